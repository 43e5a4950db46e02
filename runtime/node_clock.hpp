#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/detail/unique_function.hpp"
#include "runtime/error.hpp"

namespace triad {

/// The clock of a node's modelled world: what request latencies, tool durations, KV pin
/// deadlines, simulated device steps and CAF's delayed messages read and wait on. In real time
/// (the default) it is `std::chrono::steady_clock`. In virtual time it is steady_clock plus an
/// offset that jumps forward to the next deadline whenever nothing can make progress before it:
/// no actor of a counting domain runs or is queued, no driver or tool job runs outside a wait
/// on this clock, and no other thread holds a `busy_scope`. Work still takes its real time (a
/// busy system runs at real speed); only idle gaps are skipped, so a simulation whose devices
/// and tools wait on this clock finishes as soon as its CPU work allows, with the modelled
/// times of a real-time run.
///
/// Threads that wait in a counted activity must wait through `sleep_until`/`sleep_for` (a
/// plain sleep would hold the clock at real time); threads outside the accounting (an HTTP
/// client, a CAF blocking actor) see the jumps but cannot prevent one.
class node_clock {
public:
  using duration = std::chrono::steady_clock::duration;     ///< as steady_clock's
  using rep = duration::rep;                                ///< as steady_clock's
  using period = duration::period;                          ///< as steady_clock's
  using time_point = std::chrono::steady_clock::time_point; ///< steady_clock's time points
  static constexpr bool is_steady = true;                   ///< never goes back

  /// Now: steady_clock's time plus every jump so far (none in real time).
  static time_point now() noexcept;

  /// Whether virtual time is on in this process.
  static bool is_virtual() noexcept;

  /// Blocks the calling thread until `now() >= t`. In virtual time the caller must be counted
  /// busy (a driver or tool job, an actor's thread, a `busy_scope`): while it waits it is not,
  /// so the clock may jump to `t`.
  static void sleep_until(time_point t);

  /// sleep_until(now() + d).
  static void sleep_for(duration d) { sleep_until(now() + d); }

  /// A handle of a callback armed with `at`.
  using timer_id = std::uint64_t;

  /// Runs `fun` on the clock's thread once `now() >= t` (virtual time only; returns 0 and
  /// drops `fun` otherwise). The clock counts itself busy while `fun` runs, so what `fun`
  /// sends is counted before the clock can jump again. `fun` must not block.
  static timer_id at(time_point t, detail::unique_function fun);

  /// Cancels a callback armed with `at`; false when it ran or was cancelled already.
  static bool cancel(timer_id id);

  /// Callbacks armed on the clock by one owner (a timer wheel, a domain's delayed messages),
  /// cancelled one by one or all at once when the owner stops, so none outlives what it uses.
  /// Cancelling races with the clock's thread taking a callback: the set decides, so a
  /// cancelled callback never runs. Virtual time only (`arm` returns 0 otherwise).
  class timer_set {
  public:
    /// A callback armed in this set.
    using key = std::uint64_t;

    timer_set();
    /// cancel_all().
    ~timer_set();
    timer_set(const timer_set&) = delete;
    timer_set& operator=(const timer_set&) = delete;

    /// Runs `fun` on the clock's thread once `now() >= t`, unless cancelled first; returns 0
    /// and drops `fun` when the set is closed or time is real.
    key arm(time_point t, detail::unique_function fun);
    /// Cancels one callback; false when it ran or was cancelled already.
    bool cancel(key k);
    /// Cancels every callback armed and closes the set: later `arm` calls drop theirs.
    void cancel_all();
    /// Callbacks armed and not yet run.
    std::size_t size() const;

  private:
    struct shared;
    std::shared_ptr<shared> shared_; // shared with the armed callbacks
  };

  /// Counts one unit of work that may produce an event (a queued actor or job, a running
  /// thread): no jump until it is released. Cheap (one atomic add), a no-op in real time.
  static void busy() noexcept;

  /// Releases what `busy` counted; at zero the clock may jump.
  static void idle() noexcept;

  /// Counts the calling thread busy for its lifetime (a benchmark's thread that submits work
  /// or reads metrics must hold one, or the clock may jump while it does).
  class busy_scope {
  public:
    busy_scope() { busy(); }
    ~busy_scope() { idle(); }
    busy_scope(const busy_scope&) = delete;
    busy_scope& operator=(const busy_scope&) = delete;
  };

  /// Counters of virtual time, for reports.
  struct stats {
    std::uint64_t jumps = 0; ///< times the clock jumped
    double skipped_s = 0;    ///< seconds jumped over in all
  };

  /// Counters so far (zeros in real time).
  static stats statistics() noexcept;

  /// Virtual time for the lifetime of this object: starts the clock's thread. One at a time
  /// per process; a second start is an error. Schedulers and driver threads created while it
  /// lives count their work; create it before them and destroy it after them.
  class virtual_time {
  public:
    /// Turns virtual time on, or says why not (it is on already).
    static expected<std::unique_ptr<virtual_time>> start();
    /// Stops the thread; armed callbacks never run. The clock reads steady_clock's time again
    /// (a node after this one starts in real time; nothing may keep a time point across).
    ~virtual_time();
    virtual_time(const virtual_time&) = delete;
    virtual_time& operator=(const virtual_time&) = delete;

  private:
    virtual_time() = default;
  };
};

} // namespace triad
