#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor.hpp>

#include "actors/defaults.hpp"
#include "actors/node_config.hpp"
#include "actors/request.hpp"
#include "actors/session.hpp"
#include "cluster/control_plane.hpp"
#include "devices/factory.hpp"
#include "devices/kv_tier.hpp"
#include "kvstore/store.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"
#include "runtime/node_clock.hpp"
#include "runtime/placement.hpp"
#include "runtime/topology.hpp"
#include "tools/sandbox.hpp"

namespace triad {

class arena;
class backend;
struct compute_placement;
class tool_registry;
class tool_service;

/// What a node is started with beyond its configuration (whose `[orchestration]` section holds
/// the policies of the request actors and the router).
struct node_options {
  /// The tools the node hosts (built-ins, MCP servers, the embedder's own). Null: the built-ins
  /// the config names in `[tools].hosted` (add_hosted_tools over tools_root) and the tools of
  /// the `[[mcp_servers]]` it configures (each started in the sandbox), and none when it names
  /// none: a model's tool call then gets "this node hosts no tools" as its result.
  std::shared_ptr<const tool_registry> tools;
  /// The directory file_read reads and vector_search indexes, when `[tools].hosted` names them
  /// and `tools` is null.
  std::filesystem::path tools_root;
  /// Builds each device's backend; empty: make_backend (the cpu and sim backends of the config).
  /// Embedders plug in their own backends (or wrap the built-in ones) here; the last argument
  /// is where the plan says a cpu device computes (pass it on to make_backend). It runs on a
  /// thread of its own, joined before start() goes on (the OpenMP team that preparing weights
  /// starts ends with it): state of the thread calling start() (a current GPU context, OpenMP
  /// settings, a held interpreter lock) does not reach it.
  std::function<expected<std::unique_ptr<backend>>(
      const node_config&, const device_config&, std::shared_ptr<arena>, const compute_placement&)>
      backend_factory;
  /// A trace file (Chrome's trace-event JSON, for Perfetto or chrome://tracing): every traced
  /// request's stages on its own track, its devices' driver jobs on theirs. Empty: none.
  std::filesystem::path trace_file;
  /// With a trace file: every request is traced; false: only requests that ask
  /// (chat_request::trace, the `x-triad-trace: 1` header).
  bool trace_all_requests = true;
  /// With a trace file: the requests that asked for their trace whose spans are also kept in
  /// memory for request_trace() (the most recent; 0: none).
  std::size_t kept_request_traces = defaults::traces::kept_requests;
  /// With a trace file: the memory the kept traces take at most, MiB (1 to 1048576); past it
  /// the oldest go first.
  std::size_t kept_trace_mib = defaults::traces::kept_mib;
  /// The request metrics (`triad_request_*`: stages, tokens, transfers); false only to measure
  /// what they cost (triad-bench-orchestration).
  bool request_metrics = true;
};

/// What runs one device, as the node built it (for start-up logs, triad-node and tests).
struct device_report {
  std::string name;               ///< config name
  std::string backend;            ///< "cpu", "sim", "cuda"
  std::string kernel;             ///< backend::kernel(): what does its matmuls (or "failed: ...")
  std::string dtype;              ///< element type it computes in ("bf16", "f32")
  std::string path;               ///< cpu devices: the matmul path (cpu_kernel), else empty
  std::size_t team = 0;           ///< cpu devices: threads of its compute team (its compute cores)
  std::uint64_t weight_bytes = 0; ///< model weights it holds in memory (backend::weight_bytes)
  std::string failure;            ///< why its backend did not build (it then answers every step so)
  /// Whether its evicted pages go to the node's KV store and its prompts find pages there
  /// (`[kvstore]`; its pages must be the store's block size).
  bool kv_store = false;
};

/// A triad node embedded in a process: the topology, the per-domain actor systems, the device
/// actors, the tool domains and the router, started from one configuration. Requests go in with
/// submit() and come out as events.
class node {
public:
  /// Loads the topology the config names, plans, starts every domain, device and tool domain.
  /// Errors name what failed (a device that could not start, a plan that does not fit).
  static expected<std::unique_ptr<node>> start(const node_config& config,
                                               node_options options = {});
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  /// Stops everything (stop()).
  ~node();

  /// The node's KV store (its actors), when `[kvstore] host_mib` > 0 and a device with a prefix
  /// cache has pages that can leave it; nullptr otherwise.
  const kv_store* kv() const noexcept { return kv_ ? &*kv_ : nullptr; }
  /// The KV store as the tier below the devices (kv_link), or null without a store.
  const kv_tier* tier() const noexcept { return kv_tier_.get(); }

