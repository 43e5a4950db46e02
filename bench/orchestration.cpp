// triad-bench-orchestration: CPU time triad's own code spends per generated token and per
// request, on `sim` devices with a zero-time profile (time_scale 0: a step returns as soon as
// its simulated logits exist), for 1..1000 concurrent agent sessions, each a request with tool
// calls to an in-process tool that answers at once.
//
// Triad's CPU = the process's CPU time (getrusage: every thread, CAF workers, driver and tool
// threads alike, user and kernel mode, polling as the node's defaults poll) minus the time the
// driver threads spent inside the sim backend's steps (device_stats compute_cpu_seconds: the
// device's own work, reported as backend_compute_share). The figure before it, the orchestration
// threads' user time alone, is reported beside it. For each session count two runs differ only in
// tokens per turn; the marginal CPU per extra token is the per-token cost, and what is left of
// the shorter run per request the per-request cost (routing, admission, KV export/import, tool
// calls, events). The raw CAF cost of one message between two actors is measured in the same
// run, in the same actor system, as the yardstick, and the round trip of two plain threads
// around each session count's runs as the machine's cross-thread floor.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <caf/all.hpp>

#include "actors/chat.hpp"
#include "actors/node.hpp"
#include "bench/cost_replay.hpp"
#include "bench/machine.hpp"
#include "bench/report.hpp"
#include "devices/device.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/main_guard.hpp"
#include "tools/registry.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

using triad::cpu_times;
using triad::process_cpu;

double process_cpu_seconds() {
  return process_cpu().total();
}

// CPU microseconds per message of `n` messages from one actor to another in `sys`.
double caf_us_per_message(caf::actor_system& sys, std::size_t n) {
  std::promise<void> done;
  auto count = std::make_shared<std::size_t>(0);
  auto sink = sys.spawn([&done, count, n](caf::event_based_actor* self) -> caf::behavior {
    return {[&done, count, n, self](int) {
      if (++*count == n) {
        done.set_value();
        self->quit();
      }
    }};
  });
  auto cpu = process_cpu_seconds();
  sys.spawn([sink, n](caf::event_based_actor* self) {
    for (std::size_t i = 0; i < n; ++i)
      self->send(sink, static_cast<int>(i));
  });
  done.get_future().wait();
  return (process_cpu_seconds() - cpu) * 1e6 / static_cast<double>(n);
}

std::shared_ptr<triad::tool_registry> bench_tools() {
  auto r = std::make_shared<triad::tool_registry>();
  auto ok = r->add({"lookup", "answers at once",
                    boost::json::object{{"type", "object"}, {"properties", boost::json::object{}}}},
                   [](const boost::json::object&) -> triad::expected<triad::tool_output> {
                     return triad::tool_output{"found", {}};
                   });
  if (!ok)
    std::fprintf(stderr, "triad-bench-orchestration: %s\n", ok.error().message.c_str());
  return r;
}

// CPU seconds of the process's threads in two classes: the threads that have cores of their own
// by the placement plan (device drivers "drv.*": their steps are the device's work, and between
// jobs they spin as a GPU driver thread would; tool workers "tool.*": running the tools), and
// the rest (CAF workers of every domain, the caller's thread): the orchestration. From
// /proc/self/task/*/stat, in clock ticks; summed over many runs the ticks average out.
struct thread_cpu {
  cpu_times orchestration, pinned;
  thread_cpu operator-(const thread_cpu& o) const {
    return {orchestration - o.orchestration, pinned - o.pinned};
  }
};

thread_cpu threads_cpu() {
  thread_cpu out;
  for (const auto& t : triad::process_threads_cpu()) {
    bool pinned = t.name.rfind("drv.", 0) == 0 || t.name.rfind("tool.", 0) == 0;
    (pinned ? out.pinned : out.orchestration) += t.cpu;
  }
  return out;
}

// CPU seconds the node's device drivers spent inside their backends' steps so far
// (device_stats compute_cpu_seconds): the devices' own work, which the honest figure leaves out
// and reports.
double backend_seconds(triad::node& n) {
  caf::scoped_actor self{n.domains().orchestration().system()};
  double total = 0;
  for (const auto& [name, device] : n.devices())
    self->request(device, std::chrono::seconds{10}, triad::stats_atom::value)
        .receive([&](triad::device_stats& st) { total += st.compute_cpu_seconds; },
                 [](caf::error&) {});
  return total;
}

