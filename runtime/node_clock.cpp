#include "runtime/node_clock.hpp"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <pthread.h>

namespace triad {

namespace {

using time_point = node_clock::time_point;

// What waits for a time: a sleeping thread (woken and handed a busy count) or a callback.
struct waiter {
  std::condition_variable* sleeper = nullptr; // a thread in sleep_until
  bool* handed = nullptr;                     // set when the clock woke it and counted it busy
  detail::unique_function fun;                // a callback of at()
};

// The process's clock state. Busy counts change without the mutex (atomics); everything that
// decides a jump, and every wake-up, happens under it, so no wake-up is lost. The thread that
// makes the count zero (an actor's worker, a driver going to sleep) jumps the clock itself and
// wakes the first sleeper directly; a sleeper whose own deadline is first does not sleep at
// all. The clock's thread runs the callbacks and wakes sleepers whose time passes in real time.
struct clock_state {
  std::atomic<bool> on{false};
  std::atomic<std::int64_t> offset_ns{0};
  std::atomic<std::int64_t> busy{0};
  std::mutex mutex;
  std::condition_variable wake; // the clock's thread
  std::multimap<time_point, node_clock::timer_id> order;
  struct entry {
    std::multimap<time_point, node_clock::timer_id>::iterator at;
    waiter what;
  };
  std::unordered_map<node_clock::timer_id, entry> entries;
  std::vector<detail::unique_function> ready; // due callbacks, counted busy, for the thread
  node_clock::timer_id next = 1;
  bool stop = false;
  std::thread thread;
  std::uint64_t jumps = 0;
  std::int64_t skipped_ns = 0;

  // The steady_clock time at which this clock shows `t` (the offset as it is now).
  time_point real(time_point t) const noexcept {
    return t - std::chrono::nanoseconds{offset_ns.load(std::memory_order_acquire)};
  }

  node_clock::timer_id add(time_point t, waiter w) {
    auto id = next++;
    auto at = order.emplace(t, id);
    entries.emplace(id, entry{at, std::move(w)});
    if (at == order.begin())
      wake.notify_one(); // an earlier deadline than the thread waits for
    return id;
  }

  // Under the mutex: hands every entry due at `now` its busy count, waking its sleeper or
  // queueing its callback for the clock's thread.
  void dispatch(time_point now) {
    bool queued = false;
    while (!order.empty() && order.begin()->first <= now) {
      auto id = order.begin()->second;
      order.erase(order.begin());
      auto it = entries.find(id);
      auto& w = it->second.what;
      busy.fetch_add(1, std::memory_order_acq_rel); // the woken thread's, or the callback's
      if (w.sleeper != nullptr) {
        *w.handed = true;
        w.sleeper->notify_one();
      } else {
        ready.push_back(std::move(w.fun));
        queued = true;
      }
      entries.erase(it);
    }
    if (queued)
      wake.notify_one();
  }

  // Under the mutex: when nothing counted can act before the first deadline, goes there.
  void jump() {
    if (order.empty() || busy.load(std::memory_order_acquire) > 0)
      return;
    auto now = node_clock::now();
    auto first = order.begin()->first;
    if (first > now) {
      auto skip = std::chrono::duration_cast<std::chrono::nanoseconds>(first - now);
      offset_ns.fetch_add(skip.count(), std::memory_order_acq_rel);
      ++jumps;
      skipped_ns += skip.count();
      now = node_clock::now();
    }
    dispatch(now);
  }

