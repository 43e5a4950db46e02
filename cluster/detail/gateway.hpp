#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "cluster/detail/kv_exchange.hpp"
#include "devices/device.hpp"
#include "grammar/cache.hpp"
#include "grammar/token_mask.hpp"

namespace triad::detail {

/// A device a node publishes.
struct gateway_device {
  std::string name;                     ///< its config name
  device_role role = device_role::both; ///< what it does
  device_actor actor;                   ///< its device actor (in its own domain)
  std::uint64_t kv_store = 0;           ///< the store it reads kept blocks from (0: none)
};

/// What a device node's gateway serves.
struct gateway_options {
  std::string node;                    ///< the node's name
  std::vector<gateway_device> devices; ///< its devices, in config order
  /// Where the grammars of constrained sequences are kept once rebuilt (may be null).
  std::shared_ptr<grammar::grammar_cache> grammars;
  /// The model's vocabulary as bytes, for their masks (null: constrained sequences refused).
  std::shared_ptr<const grammar::token_index> vocabulary;
  /// The node's KV exchange (null: `[cluster] kv_wire = "off"`): a moved-out sequence's KV is
  /// held here for fronts that take references (the devices fetch KV held elsewhere).
  std::shared_ptr<kv_exchange> exchange;
};

/// Spawns a device node's gateway in `sys` (the cluster's system, whose middleman publishes
/// it): it answers front nodes' hello and heartbeats and hands their device messages
/// (detail/wire.hpp) to the devices, their constraints rebuilt. It watches each front node's
/// remote devices: when one goes (its node lost or stopped), the sequences it held here are
/// freed, so no KV waits for a front that will never free it. Asked to drain
/// (cluster_drain_atom), it tells the fronts, refuses new sequences and answers once its devices
/// and exchange hold nothing.
caf::actor spawn_gateway(caf::actor_system& sys, gateway_options options);

} // namespace triad::detail
