#include "tools/executor.hpp"

#include <deque>

#include "runtime/bridge.hpp"

#include <boost/json/serialize.hpp>
#include <caf/all.hpp>

namespace triad {

namespace {

using call_done_atom = caf::atom_constant<caf::atom("calldone")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using clock_type = std::chrono::steady_clock;
// The deadline of a call that has none.
constexpr clock_type::time_point no_deadline = clock_type::time_point::max();

class executor_actor : public homed_actor {
public:
  executor_actor(caf::actor_config& cfg, std::shared_ptr<const tool_registry> tools,
                 tool_executor_options options, std::vector<std::unique_ptr<driver_thread>> workers)
      : homed_actor(cfg)
      , tools_(std::move(tools))
      , options_(options)
      , workers_(std::move(workers)) {
    for (std::size_t i = 0; i < workers_.size(); ++i)
      free_.push_back(i);
    // Workers finish their current call and join when the actor goes away.
    attach_functor([this](const caf::error&) { workers_.clear(); });
  }

  caf::behavior make_behavior() override {
    return {
        [this](tool_call_atom, std::string& name, std::string& args) -> caf::result<tool_reply> {
          return accept(std::move(name), std::move(args), no_deadline);
        },
        [this](tool_call_atom, std::string& name, std::string& args,
               std::int64_t deadline_ms) -> caf::result<tool_reply> {
          return accept(std::move(name), std::move(args),
                        clock_type::now() + std::chrono::milliseconds{deadline_ms});
        },
        [this](expire_atom) {
          expiry_pending_ = false;
          expire();
        },
        [this](retry_atom) {
          retry_pending_ = false;
          start_next();
        },
        [this](call_done_atom, std::uint64_t key, std::size_t worker, tool_reply& reply) {
          auto it = in_flight_.find(key);
          if (it != in_flight_.end()) { // else it expired: its caller has had the timeout
            it->second.promise.deliver(std::move(reply));
            in_flight_.erase(it);
          }
          free_.push_back(worker);
          --running_;
          start_next();
        },
    };
  }

  // Promises of calls still queued or running hold their callers; dropped at exit so no
  // caller and this actor keep each other alive.
  void on_exit() override {
    tool_reply stopped;
    stopped.content = "the tool executor stopped before this call finished";
    for (auto& call : waiting_)
      call.promise.deliver(stopped);
    for (auto& [key, call] : in_flight_)
      call.promise.deliver(stopped);
    waiting_.clear();
    in_flight_.clear();
  }

private:
  struct pending {
    std::string name;
    std::string args;
    caf::response_promise promise;
    clock_type::time_point deadline = no_deadline;
  };

  struct running {
    caf::response_promise promise;
    clock_type::time_point deadline;
  };

  caf::result<tool_reply> accept(std::string name, std::string args,
                                 clock_type::time_point deadline) {
    if (running_ >= options_.concurrency && waiting_.size() >= options_.queue_capacity) {
      tool_reply busy;
      busy.busy = true;
      busy.content = "busy: " + std::to_string(running_) + " tool calls running and " +
                     std::to_string(waiting_.size()) + " waiting; retry later";
      return busy;
    }
    auto promise = make_response_promise<tool_reply>();
    waiting_.push_back({std::move(name), std::move(args), promise, deadline});
    if (deadline != no_deadline)
      check_deadlines_soon();
    start_next();
    return promise;
  }

  void check_deadlines_soon() {
    if (!expiry_pending_) {
      expiry_pending_ = true;
      delayed_send(this, defaults::tool_executor::deadline_check, expire_atom::value);
    }
  }

  // Answers every call past its deadline with a timeout, waiting or running (a running tool
  // ends under its own limits; its late result is dropped), and checks again while calls with a
  // deadline remain.
  void expire() {
    auto now = clock_type::now();
    bool left = false;
    // One pass over `calls`, whose entries `call_of` turns into something with a promise and a
    // deadline.
    auto sweep = [&](auto& calls, auto call_of) {
      for (auto it = calls.begin(); it != calls.end();) {
        auto& call = call_of(*it);
        if (call.deadline <= now) {
          call.promise.deliver(caf::make_error(caf::sec::request_timeout));
          it = calls.erase(it);
        } else {
          left = left || call.deadline != no_deadline;
          ++it;
        }
      }
    };
    sweep(waiting_, [](pending& p) -> pending& { return p; });
    sweep(in_flight_, [](auto& entry) -> running& { return entry.second; });
    if (left)
      check_deadlines_soon();
  }

  // Starts waiting calls while workers are free; each worker is a thread of its own (the
  // runtime bridge) that reports back by message, so a slow tool never blocks this actor.
  void start_next() {
    while (!free_.empty() && !waiting_.empty()) {
      auto call = std::make_shared<pending>(std::move(waiting_.front()));
      waiting_.pop_front();
      auto key = next_key_++;
      auto worker = free_.back();
      free_.pop_back();
      in_flight_.emplace(key, running{call->promise, call->deadline});
      ++running_;
      auto self = caf::actor_cast<caf::actor>(this);
      auto job = [tools = tools_, self, key, worker, call] {
        tool_reply reply;
        auto out = tools->call(call->name, call->args);
        if (out) {
          reply.ok = true;
          reply.content = std::move(out->content);
          reply.details_json = boost::json::serialize(out->details);
        } else {
          reply.content = out.error().message;
        }
        caf::anon_send(self, call_done_atom::value, key, worker, std::move(reply));
      };
      // A free worker may still be finishing its previous job (it reports before it returns),
      // so each worker's queue holds two; should it refuse anyway, the call waits again and
      // starting is retried shortly: nothing is lost.
      if (workers_[worker]->try_submit(std::move(job)) != submit_result::accepted) {
        waiting_.push_front(std::move(*call));
        in_flight_.erase(key);
        free_.push_back(worker);
        --running_;
        if (!retry_pending_) {
          retry_pending_ = true;
          delayed_send(this, std::chrono::milliseconds{1}, retry_atom::value);
        }
        return;
      }
    }
  }

  std::shared_ptr<const tool_registry> tools_;
  tool_executor_options options_;
  std::deque<pending> waiting_;
  std::map<std::uint64_t, running> in_flight_;
  std::vector<std::unique_ptr<driver_thread>> workers_;
  std::vector<std::size_t> free_;
  std::size_t running_ = 0;
  bool retry_pending_ = false;
  bool expiry_pending_ = false;
  std::uint64_t next_key_ = 0;
};

} // namespace

expected<caf::actor> spawn_tool_executor(domain& home, std::shared_ptr<const tool_registry> tools,
                                         tool_executor_options options) {
  if (tools == nullptr)
    return make_error(errc::invalid_argument, "tool executor: no registry");
  if (options.concurrency == 0)
    return make_error(errc::invalid_argument, "tool executor: concurrency 0; allowed: 1 or more");
  std::vector<std::unique_ptr<driver_thread>> workers;
  for (std::size_t i = 0; i < options.concurrency; ++i) {
    driver_options d;
    d.name = "tool." + std::to_string(i);
    d.capacity = 2; // the next job may arrive while the previous one returns
    d.cpus = options.cpus;
    d.topo = options.topo;
    auto w = driver_thread::start(std::move(d));
    if (!w)
      return w.error();
    workers.push_back(std::move(*w));
  }
  return home.spawn<executor_actor>(std::move(tools), options, std::move(workers));
}

} // namespace triad