  void run();
};

clock_state& state() {
  static clock_state s;
  return s;
}

void clock_state::run() {
  std::unique_lock<std::mutex> lock{mutex};
  std::vector<detail::unique_function> due;
  while (!stop) {
    jump();
    dispatch(node_clock::now()); // deadlines passed in real time while something was busy
    if (!ready.empty()) {
      due.swap(ready);
      const auto n = static_cast<std::int64_t>(due.size());
      lock.unlock();
      for (auto& f : due) {
        try {
          f();
        } catch (...) { // a callback must not throw; the clock goes on
        }
      }
      due.clear();
      lock.lock();
      busy.fetch_sub(n, std::memory_order_acq_rel); // what they sent is counted already
      continue;
    }
    if (order.empty())
      wake.wait(lock);
    else
      wake.wait_until(lock, real(order.begin()->first));
  }
}

} // namespace

node_clock::time_point node_clock::now() noexcept {
  return std::chrono::steady_clock::now() +
         std::chrono::nanoseconds{state().offset_ns.load(std::memory_order_acquire)};
}

bool node_clock::is_virtual() noexcept {
  return state().on.load(std::memory_order_acquire);
}

void node_clock::sleep_until(time_point t) {
  auto& s = state();
  if (!s.on.load(std::memory_order_acquire)) {
    std::this_thread::sleep_until(s.real(t));
    return;
  }
  std::unique_lock<std::mutex> lock{s.mutex};
  if (now() >= t)
    return;
  std::condition_variable cv;
  bool handed = false;
  auto id = s.add(t, waiter{&cv, &handed, {}});
  if (s.busy.fetch_sub(1, std::memory_order_acq_rel) <= 1)
    s.jump(); // the last busy one: when its own deadline is first, it does not sleep
  while (!handed && now() < t)
    cv.wait_until(lock, s.real(t));
  if (!handed) { // woken by real time: count itself busy again
    if (auto it = s.entries.find(id); it != s.entries.end()) {
      s.order.erase(it->second.at);
      s.entries.erase(it);
    }
    s.busy.fetch_add(1, std::memory_order_acq_rel);
  }
}

node_clock::timer_id node_clock::at(time_point t, detail::unique_function fun) {
  auto& s = state();
  std::lock_guard<std::mutex> g{s.mutex};
  if (!s.on.load(std::memory_order_acquire) || s.stop)
    return 0;
  return s.add(t, waiter{nullptr, nullptr, std::move(fun)});
}

bool node_clock::cancel(timer_id id) {
  auto& s = state();
  detail::unique_function dropped; // destroyed outside the lock
  std::lock_guard<std::mutex> g{s.mutex};
  auto it = s.entries.find(id);
  if (it == s.entries.end() || it->second.what.sleeper != nullptr)
    return false;
  dropped = std::move(it->second.what.fun);
  s.order.erase(it->second.at);
  s.entries.erase(it);
  return true;
}

// -- timer_set --

struct node_clock::timer_set::shared {
  mutable std::mutex mutex;
  std::unordered_map<key, timer_id> ids; // armed and not yet run or cancelled
  key next = 1;
  bool closed = false;
};

node_clock::timer_set::timer_set()
    : shared_(std::make_shared<shared>()) {}

node_clock::timer_set::~timer_set() {
  cancel_all();
}

node_clock::timer_set::key node_clock::timer_set::arm(time_point t, detail::unique_function fun) {
  if (!is_virtual())
    return 0;
  std::lock_guard<std::mutex> g{shared_->mutex};
  if (shared_->closed)
    return 0;
  auto k = shared_->next++;
  auto id = node_clock::at(t, [k, set = shared_, f = std::move(fun)]() mutable {
    {
      std::lock_guard<std::mutex> lock{set->mutex};
      if (set->ids.erase(k) == 0)
        return; // cancelled while the clock took it
    }
    f();
  });
  if (id != 0)
    shared_->ids.emplace(k, id);
  return id != 0 ? k : 0;
}

bool node_clock::timer_set::cancel(key k) {
  timer_id id = 0;
  {
    std::lock_guard<std::mutex> g{shared_->mutex};
    auto it = shared_->ids.find(k);
    if (it == shared_->ids.end())
      return false;
    id = it->second;
    shared_->ids.erase(it);
  }
  node_clock::cancel(id); // outside the set's lock: the callback may be taking it
  return true;
}

void node_clock::timer_set::cancel_all() {
  std::unordered_map<key, timer_id> ids;
  {
    std::lock_guard<std::mutex> g{shared_->mutex};
    shared_->closed = true;
    ids.swap(shared_->ids);
  }
  for (const auto& [k, id] : ids)
    node_clock::cancel(id);
}

std::size_t node_clock::timer_set::size() const {
  std::lock_guard<std::mutex> g{shared_->mutex};
  return shared_->ids.size();
}

// -- busy accounting --

void node_clock::busy() noexcept {
  state().busy.fetch_add(1, std::memory_order_acq_rel);
}

void node_clock::idle() noexcept {
  auto& s = state();
  if (s.busy.fetch_sub(1, std::memory_order_acq_rel) <= 1 && s.on.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g{s.mutex};
    s.wake.notify_one();
  }
}

node_clock::stats node_clock::statistics() noexcept {
  auto& s = state();
  std::lock_guard<std::mutex> g{s.mutex};
  return {s.jumps, static_cast<double>(s.skipped_ns) / 1e9};
}

expected<std::unique_ptr<node_clock::virtual_time>> node_clock::virtual_time::start() {
  auto& s = state();
  std::lock_guard<std::mutex> g{s.mutex};
  if (s.on.load() || s.thread.joinable())
    return make_error(errc::invalid_argument,
                      "virtual time is on already in this process; allowed: one node with "
                      "virtual time at a time");
  s.stop = false;
  s.busy.store(0);
  s.jumps = 0;
  s.skipped_ns = 0;
  s.on.store(true, std::memory_order_release);
  s.thread = std::thread{[&s] {
    pthread_setname_np(pthread_self(), "triad.clock");
    s.run();
  }};
  return std::unique_ptr<virtual_time>{new virtual_time};
}

node_clock::virtual_time::~virtual_time() {
  auto& s = state();
  decltype(s.entries) dropped; // callbacks never run; destroyed outside the lock
  std::vector<detail::unique_function> unrun;
  {
    std::lock_guard<std::mutex> g{s.mutex};
    s.stop = true;
    s.wake.notify_one();
  }
  s.thread.join();
  std::lock_guard<std::mutex> g{s.mutex};
  // Sleepers still waiting finish at their deadline in real time.
  for (auto it = s.entries.begin(); it != s.entries.end();) {
    if (it->second.what.sleeper != nullptr) {
      ++it;
      continue;
    }
    s.order.erase(it->second.at);
    dropped.insert(s.entries.extract(it++));
  }
  unrun.swap(s.ready);
  s.on.store(false, std::memory_order_release);
  s.offset_ns.store(0, std::memory_order_release); // steady_clock's time again
  s.thread = std::thread{};
}

} // namespace triad
