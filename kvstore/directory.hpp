#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "devices/prefix_hash.hpp"
#include "kvstore/defaults.hpp"
#include "runtime/forget_oldest.hpp"

namespace triad {

/// Which full blocks a KV store holds, by chain hash, readable from any thread without a
/// message: a device asks it whether a prompt's pages are worth fetching before it asks the
/// store for them. The store's prefix index keeps it (a hash is added once the index knows the
/// block, removed when the block goes); a reader may see a block that is just going, and the
/// fetch then simply returns fewer pages.
///
/// It also knows which devices hold which full pages in their own memory (their prefix caches,
/// as each device's actor reports them): a prompt whose pages another device holds is copied
/// from there instead of computed. Devices are numbered 0..max_devices-1 by whoever connects
/// them.
///
/// And it is the router's record of what it sent each device: the pages of a prompt routed to a
/// device count as that device's (for `run_on` only) until the device reports them computed (or
/// evicted), so a prompt routed while an earlier one with its prefix is still being computed goes
/// to the same device.
class kv_directory {
public:
  /// Devices whose pages the directory can tell apart.
  static constexpr std::uint32_t max_devices = 64;

  /// The longest run of a chain one device holds, counted from the chain's first page.
  struct resident_run {
    std::uint32_t device = max_devices; ///< the device (max_devices: none)
    std::size_t pages = 0;              ///< pages of the run
  };

  /// Notes a block.
  void insert(block_hash hash) {
    std::unique_lock lock{mutex_};
    held_.insert(hash);
  }
  /// Forgets a block.
  void erase(block_hash hash) {
    std::unique_lock lock{mutex_};
    held_.erase(hash);
  }
  /// How many of `chain` are held, counted from the first.
  std::size_t leading(std::span<const block_hash> chain) const {
    std::shared_lock lock{mutex_};
    std::size_t n = 0;
    while (n < chain.size() && held_.count(chain[n]) != 0)
      ++n;
    return n;
  }
  /// Blocks held.
  std::size_t size() const {
    std::shared_lock lock{mutex_};
    return held_.size();
  }

  /// Notes that `device` now holds the pages `added` and no longer holds those `gone`.
  void note_resident(std::uint32_t device, std::span<const block_hash> added,
                     std::span<const block_hash> gone) {
    if (device >= max_devices)
      return;
    const std::uint64_t bit = std::uint64_t{1} << device;
    std::unique_lock lock{mutex_};
    auto& routed = routed_[device];
    for (auto h : added) {
      resident_[h] |= bit;
      routed.erase(h); // computed: it is the device's now
    }
    for (auto h : gone) {
      routed.erase(h);
      if (auto it = resident_.find(h); it != resident_.end() && (it->second &= ~bit) == 0)
        resident_.erase(it);
    }
  }
  /// Notes that a prompt whose pages are `chain` was routed to `device`: the pages it does not
  /// hold count as its own (in run_on) until it reports them computed or evicted. A device
  /// remembers defaults::kvstore::routed_pages_per_device such pages; beyond, the least recently
  /// routed half is forgotten.
  void note_routed(std::uint32_t device, std::span<const block_hash> chain) {
    if (device >= max_devices || chain.empty())
      return;
    const std::uint64_t bit = std::uint64_t{1} << device;
    std::unique_lock lock{mutex_};
    auto& routed = routed_[device];
    const auto now = ++routed_seq_;
    for (auto h : chain)
      if (auto it = resident_.find(h); it == resident_.end() || (it->second & bit) == 0)
        routed[h] = now; // a page it holds is counted as resident, and goes when it is evicted
    if (routed.size() > defaults::kvstore::routed_pages_per_device)
      forget_oldest_half(routed, [](std::uint64_t stamp) { return stamp; });
  }
  /// Pages routed to some device and not yet reported computed there, each counted per device.
  std::size_t routed_pages() const {
    std::shared_lock lock{mutex_};
    std::size_t n = 0;
    for (const auto& routed : routed_)
      n += routed.size();
    return n;
  }

  /// Forgets every page of `device` (it stopped).
  void forget_device(std::uint32_t device) {
    if (device >= max_devices)
      return;
    const std::uint64_t bit = std::uint64_t{1} << device;
    std::unique_lock lock{mutex_};
    routed_[device].clear();
    for (auto it = resident_.begin(); it != resident_.end();)
      if ((it->second &= ~bit) == 0)
        it = resident_.erase(it);
      else
        ++it;
  }
  /// The longest run of `chain`, from its first page, that one device other than `except`
  /// holds (the lowest-numbered such device when several do).
  resident_run longest_resident(std::span<const block_hash> chain, std::uint32_t except) const {
    std::uint64_t mask = except < max_devices ? ~(std::uint64_t{1} << except) : ~std::uint64_t{0};
    resident_run best;
    std::shared_lock lock{mutex_};
    for (std::size_t i = 0; i < chain.size(); ++i) {
      auto it = resident_.find(chain[i]);
      if (it == resident_.end() || (mask & it->second) == 0)
        break;
      mask &= it->second;
      best = {static_cast<std::uint32_t>(std::countr_zero(mask)), i + 1};
    }
    return best;
  }
  /// How many of `chain`, from its first page, `device` holds or was routed and has not yet
  /// reported computed: where a prompt's prefix is, or soon will be.
  std::size_t run_on(std::uint32_t device, std::span<const block_hash> chain) const {
    if (device >= max_devices)
      return 0;
    const std::uint64_t bit = std::uint64_t{1} << device;
    std::shared_lock lock{mutex_};
    const auto& routed = routed_[device];
    std::size_t n = 0;
    for (; n < chain.size(); ++n)
      if (auto it = resident_.find(chain[n]);
          (it == resident_.end() || (it->second & bit) == 0) && routed.count(chain[n]) == 0)
        break;
    return n;
  }
  /// Pages some device holds, each counted once.
  std::size_t resident_pages() const {
    std::shared_lock lock{mutex_};
    return resident_.size();
  }

private:
  mutable std::shared_mutex mutex_;
  std::unordered_set<block_hash> held_;
  std::unordered_map<block_hash, std::uint64_t> resident_; // page -> devices holding it (bits)
  // Per device: pages of prompts routed to it, not yet reported computed -> when routed.
  std::unordered_map<block_hash, std::uint64_t> routed_[max_devices];
  std::uint64_t routed_seq_ = 0;
};

} // namespace triad
