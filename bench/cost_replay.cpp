#include "bench/cost_replay.hpp"

#include <array>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include <unistd.h>

#include <boost/json.hpp>

#include "actors/request.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/metrics.hpp"
#include "runtime/trace.hpp"

namespace triad::bench {

namespace {

// Runs `work(0)` and `work(1)` on two threads at once; the CPU both used, user and kernel.
double on_two_threads(const std::function<void(unsigned)>& work) {
  std::array<double, 2> cpu{};
  std::array<std::thread, 2> threads;
  for (unsigned t = 0; t < 2; ++t)
    threads[t] = std::thread{[&, t] {
      const double from = this_thread_cpu_seconds();
      work(t);
      cpu[t] = this_thread_cpu_seconds() - from;
    }};
  for (auto& t : threads)
    t.join();
  return cpu[0] + cpu[1];
}

// The value of series `series` (name and labels as rendered) in Prometheus text `text`, 0 when
// absent.
double value_of(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? 0.0 : std::stod(text.substr(at + series.size() + 2));
}

// The `i`th of `n` shares of `total` (integers summing to `total`).
std::uint64_t share(std::uint64_t total, std::uint64_t i, std::uint64_t n) {
  return (i + 1) * total / n - i * total / n;
}

} // namespace

replayed_cost replay_request_metrics(const std::string& metrics_text, std::uint64_t requests) {
  if (requests == 0)
    return {};
  metrics_registry registry;
  const auto m = request_metrics::attach(registry);
  // Each request histogram with what the node observed: how often, around which value.
  struct observed {
    histogram* into;
    std::uint64_t count;
    double mean;
  };
  std::vector<observed> histograms;
  auto add = [&](histogram* h, const std::string& name, const std::string& labels = {}) {
    const double count = value_of(metrics_text, name + "_count" + labels);
    const double sum = value_of(metrics_text, name + "_sum" + labels);
    if (h != nullptr && count > 0)
      histograms.push_back({h, static_cast<std::uint64_t>(count), sum / count});
  };
  add(m.total_seconds, "triad_request_seconds");
  add(m.ttft_seconds, "triad_request_ttft_seconds");
  for (std::size_t i = 0; i < request_stage_count; ++i)
    add(m.stage_seconds[i], "triad_request_stage_seconds",
        "{stage=\"" + std::string{to_string(static_cast<request_stage>(i))} + "\"}");
  add(m.tpot_seconds, "triad_request_time_per_output_token_seconds");
  add(m.tool_calls, "triad_request_tool_calls");
  add(m.kv_transfer_bytes, "triad_request_kv_transfer_bytes");
  add(m.kv_transfer_seconds, "triad_request_kv_transfer_seconds");
  const double gap_count = value_of(metrics_text, "triad_request_inter_token_seconds_count");
  const double gap_mean =
      gap_count > 0 ? value_of(metrics_text, "triad_request_inter_token_seconds_sum") / gap_count
                    : 0;
  std::uint64_t transitions = 0;
  for (std::size_t i = 0; i < m.entered.size(); ++i)
    transitions += static_cast<std::uint64_t>(
        value_of(metrics_text, "triad_request_transitions_total{state=\"" +
                                   std::string{to_string(static_cast<request_state>(i))} + "\"}"));
  const auto retries =
      static_cast<std::uint64_t>(value_of(metrics_text, "triad_request_device_retries_total"));

  std::uint64_t operations = transitions + retries + static_cast<std::uint64_t>(gap_count);
  for (const auto& h : histograms)
    operations += h.count;
  // Values spread around the mean, so the bucket search is not always the same.
  auto near = [](double mean, std::uint64_t j) { return mean * (0.5 + 0.1 * (j % 11)); };
  const double cpu = on_two_threads([&](unsigned t) {
    for (std::uint64_t j = t; j < requests; j += 2) {
      for (std::uint64_t k = share(transitions, j, requests); k > 0; --k)
        m.entered[(j + k) % m.entered.size()]->inc();
      for (std::uint64_t k = share(retries, j, requests); k > 0; --k)
        m.device_retries->inc();
      for (const auto& h : histograms)
        for (std::uint64_t k = share(h.count, j, requests); k > 0; --k)
          h.into->observe(near(h.mean, j + k));
      histogram::tally gaps{m.inter_token_seconds};
      for (std::uint64_t k = share(static_cast<std::uint64_t>(gap_count), j, requests); k > 0; --k)
        gaps.observe(near(gap_mean, j + k));
    } // each request's tally flushes as it ends
  });
  return {cpu * 1e6 / static_cast<double>(requests), operations};
}

replayed_cost replay_trace(const std::filesystem::path& trace_file, std::uint64_t requests) {
  if (requests == 0)
    return {};
  std::ifstream in{trace_file};
  if (!in)
    throw std::runtime_error{"cannot read the trace " + trace_file.string()};
  const auto doc = boost::json::parse(std::string{std::istreambuf_iterator<char>{in}, {}});
  // The spans as their writers gave them, and the names of their tracks.
  struct span {
    std::string name, category, args;
    std::pair<std::int64_t, std::int64_t> track;
    double dur_us;
  };
  std::vector<span> spans;
  std::map<std::int64_t, std::string> processes;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> threads;
  for (const auto& v : doc.at("traceEvents").as_array()) {
    const auto& e = v.as_object();
    const std::pair track{e.at("pid").as_int64(), e.contains("tid") ? e.at("tid").as_int64() : 0};
    if (e.at("ph") == "M") {
      const std::string name{e.at("args").at("name").as_string()};
      if (e.at("name") == "process_name")
        processes[track.first] = name;
      else if (e.at("name") == "thread_name")
        threads[track] = name;
      continue;
    }
    std::string args;
    if (const auto* a = e.if_contains("args")) {
      args = boost::json::serialize(*a);
      args = args.substr(1, args.size() - 2); // the members, without the braces
    }
    spans.push_back({std::string{e.at("name").as_string()}, std::string{e.at("cat").as_string()},
                     std::move(args), track, e.at("dur").to_number<double>()});
  }
  const auto copy = trace_file.parent_path() / ("triad-replayed-" + std::to_string(::getpid()) +
                                                "-" + trace_file.filename().string());
  double cpu = 0;
  {
    auto log = trace_log::open(copy);
    if (!log)
      throw std::runtime_error{log.error().message};
    cpu = on_two_threads([&](unsigned t) {
      // A writer makes its tracks as it first writes on them (a request its own two); each
      // track is one thread's, as each of the node's is one actor's.
      std::map<std::pair<std::int64_t, std::int64_t>, trace_track> tracks;
      for (const auto& s : spans) {
        if (static_cast<unsigned>(s.track.second % 2) != t)
          continue;
        auto it = tracks.find(s.track);
        if (it == tracks.end()) {
          auto process = processes.find(s.track.first);
          auto thread = threads.find(s.track);
          it = tracks
                   .emplace(s.track,
                            (*log)->new_track(process != processes.end() ? process->second : "",
                                              thread != threads.end() ? thread->second : ""))
                   .first;
        }
        // Its name and arguments built afresh, as the writer does.
        std::string name = s.name, args = s.args;
        (*log)->add(it->second, name, s.category, trace_log::clock_type::now(),
                    std::chrono::nanoseconds{static_cast<std::int64_t>(s.dur_us * 1e3)}, args);
      }
    });
  } // closed: its last bytes written
  std::filesystem::remove(copy);
  return {cpu * 1e6 / static_cast<double>(requests), spans.size()};
}

} // namespace triad::bench
