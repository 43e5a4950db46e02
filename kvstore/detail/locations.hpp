#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/block.hpp"
#include "kvstore/detail/block_actor.hpp"
#include "kvstore/pool.hpp"
#include "kvstore/store.hpp"

namespace triad::detail {

/// Where a block is: a memory pool of the store (by index, in configuration order), or the
/// disk tier.
struct location {
  int pool = 0; ///< index into the pools; -1: the disk
  /// The disk tier.
  static constexpr location disk() noexcept { return location{-1}; }
  /// A memory pool by index.
  static location of_pool(std::size_t i) noexcept { return location{static_cast<int>(i)}; }
  /// Whether it is the disk tier.
  constexpr bool on_disk() const noexcept { return pool < 0; }
  /// The pool's index (not on disk).
  constexpr std::size_t index() const noexcept { return static_cast<std::size_t>(pool); }
  /// Its entry in per-location tables, the disk's first.
  constexpr std::size_t entry() const noexcept { return static_cast<std::size_t>(pool + 1); }
  /// Same pool, or both the disk.
  bool operator==(const location&) const = default;
};

/// The places a store keeps blocks in: its memory pools and the disk tier (optional), with the
/// lookups the store makes among them (by name, the tier below, a staging pool) and their
/// slots. Knows nothing of blocks but their hashes (the disk's file names).
class locations {
public:
  /// Owns `pools` (configuration order; `peer_access[i]` is pool i's `peer_access` option) and
  /// `disk` (null: no disk tier) for blocks of `block_bytes`.
  locations(std::vector<std::unique_ptr<memory_pool>> pools, std::vector<bool> peer_access,
            std::unique_ptr<disk_pool> disk, std::size_t block_bytes);

  // -- what is there --

  /// Memory pools, the disk not counted.
  std::size_t pool_count() const noexcept { return pools_.size(); }
  /// Entries of a per-location table (location::entry): every pool and the disk.
  std::size_t entries() const noexcept { return pools_.size() + 1; }
  /// The memory pool at `loc` (not the disk).
  const memory_pool& pool(location loc) const { return *pools_[loc.index()]; }
  /// The disk tier, or null when the store has none.
  const disk_pool* disk() const noexcept { return disk_.get(); }
  /// Blocks placed on the disk (taken, not yet given back).
  std::size_t disk_blocks() const noexcept { return disk_blocks_; }

  // -- lookups --

  /// The tier of `loc`.
  tier tier_of(location loc) const;
  /// Whether `loc` is a device pool.
  bool is_device(location loc) const { return tier_of(loc) == tier::device; }
  /// The pool's name, or "disk".
  std::string name_of(location loc) const;
  /// Whether one more block fits at `loc` (never, on a store without a disk tier).
  bool has_room(location loc) const;
  /// The memory pool called `name`.
  std::optional<location> find(std::string_view name) const;
  /// Pool names, comma-separated, of one tier or all; "none" when there are none.
  std::string names(std::optional<tier> kind = std::nullopt) const;
  /// The first host pool (the first pool when there is none).
  location first_host() const;
  /// The next place down with room for a block at `from`: below a device, a host pool (one of
  /// the device's domain first, else the first with room); below a host pool other than the
  /// first (the home one, of the orchestration domain), the home pool; below the home pool
  /// (or a full one), the disk, for content-addressed (`indexed`) blocks only. None on the disk
  /// or where no place below has room.
  std::optional<location> demote_target(location from, bool indexed) const;
  /// Whether a copy from `from` into memory pool `to` goes directly: everything but device to
  /// device across domains, which goes directly only when both pools have peer access.
  bool direct(location from, location to) const;
  /// The host pool that stages an indirect copy into memory pool `to`: the last host pool of
  /// `to`'s domain, else the first host pool; none when there is no host pool.
  std::optional<location> staging_for(location to) const;

  // -- places --

  /// Takes a place at `loc` (has_room(loc) must hold): a free slot of its pool, or on the disk
  /// one more file counted (slot 0).
  slot_id take(location loc);
  /// Gives back the place taken at `loc`: the slot of a pool, or the file of block `hash`.
  void give_back(location loc, slot_id slot, block_hash hash);
  /// Where the bytes of slot `slot` of the memory pool at `loc` are.
  block_location in_memory(location loc, slot_id slot) const;
  /// Where the bytes of the block that `meta` describes are on the disk (its path is filled
  /// in here); the disk tier must exist.
  block_location on_disk(disk_entry meta) const;

  // -- usage --

  /// Blocks held, by tier (indexed by `tier`).
  std::array<std::uint64_t, 3> blocks_by_tier() const;
  /// Every pool's usage, the disk last.
  std::vector<kv_pool_stats> pool_stats() const;

private:
  std::vector<std::unique_ptr<memory_pool>> pools_;
  std::vector<bool> peer_access_; // by pool
  std::unique_ptr<disk_pool> disk_;
  std::size_t block_bytes_;
  std::size_t disk_blocks_ = 0;
};

} // namespace triad::detail
