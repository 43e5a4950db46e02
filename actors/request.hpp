#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "actors/chat.hpp"
#include "devices/sampling.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"

namespace triad {

class tool_service;

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

/// "discard", "pin", "demote" (and the like for the other enums).
std::string_view to_string(kv_policy p) noexcept;
/// "three_stage" or "monolithic".
std::string_view to_string(layout l) noexcept;
/// "fcfs" or "plas".
std::string_view to_string(schedule_policy p) noexcept;

/// Defaults of the orchestration layer.
namespace defaults::orchestration {
/// KV across tool calls.
inline constexpr kv_policy kv = kv_policy::pin;
/// Device layout.
inline constexpr layout device_layout = layout::three_stage;
/// Scheduling of waiting requests.
inline constexpr schedule_policy schedule = schedule_policy::fcfs;
/// Requests that may wait for a device at once; beyond that new ones are refused.
inline constexpr std::size_t max_waiting = 1024;
/// What a refusal tells the caller to wait before retrying.
inline constexpr std::chrono::milliseconds retry_after{200};
/// Completion tokens of a request when it gives none.
inline constexpr std::uint32_t max_tokens = 256;
/// Tool calls one request may make before it is ended.
inline constexpr std::uint32_t max_tool_calls = 16;
/// How long one tool call may run.
inline constexpr std::chrono::milliseconds tool_deadline{30'000};
/// How long the router sends nothing to a device that answered busy, unless one of its slots
/// is released sooner.
inline constexpr std::chrono::milliseconds busy_backoff{5};
/// Sessions whose attained service the router remembers; beyond, the least recently served
/// half is forgotten (they start again from zero).
inline constexpr std::size_t tracked_sessions = 65536;
} // namespace defaults::orchestration

/// Orchestration settings; every field documented where declared.
struct orchestration_options {
  kv_policy kv = defaults::orchestration::kv;                     ///< KV across tool calls
  layout device_layout = defaults::orchestration::device_layout;  ///< device layout
  schedule_policy schedule = defaults::orchestration::schedule;   ///< waiting order
  std::size_t max_waiting = defaults::orchestration::max_waiting; ///< bounded wait queue
  std::chrono::milliseconds retry_after = defaults::orchestration::retry_after;     ///< on refusal
  std::chrono::milliseconds tool_deadline = defaults::orchestration::tool_deadline; ///< per call
  /// Requests one device serves at once (router slots); 0 = the device's max_sequences.
  std::size_t device_slots = 0;
};

/// One LLM call of an agent: a conversation to continue, possibly through tool calls.
struct chat_request {
  std::string session;                ///< the agent session it belongs to (PLAS accounts by it)
  std::vector<chat_message> messages; ///< the conversation so far
  std::uint32_t max_tokens = defaults::orchestration::max_tokens; ///< completion tokens in all
  std::uint32_t max_tool_calls = defaults::orchestration::max_tool_calls; ///< calls in all
  sampling_params sampling;                                               ///< how tokens are chosen
  std::optional<generation_script> script; ///< forced output for benchmarks and tests
};

/// The states of a request; the first five match its stages, the last three are its ends.
enum class request_state : std::uint8_t {
  queued,    ///< waiting for a device slot
  prefill,   ///< its conversation is being prefilled
  transfer,  ///< its KV moves from the prefill to a decode device
  decode,    ///< generating
  tool_wait, ///< a tool call runs; the KV follows the kv_policy
  done,      ///< finished (stop, length or tool call limit)
  failed,    ///< ended by an error
  cancelled, ///< ended by cancel
};

/// "queued", "prefill", ..., "cancelled".
std::string_view to_string(request_state s) noexcept;

/// Token counts and timings of a finished request.
struct request_usage {
  std::uint64_t prompt_tokens = 0;     ///< tokens of the rendered conversation
  std::uint64_t completion_tokens = 0; ///< tokens generated
  std::uint64_t prefill_tokens = 0;    ///< tokens prefilled on devices, recomputation included
  std::uint32_t tool_calls = 0;        ///< tool calls made
  double queued_s = 0;                 ///< waiting for devices, in all
  double ttft_s = 0;                   ///< submit to first token
  double tool_s = 0;                   ///< waiting for tools, in all
  double total_s = 0;                  ///< submit to done
};

/// What a request reports, in order: tokens, tool calls and their results, then exactly one of
/// done or error.
struct request_event {
  /// The kinds of events.
  enum kind_t : std::uint8_t { token, tool_call, tool_result, state, done, error };
  std::uint64_t request = 0;  ///< the request's id
  kind_t kind = token;        ///< what happened
  triad::token tok = 0;       ///< token: its id
  std::string text;           ///< token: its text; tool_call: the call's name; tool_result:
                              ///< the output; state: the state entered (to_string of
                              ///< request_state); done: the finish reason; error: the message
  std::string arguments_json; ///< tool_call: the arguments
  request_usage usage;        ///< done: counts and timings
};

/// Receives a request's events, on the request actor's thread: it must not block.
using request_callback = std::function<void(const request_event&)>;

/// Cancels a request: `(cancel_atom)` to its actor. Its KV is freed, its devices released,
/// and an error event "cancelled" ends it.
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;

/// The request metrics of a node, shared by its request actors (null members: not counted).
struct request_metrics {
  /// `triad_request_transitions_total{state}`, indexed by request_state.
  std::array<counter*, 8> entered{};
  histogram* total_seconds = nullptr; ///< `triad_request_seconds`: submit to end
  histogram* ttft_seconds = nullptr;  ///< `triad_request_ttft_seconds`: submit to first token
  /// Registers them in `registry`.
  static request_metrics attach(metrics_registry& registry);
};

/// What a request actor needs to find devices and tools.
struct request_context {
  caf::actor router;             ///< the node's router
  tool_service* tools = nullptr; ///< the node's tool domains (null: no tools hosted)
  orchestration_options options; ///< policies
  request_metrics metrics;       ///< where transitions are counted
};

/// Spawns the actor of one request in `home` (an orchestration domain); it starts at once and
/// reports through `on_event` until done or error.
caf::actor spawn_request(domain& home, std::uint64_t id, chat_request request,
                         std::shared_ptr<const request_context> context, request_callback on_event);

} // namespace triad
