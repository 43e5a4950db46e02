// triad-bench-messaging: message throughput and round-trip latency of (a) raw CAF actors,
// (b) triad homed actors in one domain, (c) homed actors across two domains and (d) a driver
// thread sending completions to an actor through the bridge. All in one run; ratios b/a, c/b,
// d/a go to the JSON. Each configuration runs one worker per actor system with the same idle
// polling, so the ratios compare mechanisms, not thread counts: (a) on CAF's own work-stealing
// scheduler, (b) and (c) on triad's domain scheduler (runtime/detail/scheduler.hpp).

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include "bench/machine.hpp"
#include "bench/report.hpp"
#include "runtime/bridge.hpp"
#include "runtime/domains.hpp"
#include "runtime/main_guard.hpp"
#include "runtime/topology.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Executions of homed handlers that ran on a thread of another domain (must stay 0).
std::atomic<std::size_t> off_home{0};

void check_home(int expected) {
  if (expected >= 0 && triad::current_domain() != expected)
    off_home.fetch_add(1, std::memory_order_relaxed);
}

// Counts messages and fulfils `done` when `expected` have arrived.
template<class Self>
caf::behavior sink(Self* self, std::size_t expected, std::promise<void>* done, int home) {
  auto count = std::make_shared<std::size_t>(0);
  return {[=](int) {
    check_home(home);
    if (++*count == expected) {
      done->set_value();
      self->quit();
    }
  }};
}

// Sends `n` messages to `target` from one handler, then ends.
template<class Self>
void firehose(Self* self, caf::actor target, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    self->send(target, static_cast<int>(i));
}

// Answers every request with its argument.
template<class Self>
caf::behavior ponger(Self*, int home) {
  return {[=](int x) {
    check_home(home);
    return x;
  }};
}

// Runs `rounds` request/response round trips one after another.
template<class Base>
class pinger : public Base {
public:
  pinger(caf::actor_config& cfg, caf::actor target, std::size_t rounds, std::promise<void>* done,
         int home)
      : Base(cfg)
      , target_(std::move(target))
      , left_(rounds)
      , done_(done)
      , home_(home) {}

  caf::behavior make_behavior() override {
    step();
    return {[](int) {}};
  }

private:
  void step() {
    if (left_-- == 0) {
      done_->set_value();
      this->quit();
      return;
    }
    this->request(target_, caf::infinite, 1).then([this](int) {
      check_home(home_);
      step();
    });
  }

  caf::actor target_;
  std::size_t left_;
  std::promise<void>* done_;
  int home_;
};

// Messages per second from one actor to another inside `sys`.
template<class Self>
double throughput(caf::actor_system& sys, std::size_t n, int home) {
  std::promise<void> done;
  auto fut = done.get_future();
  auto target = sys.spawn(sink<Self>, n, &done, home);
  auto start = clock_type::now();
  sys.spawn(firehose<Self>, target, n);
  fut.wait();
  std::chrono::duration<double> s = clock_type::now() - start;
  return static_cast<double>(n) / s.count();
}

// Mean round-trip time in microseconds, pinger in `a`, ponger in `b`.
template<class Base, class Self>
double round_trip_us(caf::actor_system& a, caf::actor_system& b, std::size_t rounds, int home_a,
                     int home_b) {
  std::promise<void> done;
  auto fut = done.get_future();
  auto target = b.spawn(ponger<Self>, home_b);
  auto start = clock_type::now();
  a.spawn<pinger<Base>>(target, rounds, &done, home_a);
  fut.wait();
  std::chrono::duration<double, std::micro> us = clock_type::now() - start;
  caf::anon_send_exit(target, caf::exit_reason::user_shutdown);
  return us.count() / static_cast<double>(rounds);
}