// A node of `config` with the bench's tool; null (the reason printed) when it cannot start.
std::unique_ptr<triad::node> start_node(const triad::node_config& config,
                                        triad::node_options opts = {}) {
  opts.tools = bench_tools();
  auto started = triad::node::start(config, opts);
  if (!started) {
    std::fprintf(stderr, "triad-bench-orchestration: %s\n", started.error().message.c_str());
    return nullptr;
  }
  return std::move(*started);
}

struct run_result {
  std::uint64_t requests = 0, tokens = 0, tool_calls = 0, errors = 0;
  thread_cpu cpu;
  double process_s = 0; // every thread of the process, user and kernel (getrusage)
  double backend_s = 0; // of which inside the backends' steps
  double wall_s = 0;
  run_result& operator+=(const run_result& o) {
    requests += o.requests, tokens += o.tokens, tool_calls += o.tool_calls, errors += o.errors;
    cpu.orchestration += o.cpu.orchestration;
    cpu.pinned += o.cpu.pinned;
    process_s += o.process_s;
    backend_s += o.backend_s;
    wall_s += o.wall_s;
    return *this;
  }
  // The honest count: all of triad's CPU but the backends' compute.
  double triad_s() const { return process_s - backend_s; }
};

// `rounds` times `sessions` agent sessions at once, each one request: `calls` tool calls,
// `tokens` tokens of text before each and after the last. CPU is read once around all rounds,
// so the clock ticks of /proc are a small part of it.
run_result run(triad::node& n, std::size_t sessions, std::size_t rounds, std::uint32_t calls,
               std::uint32_t tokens) {
  std::mutex m;
  std::condition_variable cv;
  std::size_t ended = 0;
  run_result out;
  auto backend0 = backend_seconds(n);
  auto process0 = process_cpu_seconds();
  auto cpu0 = threads_cpu();
  auto start = clock_type::now();
  for (std::size_t round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < sessions; ++i) {
      triad::chat_request r;
      r.session = "session-" + std::to_string(i);
      r.messages = {{"system", "You are an agent."}, {"user", "Look it up."}};
      triad::generation_script s;
      for (std::uint32_t c = 0; c < calls; ++c)
        s.turns.push_back({tokens, triad::tool_call_text{"lookup", "{}"}});
      s.turns.push_back({tokens, std::nullopt});
      r.script = s;
      r.max_tokens = triad::script_length(s);
      n.submit(std::move(r), [&](const triad::request_event& e) {
        if (e.kind != triad::request_event::done && e.kind != triad::request_event::error)
          return;
        std::lock_guard<std::mutex> g{m};
        if (e.kind == triad::request_event::error && out.errors++ == 0)
          std::fprintf(stderr, "triad-bench-orchestration: request failed: %s\n",
                       e.message.c_str());
        out.tokens += e.usage.completion_tokens;
        out.tool_calls += e.usage.tool_calls;
        ++ended;
        cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> l{m};
    cv.wait(l, [&] { return ended == (round + 1) * sessions; });
  }
  out.wall_s = std::chrono::duration<double>(clock_type::now() - start).count();
  out.cpu = threads_cpu() - cpu0;
  out.process_s = process_cpu_seconds() - process0;
  out.backend_s = backend_seconds(n) - backend0;
  out.requests = sessions * rounds;
  return out;
}

// The largest of `xs` (0 when empty).
double worst_of(const std::vector<double>& xs) {
  return xs.empty() ? 0.0 : *std::max_element(xs.begin(), xs.end());
}

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-orchestration: triad's CPU time per token and per request on "
               "zero-time sim devices, against raw CAF messages"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  triad::bench::add_common_options(app, common, "smaller runs");
  std::vector<std::size_t> session_counts = {1, 10, 100, 1000};
  app.add_option("--sessions", session_counts, "concurrent session counts to run")
      ->check(CLI::PositiveNumber);
  std::uint32_t calls = 3;
  app.add_option("--tool-calls", calls, "tool calls per request")->capture_default_str();
  std::uint32_t short_turn = 4, long_turn = 64;
  app.add_option("--short-turn", short_turn, "tokens per turn in the short runs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--long-turn", long_turn, "tokens per turn in the long runs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::size_t cost_sessions = 100;
  app.add_option("--cost-sessions", cost_sessions,
                 "sessions at once when measuring the cost of metrics and tracing")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bool no_kv_store = false;
  app.add_flag("--no-kv-store", no_kv_store,
               "run the node without its KV store ([kvstore] host_mib = 0), to compare");
  CLI11_PARSE(app, argc, argv);

  // Zero-time sim devices: only triad's code and the simulated logits cost anything. The
  // scheduler and the driver threads poll as the node's defaults say: their polling is CPU the
  // node spends, so it is counted.
  auto config = triad::zero_time_sim_config();
  for (auto& d : config.devices)
    d.profile = "h200";
  if (no_kv_store)
    config.kvstore.host_mib = 0;
  auto started = start_node(config);
  if (!started)
    return 1;
  auto& n = *started;

  // Rounds per session count: enough requests that thread wake-ups average out.
  // The orchestration threads' user time comes from /proc in clock ticks, split from system
  // time by sampling: with 4000 requests the per-request figure still moved by +-15 us between
  // runs of one binary, so quick runs take 8000 (about 20 s).
  const std::size_t min_requests = quick ? 8000 : 16000;
  triad::bench::report rep;
  rep.quick = quick;
  boost::json::array rows;
  std::vector<double> per_token, per_request, per_token_all, per_request_all;
  std::vector<double> honest_token, honest_request, backend_share;
  std::uint64_t errors = 0;
  run(n, 10, 10, calls, short_turn); // warm-up: pools, first-touch pages, lazily built tables
  // This VM's cross-core hand-offs change cost by several times within minutes, and every
  // hop between a driver thread and an actor pays one: the floor is measured around each session
  // count's runs and reported beside its figures.
  auto floor_us = [] {
    std::vector<double> xs;
    for (int i = 0; i < 3; ++i)
      xs.push_back(triad::bench::thread_pingpong_us(20'000));
    return triad::bench::median(xs);
  };
  std::vector<double> floors;
  for (auto sessions : session_counts) {
    auto floor_before = floor_us();
    auto rounds = std::max<std::size_t>(2, (min_requests + sessions - 1) / sessions);
    // The short and long runs alternate in parts, so a change of the machine's speed during
    // the measurement (common here) falls on both alike instead of on their difference.
    const std::size_t parts = std::min<std::size_t>(rounds, 4);
    run_result a, b;
    for (std::size_t p = 0; p < parts; ++p) {
      auto part_rounds = rounds / parts + (p < rounds % parts ? 1 : 0);
      a += run(n, sessions, part_rounds, calls, short_turn);
      b += run(n, sessions, part_rounds, calls, long_turn);
    }
    auto floor_after = floor_us();
    floors.push_back(floor_before);
    floors.push_back(floor_after);
    errors += a.errors + b.errors;
    auto extra_tokens = static_cast<double>(b.tokens > a.tokens ? b.tokens - a.tokens : 1);
    auto split = [&](double cpu_a, double cpu_b, double& tok, double& req) {
      tok = (cpu_b - cpu_a) * 1e6 / extra_tokens;
      req = (cpu_a * 1e6 - tok * static_cast<double>(a.tokens)) / static_cast<double>(a.requests);
    };
    double tok = 0, req = 0, tok_all = 0, req_all = 0, tok_h = 0, req_h = 0;
    split(a.cpu.orchestration.user, b.cpu.orchestration.user, tok, req);
    split(a.cpu.orchestration.total(), b.cpu.orchestration.total(), tok_all, req_all);
    split(a.triad_s(), b.triad_s(), tok_h, req_h);
    honest_token.push_back(tok_h);
    honest_request.push_back(req_h);
    backend_share.push_back((a.backend_s + b.backend_s) / (a.process_s + b.process_s));
    per_token.push_back(tok);
    per_request.push_back(req);
    per_token_all.push_back(tok_all);
    per_request_all.push_back(req_all);
    rows.push_back(boost::json::object{
        {"sessions", sessions},
        {"rounds", rounds},
        {"tool_calls_per_request", calls},
        {"tokens_short", a.tokens},
        {"tokens_long", b.tokens},
        // Unsplit: all orchestration user CPU of each run per request, tokens included.
        {"user_us_per_request_short",
         a.cpu.orchestration.user * 1e6 / static_cast<double>(a.requests)},
        {"user_us_per_request_long",
         b.cpu.orchestration.user * 1e6 / static_cast<double>(b.requests)},
        {"orchestration_user_s_short", a.cpu.orchestration.user},
        {"orchestration_user_s_long", b.cpu.orchestration.user},
        {"orchestration_sys_s_short", a.cpu.orchestration.sys},
        {"orchestration_sys_s_long", b.cpu.orchestration.sys},
        {"pinned_threads_cpu_s_short", a.cpu.pinned.total()},
        {"pinned_threads_cpu_s_long", b.cpu.pinned.total()},
        {"wall_s_short", a.wall_s},
        {"wall_s_long", b.wall_s},
        {"cpu_us_per_token", tok_h},
        {"cpu_us_per_request", req_h},
        {"process_cpu_s_short", a.process_s},
        {"process_cpu_s_long", b.process_s},
        {"backend_compute_s_short", a.backend_s},
        {"backend_compute_s_long", b.backend_s},
        {"orchestration_user_cpu_us_per_token", tok},
        {"orchestration_user_cpu_us_per_request", req},
        {"with_kernel_cpu_us_per_token", tok_all},
        {"with_kernel_cpu_us_per_request", req_all},
        // The cross-thread floor just before and just after this session count's runs.
        {"thread_pingpong_rtt_us_before", floor_before},
        {"thread_pingpong_rtt_us_after", floor_after},
    });
    std::printf("%5zu sessions x %4zu rounds: %.2f us/token, %.1f us/request (every thread, user "
                "and kernel, less backend compute); orchestration threads in user mode %.2f "
                "us/token, %.1f us/request, with kernel %.2f, %.1f (wall %.2f s; thread "
                "ping-pong %.2f / %.2f us)\n",
                sessions, rounds, tok_h, req_h, tok, req, tok_all, req_all, a.wall_s + b.wall_s,
                floor_before, floor_after);
  }
  auto caf_us =
      caf_us_per_message(n.domains().orchestration().system(), quick ? 200'000 : 1'000'000);
  n.stop();
  started.reset();

  // What the request metrics and tracing every request cost (issue #30): three nodes alike but
  // for them (request metrics off; on, the default; on, with every request traced to a file), run
  // in turns at `cost_sessions` sessions so a drift of the machine's speed falls on all three.
  // Each one's triad CPU per request, unsplit (its tokens included): the differences, against
  // the per-request figure above, are the costs. The spread of the parts says how much of the
  // difference this VM's noise could make.
  double metrics_cost = 0, tracing_cost = 0, cost_noise = 0;
  std::uint64_t traced_spans = 0;
  triad::bench::replayed_cost metrics_replay, trace_replay;
  {
    // Each part's traced node writes a file of its own (the last part's is replayed below).
    auto trace_of_part = [](std::size_t p) {
      return std::filesystem::temp_directory_path() /
             ("triad-bench-orchestration-" + std::to_string(::getpid()) + "-" + std::to_string(p) +
              ".json");
    };
    triad::node_options off; // the traced node's options get their file per part
    off.request_metrics = false;
    // Fresh nodes for each part, started in a turning order: which of three nodes started first
    // moved its CPU per request by more than these costs (the first ran about 7% cheaper in
    // runs of 2026-12-04 with the order swapped), so no kind keeps a place.
    const std::array<triad::node_options, 3> kinds = {off, triad::node_options{},
                                                      triad::node_options{}};
    const std::size_t parts = quick ? 4 : 8, rounds = quick ? 10 : 20;
    const auto trace_path = trace_of_part(parts - 1);
    std::array<std::vector<double>, 3> per_request; // per part
    std::array<std::uint64_t, 3> requests{};        // each node of the last part ran
    std::string metrics_text;                       // the last part's metrics node's
    for (std::size_t p = 0; p < parts; ++p) {
      std::array<std::unique_ptr<triad::node>, 3> nodes;
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        const auto i = (p + k) % nodes.size();
        auto options = kinds[i];
        if (i == 2)
          options.trace_file = trace_of_part(p);
        nodes[i] = start_node(config, options);
        if (!nodes[i])
          return 1;
      }
      for (std::size_t i = 0; i < nodes.size(); ++i) // warm-up, counted in what the replays read
        requests[i] = run(*nodes[i], 10, 2, calls, short_turn).requests;
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        const auto i = (p + k) % nodes.size(); // each goes first in turn: no order favours one
        auto r = run(*nodes[i], cost_sessions, rounds, calls, short_turn);
        errors += r.errors;
        per_request[i].push_back(r.triad_s() * 1e6 / static_cast<double>(r.requests));
        requests[i] += r.requests;
      }
      traced_spans = nodes[2]->trace_spans();
      metrics_text = nodes[1]->metrics().render();
      for (auto& n : nodes)
        n->stop();
      nodes = {}; // the traced node's file is closed
      if (p + 1 < parts)
        std::filesystem::remove(trace_of_part(p));
    }
    auto mean = [](const std::vector<double>& xs) {
      double t = 0;
      for (double x : xs)
        t += x;
      return t / static_cast<double>(xs.size());
    };
    const double reference = std::max(1e-9, worst_of(honest_request));
    metrics_cost = (mean(per_request[1]) - mean(per_request[0])) / reference;
    tracing_cost = (mean(per_request[2]) - mean(per_request[1])) / reference;
    // The spread of one node's parts, as a share of the reference: what noise alone moves.
    for (const auto& xs : per_request) {
      auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
      cost_noise = std::max(cost_noise, (*hi - *lo) / reference);
    }
    metrics_replay = triad::bench::replay_request_metrics(metrics_text, requests[1]);
    trace_replay = triad::bench::replay_trace(trace_path, requests[2]);
    std::filesystem::remove(trace_path);
    std::printf("at %zu sessions, triad CPU per request (unsplit): metrics off %.1f us, on %.1f "
                "us, on and every request traced %.1f us; costs %.1f%% and %.1f%% of the "
                "per-request figure (parts spread %.1f%%; %llu spans traced in the last part)\n",
                cost_sessions, mean(per_request[0]), mean(per_request[1]), mean(per_request[2]),
                100 * metrics_cost, 100 * tracing_cost, 100 * cost_noise,
                static_cast<unsigned long long>(traced_spans));
    std::printf("replayed apart from the node on two threads: the request metrics %.2f us per "
                "request (%.1f%%, %llu operations), the trace %.2f us per request (%.1f%%, %llu "
                "spans)\n",
                metrics_replay.cpu_us_per_request,
                100 * metrics_replay.cpu_us_per_request / reference,
                static_cast<unsigned long long>(metrics_replay.operations),
                trace_replay.cpu_us_per_request, 100 * trace_replay.cpu_us_per_request / reference,
                static_cast<unsigned long long>(trace_replay.operations));
  }

  // An idle node as triad-node runs it (the scheduler's default polling): the share of one core
  // its process uses with no request at all.
  double idle_percent = -1;
  {
    auto idle = start_node(triad::zero_time_sim_config());
    if (!idle)
      return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds{500}); // start-up settles
    const auto wait = std::chrono::seconds{quick ? 3 : 10};
    auto cpu0 = process_cpu_seconds();
    auto t0 = clock_type::now();
    std::this_thread::sleep_for(wait);
    auto cpu = process_cpu_seconds() - cpu0;
    idle_percent = 100.0 * cpu / std::chrono::duration<double>(clock_type::now() - t0).count();
    idle->stop();
    std::printf("idle node: %.2f%% of a core\n", idle_percent);
  }

  // The headline figures: the worst over the session counts.
  double worst_token = worst_of(honest_token);
  double worst_request = worst_of(honest_request);
  rep.metrics["cpu_us_per_token"] = worst_token;
  rep.metrics["cpu_us_per_request"] = worst_request;
  rep.metrics["backend_compute_share"] = worst_of(backend_share);
  // The figures before the honest count, beside it: orchestration threads only (no driver or
  // tool thread), user mode, then with kernel time.
  rep.metrics["orchestration_user_cpu_us_per_token"] = worst_of(per_token);
  rep.metrics["orchestration_user_cpu_us_per_request"] = worst_of(per_request);
  rep.metrics["with_kernel_cpu_us_per_token"] = worst_of(per_token_all);
  rep.metrics["with_kernel_cpu_us_per_request"] = worst_of(per_request_all);
  rep.metrics["caf_us_per_message"] = caf_us;
  rep.metrics["thread_pingpong_rtt_us"] = triad::bench::median(floors);
  rep.metrics["idle_cpu_percent"] = idle_percent;
  rep.metrics["metrics_cost_share"] = metrics_cost;
  rep.metrics["tracing_cost_share"] = tracing_cost;
  rep.metrics["cost_parts_spread_share"] = cost_noise;
  // The same costs from their work replayed apart from the node (cost_replay.hpp).
  rep.metrics["metrics_replay_cpu_us_per_request"] = metrics_replay.cpu_us_per_request;
  rep.metrics["tracing_replay_cpu_us_per_request"] = trace_replay.cpu_us_per_request;
  rep.metrics["metrics_replay_cost_share"] = metrics_replay.cpu_us_per_request / worst_request;
  rep.metrics["tracing_replay_cost_share"] = trace_replay.cpu_us_per_request / worst_request;
  rep.metrics["traced_spans"] = traced_spans;
  rep.metrics["errors"] = errors;
  rep.metrics["runs"] = rows;
  rep.ratios["token_over_caf_message"] = worst_token / caf_us;
  rep.ratios["request_over_caf_message"] = worst_request / caf_us;
  const int written = rep.finish(json_path);
  return written != 0 || errors != 0 ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-orchestration", argc, argv, run);
}
