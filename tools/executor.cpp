#include "tools/executor.hpp"

#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "runtime/bridge.hpp"
#include "runtime/deadline_alarm.hpp"
#include "runtime/node_clock.hpp"

#include <boost/json/serialize.hpp>
#include <caf/all.hpp>

namespace triad {

namespace {

using clock_type = node_clock;
// The deadline of a call that has none.
constexpr clock_type::time_point no_deadline = clock_type::time_point::max();

tool_reply stopped_reply() {
  tool_reply r;
  r.content = "the tool executor stopped before this call finished";
  return r;
}

tool_reply timed_out_reply(const std::string& name) {
  tool_reply r;
  r.content = "tool '" + name + "' did not answer within its deadline";
  r.timed_out = true;
  return r;
}

void send_result(const tool_submission& call, tool_reply reply) {
  caf::anon_send(call.reply_to, tool_result_atom::value, call.id, std::move(reply));
}

} // namespace

// Calls waiting and running, free workers, and the deadline sweep's state, behind one mutex:
// submitters (any actor), the workers (after each call) and the actor (sweeps) meet here. A
// worker that ends a call takes the next waiting one itself, so no message goes to the actor
// between calls. A worker kept by a call past its deadline and the grace is given up: its slot
// gets a fresh thread and a new generation, and the old thread, whenever its call returns,
// finds its generation gone and ends (its jobs hold the state, so it may outlive the rest).
struct tool_executor::state {
  // One worker slot: its thread, the call it runs, and since when that call is past its
  // deadline.
  struct worker {
    std::unique_ptr<driver_thread> thread;
    std::uint64_t generation = 0;
    std::optional<std::uint64_t> key;
    clock_type::time_point overdue_since = no_deadline;
  };

  std::weak_ptr<state> self; // for the jobs, which keep the state while they run
  std::shared_ptr<const tool_registry> tools;
  tool_executor_options options;
  int domain = -1; // the tool domain's id: the workers' CPU counts there
  std::vector<worker> workers;
  caf::actor_addr actor; // the executor's actor: sweeps run there (weak: it owns this state)
  std::size_t abandoned_running = 0; // given-up workers whose call has not returned
  std::size_t abandoned_total = 0;

  std::mutex mutex;
  std::deque<std::pair<std::uint64_t, tool_submission>> waiting; // key, call
  // Running calls by key; a call leaves when its result or its timeout is sent, so exactly one
  // of them is.
  std::unordered_map<std::uint64_t, tool_submission> running;
  std::vector<std::size_t> free; // idle workers
  std::uint64_t next_key = 0;
  bool stopping = false;
  // The sweep scheduled on the actor: one that is not the latest armed is stale and does
  // nothing (an earlier deadline re-arms one sooner).
  deadline_alarm sweep_alarm{defaults::tool_executor::deadline_check};

  ~state() { stop(); } // the workers' jobs use this state: they end first

  // Admits `call` (see tool_executor::submit).
  submit_result submit(tool_submission& call) {
    std::unique_lock guard{mutex};
    if (stopping)
      return submit_result::stopped;
    if (free.empty() && waiting.size() >= options.queue_capacity)
      return submit_result::full;
    auto key = next_key++;
    // A sweep at the call's deadline, unless one is due by then (within a deadline_check).
    const auto at = call.deadline;
    const auto number = at != no_deadline ? sweep_alarm.arm(at) : std::nullopt;
    if (free.empty()) {
      waiting.emplace_back(key, std::move(call));
    } else {
      auto w = free.back();
      free.pop_back();
      auto& entry = running.emplace(key, std::move(call)).first->second;
      start(w, key, job_call::of(entry), guard);
    }
    if (number) {
      guard.unlock();
      schedule_sweep(at, *number);
    }
    return submit_result::accepted;
  }

  // What a worker needs of a running call: the call itself, and where its span goes. The
  // running entry keeps the name and the trace too (it is answered from there). The trace is
  // weak: a worker stuck in its tool must not keep the node's trace file open past the node.
  struct job_call {
    std::string name, args;
    clock_type::time_point deadline;
    std::weak_ptr<trace_log> trace;
    std::uint64_t trace_id = 0;

    static job_call of(tool_submission& entry) {
      return {entry.name, std::move(entry.arguments_json), entry.deadline, entry.trace,
              entry.trace_id};
    }
  };

  // Hands call `key` to worker `w`. A free worker's queue holds at most the tail of its last
  // job, and its capacity is two: only a stopping worker refuses.
  void start(std::size_t w, std::uint64_t key, job_call call, std::unique_lock<std::mutex>& guard) {
    auto& slot = workers[w];
    slot.key = key;
    slot.overdue_since = no_deadline;
    auto job = [st = self.lock(), w, gen = slot.generation, key, call = std::move(call)]() mutable {
      st->work(w, gen, key, std::move(call));
    };
    if (slot.thread->try_submit(std::move(job)) != submit_result::accepted) {
      slot.key.reset();
      auto it = running.find(key);
      auto call = std::move(it->second);
      running.erase(it);
      guard.unlock();
      send_result(call, stopped_reply());
      guard.lock();
    }
  }

