#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor.hpp>
#include <caf/send.hpp>

#include "runtime/defaults.hpp"
#include "runtime/detail/unique_function.hpp"
#include "runtime/error.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// The answer of driver_thread::try_submit: never blocks, never grows the queue past its bound.
enum class submit_result {
  accepted, ///< the job will run exactly once
  full,     ///< the queue holds `capacity` jobs; retry later or go elsewhere
  stopped,  ///< the driver is stopping and accepts no more jobs
};

/// Name of a submit result, e.g. "full".
std::string_view to_string(submit_result value) noexcept;

/// A job for a driver thread.
using driver_job = detail::unique_function;

/// Counters of a driver thread, read without stopping it.
struct driver_stats {
  std::size_t accepted = 0;  ///< jobs taken by try_submit
  std::size_t completed = 0; ///< jobs that finished running
  std::size_t refused = 0;   ///< try_submit calls answered full or stopped
  std::size_t failed = 0;    ///< jobs that threw (counted as completed too)
  std::size_t queued = 0;    ///< accepted and not yet completed
};

/// Options of a driver thread; every field documented where declared.
struct driver_options {
  std::string name = "driver"; ///< thread name (first 15 characters are visible to the OS)
  std::size_t capacity = defaults::bridge::queue_capacity; ///< jobs queued at most, >= 1
  std::vector<unsigned> cpus;                              ///< PUs to bind to; empty = no binding
  const topology* topo = nullptr; ///< topology used to bind; binding only on this machine
  /// After each job, the thread polls for the next one this long, yielding its cpu between
  /// polls, before it sleeps (0: sleeps at once).
  std::chrono::microseconds idle_poll = defaults::bridge::idle_poll;
  /// The NUMA domain whose work the thread runs and its role there ("driver", "tool"): its CPU
  /// counts under them in `/metrics` (roles_cpu). -1: the thread is counted under no domain.
  int domain = -1;
  std::string role = "driver"; ///< see `domain`
};

/// A thread that runs a device's work, fed by a bounded lock-free queue (moodycamel).
/// Actors submit without blocking; results go back to actors by message (enqueue, no wait).
class driver_thread {
public:
  /// Starts the thread; fails on capacity 0 or when binding was asked for and failed.
  static expected<std::unique_ptr<driver_thread>> start(driver_options options);

  driver_thread(const driver_thread&) = delete;
  driver_thread& operator=(const driver_thread&) = delete;
  /// Stops (drains every accepted job) and joins.
  ~driver_thread();

  /// Queues a job unless the queue is full or the driver is stopping; never blocks. A job
  /// counts against the capacity until it has returned, so a job that reports its result by
  /// message may be answered before its slot is free again.
  submit_result try_submit(driver_job&& job);

  /// Like try_submit, for the driver's one owner (an actor, used from one thread at a time):
  /// its jobs run in the order it queued them, while jobs queued by different threads through
  /// try_submit may overtake each other. A job refused (full, stopped) is left untouched.
  submit_result try_submit_in_order(driver_job&& job);

  /// Queues `fun` and sends its result to `reply_to` as a message once it has run.
  template<class F>
  submit_result try_submit_reply(caf::actor reply_to, F fun) {
    return try_submit(
        [to = std::move(reply_to), f = std::move(fun)]() mutable { caf::anon_send(to, f()); });
  }

  /// Refuses new jobs, runs every accepted one, then joins the thread.
  void stop();

  /// Gives a driver up without waiting for it (its job is stuck in a call that cannot be
  /// interrupted): it refuses new jobs at once, and its thread runs what it accepted, then
  /// deletes the driver and ends, whenever that is. Joining it would block the caller as long.
  static void abandon(std::unique_ptr<driver_thread> driver) noexcept;

  /// Counters so far.
  driver_stats stats() const noexcept;
  /// The queue bound.
  std::size_t capacity() const noexcept { return capacity_; }
  /// Whether the thread was bound to its cpus.
  bool bound() const noexcept { return bound_; }

private:
  struct queue;
  explicit driver_thread(driver_options options);
  void run(std::shared_ptr<std::atomic<int>> bind_state);
  submit_result reserve(); // takes a slot of the capacity, or says why not
  void unreserve();        // gives a slot back (a job ran, or was refused)
  void wake();             // an empty job: the sleeping thread looks at stopping_

  std::string name_;
  std::size_t capacity_;
  std::vector<unsigned> cpus_;
  const topology* topo_;
  std::chrono::microseconds idle_poll_;
  int domain_;
  std::string role_;
  bool bound_ = false;
  bool counting_; // created in virtual time: counts busy on node_clock while it has jobs
  std::unique_ptr<queue> queue_;
  std::atomic<std::size_t> pending_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> accepted_{0};
  std::atomic<std::size_t> completed_{0};
  std::atomic<std::size_t> refused_{0};
  std::atomic<std::size_t> failed_{0};
  // Who deletes the driver: its owner (0), its thread once done, after abandon() (1); 2: the
  // thread is done, so abandon() deletes it.
  std::atomic<int> ownership_{0};
  std::thread thread_;
};

} // namespace triad
