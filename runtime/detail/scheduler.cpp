#include "runtime/detail/scheduler.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <pthread.h>

#include <caf/abstract_actor.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/execution_unit.hpp>
#include <caf/logger.hpp>
#include <caf/ref_counted.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <concurrentqueue/concurrentqueue.h>
#include <concurrentqueue/lightweightsemaphore.h>

#include "runtime/cpu_time.hpp"
#include "runtime/domains.hpp"
#include "runtime/node_clock.hpp"

namespace triad::detail {

namespace {

inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Ends the worker that runs it: stop() queues one per worker (each worker takes one and ends).
class shutdown_job final : public caf::resumable, public caf::ref_counted {
public:
  resume_result resume(caf::execution_unit*, std::size_t) override {
    return resumable::shutdown_execution_unit;
  }
  void intrusive_ptr_add_ref_impl() override { ref(); }
  void intrusive_ptr_release_impl() override { deref(); }
};

// CAF's clock thread, told only what it needs to know. CAF 0.17 has every actor that ends cancel
// its timeouts through the clock thread's queue (an allocation, a lock and a wake-up of that
// thread per actor), although most actors never set one: a request actor of triad lives for one
// LLM call and sets none. This clock remembers which actors set a timeout and passes only their
// cancellations on. Delayed messages are not timeouts: CAF delivers them whatever happens.
// In virtual time (node_clock) a delayed message waits on the node's clock instead, so it
// arrives at the modelled time however far the clock jumps.
class domain_clock final : public caf::detail::thread_safe_actor_clock {
public:
  using super = caf::detail::thread_safe_actor_clock;

  explicit domain_clock(bool virtual_time)
      : virtual_(virtual_time) {}

  void schedule_message(time_point t, caf::strong_actor_ptr receiver,
                        caf::mailbox_element_ptr content) override {
    if (!virtual_) {
      super::schedule_message(t, std::move(receiver), std::move(content));
      return;
    }
    // CAF computed `t` from steady_clock: the same distance from the node's now. A set closed
    // at stop arms nothing more: as CAF's clock, the domain then delivers nothing more.
    auto when = node_clock::now() + (t - std::chrono::steady_clock::now());
    delayed_.arm(when, [r = std::move(receiver), c = std::move(content)]() mutable {
      r->enqueue(std::move(c), nullptr);
    });
  }

  // Virtual time: drops the delayed messages still waiting on node_clock (and their actor
  // references) while the domain's actor system lives; called when the scheduler stops.
  void drop_delayed() { delayed_.cancel_all(); }

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type,
                            std::uint64_t id) override {
    remember(self);
    super::set_ordinary_timeout(t, self, type, id);
  }

  void set_request_timeout(time_point t, caf::abstract_actor* self, caf::message_id id) override {
    remember(self);
    super::set_request_timeout(t, self, id);
  }

  void set_multi_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type,
                         std::uint64_t id) override {
    remember(self);
    super::set_multi_timeout(t, self, type, id);
  }

  void cancel_timeouts(caf::abstract_actor* self) override {
    {
      std::lock_guard<std::mutex> g{mutex_};
      if (with_timeouts_.erase(self->id()) == 0)
        return;
    }
    super::cancel_timeouts(self);
  }

private:
  void remember(caf::abstract_actor* self) {
    std::lock_guard<std::mutex> g{mutex_};
    with_timeouts_.insert(self->id());
  }

  const bool virtual_; // delayed messages wait on node_clock
  node_clock::timer_set delayed_; // virtual time: the delayed messages waiting on node_clock
  std::mutex mutex_;
  std::unordered_set<caf::actor_id> with_timeouts_; // live actors that set a timeout
};

class domain_scheduler;

// One worker thread: resumes actors taken from the domain's queue.
class worker final : public caf::execution_unit {
public:
  worker(domain_scheduler& parent);

  // Called by an actor this worker runs, for an actor it woke: the first one runs next on this
  // worker (no other worker is woken for it, and its mailbox is warm in this cache), the rest go
  // into the domain's queue for any worker. A chain of hand-offs keeps the next slot at most
  // `max_next_streak` times in a row, so actors bouncing messages cannot starve the queue.
  void exec_later(caf::resumable* job) override;

  void start(std::size_t index);
  void join() {
    if (thread_.joinable())
      thread_.join();
  }

private:
  void run();

  static constexpr std::size_t max_next_streak = 64;

  domain_scheduler& parent_;
  caf::resumable* next_ = nullptr; // runs before anything from the queue
  std::size_t streak_ = 0;         // jobs run from next_ in a row
  moodycamel::ProducerToken producer_;
  moodycamel::ConsumerToken consumer_;
  std::thread thread_;
};

class domain_scheduler final : public caf::scheduler::abstract_coordinator {
public:
  domain_scheduler(caf::actor_system& sys, idle_policy idle)
      : abstract_coordinator(sys)
      , idle_(idle)
      , counting_(node_clock::is_virtual())
      , ready_(0, 0)
      , clock_(counting_) {}

  void enqueue(caf::resumable* job) override {
    busy();
    queue_.enqueue(job);
    ready_.signal();
  }

