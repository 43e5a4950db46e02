#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/block.hpp"
#include "runtime/memory.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// A slot of a pool: the index of one block-sized piece of its memory.
using slot_id = std::uint32_t;

/// Fixed-size block slots in the memory of one NUMA domain: a device pool (for cpu and sim
/// devices the device's memory is host memory of its domain) or a domain's host pool. One
/// arena buffer carved into slots; a full pool says so, it never grows.
class memory_pool {
public:
  /// A pool of `capacity_bytes / block_bytes` slots from a new arena of `domain` (bound to its
  /// node when `topo` is this machine). Errors when not one slot fits.
  static expected<std::unique_ptr<memory_pool>> create(std::string name, tier kind, unsigned domain,
                                                       std::size_t block_bytes,
                                                       std::uint64_t capacity_bytes,
                                                       const topology* topo);

  /// A free slot, or nothing when the pool is full.
  std::optional<slot_id> allocate();
  /// Returns a slot.
  void free(slot_id slot);
  /// The bytes of a slot.
  std::span<std::byte> bytes(slot_id slot) const noexcept {
    return {base_ + static_cast<std::size_t>(slot) * block_bytes_, block_bytes_};
  }

  /// The pool's name: the device's, or "host<domain>".
  const std::string& name() const noexcept { return name_; }
  /// device or host.
  tier kind() const noexcept { return kind_; }
  /// The NUMA domain of its memory.
  unsigned domain() const noexcept { return domain_; }
  /// Slots in all.
  std::size_t capacity() const noexcept { return capacity_; }
  /// Slots handed out.
  std::size_t used() const noexcept { return capacity_ - free_.size(); }

private:
  memory_pool() = default;

  std::string name_;
  tier kind_ = tier::host;
  unsigned domain_ = 0;
  std::size_t block_bytes_ = 0;
  std::uint64_t model_ = 0; ///< the model fingerprint written into and checked in every file
  std::size_t capacity_ = 0;
  std::shared_ptr<arena> arena_;
  arena_buffer buffer_;
  std::byte* base_ = nullptr;
  std::vector<slot_id> free_;
};

/// What a block file says about its block (its header, checked).
struct disk_entry {
  block_hash hash = 0;        ///< the block's chained hash (the file's name)
  block_hash parent = 0;      ///< its parent's hash
  std::vector<token> tokens;  ///< its token ids
  std::uint64_t checksum = 0; ///< checksum of its payload
  std::filesystem::path path; ///< the file
};

/// Block files under one directory, at most `capacity_bytes` of them. Each file holds a
/// checked header (magic, sizes, hashes, tokens) and the payload; a file whose header or
/// payload does not check is a miss, never data. Only full, content-addressed blocks are
/// written, so they can be found again after a restart.
class disk_pool {
public:
  /// Opens (creating) `dir` for blocks of `block_tokens` tokens and `block_bytes` bytes of the
  /// model whose fingerprint is `model`: files of other sizes or another model are rejected
  /// (removed and counted in damaged_on_open), so their KV is never read as this model's.
  static expected<std::unique_ptr<disk_pool>>
  open(std::filesystem::path dir, std::size_t block_tokens, std::size_t block_bytes,
       std::uint64_t capacity_bytes, std::uint64_t model = 0);

  /// Blocks found by `open`: every file whose header checked. Files that did not check were
  /// deleted and counted in `damaged_on_open`.
  const std::vector<disk_entry>& recovered() const noexcept { return recovered_; }
  /// Files rejected (and removed) by open.
  std::size_t damaged_on_open() const noexcept { return damaged_; }

  /// Whether one more file fits.
  bool has_room() const noexcept { return files_ < capacity_; }
  /// Files held.
  std::size_t used() const noexcept { return files_; }
  /// Files it may hold.
  std::size_t capacity() const noexcept { return capacity_; }

  /// Writes a block's file (temporary file, then rename); errc::exhausted when full.
  expected<void> write(const disk_entry& meta, std::span<const std::byte> payload);
  /// Reads a block's payload into `out`, checking header and payload; `flip_bit` >= 0 flips a
  /// bit of the payload as read (fault injection). errc::corrupted or errc::not_found is a miss.
  expected<void> read(block_hash hash, std::span<std::byte> out, std::int64_t flip_bit = -1);
  /// Removes a block's file.
  void erase(block_hash hash);
  /// The file of a block.
  std::filesystem::path path_of(block_hash hash) const;

private:
  disk_pool() = default;

  std::filesystem::path dir_;
  std::size_t block_tokens_ = 0;
  std::size_t block_bytes_ = 0;
  std::uint64_t model_ = 0; ///< the model fingerprint written into and checked in every file
  std::size_t capacity_ = 0;
  std::atomic<std::size_t> files_{0};
  std::vector<disk_entry> recovered_;
  std::size_t damaged_ = 0;
};

} // namespace triad
