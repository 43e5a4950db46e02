#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "runtime/bridge.hpp"
#include "runtime/domains.hpp"
#include "runtime/topology.hpp"
#include "runtime/trace.hpp"
#include "tools/defaults.hpp"
#include "tools/registry.hpp"

namespace triad {

/// Asks a tool executor to run a tool: `(tool_call_atom, std::string name, std::string
/// arguments_json)` -> tool_reply, or with a deadline: `(tool_call_atom, name, arguments_json,
/// std::int64_t deadline_ms)`, answered with the error caf::sec::request_timeout when no result
/// came within deadline_ms (the executor sweeps for expired calls at their first deadline,
/// within `deadline_check`, so callers need no timer of their own). Answered "busy" at once when
/// the queue is full.
using tool_call_atom = caf::atom_constant<caf::atom("toolcall")>;

/// What a call submitted with tool_executor::submit (and a tool invocation, to its owner) sends
/// when the call ends, whatever the outcome: `(tool_result_atom, std::uint64_t call_id,
/// tool_reply)`.
using tool_result_atom = caf::atom_constant<caf::atom("toolres")>;

/// The answer to a tool call.
struct tool_reply {
  bool ok = false;          ///< false: refused (busy, unknown tool, bad arguments) or failed
  bool busy = false;        ///< refused because the executor's queue is full; retry later
  std::string content;      ///< the tool's output for the model, or the error message
  std::string details_json; ///< the tool's structured details (JSON object), when ok
  bool timed_out = false;   ///< no result within the call's deadline (a submitted call only)
};

/// Inspector of tool_reply.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_reply& x) {
  return f(caf::meta::type_name("tool_reply"), x.ok, x.busy, x.content, x.details_json,
           x.timed_out);
}

/// A tool executor's deadline sweep (its own timer message, at the first deadline of its
/// calls): `(tool_sweep_atom, number)`; only the latest armed sweep acts.
using tool_sweep_atom = caf::atom_constant<caf::atom("toolsweep")>;

/// The typed interface of a tool executor's actor: a message it does not take is a compile
/// error at the sender. tool_call_atom requests (see above); results of its own calls from its
/// workers (tool_result_atom); its deadline sweeps (tool_sweep_atom).
using tool_executor_actor = caf::typed_actor<
    caf::replies_to<tool_call_atom, std::string, std::string>::with<tool_reply>,
    caf::replies_to<tool_call_atom, std::string, std::string, std::int64_t>::with<tool_reply>,
    caf::reacts_to<tool_result_atom, std::uint64_t, tool_reply>,
    caf::reacts_to<tool_sweep_atom, std::uint64_t>>;

/// Options of a tool executor.
struct tool_executor_options {
  std::size_t concurrency = defaults::tool_executor::concurrency;       ///< >= 1
  std::size_t queue_capacity = defaults::tool_executor::queue_capacity; ///< >= 0
  /// PUs the worker threads bind to (the tool processes they start inherit the binding): a tool
  /// domain's `tool_cpus` from the placement plan. Empty: no binding.
  std::vector<unsigned> cpus;
  /// The topology used to bind; binding happens only when it is this machine.
  const topology* topo = nullptr;
  /// A worker still in a call this long after its deadline is given up and replaced.
  std::chrono::milliseconds stuck_grace = defaults::tool_executor::stuck_grace;
  /// Given-up workers still stuck, at most (see defaults::tool_executor::max_abandoned).
  std::size_t max_abandoned = defaults::tool_executor::max_abandoned;
};

/// A call for tool_executor::submit.
struct tool_submission {
  std::string name;           ///< the tool's registry name
  std::string arguments_json; ///< its arguments, a JSON object as text
  /// When the call times out: `reply_to` then gets a reply with timed_out set (a tool still
  /// running ends under its own limits; its late result is dropped). max(): none.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  caf::actor reply_to;  ///< gets `(tool_result_atom, id, tool_reply)` once
  std::uint64_t id = 0; ///< echoed in the result
  /// A traced request's call: the worker writes the call's span here (null: none), on its own
  /// track, as a span of request `trace_id`.
  std::shared_ptr<trace_log> trace;
  std::uint64_t trace_id = 0; ///< the request the span belongs to
};

/// The executor of a tool domain: admits calls up to `concurrency` running plus
/// `queue_capacity` waiting and runs each on one of `concurrency` worker threads (the runtime
/// bridge), so tool processes never block the domain's actors. Its actor answers
/// `tool_call_atom` requests; callers inside the node submit instead, which costs no message on
/// the way in, and the worker that ran the call sends its result straight to the caller.
class tool_executor {
public:
  /// Starts the worker threads and spawns the executor's actor in `home`.
  static expected<std::shared_ptr<tool_executor>> start(domain& home,
                                                        std::shared_ptr<const tool_registry> tools,
                                                        tool_executor_options options = {});

  tool_executor(const tool_executor&) = delete;
  tool_executor& operator=(const tool_executor&) = delete;
  /// Leaves the executor running: its actor owns it (an exit message to the actor stops it).
  ~tool_executor();

  /// Queues `call` without blocking: accepted when `call.reply_to` will get exactly one result;
  /// full (`concurrency` calls run and `queue_capacity` wait) or stopped with `call` untouched.
  submit_result submit(tool_submission& call);

  /// The executor's actor (see tool_call_atom); it stops the executor when it exits.
  const tool_executor_actor& actor() const noexcept { return actor_; }

  /// Refuses new calls, lets the running ones finish and joins the workers (those stuck in a
  /// call past its deadline are given up instead), and answers every call still waiting as
  /// stopped. Called by the actor's exit; never from a worker.
  void stop();

  /// Workers given up so far because a call kept them past its deadline and the grace.
  std::size_t abandoned_workers() const;

  /// The shared state of the executor (its actor, its workers' jobs and submitters).
  struct state;

private:
  tool_executor() = default;
  std::shared_ptr<state> state_;
  tool_executor_actor actor_;
};

/// Spawns the executor of a tool domain (tool_executor::start, keeping only its actor): a homed
/// actor admitting calls up to `concurrency` running plus `queue_capacity` waiting (more are
/// answered busy at once), running each on one of `concurrency` worker threads (the runtime
/// bridge) so tool processes never block the domain's actors.
expected<tool_executor_actor> spawn_tool_executor(domain& home,
                                                  std::shared_ptr<const tool_registry> tools,
                                                  tool_executor_options options = {});

} // namespace triad
