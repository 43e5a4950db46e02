#pragma once

#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "cluster/detail/kv_exchange.hpp"
#include "cluster/detail/wire.hpp"
#include "devices/device.hpp"

namespace triad::detail {

/// A device of another node as the front node's router and requests see it: a device actor in
/// the cluster's actor system that sends each message to the device's node (its gateway) and
/// each of the device's events back to the request that owns the sequence. It keeps what the
/// node owes (answers, sequences under way), so when the node is lost (peer_lost_atom) every
/// answer is given and every sequence under way gets a failed event at once: the requests
/// resume elsewhere or fail, none waits. New sequences are refused busy until the node is back
/// (peer_back_atom). When the node drains (peer_draining_atom) each sequence parked there, now
/// or when it parks, is told to move its KV off (device_leaving_atom to its request). With a
/// fetcher (the front's), KV the node holds for this front (a move-out's, an export's) is fetched
/// over the KV wire before it is answered; with an exchange to hold in (the front's, where the
/// node can reach it), the KV of an import waits there and the order carries its reference: the
/// device's node fetches it over the KV wire, not in the control message.
using remote_device_actor = device_actor::extend<
    caf::reacts_to<device_event>, caf::reacts_to<peer_lost_atom, std::string>,
    caf::reacts_to<peer_draining_atom>, caf::reacts_to<peer_back_atom, caf::actor, std::uint64_t>,
    caf::reacts_to<kv_free_atom, caf::actor_addr, std::uint64_t, std::uint64_t, double>>;

/// Spawns the remote device `name` (index `index` on its node) in `sys`, up, behind `gateway`
/// with the sequence tag the gateway gave this node; imports' KV held in `hold_in` (null: the
/// bytes go in the order), KV the node holds for this front fetched by `fetcher` (a kv_fetcher;
/// null: the reference is passed on).
remote_device_actor spawn_remote_device(caf::actor_system& sys, std::string name,
                                        std::uint32_t index, caf::actor gateway, std::uint64_t tag,
                                        std::shared_ptr<kv_exchange> hold_in, caf::actor fetcher);

} // namespace triad::detail
