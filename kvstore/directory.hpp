#pragma once

#include <cstddef>
#include <shared_mutex>
#include <span>
#include <unordered_set>

#include "devices/prefix_hash.hpp"

namespace triad {

/// Which full blocks a KV store holds, by chain hash, readable from any thread without a
/// message: a device asks it whether a prompt's pages are worth fetching before it asks the
/// store for them. The store's prefix index keeps it (a hash is added once the index knows the
/// block, removed when the block goes); a reader may see a block that is just going, and the
/// fetch then simply returns fewer pages.
class kv_directory {
public:
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

private:
  mutable std::shared_mutex mutex_;
  std::unordered_set<block_hash> held_;
};

} // namespace triad