  // On worker `w` of generation `gen`: runs the call, sends its result unless it timed out
  // meanwhile, then takes the next waiting call, until none waits. A worker given up while in
  // the call (its slot has a newer generation) drops the result and ends.
  void work(std::size_t w, std::uint64_t gen, std::uint64_t key, job_call call) {
    for (;;) {
      const auto started = clock_type::now();
      auto reply = run(call.name, call.args, call.deadline);
      const auto ended = clock_type::now();
      std::unique_lock guard{mutex};
      if (workers.size() <= w || workers[w].generation != gen) {
        --abandoned_running; // its call was answered as timed out when it was given up
        guard.unlock();
        // On a track of its own generation: the slot's fresh worker has the slot's own.
        trace_call(w, call, reply, started, ended, "given_up",
                   " (given up, generation " + std::to_string(gen) + ")");
        return;
      }
      std::optional<tool_submission> done;
      if (auto it = running.find(key); it != running.end()) { // else it timed out
        done = std::move(it->second);
        running.erase(it);
      }
      workers[w].overdue_since = no_deadline;
      if (stopping || waiting.empty()) {
        workers[w].key.reset();
        free.push_back(w);
        guard.unlock();
        finish(w, call, done, std::move(reply), started, ended);
        return;
      }
      auto [next, queued] = std::move(waiting.front());
      waiting.pop_front();
      key = next;
      workers[w].key = key;
      auto ran =
          std::exchange(call, job_call::of(running.emplace(next, std::move(queued)).first->second));
      guard.unlock();
      finish(w, ran, done, std::move(reply), started, ended);
    }
  }

  // After call `ran` returned on worker `w` (the mutex not held): its span, and its result to
  // the caller unless the sweep answered it as timed out meanwhile (`done` empty).
  void finish(std::size_t w, const job_call& ran, std::optional<tool_submission>& done,
              tool_reply reply, clock_type::time_point started, clock_type::time_point ended) {
    trace_call(w, ran, reply, started, ended, done ? std::string_view{} : "timed_out");
    if (done)
      send_result(*done, std::move(reply));
  }

  // A traced request's call as a span on the worker's track of this tool domain (while the
  // trace is open). `unanswered`: why what it returned went nowhere, "timed_out" (the caller
  // was answered so first) or "given_up" (its worker was, past the grace or at a stop); empty:
  // answered with it.
  void trace_call(std::size_t w, const job_call& call, const tool_reply& reply,
                  clock_type::time_point started, clock_type::time_point ended,
                  std::string_view unanswered, std::string_view worker_note = {}) {
    auto trace = call.trace.lock();
    if (!trace)
      return;
    auto track = trace->track("domain" + std::to_string(domain) + " tools",
                              "tool worker " + std::to_string(w) + std::string{worker_note});
    std::string args = "\"request\":" + std::to_string(call.trace_id) + ",\"ok\":";
    args += reply.ok && unanswered.empty() ? "true" : "false";
    if (!unanswered.empty()) {
      args += ",\"";
      args += unanswered;
      args += "\":true";
    }
    trace->add(track, "tool " + call.name, "tool", started, ended - started, args,
               std::span{&call.trace_id, 1});
  }

  // Runs one call under its deadline (a sandboxed tool's processes are killed by it, so the
  // worker comes back); a tool that throws answers with the error, so its worker goes on.
  tool_reply run(const std::string& name, const std::string& args,
                 clock_type::time_point deadline) {
    tool_reply reply;
    call_deadline_scope scope{deadline};
    try {
      auto out = tools->call(name, args);
      if (out) {
        reply.ok = true;
        reply.content = std::move(out->content);
        reply.details_json = boost::json::serialize(out->details);
      } else {
        reply.content = out.error().message;
      }
    } catch (const std::exception& e) {
      reply = {};
      reply.content = "tool '" + name + "' threw: " + e.what();
    } catch (...) {
      reply = {};
      reply.content = "tool '" + name + "' threw";
    }
    return reply;
  }

  // Schedules sweep `number` at `at` (on the node's clock; at least a deadline_check ahead).
  void schedule_sweep(clock_type::time_point at, std::uint64_t number) {
    if (auto self = caf::actor_cast<caf::actor>(actor))
      caf::delayed_anon_send(self,
                             std::max<clock_type::duration>(
                                 at - clock_type::now(), defaults::tool_executor::deadline_check),
                             tool_sweep_atom::value, number);
  }

