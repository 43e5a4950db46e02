#pragma once

#include <filesystem>
#include <string>

#include <boost/json/object.hpp>

#include "load/runner.hpp"
#include "load/stats.hpp"

namespace triad::load {

/// Service-level objectives: a call (or session) meeting all that apply counts as goodput.
struct slo {
  double ttft_ms = 0;   ///< time to first token, from the intended send time (0: none)
  double tpot_ms = 0;   ///< time per output token after the first (0: none)
  double e2e_ms = 0;    ///< call end to end, from the intended send time (0: none)
  double session_s = 0; ///< session (job) completion time (0: none)
};

/// A run summarised. Latencies are measured from the intended send time (so a client that
/// fell behind cannot hide the server's queueing), and also from the actual send time.
struct summary {
  std::string mode;            ///< how jobs arrived
  bool realtime_pacer = false; ///< the open-loop sender ran at real-time priority
  double wall_s = 0;           ///< run length
  std::size_t jobs = 0, jobs_ok = 0, jobs_not_started = 0; ///< jobs
  std::size_t calls = 0, calls_ok = 0;                     ///< LLM calls
  std::size_t calls_new_connection = 0;                    ///< calls that connected before sending
  std::uint64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0; ///< usage sums
  node_usage node;           ///< usage.triad sums: the node's own tool calls and KV figures
  distribution ttft;         ///< first token - intended (s)
  distribution ttft_sent;    ///< first token - sent (s)
  distribution tpot;         ///< (end - first token) / (tokens - 1) (s)
  distribution itl;          ///< gaps between consecutive tokens, one per token (s)
  distribution e2e;          ///< end - intended (s)
  distribution e2e_sent;     ///< end - sent (s)
  distribution session;      ///< job end - job intended start, ok jobs (s)
  distribution send_lag;     ///< sent - intended (s): the client's own delay
  distribution dispatch_lag; ///< dispatched - intended (s): timer lateness
  double calls_per_s = 0, output_tokens_per_s = 0; ///< throughput
  double goodput_calls_per_s = 0;                  ///< ok calls meeting the call SLOs, per second
  double goodput_jobs_per_s = 0; ///< ok jobs meeting the session SLO and all their calls'
  boost::json::object errors;    ///< count per error kind
  bool fell_behind = false;      ///< the client sent late (dispatch lag p99 > 10 ms or max >
                                 ///< 100 ms): the offered load was not what was asked
  boost::json::array timeline;   ///< per second: calls ended, tokens, errors
  boost::json::object stages;    ///< mean seconds per stage: send lag, ttft, decode, tool, think
};

/// Summarises `r` under `objectives`.
summary summarize(const run_result& r, const slo& objectives);

/// The summary as JSON (latencies in milliseconds, session times in seconds).
boost::json::object to_json(const summary& s);

/// Prints the summary for a terminal.
void print(const summary& s, std::FILE* out);

/// Writes one JSON object per call (JSON Lines).
bool write_jsonl(const run_result& r, const std::filesystem::path& path, std::string& error);
/// Writes one CSV row per call, with a header row.
bool write_csv(const run_result& r, const std::filesystem::path& path, std::string& error);
/// One span of a request's own track in its trace (a stage: queue, prefill, transfer, ...).
struct trace_stage {
  std::string name;     ///< the stage
  double start_ms = 0;  ///< from the request's start
  double length_ms = 0; ///< its length
};

/// A call that asked the node for its trace, and what came of it.
struct sampled_trace {
  std::size_t job = 0, turn = 0, call = 0; ///< which call
  std::string session;                     ///< its job's session
  std::string request_id;                  ///< the node's id of its request (empty: none came)
  std::string file;                ///< the trace file written, relative to the report (empty: none)
  std::string error;               ///< why there is no trace
  double e2e_ms = 0;               ///< the call's end-to-end time, from its intended send
  double request_ms = 0;           ///< the request's time in the node (its root span)
  std::size_t spans = 0;           ///< spans in the trace (stages, device jobs, KV imports)
  std::size_t device_spans = 0;    ///< of those, the devices' (category device)
  std::size_t tool_spans = 0;      ///< and the tool workers' (category tool)
  bool truncated = false;          ///< the node kept only part of its spans
  std::vector<trace_stage> stages; ///< the request's own track, in time order
};

/// Reads a node's trace of request `t.request_id` (a Chrome trace-event document, as
/// GET /v1/traces/{id} gives it) into `t`'s span counts and stages; false with `error` when it
/// is not one, or has no root span of that request.
bool read_trace(const std::string& doc, sampled_trace& t, std::string& error);

/// Writes a self-contained HTML report: the summary, latency CDFs (TTFT, inter-token, end to
/// end), throughput over time, the per-stage breakdown, as inline SVG (no scripts, no
/// network), and the sampled calls' traces: where each request's time went in the node, with a
/// link to its trace file (for Perfetto or chrome://tracing).
bool write_html(const run_result& r, const summary& s, const std::string& title,
                const std::filesystem::path& path, std::string& error,
                const std::vector<sampled_trace>& traces = {});

} // namespace triad::load