  // In virtual time, every queued or running actor counts busy on node_clock (no jump while
  // one can send): counted when queued, released when its run ends.
  void busy() noexcept {
    if (counting_)
      node_clock::busy();
  }
  void idle() noexcept {
    if (counting_)
      node_clock::idle();
  }

  caf::detail::thread_safe_actor_clock& clock() noexcept override { return clock_; }

  void start() override {
    for (std::size_t i = 0; i < std::max<std::size_t>(num_workers(), 1); ++i)
      workers_.push_back(std::make_unique<worker>(*this));
    for (std::size_t i = 0; i < workers_.size(); ++i)
      workers_[i]->start(i);
    clock_thread_ = std::thread{[this] {
      system().thread_started();
      begin_thread_role(current_domain(), "clock");
      clock_.run_dispatch_loop();
      end_thread_role();
      system().thread_terminates();
    }};
    // Named here, not in the thread, so the names are there once the system has started.
    pthread_setname_np(clock_thread_.native_handle(), "caf.clock");
    abstract_coordinator::start(); // the printer actor (detached)
  }

  void stop() override {
    clock_.drop_delayed();
    shutdown_job done;
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      done.ref(); // never released to zero: it lives on this stack
      enqueue(&done);
    }
    for (auto& w : workers_)
      w->join();
    stop_actors();
    // Actors still queued are cleaned up (their exits run) and released, as CAF's own does.
    caf::resumable* job = nullptr;
    while (queue_.try_dequeue(job)) {
      cleanup_and_release(job);
      idle();
    }
    clock_.cancel_dispatch_loop();
    clock_thread_.join();
  }

  // The next job; an idle worker polls, then (with a moderate sleep) polls with sleeps, then
  // blocks on the semaphore.
  caf::resumable* take(moodycamel::ConsumerToken& token) {
    if (!ready_.tryWait() && !poll())
      ready_.wait();
    caf::resumable* job = nullptr;
    // The count says a job is in; the queue may show it a moment later (moodycamel's queue is
    // not linearizable across producers).
    while (!queue_.try_dequeue(token, job))
      cpu_pause();
    return job;
  }

  void put(moodycamel::ProducerToken& token, caf::resumable* job) {
    busy();
    queue_.enqueue(token, job);
    ready_.signal();
  }

  moodycamel::ConcurrentQueue<caf::resumable*>& queue() noexcept { return queue_; }

private:
  bool poll() {
    for (std::size_t i = 0; i < idle_.polls; ++i) {
      if (ready_.availableApprox() > 0 && ready_.tryWait())
        return true;
      cpu_pause();
    }
    if (idle_.moderate_sleep.count() > 0)
      for (std::size_t i = 0; i < idle_.polls; ++i) {
        if (ready_.tryWait())
          return true;
        std::this_thread::sleep_for(idle_.moderate_sleep);
      }
    return false;
  }

  idle_policy idle_;
  const bool counting_; // created in virtual time
  moodycamel::ConcurrentQueue<caf::resumable*> queue_;
  moodycamel::LightweightSemaphore ready_; // jobs in queue_; no spinning of its own
  domain_clock clock_;
  std::vector<std::unique_ptr<worker>> workers_;
  std::thread clock_thread_;
};

worker::worker(domain_scheduler& parent)
    : caf::execution_unit(&parent.system())
    , parent_(parent)
    , producer_(parent.queue())
    , consumer_(parent.queue()) {}

void worker::exec_later(caf::resumable* job) {
  if (next_ == nullptr && streak_ < max_next_streak) {
    parent_.busy();
    next_ = job;
  } else
    parent_.put(producer_, job);
}

void worker::start(std::size_t index) {
  thread_ = std::thread{[this] {
    system().thread_started();
    begin_thread_role(current_domain(), "worker");
    run();
    end_thread_role();
    system().thread_terminates();
  }};
  auto name = "caf.worker." + std::to_string(index);
  pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

void worker::run() {
  const auto max_throughput = parent_.max_throughput();
  for (;;) {
    caf::resumable* job = next_;
    if (job != nullptr) {
      next_ = nullptr;
      ++streak_;
    } else {
      streak_ = 0;
      job = parent_.take(consumer_);
    }
    // CAF 0.17 records the running actor's id for its logger on every resume (twice, under one
    // spinlock shared by all threads of the system), even built without logging (CAF_LOG_LEVEL
    // quiet, as Debian's is); with no logger pointer on the thread it skips that. A spawn
    // through CAF points the thread's logger at a system again, so it is checked every time (a
    // thread-local read).
    if (caf::logger::current_logger() != nullptr)
      caf::logger::set_current_actor_system(nullptr);
    switch (job->resume(this, max_throughput)) {
    case caf::resumable::resume_later:
      parent_.put(producer_, job); // it yielded: behind the others
      break;
    case caf::resumable::done:
    case caf::resumable::awaiting_message:
      caf::intrusive_ptr_release(job);
      break;
    case caf::resumable::shutdown_execution_unit:
      parent_.idle();
      return;
    }
    parent_.idle(); // after what it woke was counted
  }
}

} // namespace

caf::actor_system::module* make_domain_scheduler(caf::actor_system& sys, idle_policy idle) {
  return new domain_scheduler(sys, idle);
}

} // namespace triad::detail
