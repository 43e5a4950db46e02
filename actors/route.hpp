#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "devices/config.hpp"
#include "devices/device.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Asks the router for a device: `(route_atom, route_order)` -> route_reply, answered when a
/// device has room (or at once with a refusal when the wait queue is full).
using route_atom = caf::atom_constant<caf::atom("route")>;
/// Gives a device slot back, its sequence gone from the device: `(release_atom, std::string
/// device)`. A device that answered busy has room for one more then.
using release_atom = caf::atom_constant<caf::atom("release")>;
/// Gives a device slot back while the device keeps the sequence, parked across a tool call
/// (the pin policy): `(park_release_atom, std::string device)`. The device's own bound still
/// counts it, so a device that answered busy gets no one more for it.
using park_release_atom = caf::atom_constant<caf::atom("parkrel")>;
/// Gives back the slot of a request the device refused busy: `(device_busy_atom, std::string
/// device)`. Until the busy backoff ends, the router hands the device one slot per sequence
/// that leaves it (each release_atom), never more: a grant beyond the device's room would be
/// refused again, and each refusal costs a round trip and an admission.
using device_busy_atom = caf::atom_constant<caf::atom("devbusy")>;
/// Reports service a session received: `(served_atom, std::string session, std::uint64_t
/// tokens)`, tokens computed for it on a device (prefilled and generated). PLAS orders waiting
/// requests by the sum; request actors report it under PLAS only.
using served_atom = caf::atom_constant<caf::atom("served")>;
/// Refreshes the router's view of every device's free KV pages at once (the devices also tell
/// it when they change: watch_kv_atom): `(refresh_atom)` -> true once all answered.
using refresh_atom = caf::atom_constant<caf::atom("refresh")>;
/// Asks for a session's attained service: `(attained_atom, std::string session)` ->
/// std::uint64_t tokens (0 for a session the router does not know; under FCFS requests report
/// none).
using attained_atom = caf::atom_constant<caf::atom("attained")>;

/// Takes the sender's waiting route_order out of the queue: `(withdraw_atom)`. Its route_atom
/// request is answered at once with a refusal ("withdrawn"), so a request that ends while it
/// waits (cancelled, past its deadline) is answered and holds no slot.
using withdraw_atom = caf::atom_constant<caf::atom("withdraw")>;

/// A device joins the router, or is back (a device of another node: cluster/): `(device_join_atom,
/// routed_device)`. A device of the same name takes the new actor and is routed to again.
using device_join_atom = caf::atom_constant<caf::atom("devjoin")>;
/// A device is lost (its node's connection closed, or no heartbeat in time): `(device_lost_atom,
/// std::string device, std::string why)`. Nothing is routed there until it joins again; orders
/// waiting for a stage no device is left for are refused, naming it.
using device_lost_atom = caf::atom_constant<caf::atom("devlost")>;

/// A device the router may send requests to.
struct routed_device {
  std::string name;                     ///< its config name
  device_role role = device_role::both; ///< what it does
  device_actor actor;                   ///< its device actor
  std::size_t slots = 1;                ///< requests it serves at once (unlimited: no cap)
  /// The KV store it reads kept blocks from (kv_tier::store_id; 0: none): its node's store
  /// when it is connected to it.
  std::uint64_t kv_store = 0;
  /// Another node's device: where that node's KV exchange serves its store's pages ("" for
  /// this node's devices, or a node without one).
  std::string kv_wire = {};
  /// The transport of that exchange's KV wire ("tcp", "shared_memory"): a device fetches from
  /// another node's exchange only over its own node's transport.
  std::string kv_transport = {};
  /// `slots` of a device whose own KV capacity bounds it (it answers busy when full).
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
};

/// Which kind of device a request needs.
enum class route_stage : std::uint8_t {
  prefill, ///< a device with role prefill (else both)
  decode,  ///< a device with role decode (else both)
  any,     ///< a device with role both (monolithic layout)
};

/// A request for a device slot.
struct route_order {
  route_stage stage = route_stage::any; ///< which devices qualify
  std::string session;                  ///< for PLAS: whose attained service counts
  std::vector<std::string> avoid;       ///< devices that failed this request: never these
  /// Prefill: chain_hashes of the prompt's full pages (empty: no prefix preference). The
  /// device that was sent the longest run of them goes first.
  std::vector<block_hash> prefix;
  /// A device slot to give back first, as `release_atom` would (empty: none): the prefill
  /// device's after a transfer, in the same message as the decode device's order.
  std::string release;
  /// A traced request's id: the router writes its grant (or refusal) in the trace (0: none).
  std::uint64_t trace_id = 0;
  /// The traced request asked for its trace to be kept (GET /v1/traces): the grant goes to it.
  bool trace_kept = false;
  /// Decode of a demoted request: the store its kept blocks are in (0: none). A device of that
  /// store goes first: it reads them back, any other computes the tokens they hold.
  std::uint64_t kv_store = 0;
};

/// The router's answer.
struct route_reply {
  bool ok = false;            ///< false: refused (overloaded or no such device)
  device_actor device;        ///< the device actor
  std::string name;           ///< its name, for release
  std::string reason;         ///< why refused, e.g. "overloaded, retry after 200 ms"
  std::uint32_t retry_ms = 0; ///< when refused as overloaded: when to retry
  /// When refused: overloaded (too many wait; retry_ms), busy (waited past the queue timeout;
  /// retry_ms), stopped (withdrawn), or unavailable (no device for the stage is up).
  errc code = errc::system_error;
  /// Prefill: where more of the prompt's pages than on the device granted may be had (the KV
  /// exchange of another node whose device was sent a longer run of them: its store keeps them
  /// once computed), and how many from the first; "" and 0 when nowhere.
  std::string prefix_wire = {};
  std::uint64_t prefix_pages = 0; ///< see prefix_wire
};

/// A busy device's backoff ended (the router's own timer): `(router_unbusy_atom, std::string
/// device)`.
using router_unbusy_atom = caf::atom_constant<caf::atom("unbusy")>;
/// A waiting order's queue timeout (the router's own timer): `(router_expire_atom,
/// std::uint32_t stage, std::uint64_t order number)`.
using router_expire_atom = caf::atom_constant<caf::atom("expire")>;

/// The typed interface of the router: a message it does not take is a compile error at the
/// sender. Requests and their devices use the atoms above; devices report their free KV pages
/// and decode step time (kv_free_atom, see watch_kv_atom); the last two are its own timers.
using router_actor = caf::typed_actor<
    caf::replies_to<route_atom, route_order>::with<route_reply>,
    caf::reacts_to<release_atom, std::string>, caf::reacts_to<park_release_atom, std::string>,
    caf::reacts_to<device_busy_atom, std::string>,
    caf::reacts_to<served_atom, std::string, std::uint64_t>,
    caf::replies_to<refresh_atom>::with<bool>,
    caf::replies_to<attained_atom, std::string>::with<std::uint64_t>, caf::reacts_to<withdraw_atom>,
    caf::reacts_to<kv_free_atom, caf::actor_addr, std::uint64_t, std::uint64_t, double>,
    caf::reacts_to<router_unbusy_atom, std::string>,
    caf::reacts_to<device_join_atom, routed_device>,
    caf::reacts_to<device_lost_atom, std::string, std::string>,
    caf::reacts_to<router_expire_atom, std::uint32_t, std::uint64_t>>;

} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::route_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::route_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::routed_device)
