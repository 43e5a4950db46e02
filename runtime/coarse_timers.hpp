#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "runtime/node_clock.hpp"

namespace triad {

/// Deadlines that are usually cancelled before they pass (a pinned KV's time-to-live during a
/// tool call), checked by one thread at a coarse granularity. Arming and cancelling take a
/// mutex and make no system call (CAF's clock wakes its thread for every timeout set: at one
/// agent session that tripled the CPU of a request); the thread ticks every `granularity` while
/// a deadline is due within 100 granularities and for `linger` after the last one ends, sleeps
/// until the first deadline while all are further away (a request's total deadline), and
/// sleeps without a timeout when none is armed, so an idle process is not woken. Arming wakes
/// it only when it sleeps past the new deadline. Deadlines are node_clock times: timers made in
/// virtual time arm node_clock's own callbacks instead of a thread (a deadline then passes when
/// the clock jumps over it).
class coarse_timers {
public:
  /// An armed deadline, for cancel().
  using key = std::uint64_t;

  /// Starts the checking thread.
  explicit coarse_timers(std::chrono::milliseconds granularity = std::chrono::milliseconds{10},
                         std::chrono::milliseconds linger = std::chrono::seconds{1});
  coarse_timers(const coarse_timers&) = delete;
  coarse_timers& operator=(const coarse_timers&) = delete;
  /// Stops the thread; deadlines still armed never fire.
  ~coarse_timers();

  /// Runs `fire` on the timers' thread once `deadline` has passed (within a granularity),
  /// unless cancelled first. `fire` must not block (it sends a message, say).
  key arm(node_clock::time_point deadline, std::function<void()> fire);
  /// Cancels a deadline; one that fired or was cancelled already is ignored.
  void cancel(key k);
  /// Deadlines armed now.
  std::size_t armed() const;

private:
  using clock = node_clock;
  void run();

  std::unique_ptr<node_clock::timer_set> on_clock_; // virtual time: armed there; else null

  const std::chrono::milliseconds granularity_, linger_;
  const std::chrono::milliseconds horizon_; // deadlines nearer than this: ticking
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::multimap<clock::time_point, key> by_deadline_;
  struct entry {
    std::multimap<clock::time_point, key>::iterator at;
    std::function<void()> fire;
  };
  std::unordered_map<key, entry> entries_;
  key next_ = 1;
  bool asleep_ = false; // waiting without a timeout: arm() must wake it
  bool timed_ = false;  // waiting until wake_at_: arm() wakes it for an earlier deadline
  bool nudged_ = false; // woken by arm()
  clock::time_point wake_at_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace triad