// Completions per second from a driver thread (one job per completion) to an actor.
double bridge_throughput(triad::driver_thread& driver, caf::actor_system& sys, std::size_t n,
                         int home) {
  std::promise<void> done;
  auto fut = done.get_future();
  auto target = sys.spawn(sink<triad::homed_actor>, n, &done, home);
  auto start = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    while (driver.try_submit([target, i] { caf::anon_send(target, static_cast<int>(i)); }) !=
           triad::submit_result::accepted)
      std::this_thread::yield();
  }
  fut.wait();
  std::chrono::duration<double> s = clock_type::now() - start;
  return static_cast<double>(n) / s.count();
}

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-messaging: actor messaging throughput and round trips, raw CAF vs "
               "triad homed actors, in-domain, cross-domain and from a driver thread"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  triad::bench::add_common_options(app, common, "smaller inputs");
  CLI11_PARSE(app, argc, argv);

  std::size_t messages = quick ? 200'000 : 2'000'000;
  std::size_t rounds = quick ? 20'000 : 200'000;
  int reps = quick ? 7 : 9;

  // Two domains of one core each; synthetic, so nothing is bound and the figures compare
  // mechanisms on whatever cores the OS gives.
  const std::string layout = "pack:1 numa:2 core:1 pu:1";
  auto topo = triad::topology::load_synthetic(layout);
  if (!topo) {
    std::fprintf(stderr, "triad-bench-messaging: %s\n", topo.error().message.c_str());
    return 1;
  }
  triad::scheduler_config sched;
  sched.threads_per_domain = 1;

  triad::bench::report out;
  out.quick = quick;
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", sched.threads_per_domain);
  cfg.set("work-stealing.moderate-sleep-duration",
          caf::timespan{std::chrono::duration_cast<caf::timespan>(sched.moderate_sleep)});
  cfg.set("work-stealing.aggressive-poll-attempts", sched.poll_attempts);
  cfg.set("work-stealing.moderate-poll-attempts", sched.poll_attempts);
  caf::actor_system raw{cfg};
  triad::domain d0{0, {0}, nullptr, sched};
  triad::domain d1{1, {1}, nullptr, sched};
  auto driver = triad::driver_thread::start(
      {.name = "bench.driver", .capacity = 1024, .cpus = {}, .topo = nullptr});
  if (!driver) {
    std::fprintf(stderr, "triad-bench-messaging: %s\n", driver.error().message.c_str());
    return 1;
  }
  // Repetitions interleave all configurations, so that the machine's slow phases (it is shared)
  // hit each of them alike; ratios are medians of per-repetition ratios.
  std::vector<double> raw_tput, homed_tput, bridge_tput, raw_rtt, homed_rtt, cross_rtt, floor_rtt;
  std::vector<double> homed_over_raw, cross_over_local, bridge_over_raw;
  for (int rep = 0; rep < reps; ++rep) {
    raw_tput.push_back(throughput<caf::event_based_actor>(raw, messages, -1));
    homed_tput.push_back(throughput<triad::homed_actor>(d0.system(), messages, 0));
    bridge_tput.push_back(bridge_throughput(**driver, d0.system(), messages, 0));
    raw_rtt.push_back(
        round_trip_us<caf::event_based_actor, caf::event_based_actor>(raw, raw, rounds, -1, -1));
    homed_rtt.push_back(round_trip_us<triad::homed_actor, triad::homed_actor>(
        d0.system(), d0.system(), rounds, 0, 0));
    cross_rtt.push_back(round_trip_us<triad::homed_actor, triad::homed_actor>(
        d0.system(), d1.system(), rounds, 0, 1));
    floor_rtt.push_back(triad::bench::thread_pingpong_us(rounds));
    homed_over_raw.push_back(homed_tput.back() / raw_tput.back());
    cross_over_local.push_back(cross_rtt.back() / homed_rtt.back());
    bridge_over_raw.push_back(bridge_tput.back() / raw_tput.back());
  }
  (*driver)->stop();
  d0.stop(std::chrono::seconds{5});
  d1.stop(std::chrono::seconds{5});

  using triad::bench::median;
  out.metrics["topology"] = "synthetic:" + layout;
  out.metrics["messages_per_run"] = messages;
  out.metrics["round_trips_per_run"] = rounds;
  out.metrics["repetitions"] = reps;
  out.metrics["raw_throughput_msgs_per_s"] = median(raw_tput);
  out.metrics["homed_throughput_msgs_per_s"] = median(homed_tput);
  out.metrics["bridge_throughput_msgs_per_s"] = median(bridge_tput);
  out.metrics["raw_rtt_us"] = median(raw_rtt);
  out.metrics["homed_rtt_us"] = median(homed_rtt);
  out.metrics["cross_domain_rtt_us"] = median(cross_rtt);
  out.metrics["thread_pingpong_rtt_us"] = median(floor_rtt);
  out.metrics["off_home_executions"] = off_home.load();
  out.ratios["homed_over_raw_throughput"] = median(homed_over_raw);
  out.ratios["cross_over_local_rtt"] = median(cross_over_local);
  out.ratios["bridge_over_raw_throughput"] = median(bridge_over_raw);
  return out.finish(json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-messaging", argc, argv, run);
}
