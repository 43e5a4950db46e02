#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the runtime area, in one place (like CAF's `defaults::`); config sections take
/// their initial values from here.
namespace triad::defaults {

namespace topology {
/// Bind domain threads and driver threads to their cpus when the topology is this machine.
inline constexpr bool bind_threads = true;
} // namespace topology

namespace scheduler {
/// CAF worker threads per domain; 0 means the plan's count: one per cpu it gives the domain's
/// workers, or one when every cpu of the domain runs a driver thread.
inline constexpr std::size_t threads_per_domain = 0;
/// After its polls, an idle worker polls as many times again with a sleep this long between
/// them before it blocks (0: it blocks at once). Under CAF's work-stealing scheduler, which the
/// domains used before, 50 us made a request/response from a non-actor thread take 85 us against
/// 8.7 us at 0.
inline constexpr std::chrono::microseconds moderate_sleep{0};
/// Times an idle worker checks its domain's queue (each check followed by a CPU pause: 23 ns on
/// the AMD EPYC this was measured on, so about 0.46 ms in all) before it sleeps; a worker that
/// sleeps costs the next message a wake-up (50-100 us on that VM). CAF's scheduler, before,
/// polled about 0.15 ms at its 3000 + 3000 slower polls. triad-bench-kv in three interleaved
/// pairs against 3000 polls (69 us): transfer_over_memcpy 0.71, 0.73, 0.81 against 0.70, 0.68,
/// 0.76 (the checked copies ran at 22-24 GB/s either way, memcpy then at 26-33 GB/s).
inline constexpr std::size_t poll_attempts = 20000;
/// Real time: a node serving clients must not skip its idle gaps.
inline constexpr bool virtual_time = false;
/// A domain prunes finished actors from the list of those it stops once the list holds this
/// many (and again each time it doubles): every request spawns actors, and each address kept
/// would keep its actor's memory until the node stops.
inline constexpr std::size_t tracked_prune_min = 1024;
} // namespace scheduler

namespace bridge {
/// Jobs a driver thread's queue holds before try_submit answers "full".
inline constexpr std::size_t queue_capacity = 1024;
/// How long a driver thread keeps polling its queue after a job, yielding its cpu between
/// polls (as CUDA's cudaDeviceScheduleYield), before it sleeps. A job submitted meanwhile needs
/// no wake-up: at 1 session of triad-bench-orchestration, with a tool call's round trip of tens
/// of microseconds between a device's jobs, it took the orchestration threads' user CPU per
/// request from 78-83 us to 49-52 us (4-token turns) and the wall time from 12.5 s to 5.8 s.
inline constexpr std::chrono::microseconds idle_poll{200};
} // namespace bridge

namespace metrics {
/// Histogram bucket upper bounds for durations in seconds (100 us to 60 s).
inline constexpr double duration_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                              0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                              1.0,    2.5,     5.0,    10.0,  30.0,   60.0};
} // namespace metrics

} // namespace triad::defaults
