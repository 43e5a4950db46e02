#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "kvstore/block.hpp"
#include "kvstore/store.hpp"
#include "runtime/metrics.hpp"

namespace triad::detail {

/// A store's counters (the kv_store_stats snapshot) and, when it has a registry, its
/// triad_kv_* metrics: evictions, demotions, promotions, pin expiries and checksum failures
/// as counters, blocks and bytes held by tier as gauges, and per path (e.g. "host->disk")
/// the bytes moved and a histogram of move times. Each event is one call.
class store_metrics {
public:
  /// Counts for a store of blocks of `block_bytes`; registers its metrics in `registry`
  /// (null: counters only).
  store_metrics(metrics_registry* registry, std::size_t block_bytes);

  // -- events --

  /// A put found a block already stored and shared it.
  void put_shared() noexcept { ++puts_shared_; }
  /// An operation was refused for lack of space.
  void refused_busy() noexcept { ++busy_; }
  /// A block was dropped for space.
  void evicted() noexcept;
  /// A block was sent a tier down.
  void demoted() noexcept;
  /// A block arrived in a device pool from outside the device tier.
  void promoted() noexcept;
  /// A pin reached its deadline.
  void pin_expired() noexcept;
  /// A pin ended by its holder before its deadline (kv_unpin).
  void pin_ended() noexcept;
  /// A copy or read failed its check.
  void checksum_failed() noexcept;
  /// A block was dropped because its bytes were damaged.
  void dropped_damaged() noexcept { ++dropped_damaged_; }
  /// A block actor was spawned (no idle one to reuse).
  void actor_spawned() noexcept { ++actors_spawned_; }
  /// A device lent the page a block of its memory stands for (a read, checked).
  void lent() noexcept { ++lent_; }
  /// Blocks standing for pages in `device`'s own memory now: sets triad_kv_device_pages (apart
  /// from triad_kv_blocks, which counts the store's own memory).
  void device_pages(const std::string& device, std::uint64_t n);
  /// A block moved from tier `from` to tier `to` in `seconds`.
  void moved(tier from, tier to, double seconds);
  /// Blocks held now, by tier (indexed by `tier`): sets the gauges.
  void held(const std::array<std::uint64_t, 3>& blocks);
  /// Each tier's byte budget (indexed by `tier`: its pools' capacity in whole blocks, the
  /// disk tier's bound): sets the triad_kv_budget_bytes gauges, once at start.
  void budget(const std::array<std::uint64_t, 3>& bytes);
  /// Whether there is a registry (held() does nothing without one).
  bool exported() const noexcept { return registry_ != nullptr; }

  // -- snapshot --

  /// Writes the counters into `s` (every field but pools, blocks and disk_damaged_on_open).
  void fill(kv_store_stats& s) const;

private:
  static void bump(counter* c) noexcept {
    if (c != nullptr)
      c->inc();
  }

  metrics_registry* registry_;
  std::size_t block_bytes_;
  std::uint64_t puts_shared_ = 0, bytes_moved_ = 0, transfers_ = 0, demotions_ = 0, promotions_ = 0,
                evictions_ = 0, pin_expiries_ = 0, pins_ended_ = 0, checksum_failures_ = 0,
                dropped_damaged_ = 0, busy_ = 0, actors_spawned_ = 0, lent_ = 0;
  counter *evictions_metric_ = nullptr, *demotions_metric_ = nullptr, *promotions_metric_ = nullptr,
          *expiries_metric_ = nullptr, *ended_metric_ = nullptr, *checksum_metric_ = nullptr;
  std::array<std::pair<gauge*, gauge*>, 3> tier_gauges_{};       // blocks, bytes; by tier
  std::map<std::string, gauge*> device_pages_;                   // by device
  std::map<std::string, std::pair<counter*, histogram*>> paths_; // bytes, seconds; by path
};

} // namespace triad::detail
