#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"
#include "runtime/placement.hpp"
#include "runtime/trace.hpp"
#include "tools/config.hpp"
#include "tools/defaults.hpp"
#include "tools/executor.hpp"

namespace triad {

/// One tool call, as the model made it.
struct tool_invocation {
  std::uint64_t id = 0;       ///< the caller's id for this call, echoed in the result
  std::string name;           ///< the tool's registry name
  std::string arguments_json; ///< its arguments, a JSON object as text (validated by the tool)
  /// How long the invocation supervises the call before failing it.
  std::chrono::milliseconds deadline = defaults::tool_invocation::deadline;
  /// A traced request's: the trace its call's span goes to (null: not traced), and its id.
  std::shared_ptr<trace_log> trace;
  std::uint64_t trace_id = 0; ///< the request the span belongs to
};

/// The node's tool domains at run time: one executor per domain of the plan with tool cpus,
/// its workers (and the tool processes they start) bound to those cpus, and one
/// tool-invocation actor per call at a time supervising it (reused for later calls).
class tool_service {
public:
  /// Starts an executor in every domain of `p` that has tool cpus: as many tool processes at
  /// once as the domain has tool cpus, `config.queue_capacity` more waiting. Binding happens
  /// when `topo` is this machine. `metrics` (optional) gets triad_tool_* counters and a
  /// duration histogram.
  static expected<std::unique_ptr<tool_service>> start(domain_set& domains, const plan& p,
                                                       const topology& topo,
                                                       std::shared_ptr<const tool_registry> tools,
                                                       const tools_config& config,
                                                       metrics_registry* metrics = nullptr);
  tool_service(const tool_service&) = delete;
  tool_service& operator=(const tool_service&) = delete;
  /// Stops the executors (running tool processes finish first).
  ~tool_service();

  /// Has a tool-invocation actor in the next tool domain (round robin; an idle one, else a new
  /// one) supervise `call`. It submits the call to that domain's executor; when it is full, to
  /// the other domains' executors in turn; it sends `(tool_result_atom, id, tool_reply)` to
  /// `owner` exactly once (busy when every domain refused, a failure when the deadline passed or
  /// the executor stopped), then waits idle for a later call.
  /// Should the owner exit first, the invocation stops waiting and drops the result.
  caf::actor invoke(tool_invocation call, caf::actor owner);

  /// The registry the executors serve.
  const std::shared_ptr<const tool_registry>& registry() const noexcept { return tools_; }
  /// The ids of the tool domains, in the order invocations rotate through them.
  std::vector<unsigned> domain_ids() const;

  /// Counters shared with the invocation actors.
  struct counters;
  /// Idle invocation actors, reused for later calls.
  struct idle_invocations;

private:
  struct tool_domain {
    domain* home = nullptr;
    std::shared_ptr<tool_executor> executor;
  };
  tool_service() = default;

  std::shared_ptr<const tool_registry> tools_;
  std::vector<tool_domain> domains_;
  std::atomic<std::size_t> next_{0};
  std::shared_ptr<counters> counters_;
  std::shared_ptr<idle_invocations> idle_;
};

} // namespace triad
