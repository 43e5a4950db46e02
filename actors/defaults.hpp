#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the actors (the node, its request actors and router) area, in one place (like
/// CAF's `defaults::`); config sections take their initial values from here.
namespace triad::defaults {

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
/// The pin policy's time-to-live on the decode device while a tool runs: the p90 of that
/// tool's recent durations, at least this...
inline constexpr std::chrono::milliseconds pin_ttl_min{50};
/// ...and at most this (also the TTL of a tool with no history yet); past it, the KV moves to
/// the KV store's host tier and the device's memory is free for others.
inline constexpr std::chrono::milliseconds pin_ttl_max{30'000};
/// Recent durations kept per tool for the pin TTL's p90.
inline constexpr std::size_t tool_duration_history = 64;
/// Sessions whose attained service the router remembers; beyond, the least recently served
/// half is forgotten (they start again from zero).
inline constexpr std::size_t tracked_sessions = 65536;
/// Prompt pages (chain hashes) the router remembers per device for prefix-aware prefill
/// routing; beyond, the least recently routed half is forgotten.
inline constexpr std::size_t tracked_prefixes = 65536;
/// Requests in flight a cached prefix is worth waiting behind: the router sends a prompt to
/// the device holding its longest prefix unless that device has more than twice this many
/// plus twice the least loaded device's (then to the least loaded; without a slot cap,
/// affinity alone would pile every prompt sharing a system prompt on one device).
inline constexpr std::size_t prefix_affinity_slack = 4;
/// How long the router waits for a device's stats on a refresh (refresh_atom).
inline constexpr std::chrono::milliseconds stats_interval{50};
/// Turns one agent session may take.
inline constexpr std::uint32_t session_max_turns = 256;
/// Tokens one session's conversation may reach; a turn that starts beyond it is refused.
inline constexpr std::uint64_t session_max_tokens = 1u << 20;
} // namespace orchestration

/// Histogram buckets of the request metrics (`triad_request_*`) beyond durations.
namespace request_metrics {
/// Tool calls per request.
inline constexpr double tool_call_buckets[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
/// Bytes per prefill-to-decode KV transfer (64 KiB to 4 GiB, by fours).
inline constexpr double kv_transfer_byte_buckets[] = {65536.0,     262144.0,     1048576.0,
                                                      4194304.0,   16777216.0,   67108864.0,
                                                      268435456.0, 1073741824.0, 4294967296.0};
} // namespace request_metrics

/// Request traces.
namespace traces {
/// Requests that asked for their trace whose spans the node keeps in memory for
/// GET /v1/traces/{id} (the most recent; each at most 4096 spans).
inline constexpr std::size_t kept_requests = 256;
/// The memory those kept traces take at most, MiB (the oldest go first past it).
inline constexpr std::size_t kept_mib = 64;
} // namespace traces

} // namespace triad::defaults
