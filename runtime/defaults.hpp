#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the runtime area, in one place (like CAF's `defaults::`).
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

namespace tools {
/// Cores reserved for tool processes across the tool domains.
inline constexpr unsigned cores = 1;
/// Tool calls waiting per tool domain before new calls are refused with "busy".
inline constexpr std::size_t queue_capacity = 64;
} // namespace tools

namespace limits {
/// Requests the node serves at once.
inline constexpr std::size_t max_concurrent_requests = 256;
/// Largest request body the node accepts.
inline constexpr std::uint64_t max_body_bytes = 4 * 1024 * 1024;
/// How long a request may wait for a device before it is answered busy (ms).
inline constexpr std::uint32_t queue_timeout_ms = 30'000;
/// How long an admitted request may take in all (ms).
inline constexpr std::uint32_t request_timeout_ms = 600'000;
} // namespace limits

namespace server {
/// `[server].listen`: the address triad-node listens on (loopback: not exposed by accident).
inline constexpr std::string_view listen = "127.0.0.1";
/// `[server].port`: its TCP port.
inline constexpr std::uint16_t port = 8080;
/// `[server].max_header_bytes`: the largest request head (request line and headers) accepted.
inline constexpr std::size_t max_header_bytes = 16 * 1024;
/// `[server].header_timeout_ms`: time a client has to send a whole request head (and, later,
/// its body) before the connection is closed (slow-header clients).
inline constexpr std::uint32_t header_timeout_ms = 10'000;
/// `[server].idle_timeout_ms`: a keep-alive connection with no request for this long is closed.
inline constexpr std::uint32_t idle_timeout_ms = 60'000;
/// `[server].drain_timeout_ms`: on SIGTERM, how long in-flight requests may run before the
/// node stops anyway.
inline constexpr std::uint32_t drain_timeout_ms = 30'000;
/// `[server].threads`: threads running the HTTP connections.
inline constexpr std::size_t threads = 2;
/// How often a connection whose client sent more while its answer is generated (a pipelined
/// request, which stays in the socket for later) looks again whether the client is still there
/// (not a config key).
inline constexpr std::chrono::milliseconds pipelined_recheck{50};
} // namespace server

namespace model {
/// `[model].preset`: the real transformer model the cpu devices run (one of
/// triad::cpu_device_profiles).
inline constexpr std::string_view preset = "tiny";
/// `[model].dtype`: element type of weights and KV, as written in the config file
/// (triad::model_dtype::automatic): bf16 where the CPU runs it well, else f32, chosen at start.
inline constexpr std::string_view dtype = "auto";
/// `[model].page_tokens`: tokens per KV cache page.
inline constexpr std::size_t page_tokens = 16;
} // namespace model

namespace device {
/// Device memory budget when a device entry does not give one.
inline constexpr std::uint64_t memory_mib = 2048;
/// Jobs queued to a device's driver thread.
inline constexpr std::size_t queue_capacity = 256;
/// Devices keep finished sequences' KV pages as a prefix cache (evicted when space is needed).
inline constexpr bool prefix_cache = true;
/// Decode steps one driver job may run back to back for an unchanged batch (sampling on the
/// driver) before the device actor sees the result, when steps are far shorter than a thread
/// hand-off. burst_window_us bounds how long tokens are held back, so this only caps fast
/// (simulated) devices: 32 instead of 8 cut triad-bench-orchestration's user CPU per request
/// at 1 session from 295-305 to 185-215 us; 128 instead of 32 runs each of its agent turns
/// (up to about 100 tokens) in one job: 5 driver jobs per request instead of 8 with 4-token
/// turns and 16 with 64-token turns.
inline constexpr std::size_t burst_steps = 128;
/// Driver time in microseconds after which a burst ends and its tokens go out, so a streamed
/// token is held back at most this long; steps longer than this (a real model's) each go back
/// at once.
inline constexpr std::uint32_t burst_window_us = 100;
/// Compute cores of a `cpu` device when its entry gives none: 0 = automatic, the placement
/// plan splits its domain's free cores among the domain's cpu devices.
inline constexpr std::size_t compute_cores = 0;
/// Modelled seconds per real second of a `sim` device: 1 waits as long as the modelled step
/// takes, 0 does not wait at all.
inline constexpr double time_scale = 1.0;
/// Accelerator a `sim` device models when its entry gives no profile (a built-in profile).
inline constexpr std::string_view sim_profile = "h100";
/// `link_bandwidth_gb_s` of a `[[sim_profiles]]` entry that gives none: no peer link modelled.
inline constexpr double sim_link_bandwidth_gb_s = 0.0;
/// `step_overhead_us` of a `[[sim_profiles]]` entry that gives none: kernel launch and
/// synchronisation per step, the figure the built-in profiles assume.
inline constexpr double sim_step_overhead_us = 20.0;
/// `source` of a `[[sim_profiles]]` entry that gives none.
inline constexpr std::string_view sim_profile_source = "user config";
} // namespace device

namespace metrics {
/// Histogram bucket upper bounds for durations in seconds (100 us to 60 s).
inline constexpr double duration_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                              0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                              1.0,    2.5,     5.0,    10.0,  30.0,   60.0};
} // namespace metrics

/// Defaults of the orchestration layer (`[orchestration]` and the request actors).
namespace orchestration {
/// KV across tool calls.
inline constexpr std::string_view kv = "pin";
/// Device layout.
inline constexpr std::string_view device_layout = "three_stage";
/// Scheduling of waiting requests.
inline constexpr std::string_view schedule = "fcfs";
/// Requests that may wait for a device at once; beyond that new ones are refused.
inline constexpr std::size_t max_waiting = 1024;
/// What a refusal tells the caller to wait before retrying.
inline constexpr std::chrono::milliseconds retry_after{200};
/// Completion tokens of a request when it gives none.
inline constexpr std::uint32_t max_tokens = 256;
/// What happens to a device's requests when a step fails there ("retry" or "fail").
inline constexpr std::string_view device_failure = "retry";
/// What happens to a tool output that would overflow the model's context.
inline constexpr std::string_view tool_result_overflow = "truncate";
/// Times one request is moved to another device after failures before it fails.
inline constexpr std::uint32_t max_device_retries = 2;
/// Tool calls one request may make before it is ended.
inline constexpr std::uint32_t max_tool_calls = 16;
/// How long one tool call may run.
inline constexpr std::chrono::milliseconds tool_deadline{30'000};
/// After a device answers busy: how often the router lets one request try it while it keeps
/// answering busy (besides one per sequence that leaves it); a backoff with no busy answer ends
/// the busy period.
inline constexpr std::chrono::milliseconds busy_backoff{5};
/// Sessions whose attained service the router remembers; beyond, the least recently served
/// half is forgotten (they start again from zero).
inline constexpr std::size_t tracked_sessions = 65536;
/// Prompt pages (chain hashes) the router remembers per device for prefix-aware prefill
/// routing; beyond, the least recently routed half is forgotten.
inline constexpr std::size_t tracked_prefixes = 65536;
/// How long the router waits for a device's stats on a refresh (refresh_atom).
inline constexpr std::chrono::milliseconds stats_interval{50};
/// Turns one agent session may take.
inline constexpr std::uint32_t session_max_turns = 256;
/// Tokens one session's conversation may reach; a turn that starts beyond it is refused.
inline constexpr std::uint64_t session_max_tokens = 1u << 20;
} // namespace orchestration

} // namespace triad::defaults
