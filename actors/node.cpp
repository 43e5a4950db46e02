#include "actors/node.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <system_error>
#include <thread>

#include <caf/all.hpp>

#include "actors/detail/build_commit.hpp"
#include "actors/kv_link.hpp"
#include "actors/router.hpp"
#include "devices/cpu/cpu_backend.hpp"
#include "devices/device.hpp"
#include "devices/factory.hpp"
#include "runtime/memory.hpp"
#include "tools/builtin.hpp"
#include "tools/mcp.hpp"
#include "tools/service.hpp"

namespace triad {

namespace {

// The configured factory or make_backend; an exception from either is the device's error.
// It runs on a thread of its own: the OpenMP team that preparing the weights starts (libgomp
// keeps one per thread) ends with that thread. A team left on the starting thread counts
// against the CPUs, and libgomp then barely spins: every barrier of the driver's team slept in
// the kernel (measured on Zen 4, 2 cores: a tenth of decode in futex waits and wake-ups).
expected<std::unique_ptr<backend>>
build_backend(const node_options& options, const node_config& config, const device_config& dev,
              std::shared_ptr<arena> storage, const compute_placement& compute) {
  expected<std::unique_ptr<backend>> built =
      make_error(errc::system_error, "building the backend did not run");
  std::string failure; // what threw, if anything did
  auto build = [&] {
    try {
      built = options.backend_factory
                  ? options.backend_factory(config, dev, std::move(storage), compute)
                  : make_backend(config, dev, std::move(storage), compute);
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "an exception that is not a std::exception";
    }
  };
  try {
    std::thread builder(build);
    builder.join();
  } catch (const std::system_error& e) { // no thread could be started
    failure = std::string{"starting its thread: "} + e.what();
  }
  if (!failure.empty())
    return make_error(errc::system_error, "building the backend threw: " + failure);
  return built;
}

// The dtype (and for a cpu backend, its matmul path) a built device computes in; nothing for
// a device whose backend failed to build.
void describe_compute(const node_config& config, const backend& be, device_report& out) {
  if (const auto* cpu = dynamic_cast<const cpu_backend*>(&be)) {
    out.dtype = std::string{to_string(cpu->type())};
    out.path = std::string{to_string(cpu->kernel_path())};
  } else if (out.failure.empty()) {
    out.dtype = std::string{to_string(accelerator_dtype(config))};
  }
}

// triad_device_info{device, backend, dtype, path, kernel, isa} 1: what each device runs.
void add_device_info(metrics_registry& metrics, const device_report& r) {
  const auto& cpu = detect_cpu();
  auto g = metrics.add_gauge("triad_device_info",
                             "What runs each device: backend, dtype, matmul path and kernel, and "
                             "the CPU ISA oneDNN reports (1 for each device)",
                             {{"device", r.name},
                              {"backend", r.backend},
                              {"dtype", r.dtype},
                              {"path", r.path},
                              {"kernel", r.kernel},
                              {"isa", r.backend == "cpu" ? cpu.onednn_isa : ""}});
  if (g)
    (*g)->set(1);
  auto w = metrics.add_gauge("triad_device_weight_bytes",
                             "Bytes of model weights each device multiplies (packed in its own "
                             "memory, or a model file's quantized blocks, mapped once per process "
                             "and shared by every device); 0 for modelled devices",
                             {{"device", r.name}});
  if (w)
    (*w)->set(static_cast<double>(r.weight_bytes));
}

// triad_build_info and triad_config_info (1 each, the facts in labels), and the process
// metrics: what an operator checks first when two nodes behave differently.
expected<void> add_node_info(metrics_registry& metrics, const node_config& config) {
  auto build = metrics.add_gauge("triad_build_info",
                                 "The build of this node: version, git commit it was built from, "
                                 "compiler and build type (1)",
                                 {{"version", TRIAD_VERSION},
                                  {"commit", detail::build_commit()},
                                  {"compiler", TRIAD_COMPILER},
                                  {"build_type", TRIAD_BUILD_TYPE}});
  if (!build)
    return build.error();
  (*build)->set(1);
  const auto& o = config.orchestration;
  auto info = metrics.add_gauge(
      "triad_config_info",
      "The orchestration settings this node runs with: layout, KV policy across tool calls, "
      "scheduling, device failure policy, and its device count (1)",
      {{"layout", std::string{to_string(o.device_layout)}},
       {"kv_policy", std::string{to_string(o.kv)}},
       {"schedule", std::string{to_string(o.schedule)}},
       {"device_failure", std::string{to_string(o.device_failure)}},
       {"devices", std::to_string(config.devices.size())}});
  if (!info)
    return info.error();
  (*info)->set(1);
  return add_process_metrics(metrics);
}

} // namespace

struct node::live_set {
  mutable std::mutex mutex;
  std::condition_variable ended;
  std::map<std::uint64_t, caf::actor> requests;
};

expected<void> node::start_kv_store(node& n, const node_config& config, std::size_t block_bytes,
                                    const std::vector<const device_placement*>& connected) {
  auto& home = n.domains_->orchestration();
  kv_store_config c;
  c.block_tokens = config.model.page_tokens;
  c.block_bytes = block_bytes;
  // A host pool in each domain that holds a connected device, and the orchestration domain's
  // (the home pool, first): a device's KV goes to its own domain's memory, then home. The host
  // budget is split evenly between them.
  const auto pool_name = [](unsigned domain) { return "host" + std::to_string(domain); };
  std::vector<unsigned> host_domains{home.id()};
  std::map<std::string, std::string> device_pools;
  for (const auto* d : connected) {
    if (std::find(host_domains.begin(), host_domains.end(), d->domain) == host_domains.end())
      host_domains.push_back(d->domain);
    device_pools[d->name] = pool_name(d->domain);
  }
  const std::uint64_t per_pool = (config.kvstore.host_mib << 20) / host_domains.size();
  if (per_pool < block_bytes)
    return make_error(errc::invalid_argument,
                      "[kvstore].host_mib = " + std::to_string(config.kvstore.host_mib) +
                          " split over the host pools of " + std::to_string(host_domains.size()) +
                          " domains gives each less than one block of " +
                          std::to_string(block_bytes) + " bytes");
  for (auto d : host_domains) {
    kv_pool_config host;
    host.name = pool_name(d);
    host.kind = tier::host;
    host.domain = d;
    host.capacity_bytes = per_pool;
    c.pools.push_back(host);
  }
  const auto home_pool = c.pools.front().name;
  if (!config.kvstore.disk_dir.empty()) {
    c.disk_dir = config.kvstore.disk_dir;
    c.disk_capacity_bytes = config.kvstore.disk_mib << 20;
  }
  c.model = n.model_.fingerprint(); // disk blocks of another model are never read
  c.topo = config.topology.source == topology_source::machine ? n.topo_.get() : nullptr;
  c.metrics = &n.metrics_;
  auto store = spawn_kv_store(*n.domains_, home, std::move(c));
  if (!store)
    return make_error(store.error().code, "[kvstore]: " + store.error().message);
  n.kv_ = *store;
  n.kv_tier_ = make_store_tier(home, *store, home_pool, std::move(device_pools),
                               config.model.page_tokens, block_bytes, n.trace_);
  return {};
}

namespace {

// The part of `config` a node of its `[cluster] role` runs: all of it; a front node none of
// the devices (its peers' join it); a device node the devices of its role (and "both") and no
// tools.
expected<node_config> devices_of_role(const node_config& config) {
  const auto role = config.cluster.role;
  if (role == node_role::all)
    return config;
  node_config out = config;
  if (role == node_role::front) {
    if (config.cluster.peers.empty())
      return make_error(errc::invalid_argument,
                        "[cluster] role = \"front\" needs peers (the device nodes it routes to, "
                        "\"host:port\")");
    out.devices.clear();
    return out;
  }
  // Tools run where requests are: a device node hosts none.
  out.tools.hosted.clear();
  out.mcp_servers.clear();
  const auto own = role == node_role::prefill ? device_role::prefill : device_role::decode;
  std::erase_if(out.devices, [own](const device_config& d) {
    return d.role != own && d.role != device_role::both;
  });
  if (out.devices.empty())
    return make_error(errc::invalid_argument, "[cluster] role = \"" + std::string{to_string(role)} +
                                                  "\": the file has no [[devices]] of role \"" +
                                                  std::string{to_string(own)} +
                                                  "\" or \"both\" for this node to run");
  return out;
}

} // namespace

expected<std::unique_ptr<node>> node::start(const node_config& whole, node_options options) {
  // A node of a cluster runs part of the file: a front none of its devices, a device node
  // those of its role.
  auto picked = devices_of_role(whole);
  if (!picked)
    return picked.error();
  const node_config& config = *picked;
  // The model, its tokenizer and chat template are checked before anything starts.
  auto model = open_model(config.model);
  if (!model)
    return model.error();
  // The served context fits the model's own.
  if (config.model.context_tokens > model->shape.max_context)
    return make_error(errc::invalid_argument,
                      "[model].context_tokens = " + std::to_string(config.model.context_tokens) +
                          " is more than the " + model->shape.name + " model's context of " +
                          std::to_string(model->shape.max_context) + " tokens");
  auto format = make_chat_format(*model, config.model.chat_template);
  if (!format)
    return format.error();
  std::unique_ptr<node> n{new node};
  n->model_ = std::move(*model);
  n->live_ = std::make_shared<live_set>();
  if (auto info = add_node_info(n->metrics_, config); !info)
    return info.error();
  if (!options.trace_file.empty()) {
    if (options.kept_trace_mib == 0 || options.kept_trace_mib > (std::size_t{1} << 20))
      return make_error(errc::invalid_argument,
                        "node_options::kept_trace_mib = " + std::to_string(options.kept_trace_mib) +
                            ": the kept traces' memory must be 1 to 1048576 MiB");
    auto log = trace_log::open(options.trace_file, options.kept_trace_mib << 20);
    if (!log)
      return log.error();
    n->trace_ = std::move(*log);
    n->kept_traces_ = options.kept_request_traces;
    n->kept_trace_mib_ = options.kept_trace_mib;
  }
  auto topo = topology::load(config.topology);
  if (!topo)
    return topo.error();
  n->topo_ = std::make_unique<topology>(std::move(*topo));
  auto p = make_plan(n->topo_->info(), config);
  if (!p)
    return p.error();
  n->plan_ = std::move(*p);
  if (!options.backend_factory)
    if (auto ok = check_backends(config); !ok)
      return ok.error();
  if (config.scheduler.virtual_time) {
    auto clock = node_clock::virtual_time::start();
    if (!clock)
      return clock.error();
    n->virtual_time_ = std::move(*clock);
  }
  const bool machine = config.topology.source == topology_source::machine;
  const bool bind = machine && config.topology.bind_threads;
  auto domains = domain_set::start(*n->topo_, n->plan_, config.scheduler, bind);
  if (!domains)
    return domains.error();
  n->domains_ = std::move(*domains);

  // Each device's backend first: the KV store's blocks and host pools follow from which
  // devices it connects.
  struct built_device {
    const device_config* config;
    const device_placement* placed;
    domain* home;
    std::unique_ptr<backend> be;
    device_report report;
  };
  std::vector<built_device> built;
  for (const auto& dev : config.devices) {
    const auto* placed = n->plan_.find_device(dev.name);
    if (placed == nullptr)
      return make_error(errc::invalid_argument, "device '" + dev.name + "' is not in the plan");
    auto home = n->domains_->find(placed->domain);
    if (!home)
      return home.error();
    // The device's KV pages come from an arena of its own domain, bound there on this machine.
    auto storage = arena::create(placed->domain, (dev.memory_mib << 20) + (64ull << 20),
                                 machine ? n->topo_.get() : nullptr);
    if (!storage)
      return storage.error();
    compute_placement compute;
    for (auto core : placed->compute_cores)
      compute.team.push_back(n->topo_->info().cores[core].pus);
    compute.topo = bind ? n->topo_.get() : nullptr;
    auto be = build_backend(options, config, dev, std::move(*storage), compute);
    device_report report;
    report.name = dev.name;
    report.backend = std::string{to_string(dev.backend)};
    if (!be) {
      // Config errors were refused above; what fails now (oneDNN, memory) fails this device
      // only: it answers with the error and the node serves on the others.
      report.failure = "device '" + dev.name + "': " + be.error().message;
      be = make_failed_backend(n->model_.shape, config.model.page_tokens,
                               make_error(be.error().code, report.failure));
    }
    report.kernel = (*be)->kernel();
    report.weight_bytes = (*be)->weight_bytes();
    report.team = compute.team.size();
    describe_compute(config, **be, report);
    built.push_back({&dev, placed, *home, std::move(*be), std::move(report)});
  }
  // The KV store's blocks are the pages of the first device with a prefix cache whose pages can
  // leave it; it connects the devices with a prefix cache whose pages have that size (the devices'
  // own rule, devices/device.cpp), and only their domains get a host pool.
  std::size_t block_bytes = 0;
  for (const auto& b : built)
    if (block_bytes == 0 && b.config->prefix_cache)
      block_bytes = b.be->page_payload_bytes();
  if (config.kvstore.host_mib > 0 && block_bytes > 0) {
    std::vector<const device_placement*> connected;
    for (auto& b : built)
      if ((b.report.kv_store = b.config->prefix_cache && b.be->page_payload_bytes() == block_bytes))
        connected.push_back(b.placed);
    if (auto started = start_kv_store(*n, config, block_bytes, connected); !started)
      return started.error();
  }
  // A cluster node's control plane starts before its devices: they fetch KV other nodes hold
  // through its KV exchange.
  if (config.cluster.role != node_role::all || !config.cluster.peers.empty()) {
    auto cp = control_plane::start(config.cluster, &n->metrics_);
    if (!cp)
      return cp.error();
    n->cluster_ = std::move(*cp);
    n->cluster_->serve_kept(n->kv_tier_); // a demotion's blocks, to other nodes' devices
  }
  std::vector<routed_device> routed;
  for (auto& [dev_config, placed, home, be, report] : built) {
    const auto& dev = *dev_config;
    add_device_info(n->metrics_, report);
    n->reports_.push_back(report);
    device_options o;
    o.tier = n->kv_tier_;
    // A sequence's KV moves out through a stream of the store's blocks: to a device of this
    // node, or, on a device node with a KV exchange, to another node's, which fetches the
    // pages from the exchange (the gateway holds the stream there; KV under kv_wire_min_kib
    // goes as bytes in the control message). A front with peers hands its devices' KV to a
    // peer's device as bytes (held in its exchange), not a stream.
    const bool device_node =
        config.cluster.role == node_role::prefill || config.cluster.role == node_role::decode;
    o.stream_moves = (config.cluster.role == node_role::all && config.cluster.peers.empty()) ||
                     (device_node && n->cluster_ && !n->cluster_->kv_wire_address().empty());
    if (device_node) {
      o.stream_min_bytes = std::size_t{config.cluster.kv_wire_min_kib} << 10;
      o.stream_max_tokens = std::min(defaults::cluster::kv_fetch_max_tokens,
                                     defaults::cluster::kv_fetch_max_pages * be->kv().page_tokens);
    }
    if (auto fetcher = n->cluster_ ? n->cluster_->kv_fetcher() : caf::actor{})
      o.kv_fetcher = fetcher.address();
    o.name = dev.name;
    o.role = dev.role;
    o.queue_capacity = dev.queue_capacity;
    o.prefix_cache = dev.prefix_cache;
    o.burst_steps = dev.burst_steps;
    o.step_kv_fast_tier = dev.step_kv_fast_tier;
    o.burst_window = std::chrono::microseconds{dev.burst_window_us};
    if (bind)
      o.driver_cpus = {placed->driver_cpu};
    o.topo = machine ? n->topo_.get() : nullptr;
    o.metrics = &n->metrics_;
    o.trace = n->trace_;
    auto actor = spawn_device(*home, std::move(be), o);
    if (!actor)
      return make_error(actor.error().code, "device '" + dev.name + "': " + actor.error().message);
    n->devices_.emplace_back(dev.name, *actor);
    // No cap by default: the device admits while its KV fits and answers busy beyond.
    auto slots = config.orchestration.device_slots != 0 ? config.orchestration.device_slots
                 : o.max_sequences != 0                 ? o.max_sequences
                                                        : routed_device::unlimited;
    routed.push_back({dev.name, dev.role, *actor, slots, n->store_of(n->devices_.size() - 1)});
  }
  auto hosted = options.tools;
  if (!hosted && (!config.tools.hosted.empty() || !config.mcp_servers.empty())) {
    // Tool processes run only sealed: a machine where none can be is refused here, not at
    // the first call.
    auto probe = probe_sandbox();
    if (!probe)
      return make_error(probe.error().code,
                        "[tools].hosted / [[mcp_servers]]: tool processes cannot be sealed on "
                        "this machine (" +
                            probe.error().message +
                            "); host no tool here, or allow user namespaces");
    n->sandbox_ = std::move(*probe);
    auto registry = std::make_shared<tool_registry>();
    if (auto added = add_hosted_tools(*registry, config.tools.hosted, options.tools_root); !added)
      return make_error(added.error().code, "[tools].hosted: " + added.error().message);
    // Each configured MCP server, started in its sandbox; its tools are "<name>__<tool>".
    for (const auto& entry : config.mcp_servers) {
      mcp_server_config server;
      server.name = entry.name;
      server.argv = entry.command;
      server.env = entry.env;
      server.read_only = entry.read_only;
      server.read_write = entry.read_write;
      auto client = mcp_client::start(std::move(server));
      if (!client)
        return make_error(client.error().code,
                          "[[mcp_servers]] " + entry.name + ": " + client.error().message);
      if (auto added = add_mcp_tools(*registry, *client); !added)
        return make_error(added.error().code,
                          "[[mcp_servers]] " + entry.name + ": " + added.error().message);
    }
    hosted = std::move(registry);
  }
  if (hosted) {
    auto tools =
        tool_service::start(*n->domains_, n->plan_, *n->topo_, hosted, config.tools, &n->metrics_);
    if (!tools)
      return tools.error();
    n->tools_ = std::move(*tools);
  }
  n->router_ = spawn_router(n->domains_->orchestration(), std::move(routed), config.orchestration,
                            std::chrono::milliseconds{config.limits.queue_timeout_ms}, n->kv_tier_,
                            n->trace_);
  auto ctx = std::make_shared<request_context>();
  ctx->router = n->router_;
  ctx->tools = n->tools_.get();
  ctx->expose_hosted_tools = config.tools.expose_to_all_requests;
  ctx->options = config.orchestration;
  ctx->page_tokens = config.model.page_tokens;
  ctx->request_timeout = std::chrono::milliseconds{config.limits.request_timeout_ms};
  ctx->max_context =
      config.model.context_tokens != 0 ? config.model.context_tokens : n->model_.shape.max_context;
  ctx->format = std::move(*format);
  ctx->vocabulary = answer_vocabulary(*ctx->format, n->model_.shape.vocab);
  ctx->grammars = std::make_shared<grammar::grammar_cache>();
  ctx->grammars->attach(n->metrics_);
  if (options.request_metrics)
    ctx->metrics = request_metrics::attach(n->metrics_);
  ctx->tier = n->kv_tier_;
  if (n->cluster_ && n->kv_tier_)
    ctx->kept_wire = n->cluster_->kv_wire_address();
  ctx->trace = n->trace_;
  ctx->trace_all = options.trace_all_requests;
  ctx->kept_traces = options.kept_request_traces;
  ctx->sessions_in_store = n->kv_tier_ && std::all_of(n->reports_.begin(), n->reports_.end(),
                                                      [](const auto& r) { return r.kv_store; });
  ctx->durations = std::make_shared<tool_durations>();
  ctx->timers = std::make_shared<coarse_timers>();
  n->context_ = std::move(ctx);
  if (auto joined = start_cluster(*n, config); !joined)
    return joined.error();
  return n;
}

expected<void> node::start_cluster(node& n, const node_config& config) {
  const auto role = config.cluster.role;
  if (!n.cluster_)
    return {};
  if (role == node_role::prefill || role == node_role::decode) {
    std::vector<published_device> devices;
    for (std::size_t i = 0; i < n.devices_.size(); ++i)
      devices.push_back(
          {n.devices_[i].first, config.devices[i].role, n.devices_[i].second, n.store_of(i)});
    auto port =
        n.cluster_->publish(std::move(devices), n.context_->grammars, n.context_->vocabulary);
    if (!port)
      return port.error();
    n.cluster_port_ = *port;
    return {};
  }
  // A front node (or a whole one with peers): the peers' devices join the router as they come.
  const auto slots = config.orchestration.device_slots != 0 ? config.orchestration.device_slots
                                                            : routed_device::unlimited;
  auto router = n.router_;
  cluster_events events;
  events.takes_held = n.devices_.empty(); // every import lands on a device node
  events.joined = [router, slots](const remote_device& d) {
    caf::anon_send(
        router, device_join_atom::value,
        routed_device{d.name, d.role, d.actor, slots, d.kv_store, d.kv_wire, d.kv_transport});
  };
  events.lost = [router](const std::string& name, const std::string& why) {
    caf::anon_send(router, device_lost_atom::value, name, why);
  };
  // The operator sees why a peer stays out (once per reason): its devices never join routing.
  events.trouble = [](const std::string& peer, const std::string& why) {
    std::fprintf(stderr, "triad: cluster: peer %s not joined: %s\n", peer.c_str(), why.c_str());
  };
  return n.cluster_->join(std::move(events));
}

node::~node() {
  stop();
}

request_handle node::submit(chat_request request, request_callback on_event) {
  if (draining_.load() || stopped_) {
    request_event ev;
    ev.kind = request_event::error;
    ev.code = errc::stopped;
    ev.message = "the node is draining: no new requests";
    ev.retry_ms = 1000;
    if (on_event)
      on_event(ev);
    return {};
  }
  auto id = next_id_.fetch_add(1);
  auto live = live_;
  auto wrapped = [live, id, cb = std::move(on_event)](const request_event& ev) {
    if (cb)
      cb(ev);
    if (ev.kind == request_event::done || ev.kind == request_event::error) {
      std::lock_guard<std::mutex> guard{live->mutex};
      live->requests.erase(id);
      live->ended.notify_all();
    }
  };
  std::lock_guard<std::mutex> guard{live_->mutex};
  auto actor = spawn_request(domains_->orchestration(), id, std::move(request), context_,
                             std::move(wrapped));
  live_->requests.emplace(id, actor);
  return {id, actor};
}

caf::actor node::open_session(session_options options) {
  auto actor = spawn_session(
      domains_->orchestration(), std::move(options),
      [this](chat_request r, request_callback cb) { return submit(std::move(r), std::move(cb)); });
  std::lock_guard<std::mutex> guard{live_->mutex};
  sessions_.push_back(actor);
  return actor;
}

void node::cancel(const request_handle& handle) {
  if (handle.actor)
    caf::anon_send(handle.actor, cancel_atom::value);
}

std::size_t node::in_flight() const {
  std::lock_guard<std::mutex> guard{live_->mutex};
  return live_->requests.size();
}

bool node::drain(std::chrono::milliseconds deadline) {
  draining_ = true;
  const auto until = std::chrono::steady_clock::now() + deadline;
  // A device node: its fronts stop routing here and move what is parked here off, and what
  // runs here finishes (a front or a whole node: nothing to wait for there).
  const bool devices_drained = !cluster_ || cluster_->drain(deadline);
  std::unique_lock<std::mutex> lock{live_->mutex};
  return live_->ended.wait_until(lock, until, [&] { return live_->requests.empty(); }) &&
         devices_drained;
}

expected<std::string> node::request_trace(std::uint64_t id) const {
  if (!trace_)
    return make_error(errc::unsupported,
                      "this node writes no traces: start it with a trace file (triad-node --trace "
                      "FILE, node_options::trace_file)");
  if (auto doc = trace_->trace_of(id))
    return std::move(*doc);
  if (kept_traces_ == 0)
    return make_error(errc::not_found, "this node keeps no request traces in memory "
                                       "(node_options::kept_request_traces = 0); they are in " +
                                           trace_->path().string());
  return make_error(errc::not_found,
                    "no trace of request " + std::to_string(id) +
                        " is kept: the node keeps the spans of the last " +
                        std::to_string(kept_traces_) +
                        " requests that asked for theirs (header x-triad-trace: 1), " +
                        std::to_string(kept_trace_mib_) + " MiB at most");
}

void node::stop() {
  if (stopped_)
    return;
  draining_ = true;
  if (cluster_)
    cluster_->close_gateway(); // a device node's fronts route elsewhere from now on
  {
    std::lock_guard<std::mutex> guard{live_->mutex};
    for (auto& [id, actor] : live_->requests)
      caf::anon_send(actor, cancel_atom::value);
  }
  drain(std::chrono::seconds{10});
  stopped_ = true;
  {
    std::lock_guard<std::mutex> guard{live_->mutex};
    for (auto& s : sessions_)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    sessions_.clear();
  }
  for (auto& [name, actor] : devices_)
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  if (router_)
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
  if (cluster_)
    cluster_->stop_serving_kept(); // other nodes' reads of the store end before it does
  // In reverse start order (the members' order in node.hpp): tools, the KV store, then the
  // domains.
  tools_.reset();
  kv_tier_.reset();
  if (kv_) {
    caf::anon_send_exit(kv_->store, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(kv_->index, caf::exit_reason::user_shutdown);
  }
  if (domains_)
    domains_->stop();
  cluster_.reset(); // its connections close: peers see this node lost
  if (trace_)
    trace_->flush(); // every span so far is in the file (it is closed with the node)
}

} // namespace triad
