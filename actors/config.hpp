#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "actors/defaults.hpp"
#include "runtime/options.hpp"

/// The orchestration layer's config sections: `[orchestration]` (request actors and router) and
/// `[limits]` (admission bounds of the node).
namespace triad {

/// Where a request's KV goes while one of its tool calls runs.
enum class kv_policy : std::uint8_t {
  discard, ///< freed; the whole conversation is prefilled again after the tool
  pin,     ///< kept on the decode device (parked) until the tool returns
  demote,  ///< copied to host memory of the orchestration domain, freed on the device, and
           ///< imported into a decode device when the tool returns
};

/// How devices are used.
enum class layout : std::uint8_t {
  three_stage, ///< prefill devices, then decode devices; tools on CPU domains, asynchronously
  monolithic,  ///< one device prefills and decodes, and its slot is held while a tool runs
};

/// Which waiting request the router serves first when a device frees up.
enum class schedule_policy : std::uint8_t {
  fcfs, ///< first come, first served
  plas, ///< least attained service first: the session that received fewer tokens so far
};

/// What happens to the requests of a device whose step failed (the backend reported an error
/// or threw).
enum class device_failure_policy : std::uint8_t {
  retry, ///< each moves to another device (up to max_device_retries times), recomputing its KV
  fail,  ///< each ends with an error naming the device and the failure
};

/// What happens to a tool's output that would overflow the model's context.
enum class tool_overflow_policy : std::uint8_t {
  truncate, ///< the output is cut to fit, with a note to the model saying how much was left out
  fail,     ///< the request ends with an error naming the sizes
};

/// "discard", "pin" or "demote".
std::string_view to_string(kv_policy p) noexcept;
/// "three_stage" or "monolithic".
std::string_view to_string(layout l) noexcept;
/// "fcfs" or "plas".
std::string_view to_string(schedule_policy p) noexcept;
/// "retry" or "fail".
std::string_view to_string(device_failure_policy p) noexcept;
/// "truncate" or "fail".
std::string_view to_string(tool_overflow_policy p) noexcept;

/// `[orchestration]`: policies of the request actors and the router.
struct orchestration_options {
  /// `kv`: "discard", "pin" or "demote": where a request's KV stays while its tools run.
  kv_policy kv = kv_policy::pin;
  /// `layout`: "three_stage" or "monolithic".
  layout device_layout = layout::three_stage;
  /// `schedule`: "fcfs" or "plas": which waiting request gets a freed device slot.
  schedule_policy schedule = schedule_policy::fcfs;
  /// `max_waiting`: requests that may wait for devices at once, 0..1000000; beyond, refused.
  std::size_t max_waiting = defaults::orchestration::max_waiting;
  /// `retry_after_ms`: what a refusal tells the caller to wait, 1..600000 ms.
  std::chrono::milliseconds retry_after = defaults::orchestration::retry_after;
  /// `tool_deadline_ms`: how long one tool call may run, 1..86400000 ms.
  std::chrono::milliseconds tool_deadline = defaults::orchestration::tool_deadline;
  /// `device_slots`: an optional cap on the requests one device serves at once (router
  /// slots), 0..65536; 0 = no cap: a device admits while their KV fits its memory tiers and
  /// answers busy beyond (capacity-driven admission).
  std::size_t device_slots = 0;
  /// `device_failure`: "retry" or "fail".
  device_failure_policy device_failure = device_failure_policy::retry;
  /// `tool_result_overflow`: "truncate" or "fail": a tool output that would overflow the
  /// model's context (with the tokens the request may still generate).
  tool_overflow_policy tool_result_overflow = tool_overflow_policy::truncate;
  /// `max_device_retries`: moves to another device per request after failures, 0..16.
  std::uint32_t max_device_retries = defaults::orchestration::max_device_retries;
  /// `busy_backoff_ms`: after a device answers busy, the router hands it one request per
  /// sequence that leaves it, and one more per backoff; a backoff with no busy answer ends
  /// that, 1..60000 ms.
  std::chrono::milliseconds busy_backoff = defaults::orchestration::busy_backoff;
  /// `pin_ttl_min_ms`, `pin_ttl_max_ms`: under the pin policy (three-stage layout, with a KV
  /// store), a parked sequence stays on its decode device for the p90 of the tool's recent
  /// durations, clamped to these (the maximum for a tool not seen yet), then moves to the
  /// store's host tier; 1..86400000 ms, min <= max.
  std::chrono::milliseconds pin_ttl_min = defaults::orchestration::pin_ttl_min;
  std::chrono::milliseconds pin_ttl_max = defaults::orchestration::pin_ttl_max; ///< see above
  bool operator==(const orchestration_options&) const = default;
};

/// `[limits]`: admission bounds of the node.
struct limits_config {
  std::size_t max_concurrent_requests = defaults::limits::max_concurrent_requests; ///< at least 1
  std::uint64_t max_body_bytes = defaults::limits::max_body_bytes;                 ///< at least 1
  /// `queue_timeout_ms`: how long a request may wait for a device before it is answered "busy"
  /// (HTTP 503 with Retry-After) and leaves the queue; 0 = no limit.
  std::uint32_t queue_timeout_ms = defaults::limits::queue_timeout_ms;
  /// `request_timeout_ms`: how long an admitted request may take in all (queueing, compute and
  /// tools) before it ends with a timeout error (HTTP 504); 0 = no limit.
  std::uint32_t request_timeout_ms = defaults::limits::request_timeout_ms;
  bool operator==(const limits_config&) const = default;
};

/// The `[orchestration]` section's keys.
const options::section<orchestration_options>& orchestration_section();
/// The `[limits]` section's keys.
const options::section<limits_config>& limits_section();

} // namespace triad
