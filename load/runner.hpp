#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "load/schedule.hpp"
#include "load/target.hpp"
#include "load/workload.hpp"

namespace triad::load {

/// One LLM call as it happened; times in seconds from the start of the run.
struct call_record {
  std::size_t job = 0, turn = 0, call = 0; ///< where it was in its job's plan
  std::string session;                     ///< the job's session
  double intended_s = 0;                   ///< when the schedule said to send it
  double dispatched_s = 0;                 ///< when the client got to it (timer fired)
  double sent_s = 0;                       ///< when the request left for the server
  double first_token_s = -1;               ///< first token's arrival (< 0: none)
  double end_s = 0;                        ///< answer complete (or failed)
  std::vector<double> token_s;             ///< each token's arrival
  std::uint64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0; ///< usage
  node_usage node;             ///< usage.triad: the node's own tool calls and KV figures
  bool ok = false;             ///< a complete answer
  std::string error_kind;      ///< when not ok
  std::string error;           ///< when not ok
  std::string finish_reason;   ///< stop, length, tool_calls
  bool tool_call = false;      ///< the answer asked the client to run a tool
  bool new_connection = false; ///< it connected before sending (no idle connection was left)
  bool traced = false;         ///< it asked the server for its trace (run_options::trace_sample)
  std::string request_id;      ///< traced: the node's id of its request (empty: none came)
};

/// One job (chat request or agent session) as it happened.
struct job_record {
  std::size_t job = 0;   ///< index
  std::string session;   ///< its session id
  double intended_s = 0; ///< when it should have started
  double end_s = 0;      ///< when its last call ended
  bool ok = false;       ///< every call ok
  bool started = false;  ///< false: never started (beyond --duration)
  std::size_t calls = 0; ///< calls made
  double tool_s = 0;     ///< time its client-side tools took
  double think_s = 0;    ///< time its user thought between turns
};

/// How to run.
struct run_options {
  std::optional<arrival_spec> arrival; ///< open loop (jobs start on this schedule)
  std::size_t concurrency = 0;         ///< closed loop: jobs in flight (when no arrival)
  bool trace_times = false;            ///< open loop on the jobs' own arrival times (traces)
  double duration_s = 0;               ///< > 0: jobs scheduled after this do not start
  std::uint64_t seed = 1;              ///< for the schedule
  bool scripted = true;                ///< send triad's script extension (forced lengths)
  bool stream = true;                  ///< ask for streaming answers
  /// The share of calls (0..1) that ask a triad node for their trace (x-triad-trace: 1), drawn
  /// from `seed` by call, so the same run samples the same calls.
  double trace_sample = 0;
  std::string tool_name = "sim_tool";  ///< client-side tool of agent plans
  /// Agent plans: a tool the server hosts, called instead of the client-side one (empty:
  /// none). Each turn is then one request whose script makes all of its calls; the server runs
  /// them (its tools take what they take: the plan's tool durations are not used).
  std::string hosted_tool;
  std::string hosted_arguments; ///< the hosted tool's arguments, a JSON object as text
  bool progress = false;        ///< a live progress line on stderr
  /// Open loop: run the thread that sends on the schedule at real-time priority (SCHED_FIFO 1)
  /// where the system allows it (root or CAP_SYS_NICE), so sends are not late for lack of CPU.
  bool realtime_pacer = true;
  /// Open loop: connections opened before the first send (the pacer then rarely connects).
  std::size_t warm_connections = 16;
  /// Open loop: called once the warm connections are open and before the clock starts; for
  /// waiting until the server has taken them (a server still accepting hundreds of new
  /// connections answers the first sends late, and the pacer then runs out of idle ones).
  std::function<void(std::size_t warmed)> before_clock;
  /// Called on the runner's thread as each call that asked for its trace (trace_sample) ends,
  /// with its record: for fetching the trace while the node still keeps it. It must not block.
  std::function<void(const call_record&)> on_traced_call;
};

/// Everything a run produced.
struct run_result {
  std::vector<call_record> calls; ///< in completion order
  std::vector<job_record> jobs;   ///< by job index
  double wall_s = 0;              ///< start to last answer
  std::string mode;               ///< "open poisson:10", "closed 8", "trace x1"
  bool realtime_pacer = false;    ///< the open-loop pacer got real-time priority
};

/// Runs `jobs` against `t` as `options` says and waits for every started job to end. Every
/// call records its intended send time, computed before it could be late (up front for
/// arrivals; from the previous answer for a session's next call), as well as when it was
/// dispatched and sent, so latencies can be reported from the intended time.
run_result run(target& t, std::vector<job_plan> jobs, const run_options& options);

} // namespace triad::load
