#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

/// A front node's joiner, planned: which peer addresses to start trying and which to stop
/// trying, from what the configured peers' lookups give now (pure, so tested without DNS).
namespace triad::detail {

/// An address ("ip:port") the joiner runs a peer actor for.
struct known_peer {
  std::string from; ///< the configured peer ("host:port") whose lookup first gave it
  bool up = false;  ///< its node's devices are joined now
};

/// One configured peer's lookup: the addresses it gives now; empty when the lookup failed (a
/// DNS outage retires nothing).
struct peer_lookup {
  std::string peer;                   ///< as configured, "host:port"
  std::vector<std::string> addresses; ///< "ip:port", each once
};

/// What one round of the joiner does.
struct peer_plan {
  /// New addresses to try, each with the configured peer that gave it.
  std::vector<std::pair<std::string, std::string>> spawn;
  /// Addresses no successful lookup gives any more and whose node is not joined: a pod that
  /// went away behind a headless Service, tried no more. One that is up stays until it is lost.
  std::vector<std::string> retire;
};

/// Plans a joiner round from the addresses it knows and the lookups of this round.
peer_plan plan_peers(const std::map<std::string, known_peer>& known,
                     const std::vector<peer_lookup>& lookups);

} // namespace triad::detail
