#include "load/runner.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "runtime/cpu_time.hpp"

namespace triad::load {

namespace net = boost::asio;

namespace {

// How long before an arrival the pacer stops sleeping and spins: a sleeping thread wakes 40 us
// late here at the median, 100 us at the 99th percentile (a 2-core VM, both cores busy).
constexpr auto spin_window = std::chrono::microseconds{50};

class runner {
public:
  runner(target& t, std::vector<job_plan> jobs, const run_options& o)
      : target_(t)
      , options_(o)
      , plans_(std::move(jobs))
      , io_(t.single_thread_io() != nullptr ? *t.single_thread_io() : own_io_)
      , work_(own_io_.get_executor()) {
    result_.jobs.resize(plans_.size());
    std::size_t calls = 0;
    for (std::size_t i = 0; i < plans_.size(); ++i) {
      result_.jobs[i].job = i;
      result_.jobs[i].session = plans_[i].session;
      for (const auto& t : plans_[i].turns)
        calls += t.calls.size();
    }
    // Room for every planned call up front: growing a vector of tens of thousands of records
    // mid-run moves them all, a stall of milliseconds on the thread that reads the answers.
    result_.calls.reserve(calls);
  }

  run_result go() {
    // An open loop's schedule, connections and pacer thread are made before the clock starts,
    // so the first sends are not late for them.
    bool open_loop = !plans_.empty() && (options_.arrival || options_.trace_times);
    std::promise<void> clock_started;
    std::thread pacer;
    if (open_loop) {
      plan_arrivals();
      auto warmed = std::min(options_.warm_connections, plans_.size());
      target_.warm(warmed);
      if (options_.before_clock)
        options_.before_clock(warmed);
      pacer = std::thread{[this, go = clock_started.get_future().share()] { pace(go); }};
    }
    start_ = clock_type::now();
    clock_started.set_value();
    std::thread io_thread;
    if (&io_ == &own_io_)
      io_thread = std::thread{[this] {
        ::prctl(PR_SET_TIMERSLACK, 1UL); // timers fire on time, not up to 50 us late
        own_io_.run();
      }};
    std::thread progress;
    std::atomic<bool> stop_progress{false};
    if (options_.progress)
      progress = std::thread{[&] {
        while (!stop_progress.load()) {
          std::this_thread::sleep_for(std::chrono::seconds{1});
          std::fprintf(stderr,
                       "\r[%6.1f s] jobs started %zu/%zu, done %zu; calls done %zu, failed %zu   ",
                       since_start(), started_.load(), plans_.size(), jobs_done_.load(),
                       calls_done_.load(), calls_failed_.load());
        }
        std::fprintf(stderr, "\n");
      }};
    if (plans_.empty())
      done_all();
    else if (!open_loop)
      net::post(io_, [this] { launch_closed(); });
    {
      std::unique_lock<std::mutex> l{m_};
      cv_.wait(l, [&] { return finished_; });
    }
    result_.wall_s = since_start();
    if (pacer.joinable())
      pacer.join();
    work_.reset();
    own_io_.stop();
    if (io_thread.joinable())
      io_thread.join();
    stop_progress = true;
    if (progress.joinable())
      progress.join();
    return std::move(result_);
  }

private:
  struct job_state {
    std::size_t index = 0;
    std::vector<message> messages;
    std::size_t turn = 0, call = 0;
    bool has_tools = false;
    double intended_s = 0, dispatched_s = 0; // of the call in flight
  };

  double since_start() const {
    return std::chrono::duration<double>(clock_type::now() - start_).count();
  }
  double seconds(clock_type::time_point t) const {
    return std::chrono::duration<double>(t - start_).count();
  }

  // The open loop's schedule: each job's intended start, and the jobs in time order (traces
  // need not be sorted). Computed before the clock starts.
  void plan_arrivals() {
    if (options_.trace_times)
      for (const auto& p : plans_)
        arrivals_.push_back(std::max(0.0, p.arrival_s));
    else
      arrivals_ = arrival_times(*options_.arrival, plans_.size(), options_.seed);
    result_.mode = options_.trace_times ? "open trace" : "open " + to_string(*options_.arrival);
    order_.resize(plans_.size());
    for (std::size_t i = 0; i < order_.size(); ++i)
      order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](std::size_t a, std::size_t b) { return arrivals_[a] < arrivals_[b]; });
  }

