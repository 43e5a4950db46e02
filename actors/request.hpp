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

#include "actors/tool_durations.hpp"
#include "runtime/coarse_timers.hpp"

#include "actors/chat.hpp"
#include "actors/chat_format.hpp"
#include "actors/config.hpp"
#include "actors/route.hpp"
#include "devices/config.hpp"
#include "devices/device.hpp"
#include "devices/sampling.hpp"
#include "grammar/cache.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"
#include "runtime/trace.hpp"

namespace triad {

class tool_service;

/// A conversation as the device saw it at the end of a request: its tokens and, when kept, their
/// KV. A session carries it from one turn to the next, so the next turn prefills only its new
/// messages.
struct conversation_state {
  std::vector<token> tokens; ///< every token so far (prompt, generated, tool results)
  std::optional<kv_blob> kv; ///< the KV of a prefix of `tokens` (none: recompute all)
  /// With a KV store: tokens of `tokens` whose KV went into the store as blocks (the next turn
  /// finds the full pages there by its prompt, unless pressure moved them out meanwhile).
  std::uint64_t stored_tokens = 0;
};

/// One LLM call of an agent: a conversation to continue, possibly through tool calls.
struct chat_request {
  std::string session; ///< the agent session it belongs to (PLAS accounts by it)
  /// The conversation so far; with `prior`, only the messages after it (rendered after its
  /// tokens with render_turn).
  std::vector<chat_message> messages;
  std::shared_ptr<const conversation_state> prior; ///< where an earlier turn ended (optional)
  bool keep_kv = false; ///< at the end, export the KV into the done event's conversation
  std::uint32_t max_tokens = defaults::orchestration::max_tokens; ///< completion tokens in all
  std::uint32_t max_tool_calls = defaults::orchestration::max_tool_calls; ///< calls in all
  sampling_params sampling;                                               ///< how tokens are chosen
  /// Forced output for benchmarks and tests, capped by max_tokens (script_length gives what a
  /// whole script needs).
  std::optional<generation_script> script;
  /// A call to a tool the node does not host ends the request with finish reason "tool_calls"
  /// (the caller runs it, as an OpenAI client does) instead of feeding "no such tool" back to
  /// the model. Calls to hosted tools always run on the node.
  bool return_unhosted_calls = false;
  /// Asks for this request's trace (HTTP: the `x-triad-trace: 1` header) where the node writes
  /// traces of asked requests only (node_options::trace_all_requests false); a node that writes
  /// none ignores it.
  bool trace = false;
  /// The tools the caller declared (an HTTP request's `tools` names): a hosted tool runs only
  /// when declared here, or when the node exposes its hosted tools to every request
  /// (`[tools].expose_to_all_requests`); a call to any other is a call the node does not host.
  /// Unset: the embedded caller, who configured the node's tools, may call each of them.
  std::optional<std::vector<std::string>> declared_tools;
  /// An answer may make several calls (OpenAI's parallel_tool_calls); false: its first call
  /// alone is one, the rest of what it writes text.
  bool parallel_tool_calls = true;
  /// A plain completion (`/v1/completions`): the prompt is this text's tokens (after BOS where
  /// the model wants one), with no chat template; `messages` is not used.
  std::optional<std::string> raw_prompt;
  /// The request's `tools` array as JSON text (empty: none): a model file's chat template
  /// renders the definitions in the model's own format.
  std::string tools_json;
  /// The grammar the answer must match (null: free): a response_format's document, or with
  /// tools under tool_choice "auto" that or calls to them (text or calls; calls alone where
  /// `response_grammar_waits_for_call`): the devices mask every token it does not allow before
  /// sampling. After each hosted call's result the answer matches it afresh.
  std::shared_ptr<const grammar::grammar> response_grammar;
  /// The response grammar holds from the answer's first token that opens a call: the text
  /// before is free (token_constraint::free_until_call).
  bool response_grammar_waits_for_call = false;
  /// The grammar of the calls the answer must make (tool_choice "required" or a named function,
  /// in the model's call syntax: call_layout_of; null: the model chooses): the devices mask
  /// every token it does not allow, to the end of an answer that returns its calls, up to the
  /// first call where the node runs it; after that call's result, response_grammar.
  std::shared_ptr<const grammar::grammar> tool_grammar;
  /// Report each generated token's log probability under the model (token events' `logprob`),
  /// with this many of the most likely alternatives (top_logprobs, at most max_top_logprobs).
  bool logprobs = false;
  std::uint8_t top_logprobs = 0; ///< see logprobs
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

/// Where a request's time goes, as `triad_request_stage_seconds{stage}` reports it: every moment
/// from submit to the end is in exactly one stage, so the stages add up to end to end.
enum class request_stage : std::uint8_t {
  queue,    ///< waiting for a device slot (the router's queue)
  prefill,  ///< on a prefill device (or a monolithic one's prefill): admission to its first token
  transfer, ///< KV from the prefill device to a decode device: the hand-over and the import
  decode,   ///< on a decode device, tool time excluded
  tool,     ///< a tool call runs (from the call to its result)
  orchestration, ///< the node's own work between them: templates, tokenizing, tool-call parsing
};

/// Stages in request_stage.
inline constexpr std::size_t request_stage_count = 6;

/// "queue", "prefill", "transfer", "decode", "tool", "orchestration".
std::string_view to_string(request_stage s) noexcept;

/// Why a request ended with done.
enum class finish_reason : std::uint8_t {
  stop,             ///< the model ended its answer (EOS), or a stop string matched
  length,           ///< max_tokens were generated
  tool_calls,       ///< it called a tool the caller runs (return_unhosted_calls)
  tool_calls_limit, ///< it called tools max_tool_calls times
};

/// "stop", "length", "tool_calls", "tool_calls_limit".
std::string_view to_string(finish_reason r) noexcept;

/// Token counts and timings of a finished request.
struct request_usage {
  std::uint64_t prompt_tokens = 0;     ///< tokens of the rendered conversation
  std::uint64_t completion_tokens = 0; ///< tokens generated
  std::uint64_t prefill_tokens = 0;    ///< tokens prefilled on devices, recomputation included
  std::uint64_t cached_tokens = 0;     ///< prompt tokens a device found in its prefix cache
  std::uint32_t tool_calls = 0;        ///< tool calls made
  std::uint32_t hosted_tool_calls = 0; ///< of those, run by the node's own tools
  /// Tool calls whose pinned KV outlived its TTL and moved to the KV store (pin policy).
  std::uint32_t pin_expiries = 0;
  /// Device failures after which the request resumed from its blocks in the KV store, not by
  /// recomputing its KV.
  std::uint32_t recovered_from_store = 0;
  /// Tool calls across which the KV stayed on its device (pin within its TTL, monolithic).
  std::uint32_t kv_kept_calls = 0;
  /// Tool calls across which the KV waited in the KV store (demote, a pin past its TTL).
  std::uint32_t kv_stored_calls = 0;
  /// Of cached_tokens, those whose KV devices read from the KV store (its blocks, or another
  /// device's memory it knows of) instead of computing it.
  std::uint64_t store_tokens = 0;
  double queued_s = 0; ///< waiting for devices, in all
  double ttft_s = 0;   ///< submit to first token
  double tool_s = 0;   ///< waiting for tools, in all
  double total_s = 0;  ///< submit to done
};

/// What a request reports, in order: tokens, tool calls and their results, then exactly one of
/// done or error.
struct request_event {
  /// The kinds of events. tool_call_delta: part of a call the client will run, as the model
  /// writes it (under a grammar of calls, so certain to be well formed): its name first, then
  /// pieces of its arguments' JSON; the whole call still follows as a tool_call.
  enum kind_t : std::uint8_t { token, tool_call, tool_result, state, done, error, tool_call_delta };
  std::uint64_t request = 0; ///< the request's id
  kind_t kind = token;       ///< what happened
  triad::token tok = 0;      ///< token: its id
  std::string text;          ///< token: its bytes (a character may span tokens)
  /// token: part of the answer's text (not a control token, not inside a tool call).
  bool content = true;
  /// One of the most likely tokens at a step, for logprobs.
  struct alternative {
    triad::token tok = 0; ///< its id
    std::string text;     ///< its bytes
    float logprob = 0;    ///< its log probability
  };
  /// token, where the request asked for logprobs: the token's log probability under the model
  /// (log softmax of the step's logits before temperature, top-k/p and any grammar mask).
  std::optional<float> logprob;
  std::vector<alternative> top_logprobs; ///< token: the most likely tokens (top_logprobs)
  /// tool_call: the function called ("(malformed)" if unparsed); tool_call_delta: on the
  /// call's first piece only.
  std::string tool_name;
  std::string arguments_json;   ///< tool_call: its arguments; tool_call_delta: their next bytes
  std::uint32_t call_index = 0; ///< tool_call_delta: the call's index among the answer's calls
  std::string tool_output;    ///< tool_result: the output, as the model reads it
  request_state entered = request_state::queued; ///< state: the state entered
  finish_reason finish = finish_reason::stop;    ///< done: why
  /// error: what kind (exhausted: the request does not fit the model's context, or a tool
  /// output overflowed it; invalid_argument: it cannot be served as given; overloaded: too many
  /// requests wait for devices; busy: it waited past the queue timeout; stopped: the node is
  /// draining; cancelled: cancel() or the client left; timed_out: past the request deadline;
  /// system_error otherwise).
  errc code = errc::system_error;
  std::string message;        ///< error: what happened, for people (never parsed)
  std::uint32_t retry_ms = 0; ///< error with code overloaded, busy or stopped: retry after
  request_usage usage;        ///< done and error: counts and timings
  /// done: the conversation's tokens (and its KV when the request asked keep_kv), for the next
  /// turn's `prior`.
  std::shared_ptr<const conversation_state> conversation;
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
  counter* device_retries = nullptr;  ///< `triad_request_device_retries_total`
  counter* kv_moved_off = nullptr;    ///< `triad_request_kv_moved_off_total`
  histogram* total_seconds = nullptr; ///< `triad_request_seconds`: submit to end
  histogram* ttft_seconds = nullptr;  ///< `triad_request_ttft_seconds`: submit to first token
  /// `triad_request_stage_seconds{stage}`, indexed by request_stage: each request's time per
  /// stage, observed at its end.
  std::array<histogram*, request_stage_count> stage_seconds{};
  /// `triad_request_inter_token_seconds`: the gaps between a request's tokens as it receives
  /// them (the gap across a tool call left out; the gap of a prefill-to-decode transfer is in).
  histogram* inter_token_seconds = nullptr;
  /// `triad_request_time_per_output_token_seconds`: per request with two tokens or more, its
  /// time from the first token to the end less tool time, per token after the first.
  histogram* tpot_seconds = nullptr;
  histogram* tool_calls = nullptr; ///< `triad_request_tool_calls`: tool calls per request
  /// `triad_request_kv_transfer_bytes` / `_seconds`: per prefill-to-decode KV transfer.
  histogram* kv_transfer_bytes = nullptr;
  histogram* kv_transfer_seconds = nullptr; ///< see kv_transfer_bytes
  /// Registers them in `registry`.
  static request_metrics attach(metrics_registry& registry);
};

/// What a request actor needs to find devices and tools.
struct request_context {
  router_actor router; ///< the node's router
  /// How conversations become the model's tokens and tokens text (chat_format.hpp); the byte
  /// format of the random presets unless the node serves a model file.
  std::shared_ptr<const chat_format> format = byte_chat_format();
  tool_service* tools = nullptr; ///< the node's tool domains (null: no tools hosted)
  /// Hosted tools run for requests that did not declare them (`[tools].expose_to_all_requests`).
  bool expose_hosted_tools = false;
  orchestration_options options; ///< policies
  request_metrics metrics;       ///< where transitions are counted
  /// Where the spans of traced requests go (null: the node writes no trace).
  std::shared_ptr<trace_log> trace;
  bool trace_all = true; ///< every request is traced, not only those that ask (trace above)
  /// Requests that asked whose spans the trace log keeps in memory (trace_log::keep).
  std::size_t kept_traces = defaults::traces::kept_requests;
  /// Tokens per KV page of the node's devices: prompts are hashed page by page for
  /// prefix-aware routing.
  std::size_t page_tokens = defaults::model::page_tokens;
  /// The model's context in tokens: a request whose prompt and max_tokens exceed it is refused
  /// before any compute, and tool outputs are fitted to it (tool_result_overflow).
  std::size_t max_context = 4096;
  /// How long a request may take in all before it ends with errc::timed_out (0: no limit).
  std::chrono::milliseconds request_timeout{0};
  /// The node's KV store as the devices' tier below (null: none). The demote policy keeps a
  /// request's KV there across a tool call (blocks it holds and releases), instead of a copy
  /// on the request actor.
  std::shared_ptr<kv_tier> tier;
  /// Where other nodes' devices fetch blocks `tier` keeps (the node's KV exchange, serving
  /// them; "" none): named in the kv_kept of a demotion on this node's own devices.
  std::string kept_wire;
  /// Whether every device is connected to `tier` (a prefix cache, pages of the store's size):
  /// only then does a session's KV wait between turns as store blocks, found again by the
  /// next turn's prompt; else it rides on the conversation as bytes.
  bool sessions_in_store = false;
  /// Recent durations per tool (the pin policy's TTL); null: every TTL is pin_ttl_max.
  std::shared_ptr<tool_durations> durations;
  /// The served model's vocabulary as bytes, for the token masks of requests with a
  /// response_format (the node always sets it).
  std::shared_ptr<const grammar::token_index> vocabulary;
  /// The node's compiled grammars and their masks, shared by requests that send the same schema
  /// or tools (null: each request computes its own masks).
  std::shared_ptr<grammar::grammar_cache> grammars;
  /// Where pin TTLs are armed (null: pins have no TTL); shared, so a request actor that ends
  /// after its node can still cancel its own.
  std::shared_ptr<coarse_timers> timers;
};

/// A submitted request: its id, and its actor for those who want to watch it.
struct request_handle {
  std::uint64_t id = 0; ///< unique in the node; 0: refused at once (see the error event)
  caf::actor actor;     ///< the request actor (null when refused)
};

/// Spawns the actor of one request in `home` (an orchestration domain); it starts at once and
/// reports through `on_event` until done or error.
caf::actor spawn_request(domain& home, std::uint64_t id, chat_request request,
                         std::shared_ptr<const request_context> context, request_callback on_event);

} // namespace triad
