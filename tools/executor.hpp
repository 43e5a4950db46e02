#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "runtime/domains.hpp"
#include "runtime/topology.hpp"
#include "tools/registry.hpp"

namespace triad {

/// Asks a tool executor to run a tool: `(tool_call_atom, std::string name, std::string
/// arguments_json)` -> tool_reply, or with a deadline: `(tool_call_atom, name, arguments_json,
/// std::int64_t deadline_ms)`, answered with the error caf::sec::request_timeout when no result
/// came within deadline_ms (the executor checks its calls' deadlines every `deadline_check`, so
/// callers need no timer of their own). Answered "busy" at once when the queue is full.
using tool_call_atom = caf::atom_constant<caf::atom("toolcall")>;

/// Defaults of the tool executor.
namespace defaults::tool_executor {
/// Tool processes running at once per executor (per tool domain).
inline constexpr std::size_t concurrency = 2;
/// Calls waiting for a slot before new ones are refused.
inline constexpr std::size_t queue_capacity = 64;
/// How often an executor with calls under a deadline looks for expired ones: one timer for all
/// of them instead of one per call (a deadline is met within this much).
inline constexpr std::chrono::milliseconds deadline_check{10};
} // namespace defaults::tool_executor

/// The answer to a tool call.
struct tool_reply {
  bool ok = false;          ///< false: refused (busy, unknown tool, bad arguments) or failed
  bool busy = false;        ///< refused because the executor's queue is full; retry later
  std::string content;      ///< the tool's output for the model, or the error message
  std::string details_json; ///< the tool's structured details (JSON object), when ok
};

/// Inspector of tool_reply.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_reply& x) {
  return f(caf::meta::type_name("tool_reply"), x.ok, x.busy, x.content, x.details_json);
}

/// Options of a tool executor.
struct tool_executor_options {
  std::size_t concurrency = defaults::tool_executor::concurrency;       ///< >= 1
  std::size_t queue_capacity = defaults::tool_executor::queue_capacity; ///< >= 0
  /// PUs the worker threads bind to (the tool processes they start inherit the binding): a tool
  /// domain's `tool_cpus` from the placement plan. Empty: no binding.
  std::vector<unsigned> cpus;
  /// The topology used to bind; binding happens only when it is this machine.
  const topology* topo = nullptr;
};

/// Spawns the executor of a tool domain: a homed actor admitting calls up to `concurrency`
/// running plus `queue_capacity` waiting (more are answered busy at once), running each on one
/// of `concurrency` worker threads (the runtime bridge) so tool processes never block the
/// domain's actors.
expected<caf::actor> spawn_tool_executor(domain& home, std::shared_ptr<const tool_registry> tools,
                                         tool_executor_options options = {});

} // namespace triad
