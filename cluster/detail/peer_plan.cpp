#include "cluster/detail/peer_plan.hpp"

#include <set>

namespace triad::detail {

peer_plan plan_peers(const std::map<std::string, known_peer>& known,
                     const std::vector<peer_lookup>& lookups) {
  peer_plan plan;
  std::set<std::string> given;  // every address a lookup gives now
  std::set<std::string> failed; // configured peers whose lookup gave nothing
  for (const auto& l : lookups) {
    if (l.addresses.empty())
      failed.insert(l.peer);
    for (const auto& a : l.addresses)
      if (given.insert(a).second && known.count(a) == 0)
        plan.spawn.emplace_back(a, l.peer);
  }
  for (const auto& [address, k] : known)
    if (!k.up && given.count(address) == 0 && failed.count(k.from) == 0)
      plan.retire.push_back(address);
  return plan;
}

} // namespace triad::detail
