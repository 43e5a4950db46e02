// triad-load: load generator and SLO reporter for OpenAI-compatible servers (--url), an
// in-process triad node (--inproc CONFIG), or a built-in mock server that measures the client
// itself (--self-test).

#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "actors/node.hpp"
#include "load/mock_server.hpp"
#include "load/report.hpp"
#include "load/runner.hpp"
#include "load/trace.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/main_guard.hpp"
#include "server/http_server.hpp"

namespace {

using namespace triad::load;
namespace json = boost::json;

int fail(const std::string& message) {
  std::fprintf(stderr, "triad-load: %s\n", message.c_str());
  return 2;
}

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream f{path};
  f << text;
  if (!f) {
    std::fprintf(stderr, "triad-load: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// Where the sampled calls' traces go: <report>-traces/ beside the report.
std::filesystem::path traces_folder(const std::filesystem::path& html) {
  return html.parent_path() / (html.stem().string() + "-traces");
}

// The traces of the calls that asked for one, fetched from the node as each call ends (the node
// keeps only the most recent ones), on a thread of its own, and written to a folder beside the
// report (<report>-traces/) for the report to link; a call without one says why.
class trace_fetcher {
public:
  trace_fetcher(target& t, const std::filesystem::path& html)
      : t_(t)
      , folder_(traces_folder(html)) {
    std::error_code ec;
    std::filesystem::create_directories(folder_, ec);
    if (ec)
      no_traces_ = "cannot create " + folder_.string() + ": " + ec.message();
    thread_ = std::thread{[this] { run(); }};
  }
  ~trace_fetcher() { finish(); }
  trace_fetcher(const trace_fetcher&) = delete;
  trace_fetcher& operator=(const trace_fetcher&) = delete;

  // A traced call ended (on the runner's thread): its trace is fetched next, without waiting.
  void add(const call_record& c) {
    {
      std::lock_guard g{m_};
      queue_.push_back(c);
    }
    cv_.notify_one();
  }

  // Waits for the traces of the calls added so far and gives them, in the order the calls
  // ended; says on stderr how many came.
  std::vector<sampled_trace> finish() {
    {
      std::lock_guard g{m_};
      if (done_)
        return {};
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
    std::size_t failed = 0;
    std::string first_error;
    for (const auto& st : out_)
      if (!st.error.empty() && failed++ == 0)
        first_error = st.error;
    std::fprintf(stderr, "triad-load: %zu of %zu sampled calls' traces written to %s%s%s\n",
                 out_.size() - failed, out_.size(), folder_.c_str(),
                 failed ? "; the first missing one: " : "", first_error.c_str());
    return std::move(out_);
  }

private:
  void run() {
    for (;;) {
      call_record c;
      {
        std::unique_lock g{m_};
        cv_.wait(g, [this] { return done_ || !queue_.empty(); });
        if (queue_.empty())
          return; // done, and every call added is fetched
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      out_.push_back(fetch(c));
    }
  }

  sampled_trace fetch(const call_record& c) {
    sampled_trace st;
    st.job = c.job;
    st.turn = c.turn;
    st.call = c.call;
    st.session = c.session;
    st.request_id = c.request_id;
    st.e2e_ms = (c.end_s - c.intended_s) * 1e3;
    if (!no_traces_.empty()) {
      st.error = no_traces_;
    } else if (c.request_id.empty()) {
      st.error = c.ok ? "the server sent no request id (x-triad-request-id): not a triad node?"
                      : "the call failed: " + c.error;
    } else if (auto doc = t_.trace_of(c.request_id); !doc) {
      st.error = doc.error().message;
      if (doc.error().code == triad::errc::unsupported) // no later call's will come either
        no_traces_ = st.error;
    } else if (std::string error; !read_trace(*doc, st, error)) {
      st.error = error;
    } else {
      const auto name = "job" + std::to_string(c.job) + "-turn" + std::to_string(c.turn) + "-call" +
                        std::to_string(c.call) + "-request" + c.request_id + ".json";
      if (!write_text((folder_ / name).string(), *doc))
        st.error = "cannot write " + (folder_ / name).string();
      else
        st.file = folder_.filename().string() + "/" + name;
    }
    return st;
  }

  target& t_;
  std::filesystem::path folder_;
  std::string no_traces_; // why none can come (the folder, or a node that writes none)
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<call_record> queue_; // ended, not yet fetched
  bool done_ = false;
  std::vector<sampled_trace> out_; // the fetcher thread's until finish() joined it
  std::thread thread_;
};

// Raises the open-file limit to its hard maximum: thousands of streams need thousands of fds.
void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Chat jobs of `tokens` output tokens and a short prompt, enough for `seconds` at `rate`.
std::vector<job_plan> small_jobs(std::size_t n, std::uint32_t tokens) {
  workload_options w;
  w.kind = workload_options::chat;
  w.input = {distribution_spec::fixed, 16, 0};
  w.output = {distribution_spec::fixed, static_cast<double>(tokens), 0};
  return plan_jobs(w, n, 1);
}

// A mock server and an HTTP client of it, for the self-test.
struct mock_pair {
  std::unique_ptr<mock_server> server;
  std::unique_ptr<target> client;
};

triad::expected<mock_pair> start_mock(mock_options options, std::chrono::milliseconds timeout) {
  auto server = mock_server::start(options);
  if (!server)
    return server.error();
  auto client = make_http_target(
      {"http://127.0.0.1:" + std::to_string((*server)->port()) + "/v1", "", "mock", 1, timeout});
  if (!client)
    return client.error();
  return mock_pair{std::move(*server), std::move(*client)};
}

// --self-test: the mock server in this process, measured three ways, then triad-node's HTTP
// overhead on a zero-time node.
int self_test(double duration, std::size_t streams, double open_rate, bool realtime,
              const std::string& json_path) {
  raise_fd_limit();
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  streams = std::min<std::size_t>(streams, r.rlim_cur > 200 ? (r.rlim_cur - 100) / 2 : 50);
  json::object metrics, ratios;
  run_options base;
  base.scripted = false;

  // 1. Capacity: closed loop, 64 connections, one-token streamed answers.
  double capacity = 0;
  {
    auto pair =
        start_mock({1, std::chrono::microseconds{0}, 64}, std::chrono::milliseconds{30'000});
    if (!pair)
      return fail(pair.error().message);
    auto& t = pair->client;
    auto o = base;
    o.concurrency = 64;
    o.duration_s = duration * 0.4;
    auto res = run(*t, small_jobs(static_cast<std::size_t>(60'000 * o.duration_s), 1), o);
    auto s = summarize(res, {});
    capacity = s.calls_per_s;
    metrics["requests_per_s"] = capacity;
    metrics["capacity_errors"] = s.calls - s.calls_ok;
    std::printf("self-test 1/4: %.0f requests/s (closed loop, 64 connections, streamed, 1 token)\n",
                capacity);
  }
  // 2. Schedule accuracy: open loop, Poisson at half that rate.
  {
    auto pair =
        start_mock({1, std::chrono::microseconds{0}, 64}, std::chrono::milliseconds{30'000});
    if (!pair)
      return fail(pair.error().message);
    auto& t = pair->client;
    auto o = base;
    double rate = open_rate > 0 ? open_rate : std::max(10.0, capacity / 2);
    o.arrival = triad::load::arrival_spec{arrival_kind::poisson, rate, 1.0};
    o.realtime_pacer = realtime;
    // Connections for 150 ms of arrivals: a send that finds none idle connects on the clock,
    // and answers here stall for tens of ms at times (measured: with 256 at ~14000/s, 5-22%
    // of sends connected first; with 2048, none in most runs).
    o.warm_connections = std::clamp<std::size_t>(static_cast<std::size_t>(rate * 0.15), 256, 4096);
    // The clock starts once the mock server has accepted them all (up to 5 s): it accepts them
    // one by one on its one thread, and sends made meanwhile waited for that (the answers then
    // stalled some 300 ms after the start, and thousands of sends connected on the clock).
    auto* server = pair->server.get();
    const auto before = server->accepted(); // connections made before the warm ones, if any
    o.before_clock = [server, before](std::size_t warmed) {
      server->await_accepted(before + warmed, std::chrono::seconds{5});
    };
    double seconds = duration * 0.3;
    auto res = run(*t, small_jobs(static_cast<std::size_t>(rate * seconds), 1), o);
    auto s = summarize(res, {});
    metrics["send_error_p99_us"] = s.send_lag.p99 * 1e6;
    metrics["send_error_p50_us"] = s.send_lag.p50 * 1e6;
    metrics["open_loop_new_connections"] = s.calls_new_connection;
    metrics["dispatch_lag_p99_us"] = s.dispatch_lag.p99 * 1e6;
    metrics["open_loop_rate"] = rate;
    metrics["open_loop_achieved_per_s"] = s.calls_per_s;
    metrics["realtime_pacer"] = res.realtime_pacer;
    std::printf("self-test 2/4: Poisson %.0f/s: send error p50 %.0f us, p99 %.0f us "
                "(dispatch lag p99 %.0f us; pacer %s; %zu of %zu sends connected first)\n",
                rate, s.send_lag.p50 * 1e6, s.send_lag.p99 * 1e6, s.dispatch_lag.p99 * 1e6,
                res.realtime_pacer ? "real-time" : "normal priority", s.calls_new_connection,
                s.calls);
  }
  // 3. Concurrent streams: closed loop of `streams`, each ~2 s long (20 tokens 100 ms apart).
  {
    auto pair =
        start_mock({1, std::chrono::microseconds{100'000}, 20}, std::chrono::milliseconds{60'000});
    if (!pair)
      return fail(pair.error().message);
    auto& mock = pair->server;
    auto& t = pair->client;
    auto o = base;
    o.concurrency = streams;
    o.duration_s = std::max(2.5, duration * 0.3);
    auto res = run(*t, small_jobs(streams * 2, 20), o);
    auto s = summarize(res, {});
    metrics["concurrent_streams"] = mock->peak_streams();
    metrics["streams_asked"] = streams;
    metrics["stream_errors"] = s.calls - s.calls_ok;
    metrics["stream_itl_p99_ms"] = s.itl.p99 * 1e3;
    std::printf("self-test 3/4: %zu concurrent streams held (asked %zu), %zu errors, ITL p99 "
                "%.1f ms (server sends every 100 ms)\n",
                mock->peak_streams(), streams, s.calls - s.calls_ok, s.itl.p99 * 1e3);
  }
  // 4. Node HTTP overhead per streamed token: the same streamed requests to one node (zero-time
  // sim devices) through triad-node's HTTP server and through node::submit, in this process.
  // The node's CPU per token in each (the whole process but the load client's own I/O thread).
  {
    auto config = triad::zero_time_sim_config();
    config.scheduler.poll_attempts = 1; // idle workers sleep: CPU time counts work only
    auto n = triad::node::start(config);
    if (!n)
      return fail(n.error().message);
    triad::http_server_options h;
    h.server.port = 0;
    h.server.allow_scripts = true; // the jobs force their lengths
    h.model_id = "triad-tiny";
    auto server = triad::http_server::start(**n, h);
    if (!server)
      return fail(server.error().message);
    auto http = make_http_target({"http://127.0.0.1:" + std::to_string((*server)->port()) + "/v1",
                                  "", "triad-tiny", 1, std::chrono::milliseconds{60'000}});
    if (!http)
      return fail(http.error().message);
    auto inproc = make_inproc_target(**n, "triad-tiny");
    run_options o;
    o.concurrency = 8;
    auto jobs = static_cast<std::size_t>(std::max(20.0, 40 * duration));
    auto measure = [&](target& t) {
      auto client = [] {
        triad::cpu_times c;
        for (const auto& th : triad::process_threads_cpu())
          if (th.name == "load.io")
            c += th.cpu;
        return c;
      };
      auto all0 = triad::process_cpu();
      auto client0 = client();
      auto res = run(t, small_jobs(jobs, 64), o);
      auto all = triad::process_cpu() - all0;
      auto mine = client() - client0;
      auto s = summarize(res, {});
      return std::pair{(all.total() - mine.total()) * 1e6 /
                           static_cast<double>(std::max<std::uint64_t>(1, s.output_tokens)),
                       s.calls - s.calls_ok};
    };
    measure(*inproc); // warm-up: pools, first-touch pages
    measure(**http);
    auto [in_us, in_err] = measure(*inproc);
    auto [http_us, http_err] = measure(**http);
    metrics["inproc_cpu_us_per_token"] = in_us;
    metrics["http_cpu_us_per_token"] = http_us;
    metrics["http_overhead_us_per_token"] = http_us - in_us;
    metrics["overhead_run_errors"] = in_err + http_err;
    ratios["http_over_inproc_cpu_per_token"] = http_us / in_us;
    std::printf("self-test 4/4: node CPU per streamed token: in-process %.2f us, over HTTP %.2f "
                "us (%zu requests of 64 tokens each way)\n",
                in_us, http_us, jobs);
    (*server)->stop();
    (*n)->stop();
    if (in_err + http_err != 0) // a figure over failed requests says nothing
      return fail(std::to_string(in_err) + " in-process and " + std::to_string(http_err) +
                  " HTTP requests of the overhead run failed");
  }
  ratios["send_error_p99_over_target"] = metrics["send_error_p99_us"].to_number<double>() / 200.0;
  ratios["requests_per_s_over_target"] = capacity / 20'000.0;
  json::object out{{"metrics", metrics}, {"ratios", ratios}};
  if (!json_path.empty() && !write_text(json_path, json::serialize(out) + "\n"))
    return 1;
  std::printf("%s\n", json::serialize(out).c_str());
  return 0;
}

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-load: agentic load generator and SLO reporter for OpenAI-compatible "
               "servers"};
  std::string url, inproc, workload = "chat", trace_path, arrival, api_key, model;
  // Distributions given on the command line (each overrides the workload's or profile's).
  std::string input, output, turns, tool_calls, tool_ms, think_ms, user_tokens, result_tokens,
      call_tokens, profile;
  std::string json_path, jsonl_path, csv_path, html_path, sweep;
  std::size_t requests = 100, concurrency = 0, streams = 5000;
  std::uint32_t system_tokens = 512;
  double duration = 0, trace_speed = 1, slo_ttft = 0, slo_tpot = 0, slo_e2e = 0, slo_session = 0;
  std::uint64_t seed = 1;
  bool no_script = false, no_stream = false, progress = false, self = false;
  auto* target_group = app.add_option_group("target", "what to load (exactly one)");
  target_group->add_option("--url", url,
                           "an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1");
  target_group->add_option("--inproc", inproc, "a triad node config (TOML) to run in this process")
      ->check(CLI::ExistingFile);
  target_group->add_flag("--self-test", self, "measure this client against a built-in mock server");
  target_group->require_option(1);
  app.add_option("--workload", workload, "chat, agent or trace")
      ->check(CLI::IsMember({"chat", "agent", "trace"}));
  {
    std::string names;
    for (const auto& p : workload_profiles())
      names += (names.empty() ? "" : ", ") + p.name;
    app.add_option("--profile", profile,
                   "agent sessions shaped as one of: " + names +
                       " (load/README.md lists their figures; the options below override them)");
  }
  app.add_option("--trace", trace_path, "Mooncake JSONL trace (--workload trace)");
  app.add_option("--trace-speed", trace_speed, "replay speed-up of the trace's timestamps")
      ->check(CLI::PositiveNumber);
  app.add_option("--requests", requests, "jobs: chat requests or agent sessions")
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", duration,
                 "seconds: jobs scheduled later do not start (--self-test: its length)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--arrival", arrival, "open loop: poisson:RATE, gamma:RATE:CV or constant:RATE");
  app.add_option("--concurrency", concurrency, "closed loop: jobs in flight");
  app.add_option("--sweep", sweep, "Poisson rates, comma-separated: one phase of --requests each");
  app.add_option("--seed", seed, "seeds the workload and the schedule");
  app.add_option("--input-tokens", input, "chat: prompt length distribution (default 256)");
  app.add_option("--output-tokens", output,
                 "chat and agent: answer length distribution (default 64)");
  app.add_option("--turns", turns, "agent: turns per session (default uniform:1:2)");
  app.add_option("--tool-calls", tool_calls, "agent: tool calls per turn (default uniform:3:8)");
  app.add_option("--tool-ms", tool_ms, "agent: tool durations in ms (default uniform:50:2000)");
  app.add_option("--think-ms", think_ms,
                 "agent: user think time between turns in ms (default uniform:0:1000)");
  app.add_option("--system-tokens", system_tokens,
                 "agent: the shared system prompt's length (default 512)");
  app.add_option("--user-tokens", user_tokens,
                 "agent: user message length distribution (default uniform:32:128)");
  app.add_option("--tool-result-tokens", result_tokens,
                 "agent: each tool result's length distribution (default 64)");
  app.add_option("--call-tokens", call_tokens,
                 "agent: text before each tool call, length distribution (default uniform:8:48)");
  std::string hosted_tool, hosted_args = "{}";
  app.add_option("--hosted-tool", hosted_tool,
                 "agent: call this tool, which the server hosts and runs itself, instead of a "
                 "client-side one; each turn is then one request (needs the script extension)");
  app.add_option("--hosted-tool-args", hosted_args,
                 "agent: the hosted tool's arguments, a JSON object (default {})");
  app.add_flag("--no-script", no_script,
               "do not send triad's forced-generation extension (lengths become max_tokens)");
  app.add_flag("--no-stream", no_stream, "ask for whole answers instead of event streams");
  app.add_option("--slo-ttft-ms", slo_ttft, "goodput SLO: TTFT from the intended send time");
  app.add_option("--slo-tpot-ms", slo_tpot, "goodput SLO: time per output token");
  app.add_option("--slo-e2e-ms", slo_e2e, "goodput SLO: end to end from the intended send time");
  app.add_option("--slo-session-s", slo_session, "goodput SLO: session completion time");
  app.add_option("--api-key", api_key, "bearer token (default: $TRIAD_API_KEY)");
  app.add_option("--model", model, "model name (default: asked from GET /v1/models)");
  app.add_option("--streams", streams, "--self-test: concurrent streams to hold")
      ->check(CLI::PositiveNumber);
  double self_rate = 0;
  app.add_option("--self-test-rate", self_rate,
                 "--self-test: the open-loop rate whose send error is measured (default: half "
                 "the measured capacity)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the run summary (JSON)");
  app.add_option("--jsonl", jsonl_path, "write one JSON object per call");
  app.add_option("--csv", csv_path, "write one CSV row per call");
  app.add_option("--html", html_path, "write a self-contained HTML report");
  double sample_traces = 0;
  app.add_option("--sample-traces", sample_traces,
                 "ask a triad node for the traces of this share of calls (0..1; the node runs "
                 "with --trace FILE and keeps the last --kept-traces asking requests' traces, "
                 "256 by default), write them beside the --html report and link them from it")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--progress", progress, "a live progress line on stderr");
  bool no_realtime = false;
  app.add_flag("--no-realtime", no_realtime,
               "open loop: keep the sending thread at normal priority (by default it asks for "
               "SCHED_FIFO, which root or CAP_SYS_NICE grants, so sends are not late for lack "
               "of CPU)");
  CLI11_PARSE(app, argc, argv);

  if (self)
    return self_test(duration > 0 ? duration : 10.0, streams, self_rate, !no_realtime, json_path);
  raise_fd_limit();

  workload_options w;
  if (!profile.empty()) {
    auto p = find_workload_profile(profile);
    if (!p)
      return fail("--profile: " + p.error().message);
    if (app.count("--workload") != 0 && workload != "agent")
      return fail("--profile " + profile + ": profiles are agent sessions; drop --workload " +
                  workload);
    w = p->options;
    workload = "agent";
  } else {
    w.kind = workload == "agent"   ? workload_options::agent
             : workload == "trace" ? workload_options::trace_replay
                                   : workload_options::chat;
  }
  for (auto [text, what, out] :
       {std::tuple{&input, "--input-tokens", &w.input},
        std::tuple{&output, "--output-tokens", &w.output}, std::tuple{&turns, "--turns", &w.turns},
        std::tuple{&tool_calls, "--tool-calls", &w.tool_calls},
        std::tuple{&tool_ms, "--tool-ms", &w.tool_ms},
        std::tuple{&think_ms, "--think-ms", &w.think_ms},
        std::tuple{&user_tokens, "--user-tokens", &w.user_tokens},
        std::tuple{&result_tokens, "--tool-result-tokens", &w.tool_result_tokens},
        std::tuple{&call_tokens, "--call-tokens", &w.call_tokens}}) {
    if (app.count(what) == 0)
      continue; // the workload's or profile's own
    auto d = parse_distribution(*text, what);
    if (!d)
      return fail(d.error().message);
    *out = *d;
  }
  if (app.count("--system-tokens") != 0)
    w.system_tokens = system_tokens;

  std::optional<trace> tr;
  if (w.kind == workload_options::trace_replay) {
    if (trace_path.empty())
      return fail("--workload trace needs --trace FILE");
    auto t = read_mooncake(trace_path);
    if (!t)
      return fail(t.error().message);
    tr = std::move(*t);
    for (const auto& p : tr->problems)
      std::fprintf(stderr, "triad-load: %s:%zu: skipped: %s\n", trace_path.c_str(), p.line,
                   p.reason.c_str());
    std::fprintf(stderr, "triad-load: trace %s: %zu requests, %zu bad lines skipped\n",
                 trace_path.c_str(), tr->entries.size(), tr->problems.size());
    if (tr->entries.empty())
      return fail("trace " + trace_path + " has no usable request");
  }

  if (sample_traces > 0 && html_path.empty())
    return fail("--sample-traces: the traces are written beside the --html report and linked "
                "from it; give --html FILE");
  run_options o;
  o.seed = seed;
  o.trace_sample = sample_traces;
  o.duration_s = duration;
  o.scripted = !no_script;
  o.stream = !no_stream;
  o.progress = progress;
  o.realtime_pacer = !no_realtime;
  o.tool_name = w.tool_name;
  if (!hosted_tool.empty()) {
    if (w.kind != workload_options::agent)
      return fail("--hosted-tool " + hosted_tool + ": only for --workload agent");
    if (no_script)
      return fail("--hosted-tool " + hosted_tool +
                  ": the server makes the calls from triad's script extension; drop --no-script");
    boost::system::error_code ec;
    auto args = boost::json::parse(hosted_args, ec);
    if (ec || !args.is_object())
      return fail("--hosted-tool-args " + hosted_args + ": not a JSON object" +
                  (ec ? " (" + ec.message() + ")" : std::string{}));
    o.hosted_tool = hosted_tool;
    o.hosted_arguments = boost::json::serialize(args);
  }
  if (!arrival.empty()) {
    auto a = parse_arrival(arrival);
    if (!a)
      return fail(a.error().message);
    o.arrival = *a;
  } else if (tr) {
    o.trace_times = true;
  } else if (concurrency == 0 && sweep.empty()) {
    concurrency = 1;
  }
  std::vector<double> rates;
  if (!sweep.empty()) {
    std::stringstream ss{sweep};
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto a = parse_arrival("poisson:" + item);
      if (!a)
        return fail("--sweep: " + a.error().message);
      rates.push_back(a->rate);
    }
  }
  std::unique_ptr<target> t;
  if (!url.empty()) {
    if (api_key.empty())
      if (const char* k = std::getenv("TRIAD_API_KEY"))
        api_key = k;
    auto made = make_http_target({url, api_key, model, 1, std::chrono::milliseconds{600'000}});
    if (!made)
      return fail(made.error().message);
    t = std::move(*made);
  } else {
    auto config = triad::load_config(inproc);
    if (!config)
      return fail(config.error().message);
    // Sampled traces: the node in this process writes those calls' spans beside the report.
    std::filesystem::path trace_file;
    if (sample_traces > 0) {
      const auto folder = traces_folder(html_path);
      std::error_code ec;
      std::filesystem::create_directories(folder, ec);
      if (ec)
        return fail("--sample-traces: cannot create " + folder.string() + ": " + ec.message());
      trace_file = folder / "node-trace.json";
    }
    auto made = make_inproc_target(*config, trace_file);
    if (!made)
      return fail(made.error().message);
    t = std::move(*made);
  }

  o.concurrency = concurrency;
  slo objectives{slo_ttft, slo_tpot, slo_e2e, slo_session};

  std::printf("triad-load: %s, workload %s%s, model %s\n", t->describe().c_str(), workload.c_str(),
              profile.empty() ? "" : (" (profile " + profile + ")").c_str(), t->model().c_str());
  json::object out;
  run_result last;
  summary last_summary;
  // Sampled traces are fetched as their calls end (of the last phase, whose calls the report
  // shows).
  std::unique_ptr<trace_fetcher> fetcher;
  if (sample_traces > 0)
    fetcher = std::make_unique<trace_fetcher>(*t, html_path);
  auto fetch_traces_of_this_run = [&] {
    if (fetcher)
      o.on_traced_call = [f = fetcher.get()](const call_record& c) { f->add(c); };
  };
  if (!rates.empty()) {
    json::array phases;
    for (std::size_t i = 0; i < rates.size(); ++i) {
      const auto rate = rates[i];
      o.arrival = arrival_spec{arrival_kind::poisson, rate, 1.0};
      if (i + 1 == rates.size())
        fetch_traces_of_this_run();
      auto res = run(*t, plan_jobs(w, requests, seed), o);
      auto s = summarize(res, objectives);
      print(s, stdout);
      phases.push_back(to_json(s));
      last = std::move(res);
      last_summary = s;
    }
    out["sweep"] = std::move(phases);
  } else {
    fetch_traces_of_this_run();
    last = run(*t, plan_jobs(w, requests, seed, tr ? &*tr : nullptr, trace_speed), o);
    last_summary = summarize(last, objectives);
    print(last_summary, stdout);
    out["metrics"] = to_json(last_summary);
  }
  if (last_summary.errors.contains("http_400:scripts_not_allowed"))
    std::fprintf(stderr,
                 "triad-load: the node refuses the triad.script extension these calls use to force "
                 "their lengths: start it with --allow-scripts ([server].allow_scripts = true), or "
                 "run triad-load with --no-script\n");
  out["target"] = t->describe();
  out["workload"] = workload;
  if (!profile.empty())
    out["profile"] = profile;
  out["seed"] = seed;
  if (tr)
    out["trace"] = json::object{
        {"file", trace_path}, {"requests", tr->entries.size()}, {"bad_lines", tr->problems.size()}};
  std::string error;
  bool ok = true;
  if (!json_path.empty())
    ok = write_text(json_path, json::serialize(out) + "\n") && ok;
  if (!jsonl_path.empty() && !write_jsonl(last, jsonl_path, error))
    ok = (std::fprintf(stderr, "triad-load: %s\n", error.c_str()), false);
  if (!csv_path.empty() && !write_csv(last, csv_path, error))
    ok = (std::fprintf(stderr, "triad-load: %s\n", error.c_str()), false);
  std::vector<sampled_trace> traces;
  if (fetcher)
    traces = fetcher->finish();
  if (!html_path.empty() &&
      !write_html(last, last_summary, "triad-load: " + t->describe(), html_path, error, traces))
    ok = (std::fprintf(stderr, "triad-load: %s\n", error.c_str()), false);
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-load", argc, argv, run);
}
