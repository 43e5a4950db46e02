#include "kvstore/detail/move_batcher.hpp"

#include <caf/scheduler/abstract_coordinator.hpp>

namespace triad::detail {

move_batch make_move_batch(std::vector<pending_copy> copies) {
  move_batch out;
  out.items.reserve(copies.size());
  out.finishes.reserve(copies.size());
  for (auto& c : copies) {
    out.items.push_back({std::move(c.actor), c.id, std::move(c.where), std::move(c.order)});
    out.finishes.push_back(std::move(c.finish));
  }
  return out;
}

const caf::actor& mover_pool::next(domain& d) {
  auto& m = movers_[&d];
  if (m.all.empty()) {
    auto n = std::clamp<std::size_t>(d.system().scheduler().num_workers(), 1,
                                     defaults::kvstore::movers_per_domain);
    for (std::size_t i = 0; i < n; ++i)
      m.all.push_back(spawn_mover_actor(d));
  }
  return m.all[m.next++ % m.all.size()];
}

std::vector<caf::actor> mover_pool::all() const {
  std::vector<caf::actor> out;
  for (const auto& [d, m] : movers_)
    out.insert(out.end(), m.all.begin(), m.all.end());
  return out;
}

} // namespace triad::detail
