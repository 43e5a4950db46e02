#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "runtime/error.hpp"

namespace triad::cluster {

// -- memory other processes of this machine read --

/// Memory that other processes of this machine map and read directly: UCX-allocated shared
/// memory (its sysv or posix segments), registered once, as NIXL registers a KV cache. A holder
/// keeps the KV it offers in it; a kv_wire that sends blocks lying in it over shared memory
/// sends where they are, and the receiver copies them out of its mapping (one copy, checked in
/// the same pass, at memcpy's speed once mapped; the cross-memory attach of a plain send goes
/// through the kernel page by page). RAII: the segment goes with it (a reader's mapping keeps
/// it alive until unmapped). Its ranges are handed out first fit; thread-safe.
class kv_shared_memory {
public:
  /// Allocates `bytes` of shared memory in a sysv segment (pages come as they are first written)
  /// and checks that another UCX context of this process maps it directly (another process may
  /// still fail to: another IPC namespace; its reader then says so, kv_wire); errc::unsupported
  /// when UCX could not place it where others map it (then blocks are sent the usual way),
  /// errors name the UCX call otherwise.
  static expected<std::unique_ptr<kv_shared_memory>> open(std::size_t bytes);
  /// Unregisters and frees the memory.
  ~kv_shared_memory();
  kv_shared_memory(const kv_shared_memory&) = delete;
  kv_shared_memory& operator=(const kv_shared_memory&) = delete;

  /// All of it.
  std::span<std::byte> bytes() const noexcept;
  /// What a reader maps it by (kv_shared_reader::read): its id, address, size, UCX worker
  /// address and packed remote key. Opaque to everyone else.
  std::span<const std::byte> key() const noexcept;
  /// Where `range` starts in it, when all of it lies inside.
  std::optional<std::size_t> offset_of(std::span<const std::byte> range) const noexcept;

  /// `n` bytes of it (64-byte aligned) for the caller until release(); nothing when no free
  /// range is that large.
  std::optional<std::span<std::byte>> allocate(std::size_t n);
  /// Gives a range allocate() answered back.
  void release(std::span<std::byte> range);

  struct state;

private:
  explicit kv_shared_memory(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

/// A reader of other processes' kv_shared_memory: a UCX context and worker of its own, each
/// memory mapped at its first read and kept mapped (the first touch of a fresh mapping faults
/// every page in: several times slower than a copy), the least recently used unmapped past a
/// bound and any unused for a minute (a restarted holder's old segment lives while mapped).
/// Thread-safe; copies run in parallel (mapping and unmapping, under its lock, do not).
class kv_shared_reader {
public:
  /// Faults a reader may be opened with, for tests and drills.
  enum class fault : std::uint8_t {
    none,       ///< reads as it should
    cannot_map, ///< every memory fails to map (errc::io_error), as in another IPC namespace
  };

  /// Opens the reader's UCX context and worker; errors name the UCX call and status.
  static expected<std::unique_ptr<kv_shared_reader>> open(fault injected = fault::none);
  /// Unmaps everything it mapped.
  ~kv_shared_reader();
  kv_shared_reader(const kv_shared_reader&) = delete;
  kv_shared_reader& operator=(const kv_shared_reader&) = delete;

  /// Copies `into.size()` bytes at `offset` of the memory `key` names into `into`, checking
  /// them against `checksum` (block_checksum at their origin) in the same pass.
  /// errc::parse_error for a key that is not one; errc::io_error when it cannot be mapped;
  /// errc::invalid_argument past its end; errc::corrupted when the bytes fail their checksum (they
  /// must not be used).
  expected<void> read(std::span<const std::byte> key, std::uint64_t offset,
                      std::span<std::byte> into, std::uint64_t checksum);

  struct state;

private:
  explicit kv_shared_reader(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

} // namespace triad::cluster
