#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "actors/config.hpp"
#include "actors/request.hpp"
#include "actors/route.hpp"
#include "devices/config.hpp"
#include "devices/kv_tier.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/trace.hpp"

namespace triad {

/// Spawns the router in `home`. It hands each request a qualifying device with a free slot:
/// for decode the one with the most free KV pages (as the devices report them), then the most
/// free slots; for prefill (and the monolithic layout) the one with the longest cached prefix
/// of the prompt (prefixes within a quarter of the prompt's pages of each other count as
/// equal), then the most free slots (ties: config order), unless that one has more than
/// 2 (least + defaults::orchestration::prefix_affinity_slack) requests in flight, `least` the
/// least loaded qualifying device's (then the least loaded); never one that said busy
/// since its last release (or within defaults::orchestration::busy_backoff). A device's cached
/// prefix is what the KV store's directory (`tier`, when the node has a store) says it holds:
/// the pages it reported computing and has not evicted, and the pages of prompts routed to it
/// and not yet computed (the router notes each grant there). For a device the store does not
/// connect, the router keeps that record itself (page hashes, the
/// defaults::orchestration::tracked_prefixes most recent per device). A wrong guess costs only
/// recompute.
/// A request with no device free waits, up to
/// `options.max_waiting` in all, beyond which it is refused "overloaded, retry after N ms".
/// When a slot frees, the waiting request served first is the earliest (FCFS) or the one whose
/// session has received the fewest tokens so far, as reported with served_atom, earliest
/// first among equals (PLAS). The service ledger keeps the most recently served
/// defaults::orchestration::tracked_sessions sessions.
/// A request that waits longer than `queue_timeout` (0: no limit) is refused with errc::busy,
/// "waited N ms for a device ([limits].queue_timeout_ms); retry after M ms".
/// With `trace`, each answer to a traced request's order (route_order::trace_id) is a span on
/// the router's track as it answers: "grant <device>" or "refuse", a moment long, with how long
/// the order waited in the router (`waited_us`).
router_actor spawn_router(domain& home, std::vector<routed_device> devices,
                          orchestration_options options,
                          std::chrono::milliseconds queue_timeout = std::chrono::milliseconds{0},
                          std::shared_ptr<kv_tier> tier = nullptr,
                          std::shared_ptr<trace_log> trace = nullptr);

} // namespace triad
