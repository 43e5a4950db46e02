#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "actors/request.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/config.hpp"

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
/// Refreshes the router's view of every device's free KV pages (it also polls them every
/// defaults::orchestration::stats_interval): `(refresh_atom)` -> true once all answered.
using refresh_atom = caf::atom_constant<caf::atom("refresh")>;
/// Asks for a session's attained service: `(attained_atom, std::string session)` ->
/// std::uint64_t tokens (0 for a session the router does not know; under FCFS requests report
/// none).
using attained_atom = caf::atom_constant<caf::atom("attained")>;

/// Takes the sender's waiting route_order out of the queue: `(withdraw_atom)`. Its route_atom
/// request is answered at once with a refusal ("withdrawn"), so a request that ends while it
/// waits (cancelled, past its deadline) is answered and holds no slot.
using withdraw_atom = caf::atom_constant<caf::atom("withdraw")>;

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
};

/// The router's answer.
struct route_reply {
  bool ok = false;            ///< false: refused (overloaded or no such device)
  caf::actor device;          ///< the device actor
  std::string name;           ///< its name, for release
  std::string reason;         ///< why refused, e.g. "overloaded, retry after 200 ms"
  std::uint32_t retry_ms = 0; ///< when refused as overloaded: when to retry
  /// When refused: busy (waited past the queue timeout), or system_error (anything else).
  errc code = errc::system_error;
};

/// A device the router may send requests to.
struct routed_device {
  std::string name;                     ///< its config name
  device_role role = device_role::both; ///< what it does
  caf::actor actor;                     ///< its device actor
  std::size_t slots = 1;                ///< requests it serves at once
};

/// Spawns the router in `home`. It hands each request a qualifying device with a free slot:
/// for decode the one with the most free KV pages (polled from the devices), then the most
/// free slots; for prefill (and the monolithic layout) the one with the longest cached prefix
/// of the prompt, then the most free slots (ties: config order); never one that said busy
/// since its last release (or within defaults::orchestration::busy_backoff). The cached
/// prefixes are the router's own record of the prompts it sent each device (their page hashes,
/// the defaults::orchestration::tracked_prefixes most recent per device): an approximation of
/// the devices' prefix caches, which evict on their own; a wrong guess costs only recompute.
/// A request with no device free waits, up to
/// `options.max_waiting` in all, beyond which it is refused "overloaded, retry after N ms".
/// When a slot frees, the waiting request served first is the earliest (FCFS) or the one whose
/// session has received the fewest tokens so far, as reported with served_atom, earliest
/// first among equals (PLAS). The service ledger keeps the most recently served
/// defaults::orchestration::tracked_sessions sessions.
/// A request that waits longer than `queue_timeout` (0: no limit) is refused with errc::busy,
/// "waited N ms for a device ([limits].queue_timeout_ms); retry after M ms".
caf::actor spawn_router(domain& home, std::vector<routed_device> devices,
                        orchestration_options options,
                        std::chrono::milliseconds queue_timeout = std::chrono::milliseconds{0});

} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::route_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::route_reply)