  // On the actor: answers every call past its deadline, waiting or running, with a timeout,
  // gives up workers stuck past the grace, and schedules the next sweep at the first deadline
  // (or stuck worker's grace) that remains. A sweep that is not the latest armed does nothing.
  void sweep(std::uint64_t number) {
    std::vector<tool_submission> expired;
    std::vector<std::unique_ptr<driver_thread>> given_up;
    auto next = no_deadline; // when the next sweep is due
    std::optional<std::uint64_t> next_number;
    {
      std::unique_lock guard{mutex};
      if (!sweep_alarm.fire(number))
        return; // stale: a sooner sweep was armed after it
      auto now = clock_type::now();
      const auto soon = now + defaults::tool_executor::deadline_check;
      // Both containers hold (key, call) pairs; the sweep goes on while calls with a deadline
      // remain.
      auto take_expired = [&](auto& calls) {
        for (auto it = calls.begin(); it != calls.end();) {
          if (it->second.deadline <= now) {
            expired.push_back(std::move(it->second));
            it = calls.erase(it);
          } else {
            next = std::min(next, it->second.deadline);
            ++it;
          }
        }
      };
      take_expired(waiting);
      for (auto it = running.begin(); it != running.end(); ++it)
        if (it->second.deadline <= now)
          for (auto& slot : workers)
            if (slot.key == it->first && slot.overdue_since == no_deadline)
              slot.overdue_since = now;
      take_expired(running);
      for (std::size_t w = 0; w < workers.size(); ++w) {
        auto& slot = workers[w];
        if (!slot.key || slot.overdue_since == no_deadline)
          continue;
        if (now - slot.overdue_since < options.stuck_grace) {
          next = std::min(next, slot.overdue_since + options.stuck_grace);
          continue;
        }
        if (abandoned_running >= options.max_abandoned || stopping) {
          next = std::min(next, soon); // looked at again by the next sweep
          continue;
        }
        auto fresh = start_worker(w);
        if (!fresh) {
          next = std::min(next, soon); // no thread to be had now: the stuck one is waited for
          continue;
        }
        given_up.push_back(std::exchange(slot.thread, std::move(*fresh)));
        mark_given_up(slot);
        // The fresh worker takes the next waiting call, or becomes free.
        if (!waiting.empty()) {
          auto [key, call] = std::move(waiting.front());
          waiting.pop_front();
          auto& entry = running.emplace(key, std::move(call)).first->second;
          next = std::min(next, entry.deadline);
          start(w, key, job_call::of(entry), guard);
        } else {
          free.push_back(w);
        }
      }
      if (next != no_deadline)
        next_number = sweep_alarm.arm(next);
    }
    for (auto& thread : given_up)
      driver_thread::abandon(std::move(thread));
    for (auto& call : expired)
      send_result(call, timed_out_reply(call.name));
    if (next_number)
      schedule_sweep(next, *next_number);
  }

  // Slot `slot`'s thread (moved out by the caller) is given up: its job, whenever it returns,
  // finds a newer generation and ends without touching the slot.
  void mark_given_up(worker& slot) {
    ++slot.generation;
    slot.key.reset();
    slot.overdue_since = no_deadline;
    ++abandoned_running;
    ++abandoned_total;
  }

  // A worker thread for slot `w`, bound as the options say.
  expected<std::unique_ptr<driver_thread>> start_worker(std::size_t w) const {
    driver_options d;
    d.name = "tool." + std::to_string(w);
    d.domain = domain;
    d.role = "tool";
    d.capacity = 2; // the next call may arrive while the previous job returns
    d.cpus = options.cpus;
    d.topo = options.topo;
    return driver_thread::start(std::move(d));
  }

  // See tool_executor::stop.
  void stop() {
    std::vector<std::unique_ptr<driver_thread>> to_join, given_up;
    {
      std::lock_guard guard{mutex};
      if (stopping)
        return;
      stopping = true;
      // Workers in a call past its deadline are given up; the rest finish their call.
      const auto now = clock_type::now();
      for (auto& slot : workers) {
        auto call = slot.key ? running.find(*slot.key) : running.end();
        bool stuck = slot.key && (slot.overdue_since != no_deadline ||
                                  (call != running.end() && call->second.deadline <= now));
        if (stuck)
          mark_given_up(slot);
        (stuck ? given_up : to_join).push_back(std::move(slot.thread));
      }
    }
    for (auto& thread : given_up)
      driver_thread::abandon(std::move(thread));
    to_join.clear(); // each finishes its call and takes no other
    std::deque<std::pair<std::uint64_t, tool_submission>> left;
    std::unordered_map<std::uint64_t, tool_submission> lost;
    {
      std::lock_guard guard{mutex};
      left.swap(waiting);
      lost.swap(running); // none: every worker has joined
    }
    for (auto& [key, call] : left)
      send_result(call, stopped_reply());
    for (auto& [key, call] : lost)
      send_result(call, stopped_reply());
  }
};

namespace {

// The executor's actor: answers tool_call_atom requests through the shared state (each
// request's result comes back to it under the request's key and goes to its promise) and runs
// the deadline sweeps.
class executor_actor : public homed<tool_executor_actor::base> {
public:
  executor_actor(caf::actor_config& cfg, std::shared_ptr<tool_executor::state> state)
      : homed(cfg)
      , state_(std::move(state)) {
    // Workers finish their current call and join when the actor goes away.
    attach_functor([st = state_](const caf::error&) { st->stop(); });
  }

