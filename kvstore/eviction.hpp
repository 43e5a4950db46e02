#pragma once

#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>

#include "kvstore/block.hpp"

namespace triad {

/// Chooses which block of a pool leaves first under pressure. The store tells it about every
/// block that enters, is used and leaves the pool; it answers the next victim among those the
/// store says are eligible (not pinned, not moving).
class eviction_policy {
public:
  virtual ~eviction_policy() = default;
  /// A block entered the pool or was used.
  virtual void touched(block_id id) = 0;
  /// A block left the pool.
  virtual void erased(block_id id) = 0;
  /// The first eligible block to leave, or nothing.
  virtual std::optional<block_id> victim(const std::function<bool(block_id)>& eligible) const = 0;
};

/// Least recently used first (the default).
class lru_policy final : public eviction_policy {
public:
  /// Moves the block to the most recently used end.
  void touched(block_id id) override;
  /// Forgets the block.
  void erased(block_id id) override;
  /// Walks from the least recently used end.
  std::optional<block_id> victim(const std::function<bool(block_id)>& eligible) const override;

private:
  std::list<block_id> order_; // front: least recently used
  std::unordered_map<block_id, std::list<block_id>::iterator> where_;
};

/// Makes a policy for each pool of a store.
using eviction_policy_factory = std::function<std::unique_ptr<eviction_policy>()>;

} // namespace triad
