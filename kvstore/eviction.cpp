#include "kvstore/eviction.hpp"

namespace triad {

void lru_policy::touched(block_id id) {
  auto it = where_.find(id);
  if (it != where_.end()) {
    order_.splice(order_.end(), order_, it->second);
    return;
  }
  where_.emplace(id, order_.insert(order_.end(), id));
}

void lru_policy::erased(block_id id) {
  auto it = where_.find(id);
  if (it == where_.end())
    return;
  order_.erase(it->second);
  where_.erase(it);
}

std::optional<block_id> lru_policy::victim(const std::function<bool(block_id)>& eligible) const {
  for (auto id : order_)
    if (eligible(id))
      return id;
  return std::nullopt;
}

} // namespace triad