  behavior_type make_behavior() override {
    return {
        [this](tool_call_atom, std::string& name, std::string& args) -> caf::result<tool_reply> {
          return accept(std::move(name), std::move(args), no_deadline);
        },
        [this](tool_call_atom, std::string& name, std::string& args,
               std::int64_t deadline_ms) -> caf::result<tool_reply> {
          return accept(std::move(name), std::move(args),
                        clock_type::now() + std::chrono::milliseconds{deadline_ms});
        },
        [this](tool_result_atom, std::uint64_t key, tool_reply& reply) {
          auto it = promises_.find(key);
          if (it == promises_.end())
            return;
          if (reply.timed_out)
            it->second.deliver(caf::make_error(caf::sec::request_timeout));
          else
            it->second.deliver(std::move(reply));
          promises_.erase(it);
        },
        [this](tool_sweep_atom, std::uint64_t number) { state_->sweep(number); },
    };
  }

  // Promises of calls still queued or running hold their callers; answered and dropped at exit
  // so no caller and this actor keep each other alive.
  void on_exit() override {
    for (auto& [key, promise] : promises_)
      promise.deliver(stopped_reply());
    promises_.clear();
  }

private:
  caf::result<tool_reply> accept(std::string name, std::string args,
                                 clock_type::time_point deadline) {
    auto key = next_key_++;
    tool_submission call{std::move(name),
                         std::move(args),
                         deadline,
                         caf::actor_cast<caf::actor>(this),
                         key,
                         nullptr,
                         0};
    if (state_->submit(call) != submit_result::accepted) {
      tool_reply busy;
      busy.busy = true;
      std::lock_guard guard{state_->mutex};
      busy.content = state_->stopping
                         ? "busy: the tool executor is stopping"
                         : "busy: " + std::to_string(state_->running.size()) +
                               " tool calls running and " + std::to_string(state_->waiting.size()) +
                               " waiting; retry later";
      return busy;
    }
    auto promise = make_response_promise<tool_reply>();
    promises_.emplace(key, promise);
    return promise;
  }

  std::shared_ptr<tool_executor::state> state_;
  std::unordered_map<std::uint64_t, caf::typed_response_promise<tool_reply>> promises_;
  std::uint64_t next_key_ = 0;
};

} // namespace

expected<std::shared_ptr<tool_executor>>
tool_executor::start(domain& home, std::shared_ptr<const tool_registry> tools,
                     tool_executor_options options) {
  if (tools == nullptr)
    return make_error(errc::invalid_argument, "tool executor: no registry");
  if (options.concurrency == 0)
    return make_error(errc::invalid_argument, "tool executor: concurrency 0; allowed: 1 or more");
  auto st = std::make_shared<state>();
  st->self = st;
  st->tools = std::move(tools);
  st->options = options;
  st->domain = static_cast<int>(home.id());
  for (std::size_t i = 0; i < options.concurrency; ++i) {
    auto w = st->start_worker(i);
    if (!w)
      return w.error();
    st->workers.emplace_back().thread = std::move(*w);
    st->free.push_back(i);
  }
  std::shared_ptr<tool_executor> ex{new tool_executor};
  ex->actor_ = home.spawn<executor_actor>(st);
  st->actor = ex->actor_.address();
  ex->state_ = std::move(st);
  return ex;
}

tool_executor::~tool_executor() = default;

submit_result tool_executor::submit(tool_submission& call) {
  return state_->submit(call);
}

void tool_executor::stop() {
  state_->stop();
}

std::size_t tool_executor::abandoned_workers() const {
  std::lock_guard guard{state_->mutex};
  return state_->abandoned_total;
}

expected<tool_executor_actor> spawn_tool_executor(domain& home,
                                                  std::shared_ptr<const tool_registry> tools,
                                                  tool_executor_options options) {
  auto ex = tool_executor::start(home, std::move(tools), options);
  if (!ex)
    return ex.error();
  return (*ex)->actor();
}

} // namespace triad
