#include "runtime/bridge.hpp"

#include <chrono>

#include <pthread.h>
#include <sched.h>

#include <concurrentqueue/blockingconcurrentqueue.h>

#include "runtime/cpu_time.hpp"
#include "runtime/node_clock.hpp"

namespace triad {

struct driver_thread::queue {
  explicit queue(std::size_t capacity)
      : jobs(capacity)
      , owner(jobs) {}
  moodycamel::BlockingConcurrentQueue<driver_job> jobs;
  moodycamel::ProducerToken owner; // one producer queue, so the owner's jobs stay in order
};

std::string_view to_string(submit_result value) noexcept {
  switch (value) {
  case submit_result::accepted:
    return "accepted";
  case submit_result::full:
    return "full";
  case submit_result::stopped:
    return "stopped";
  }
  return "unknown";
}

driver_thread::driver_thread(driver_options options)
    : name_(std::move(options.name))
    , capacity_(options.capacity)
    , cpus_(std::move(options.cpus))
    , topo_(options.topo)
    , idle_poll_(options.idle_poll)
    , domain_(options.domain)
    , role_(std::move(options.role))
    , counting_(node_clock::is_virtual())
    , queue_(std::make_unique<queue>(options.capacity)) {}

expected<std::unique_ptr<driver_thread>> driver_thread::start(driver_options options) {
  if (options.capacity == 0)
    return make_error(errc::invalid_argument,
                      "driver '" + options.name + "': capacity 0; allowed: 1 or more");
  bool bind = options.topo != nullptr && !options.cpus.empty();
  if (bind && !options.topo->info().is_this_machine)
    return make_error(errc::unsupported, "driver '" + options.name +
                                             "': cannot bind to cpus of a topology that is not "
                                             "this machine (" +
                                             options.topo->info().source + ")");
  std::unique_ptr<driver_thread> self{new driver_thread(std::move(options))};
  // 0: starting, 1: bound or not asked, -1: binding failed.
  auto bind_state = std::make_shared<std::atomic<int>>(0);
  self->thread_ = std::thread([raw = self.get(), bind_state] {
    if (raw->domain_ >= 0)
      begin_thread_role(raw->domain_, raw->role_);
    raw->run(bind_state);
    if (raw->domain_ >= 0)
      end_thread_role();
    if (raw->ownership_.exchange(2) == 1)
      delete raw; // abandoned: nobody joins it
  });
  while (bind_state->load() == 0)
    std::this_thread::yield();
  if (bind_state->load() < 0) {
    self->stop();
    return make_error(errc::system_error,
                      "driver '" + self->name_ + "': binding to its cpus failed");
  }
  self->bound_ = bind;
  return self;
}

driver_thread::~driver_thread() {
  stop();
}

submit_result driver_thread::reserve() {
  // Reserve a slot first, then look at stopping_: with stop() storing stopping_ before the
  // driver's last look at pending_, a job is either refused here or run by the driver.
  const auto before = pending_.fetch_add(1);
  // In virtual time a driver with jobs counts busy once, not once a job: a job queued behind
  // one that waits on node_clock cannot run before that one is woken, so it must not hold the
  // clock. The submitter is counted busy itself, so the count never passes zero meanwhile.
  if (counting_ && before == 0)
    node_clock::busy();
  if (before >= capacity_) {
    unreserve();
    refused_.fetch_add(1, std::memory_order_relaxed);
    return submit_result::full;
  }
  if (stopping_.load()) {
    unreserve();
    refused_.fetch_add(1, std::memory_order_relaxed);
    return submit_result::stopped;
  }
  accepted_.fetch_add(1, std::memory_order_relaxed);
  return submit_result::accepted;
}

void driver_thread::unreserve() {
  if (pending_.fetch_sub(1) == 1 && counting_)
    node_clock::idle(); // the last job: what it sent is counted already
}

submit_result driver_thread::try_submit(driver_job&& job) {
  if (!job) // nothing to run (an empty job in the queue is the stop wake-up)
    return submit_result::accepted;
  auto r = reserve();
  if (r == submit_result::accepted)
    queue_->jobs.enqueue(std::move(job));
  return r;
}

submit_result driver_thread::try_submit_in_order(driver_job&& job) {
  if (!job) // nothing to run (an empty job in the queue is the stop wake-up)
    return submit_result::accepted;
  auto r = reserve();
  if (r == submit_result::accepted)
    queue_->jobs.enqueue(queue_->owner, std::move(job));
  return r;
}

void driver_thread::run(std::shared_ptr<std::atomic<int>> bind_state) {
  auto short_name = name_.substr(0, 15);
  pthread_setname_np(pthread_self(), short_name.c_str());
  if (topo_ != nullptr && !cpus_.empty())
    bind_state->store(topo_->bind_this_thread(cpus_) ? 1 : -1);
  else
    bind_state->store(1);
  driver_job job;
  auto poll_until = std::chrono::steady_clock::now();
  for (;;) {
    // Polls (yielding the cpu to whatever else is runnable) until idle_poll after the last job,
    // then sleeps on the queue's semaphore until a job comes, or stop()'s wake-up (an empty
    // job): an idle driver wakes for nothing.
    bool got = false;
    while (!(got = queue_->jobs.try_dequeue(job)) && std::chrono::steady_clock::now() < poll_until)
      sched_yield();
    if (!got) {
      if (stopping_.load() && pending_.load() == 0)
        return;
      // Stopping, a submit that is then refused holds a slot for a moment: look again soon
      // rather than sleep on a wake-up already taken.
      if (stopping_.load())
        queue_->jobs.wait_dequeue_timed(job, std::chrono::milliseconds{1});
      else
        queue_->jobs.wait_dequeue(job);
    }
    if (!job) { // a wake-up: every accepted job has run, or is about to be queued
      if (stopping_.load() && pending_.load() == 0)
        return;
      continue;
    }
    poll_until = std::chrono::steady_clock::now() + idle_poll_;
    try {
      job();
    } catch (...) {
      failed_.fetch_add(1, std::memory_order_relaxed);
    }
    job = driver_job{};
    completed_.fetch_add(1, std::memory_order_release);
    unreserve();
  }
}

void driver_thread::wake() {
  queue_->jobs.enqueue(driver_job{});
}

void driver_thread::stop() {
  stopping_.store(true);
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
}

void driver_thread::abandon(std::unique_ptr<driver_thread> driver) noexcept {
  if (!driver)
    return;
  if (!driver->thread_.joinable())
    return; // stopped and joined already: the driver goes with the unique_ptr
  driver_thread* raw = driver.release();
  raw->stopping_.store(true);
  raw->wake();
  raw->thread_.detach(); // before the exchange: from then on the thread may delete the driver
  if (raw->ownership_.exchange(1) == 2)
    delete raw; // its thread had already ended
}

driver_stats driver_thread::stats() const noexcept {
  driver_stats s;
  s.accepted = accepted_.load(std::memory_order_relaxed);
  s.completed = completed_.load(std::memory_order_acquire);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.failed = failed_.load(std::memory_order_relaxed);
  s.queued = pending_.load();
  return s;
}

} // namespace triad