  // Open loop, on a thread of its own (the pacer): each job's first call is built ahead, then
  // sent at its intended time from this thread, so the answers the I/O thread reads do not
  // delay it. Starts sending once `go` is ready (start_ set).
  void pace(std::shared_future<void> go) {
    ::prctl(PR_SET_TIMERSLACK, 1UL); // timers fire on time, not up to 50 us late
    name_this_thread("load.pacer");
    if (options_.realtime_pacer) {
      // Real-time priority, where allowed: a woken pacer then runs at once instead of waiting
      // for the I/O thread's or the server's time slice (a late send is a wrong measurement).
      // It sleeps between sends and spins at most spin_window, so it cannot starve the others.
      sched_param p{};
      p.sched_priority = 1;
      result_.realtime_pacer = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &p) == 0;
    }
    go.wait(); // the clock starts
    const auto& at = arrivals_;
    const auto& order = order_;
    // Calls are built ahead (up to `lookahead`) while there is time before the next is due, so
    // a burst of arrivals costs only the sends.
    struct ready_call {
      std::shared_ptr<job_state> js;
      std::unique_ptr<prepared_call> call;
      double at_s;
    };
    constexpr std::size_t lookahead = 64;
    std::deque<ready_call> ready;
    std::size_t next = 0;
    double last_s = 0;
    while (next < order.size() || !ready.empty()) {
      while (next < order.size() && ready.size() < lookahead &&
             (ready.empty() || clock_type::now() + spin_window < time_of(ready.front().at_s))) {
        auto i = order[next++];
        if (!begin_job(i, at[i]))
          continue;
        auto js = first_call_state(i);
        auto call = target_.prepare(spec_for(*js), callback_for(js));
        ready.push_back({std::move(js), std::move(call), at[i]});
      }
      if (ready.empty())
        continue;
      auto r = std::move(ready.front());
      ready.pop_front();
      // Spin at most a quarter of the gap to the previous send, so spinning takes no more than a
      // quarter of a core however dense the arrivals.
      auto gap = std::chrono::duration<double>(r.at_s - last_s);
      wait_until(time_of(r.at_s),
                 std::min<clock_type::duration>(
                     spin_window, std::chrono::duration_cast<clock_type::duration>(gap / 4)));
      last_s = r.at_s;
      r.js->intended_s = r.at_s;
      r.js->dispatched_s = since_start();
      r.call->send();
    }
  }

  // Sleeps until `spin` before `when`, then spins to it.
  static void wait_until(clock_type::time_point when, clock_type::duration spin) {
    auto wake = when - spin;
    if (clock_type::now() < wake)
      std::this_thread::sleep_until(wake);
    while (clock_type::now() < when) {
    }
  }

  clock_type::time_point time_of(double at_s) const {
    return start_ +
           std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(at_s));
  }

  // Closed loop: the first `concurrency` jobs now, on the I/O thread.
  void launch_closed() {
    auto c = std::max<std::size_t>(1, options_.concurrency);
    result_.mode = "closed " + std::to_string(c);
    next_closed_ = std::min(c, plans_.size());
    for (std::size_t i = 0; i < next_closed_; ++i)
      start_job_at(i, 0);
  }

  // Records job `i` as starting at `at_s`; false (and the job counted as not started) when that
  // is past --duration.
  bool begin_job(std::size_t i, double at_s) {
    auto& rec = result_.jobs[i];
    rec.intended_s = at_s;
    if (options_.duration_s > 0 && at_s > options_.duration_s) {
      job_finished(i, false);
      return false;
    }
    rec.started = true;
    ++started_;
    return true;
  }

  // A job's state before its first call: system prompt and first user message.
  std::shared_ptr<job_state> first_call_state(std::size_t i) const {
    auto js = std::make_shared<job_state>();
    js->index = i;
    const auto& plan = plans_[i];
    if (!plan.system_text.empty())
      js->messages.push_back({"system", plan.system_text, {}, {}, {}});
    js->messages.push_back({"user", plan.turns[0].user_text, {}, {}, {}});
    for (const auto& t : plan.turns)
      for (const auto& c : t.calls)
        js->has_tools = js->has_tools || c.tool_ms >= 0;
    return js;
  }

  // Closed loop: starts job `i` now, on the I/O thread.
  void start_job_at(std::size_t i, double at_s) {
    if (begin_job(i, at_s))
      dispatch(first_call_state(i), at_s);
  }

  // Runs `fn` on the runner thread at `at_s` seconds from the start (at once if past).
  template<class F>
  void at(double at_s, F fn) {
    auto when = time_of(at_s);
    if (when <= clock_type::now()) {
      fn();
      return;
    }
    auto timer = std::make_shared<net::steady_timer>(io_, when);
    timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code& ec) {
      if (!ec)
        fn();
    });
  }

  // The call a job makes next, from its plan and conversation so far.
  call_spec spec_for(const job_state& js) const {
    const auto& plan = plans_[js.index];
    const auto& cp = plan.turns[js.turn].calls[js.call];
    call_spec spec;
    spec.messages = js.messages;
    spec.session = plan.session;
    spec.stream = options_.stream;
    spec.trace = sampled_for_trace(js);
    bool tool = cp.tool_ms >= 0;
    if (options_.scripted && !options_.hosted_tool.empty()) {
      // The whole turn in one request: the server runs the calls between the texts.
      spec.max_tokens = 0;
      for (const auto& c : plan.turns[js.turn].calls) {
        spec.script.push_back({c.tokens, c.tool_ms >= 0 ? options_.hosted_tool : std::string{},
                               options_.hosted_arguments});
        spec.max_tokens += c.tokens + 512;
      }
      if (!spec.script.back().tool.empty())
        spec.script.push_back({0, {}, {}});
      spec.tools.push_back(options_.hosted_tool); // a node runs only the hosted tools declared
      return spec;
    }
    if (options_.scripted) {
      spec.script.push_back({cp.tokens, tool ? options_.tool_name : std::string{}, {}});
      if (tool)
        spec.script.push_back({0, {}, {}});
      spec.max_tokens = cp.tokens + 512; // the script decides; room for the call's own tokens
    } else {
      spec.max_tokens = std::max<std::uint32_t>(1, cp.tokens);
    }
    if (js.has_tools)
      spec.tools.push_back(options_.tool_name);
    return spec;
  }

  // Whether the call `js` makes next asks for its trace: a hash of the seed and the call's place
  // (job, turn, call) under the sampled share.
  bool sampled_for_trace(const job_state& js) const {
    if (options_.trace_sample <= 0)
      return false;
    std::uint64_t h = options_.seed * 0x9E3779B97F4A7C15ull;
    for (std::uint64_t v :
         {std::uint64_t{js.index}, std::uint64_t{js.turn}, std::uint64_t{js.call}}) {
      h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    return static_cast<double>(h >> 11) * 0x1.0p-53 < options_.trace_sample;
  }

  // Where a call's result goes: the runner's thread.
  call_callback callback_for(std::shared_ptr<job_state> js) {
    return [this, js](call_result&& r) {
      if (&io_ != &own_io_) { // the target's one thread is the runner's: no hand-off
        on_result(js, std::move(r));
        return;
      }
      net::post(io_, [this, js, r = std::move(r)]() mutable { on_result(js, std::move(r)); });
    };
  }

  // Sends a job's next call now (on the runner's thread), intended for `intended_s`.
  void dispatch(std::shared_ptr<job_state> js, double intended_s) {
    js->intended_s = intended_s;
    js->dispatched_s = since_start();
    target_.call(spec_for(*js), callback_for(js));
  }

  void on_result(std::shared_ptr<job_state> js, call_result r) {
    auto intended_s = js->intended_s, dispatched_s = js->dispatched_s;
    const auto& plan = plans_[js->index];
    auto& job = result_.jobs[js->index];
    call_record c;
    c.job = js->index;
    c.turn = js->turn;
    c.call = js->call;
    c.session = plan.session;
    c.intended_s = intended_s;
    c.dispatched_s = dispatched_s;
    c.sent_s = r.sent.time_since_epoch().count() == 0 ? dispatched_s : seconds(r.sent);
    c.end_s = seconds(r.ended);
    c.token_s.reserve(r.token_times.size());
    for (auto t : r.token_times)
      c.token_s.push_back(seconds(t));
    if (!c.token_s.empty())
      c.first_token_s = c.token_s.front();
    c.prompt_tokens = r.prompt_tokens;
    c.completion_tokens = r.completion_tokens;
    c.cached_tokens = r.cached_tokens;
    c.node = r.node;
    c.ok = r.ok;
    c.error_kind = r.error_kind;
    c.error = r.error;
    c.finish_reason = r.finish_reason;
    c.tool_call = !r.tool_name.empty();
    c.new_connection = r.new_connection;
    c.traced = sampled_for_trace(*js);
    c.request_id = r.request_id;
    ++job.calls;
    ++calls_done_;
    result_.calls.push_back(c);
    if (c.traced && options_.on_traced_call)
      options_.on_traced_call(c);
    if (!r.ok) {
      ++calls_failed_;
      job.end_s = c.end_s;
      return job_finished(js->index, false);
    }
    const auto& turn = plan.turns[js->turn];
    bool planned_tool = turn.calls[js->call].tool_ms >= 0;
    if (planned_tool && c.tool_call) {
      // The client runs the tool (simulated: it takes the planned time), then sends its result.
      js->messages.push_back(
          {"assistant", r.content, r.tool_name, r.tool_arguments, r.tool_call_id});
      const auto& done = turn.calls[js->call];
      auto tool_ms = done.tool_ms;
      job.tool_s += tool_ms / 1000.0;
      auto result_text = filler_text(plan.index * 977 + js->call + 1, done.result_tokens);
      ++js->call;
      js->messages.push_back({"tool", result_text, {}, {}, r.tool_call_id});
      auto next = c.end_s + tool_ms / 1000.0;
      at(next, [this, js, next] { dispatch(js, next); });
      return;
    }
    // The turn's answer (or a server that did not call the tool): next turn, or the end.
    js->messages.push_back({"assistant", r.content, {}, {}, {}});
    ++js->turn;
    js->call = 0;
    if (js->turn >= plan.turns.size()) {
      job.end_s = c.end_s;
      return job_finished(js->index, true);
    }
    const auto& next_turn = plan.turns[js->turn];
    job.think_s += next_turn.think_ms / 1000.0;
    js->messages.push_back({"user", next_turn.user_text, {}, {}, {}});
    auto next = c.end_s + next_turn.think_ms / 1000.0;
    at(next, [this, js, next] { dispatch(js, next); });
  }

  void job_finished(std::size_t i, bool ok) {
    result_.jobs[i].ok = ok;
    auto done = ++jobs_done_; // the pacer and the I/O thread both end jobs
    if (!options_.arrival && !options_.trace_times && next_closed_ < plans_.size()) {
      // Closed loop: the freed slot starts the next job now.
      auto now = since_start();
      start_job_at(next_closed_++, now);
      return;
    }
    if (done == plans_.size())
      done_all();
  }

  void done_all() {
    std::lock_guard<std::mutex> g{m_};
    finished_ = true;
    cv_.notify_all();
  }

  target& target_;
  run_options options_;
  std::vector<job_plan> plans_;
  net::io_context own_io_; // the runner's thread, when the target has none to share
  net::io_context& io_;    // where timers and job state live
  net::executor_work_guard<net::io_context::executor_type> work_;
  clock_type::time_point start_;
  run_result result_;
  std::size_t next_closed_ = 0;
  std::vector<double> arrivals_;   // open loop: each job's intended start
  std::vector<std::size_t> order_; // open loop: jobs by arrival time
  std::atomic<std::size_t> started_{0}, jobs_done_{0}, calls_done_{0}, calls_failed_{0};
  std::mutex m_;
  std::condition_variable cv_;
  bool finished_ = false;
};

} // namespace

run_result run(target& t, std::vector<job_plan> jobs, const run_options& options) {
  runner r{t, std::move(jobs), options};
  return r.go();
}

} // namespace triad::load