  /// Where everything runs.
  const plan& placement() const noexcept { return plan_; }
  /// The machine (or XML, or synthetic) topology it runs on.
  const topology& machine() const noexcept { return *topo_; }
  /// The domains, for spawning the embedder's own actors (see spawn()).
  domain_set& domains() noexcept { return *domains_; }
  /// The node's metrics (Prometheus text via render).
  metrics_registry& metrics() noexcept { return metrics_; }
  /// Spans written to the trace file so far (0 without one: node_options::trace_file).
  std::uint64_t trace_spans() const { return trace_ ? trace_->spans() : 0; }
  /// The spans of request `id`, which asked for its trace (chat_request::trace), as a Chrome
  /// trace-event document of its own; unsupported when the node writes no trace, not_found when
  /// it keeps none of that request (it did not ask, or newer ones displaced it:
  /// kept_request_traces).
  expected<std::string> request_trace(std::uint64_t id) const;
  /// What each device runs, in config order.
  const std::vector<device_report>& device_reports() const noexcept { return reports_; }
  /// The model it serves (`[model]`: a file or a preset), with the name clients see.
  const model_source& model() const noexcept { return model_; }
  /// How its model's conversations become tokens, and how the model writes tool calls (a
  /// server compiles a request's tool_choice against it).
  const chat_format& format() const noexcept { return *context_->format; }
  /// The compiled grammars (response_format, tools) and token masks requests share.
  grammar::grammar_cache& grammars() noexcept { return *context_->grammars; }
  /// What the tools' sandbox applies here (probe_sandbox at start), when the config hosts a
  /// tool or an MCP server; empty otherwise.
  const std::optional<sandbox_result>& sandbox_report() const noexcept { return sandbox_; }
  /// The cluster's control plane (`[cluster]`), or null when the node is alone.
  const control_plane* cluster() const noexcept { return cluster_.get(); }
  /// A device node's control port (where its devices are published); 0 for other nodes.
  std::uint16_t cluster_port() const noexcept { return cluster_port_; }
  /// The device actors by config name.
  const std::vector<std::pair<std::string, device_actor>>& devices() const noexcept {
    return devices_;
  }

  /// The router (route_atom and friends in router.hpp): for inspection, such as a session's
  /// attained service under PLAS (attained_atom).
  const router_actor& router() const noexcept { return router_; }
  /// Spawns the embedder's class-based actor (derive from homed_actor to keep it home) into a
  /// named domain: "orchestration", "tools", "domain<id>" or "device:<name>".
  template<class Impl, class... Ts>
  auto spawn(std::string_view domain_name, Ts&&... xs) {
    return domains_->spawn_in<Impl>(domain_name, std::forward<Ts>(xs)...);
  }

  /// Starts a request; `on_event` receives its tokens, tool calls and results, then one done
  /// or error event, on the request actor's thread (it must not block). While the node drains,
  /// the request is refused with an error event at once and the handle's id is 0.
  request_handle submit(chat_request request, request_callback on_event);
  /// Opens an agent session (see session.hpp): send it `(turn_atom, turn_request,
  /// request_callback)` for each turn and `(session_info_atom)` for its history and service.
  /// It lives until the node stops or it is sent an exit.
  caf::actor open_session(session_options options);
  /// Cancels a request: its KV is freed and an error event "cancelled" ends it.
  void cancel(const request_handle& handle);
  /// Refuses new requests and waits up to `deadline` for those in flight (a device node of a
  /// cluster first for its sequences to finish or move off: control_plane::drain); true when
  /// all ended.
  bool drain(std::chrono::milliseconds deadline);
  /// Requests submitted and not yet ended.
  std::size_t in_flight() const;
  /// Stops devices, tools and domains. Requests still in flight are cancelled first.
  void stop();

private:
  node() = default;
  // Starts the KV store ([kvstore]) with blocks of `block_bytes`, a host pool in the domain of
  // each `connected` device and the orchestration domain's, and its link for the devices.
  // Starts the control plane (`[cluster]`): a device node publishes its devices, a front node
  // joins its peers, whose devices join the router.
  static expected<void> start_cluster(node& n, const node_config& config);
  static expected<void> start_kv_store(node& n, const node_config& config, std::size_t block_bytes,
                                       const std::vector<const device_placement*>& connected);

  std::unique_ptr<topology> topo_;
  plan plan_;
  metrics_registry metrics_;
  std::shared_ptr<trace_log> trace_; // the trace file's writer (null: none)
  std::size_t kept_traces_ = 0;      // node_options::kept_request_traces
  std::size_t kept_trace_mib_ = 0;   // node_options::kept_trace_mib
  model_source model_; // the served model (its file mapped while the node lives)
  // -- what the node runs, in start order; stop() ends them in reverse, as destruction would --
  // Virtual time ([scheduler].virtual_time): before the domains and driver threads, which count
  // their work on it when made while it is on; it ends after them.
  std::unique_ptr<node_clock::virtual_time> virtual_time_;
  // The domains run every actor below and the tool service's invocation actors: they go last.
  // The tool service joins its workers (whose results go to actors in the domains) before.
  std::unique_ptr<domain_set> domains_;
  // The cluster's control plane (`[cluster]`: a device node's gateway, a front node's peers),
  // when the role is not "all" or peers are given. Stopped after the domains (the router and
  // requests hold its remote devices until they end).
  std::unique_ptr<control_plane> cluster_;
  std::uint16_t cluster_port_ = 0; // a device node's control port
  // The KV store (its actors run in the domains) and the devices' link to it.
  std::optional<kv_store> kv_;
  std::shared_ptr<kv_tier> kv_tier_;
  // The store device `i` reads kept blocks from: the node's, when the device is connected to it
  // (0: none).
  std::uint64_t store_of(std::size_t i) const noexcept {
    return kv_tier_ && i < reports_.size() && reports_[i].kv_store ? kv_tier_->store_id() : 0;
  }

  std::unique_ptr<tool_service> tools_;
  std::vector<std::pair<std::string, device_actor>> devices_;
  std::vector<device_report> reports_;
  std::optional<sandbox_result> sandbox_;
  router_actor router_;
  std::shared_ptr<const request_context> context_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<bool> draining_{false};
  /// Requests in flight (shared with their callbacks, which may outlive a stopping node).
  struct live_set;
  std::shared_ptr<live_set> live_;
  std::vector<caf::actor> sessions_; // told to exit at stop (guarded by live_->mutex)
  bool stopped_ = false;
};

} // namespace triad
