#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include "devices/device.hpp"
#include "grammar/cache.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/error.hpp"

/// What front and device nodes say to each other over CAF's BASP: a gateway actor per device
/// node takes the device messages of devices/device.hpp with the device's index in front, and
/// the grammar of a constrained sequence as data (a constraint object does not serialize).
namespace triad::detail {

/// Asks a gateway for its node's name and devices: `(cluster_hello_atom, bool takes_held,
/// std::string fetches)` -> node_hello. `takes_held`: the front has no devices of its own, so a
/// prefill's hand-off may stay on its device node (kv_held) for the importing node to fetch over
/// the KV wire. `fetches`: the transport of the front's own KV wire ("" = none); when it is the
/// node's, the KV the front asks for (export, move-out) waits there and the front fetches it.
using cluster_hello_atom = caf::atom_constant<caf::atom("clhello")>;
/// A front node's heartbeat: `(cluster_ping_atom)` -> true.
using cluster_ping_atom = caf::atom_constant<caf::atom("clping")>;
/// A peer's devices are gone (its node lost): `(peer_lost_atom, std::string why)`.
using peer_lost_atom = caf::atom_constant<caf::atom("peerlost")>;
/// A peer's gateway answered again: `(peer_back_atom, caf::actor gateway, std::uint64_t tag)`.
using peer_back_atom = caf::atom_constant<caf::atom("peerback")>;
/// A device node drains: `(cluster_drain_atom)` to its gateway -> true once its devices hold no
/// sequence and its exchange no KV (the fronts told first: cluster_draining_atom).
using cluster_drain_atom = caf::atom_constant<caf::atom("cldrain")>;
/// From a draining node's gateway to each front that said hello: `(cluster_draining_atom)`.
/// The front routes nothing new there and moves the sequences parked there off.
using cluster_draining_atom = caf::atom_constant<caf::atom("cldraining")>;
/// To a remote device: its node drains: `(peer_draining_atom)`. Each sequence parked there (now
/// or when it parks) is told device_leaving_atom.
using peer_draining_atom = caf::atom_constant<caf::atom("peerdrain")>;

/// One device a node publishes.
struct wire_device {
  std::string name;           ///< its config name on that node
  std::uint8_t role = 0;      ///< device_role
  std::uint64_t kv_pages = 0; ///< KV pages of its budget (informative)
  std::uint64_t kv_store = 0; ///< the store it reads kept blocks from (kv_tier::store_id; 0: none)
};

/// A gateway's answer to hello.
struct node_hello {
  std::string node;                 ///< the node's name (`[cluster] name` or its host name)
  std::vector<wire_device> devices; ///< in index order
  /// What the asking front node puts in the top 16 bits of its sequence ids on this node, so
  /// the sequences of two front nodes never share an id on one device.
  std::uint64_t tag = 0;
  /// The transport of the node's KV wire ("tcp", "shared_memory"; "" without one): a front
  /// holds its own KV for the node's devices to fetch only when its wire runs the same.
  std::string kv_wire;
  /// Where the node's KV exchange listens ("host:port,port"; "" without one): a front names it
  /// to a device of another node whose prompt's pages this node's store may hold.
  std::string kv_address;
};

/// A sequence's grammar constraint as data (token_constraint::origin): the grammar's rules and
/// byte sets, the budget, whether it waited for a call, the tokens it moved on by.
struct constraint_wire {
  bool present = false;                ///< false: no constraint
  std::vector<std::string> rule_names; ///< rule i's name
  /// rule i's alternatives; an element is `index << 1 | 1` for a rule, `index << 1` for a set
  std::vector<std::vector<std::vector<std::uint32_t>>> rules;
  std::string sets;                    ///< 32 bytes a byte set, set i at 32 * i
  std::uint32_t budget = 0;            ///< the constraint's budget when made
  bool free_until_call = false;        ///< see token_constraint::free_until_call
  std::vector<std::uint32_t> advanced; ///< tokens it moved on by
};

/// The constraint as data (nothing for null).
constraint_wire to_wire(const std::shared_ptr<grammar::token_constraint>& c);

/// Rebuilds a constraint from data over the node's vocabulary, its grammar kept in `cache`
/// (keyed by the data's hash, so a grammar many sequences share is compiled once). Null for
/// none; an error when the rules are malformed or a token it moved on by is refused.
expected<std::shared_ptr<grammar::token_constraint>>
from_wire(const constraint_wire& w, grammar::grammar_cache* cache,
          const std::shared_ptr<const grammar::token_index>& vocabulary);

/// The cluster protocol this build speaks: the messages above, the devices' messages they carry
/// (devices/device.hpp) and the KV exchange's requests. Bumped with any change to them: a front
/// does not join a node of another protocol, CAF's handshake (checked by the side that
/// connects) failing before any message is read.
constexpr std::uint32_t cluster_protocol = 5;

/// The CAF application identifier of cluster_protocol ("triad-cluster/5"): BASP connects only
/// nodes that share one (`middleman.app-identifiers`).
std::string cluster_app_identifier();

/// Makes `cfg`'s system speak cluster_protocol: announces every type the cluster's messages
/// carry to CAF, under the same names on every node (a message with an unannounced type would be
/// dropped), and sets the application identifier its middleman accepts.
void speak_cluster_protocol(caf::actor_system_config& cfg);

/// Inspector of wire_device.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_device& x) {
  return f(caf::meta::type_name("wire_device"), x.name, x.role, x.kv_pages, x.kv_store);
}
/// Inspector of node_hello.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_hello& x) {
  return f(caf::meta::type_name("node_hello"), x.node, x.devices, x.tag, x.kv_wire, x.kv_address);
}
/// Inspector of constraint_wire.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, constraint_wire& x) {
  return f(caf::meta::type_name("constraint_wire"), x.present, x.rule_names, x.rules, x.sets,
           x.budget, x.free_until_call, x.advanced);
}

} // namespace triad::detail
