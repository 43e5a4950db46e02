#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/node_config.hpp"

namespace boost::asio {
class io_context;
}
#include "runtime/error.hpp"

namespace triad {
class node;
}

namespace triad::load {

using clock_type = std::chrono::steady_clock;

/// A message of an OpenAI conversation as triad-load builds it.
struct message {
  std::string role;           ///< system, user, assistant or tool
  std::string content;        ///< text (may be empty for an assistant message with a tool call)
  std::string tool_name;      ///< assistant: the tool it called (empty: none)
  std::string tool_arguments; ///< assistant: its arguments, a JSON object as text
  std::string tool_call_id;   ///< assistant with a call, and tool: the call's id
};

/// One turn of a forced generation (triad's `triad.script` extension; other servers ignore it).
struct script_step {
  std::uint32_t tokens = 0; ///< text tokens
  std::string tool;         ///< then a call to this tool (empty: the answer ends)
  std::string arguments;    ///< the call's arguments, a JSON object as text (empty: {})
};

/// What a triad node adds to a call's usage (`usage.triad`): tool calls it ran itself and
/// where the KV waited across them, and prompt tokens read from its KV store.
struct node_usage {
  std::uint64_t server_tool_calls = 0; ///< tool calls the node hosted and ran
  std::uint64_t kv_kept_calls = 0;     ///< of those, the KV stayed on its device across
  std::uint64_t kv_stored_calls = 0;   ///< of those, the KV waited in the KV store across
  std::uint64_t store_tokens = 0;      ///< prompt tokens whose KV came from the KV store
  /// Adds `o`'s counts (a run's sums).
  node_usage& operator+=(const node_usage& o) noexcept {
    server_tool_calls += o.server_tool_calls;
    kv_kept_calls += o.kv_kept_calls;
    kv_stored_calls += o.kv_stored_calls;
    store_tokens += o.store_tokens;
    return *this;
  }
};

/// One LLM call to make.
struct call_spec {
  std::vector<message> messages;   ///< the conversation so far
  std::uint32_t max_tokens = 16;   ///< completion bound
  std::vector<script_step> script; ///< forced output (empty: the model decides)
  std::vector<std::string> tools;  ///< functions declared to the server (client-side tools)
  std::string session;             ///< PLAS accounting key (`triad.session`)
  bool stream = true;              ///< ask for server-sent events
  bool trace = false;              ///< ask a triad node for this call's trace (x-triad-trace)
};

/// What came back.
struct call_result {
  bool ok = false;            ///< a complete answer
  std::string error_kind;     ///< "http_429", "http_500", "connect", "timeout", "protocol", ...
  std::string error;          ///< the message
  std::string content;        ///< the answer's text
  std::string finish_reason;  ///< stop, length, tool_calls
  std::string tool_name;      ///< a tool call returned to the client (empty: none)
  std::string tool_arguments; ///< its arguments
  std::string tool_call_id;   ///< its id
  std::uint64_t prompt_tokens = 0;     ///< usage, when the server reported it
  std::uint64_t completion_tokens = 0; ///< usage, or the tokens counted in the stream
  std::uint64_t cached_tokens = 0;     ///< usage.prompt_tokens_details.cached_tokens
  node_usage node;                     ///< usage.triad, from a triad node (zeros elsewhere)
  clock_type::time_point sent;         ///< when the request was handed to the connection
  /// The call opened a connection of its own before sending (none was idle): over HTTP a
  /// connect on the clock, so many of these in an open loop explain late sends.
  bool new_connection = false;
  /// When each completion token arrived; a chunk carrying several tokens counts as several at
  /// its arrival time (tokens per chunk: usage.completion_tokens spread over the chunks in
  /// proportion to their text, or one per chunk when usage is missing).
  std::vector<clock_type::time_point> token_times;
  clock_type::time_point ended; ///< when the answer (or error) was complete
  /// A traced call: the node's id of its request (x-triad-request-id), for target::trace_of.
  std::string request_id;
};

/// Receives a call's result on one of the target's threads; must not block.
using call_callback = std::function<void(call_result&&)>;

/// A call built ahead of its send time (serialised, ready to go), so that sending it at its
/// intended time costs only the hand-off to the server.
class prepared_call {
public:
  virtual ~prepared_call() = default;
  /// Hands the call to the server from the calling thread, at once; the `done` given to
  /// `target::prepare` is then called exactly once, on one of the target's threads.
  virtual void send() = 0;
};

/// Something to load: an OpenAI-compatible HTTP server, or a node in this process.
class target {
public:
  virtual ~target() = default;
  /// Builds `spec` for a later `send()`; `sent` in the result is stamped when the request
  /// leaves for the server.
  virtual std::unique_ptr<prepared_call> prepare(call_spec spec, call_callback done) = 0;
  /// Starts `spec` now: `prepare` and `send` in one step.
  void call(call_spec spec, call_callback done) {
    prepare(std::move(spec), std::move(done))->send();
  }
  /// Opens up to `connections` idle connections ahead of a run, so that sends on a schedule
  /// need not connect first; those that fail are left out (a call connects when none is idle).
  /// Targets without connections ignore it.
  virtual void warm(std::size_t connections) { (void)connections; }
  /// The trace of a call that asked for one (call_spec::trace), by the request id its result
  /// carries: a Chrome trace-event document as the node keeps it (GET /v1/traces/{id}). The
  /// error says why there is none (the node writes no traces, or no longer keeps this one).
  virtual expected<std::string> trace_of(const std::string& request_id) = 0;
  /// A short description ("http://127.0.0.1:8080/v1", "inproc triad-tiny").
  virtual std::string describe() const = 0;
  /// The model name requests carry.
  virtual std::string model() const = 0;
  /// The io_context the target does its I/O on, when it has exactly one thread running it: the
  /// runner then sets its follow-up timers there too, so a timer that fires writes the request
  /// in the same thread, without a hand-off (null: the runner uses its own thread).
  virtual boost::asio::io_context* single_thread_io() { return nullptr; }
};

/// Where an HTTP target is.
struct http_target_options {
  std::string url;         ///< base URL up to and including /v1, e.g. http://127.0.0.1:8080/v1
  std::string api_key;     ///< bearer token (empty: none)
  std::string model;       ///< model name (empty: asked from GET /v1/models)
  std::size_t threads = 1; ///< client I/O threads
  std::chrono::milliseconds timeout{600'000}; ///< per request, connect to last byte
};

/// An OpenAI-compatible server over HTTP/1.1 (keep-alive connections, reused when idle; SSE
/// parsed as it arrives). Errors name the URL.
expected<std::unique_ptr<target>> make_http_target(http_target_options options);

/// GETs `url` (http://host:port/path) on a connection of its own within 10 s: the body of a 200
/// answer, else an error naming the URL and the status or the step that failed. For the few
/// requests around a run (a node's /metrics), not the load.
expected<std::string> http_get(const std::string& url);

/// The value of the sample `series` (its name and labels as a node renders them, e.g.
/// `triad_device_running{device="decode0"}`) in Prometheus text `text`; nothing when absent.
std::optional<double> metric_sample(std::string_view text, std::string_view series);

/// A node embedded in this process, started from a config file (its devices, tools, policies):
/// requests go through node::submit, without HTTP. `trace_file`: where it writes the traces of
/// the calls that ask for one (empty: it writes none).
expected<std::unique_ptr<target>> make_inproc_target(const node_config& config,
                                                     const std::filesystem::path& trace_file = {});

/// The same on a node someone else started and keeps (it must outlive the target); `model`
/// is what the target reports.
std::unique_ptr<target> make_inproc_target(node& n, std::string model);

} // namespace triad::load
