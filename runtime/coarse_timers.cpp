#include "runtime/coarse_timers.hpp"

#include <algorithm>
#include <vector>

#include <pthread.h>

namespace triad {

coarse_timers::coarse_timers(std::chrono::milliseconds granularity,
                             std::chrono::milliseconds linger)
    : granularity_(std::max(granularity, std::chrono::milliseconds{1}))
    , linger_(linger)
    , horizon_(100 * granularity_) {
  if (node_clock::is_virtual())
    on_clock_ = std::make_unique<node_clock::timer_set>();
  else
    thread_ = std::thread{[this] { run(); }};
}

coarse_timers::~coarse_timers() {
  if (on_clock_)
    return; // the set cancels what is armed

  {
    std::lock_guard<std::mutex> lock{mutex_};
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

coarse_timers::key coarse_timers::arm(clock::time_point deadline, std::function<void()> fire) {
  if (on_clock_)
    return on_clock_->arm(deadline, std::move(fire));
  bool wake = false;
  key k = 0;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    k = next_++;
    auto at = by_deadline_.emplace(deadline, k);
    entries_.emplace(k, entry{at, std::move(fire)});
    // The thread sleeps without a timeout (once per idle period), or until a later deadline
    // than this one (only far deadlines armed: at most once per such period).
    wake = asleep_ || (timed_ && deadline < wake_at_);
    asleep_ = false;
    nudged_ = nudged_ || wake;
  }
  if (wake)
    wake_.notify_one();
  return k;
}

void coarse_timers::cancel(key k) {
  if (on_clock_) {
    on_clock_->cancel(k);
    return;
  }
  std::lock_guard<std::mutex> lock{mutex_};
  auto it = entries_.find(k);
  if (it == entries_.end())
    return;
  by_deadline_.erase(it->second.at);
  entries_.erase(it);
}

std::size_t coarse_timers::armed() const {
  if (on_clock_)
    return on_clock_->size();
  std::lock_guard<std::mutex> lock{mutex_};
  return entries_.size();
}

void coarse_timers::run() {
  pthread_setname_np(pthread_self(), "triad.timers");
  std::unique_lock<std::mutex> lock{mutex_};
  auto last_armed = clock::now();
  std::vector<std::function<void()>> due;
  while (!stop_) {
    if (entries_.empty() && clock::now() - last_armed >= linger_) {
      asleep_ = true;
      wake_.wait(lock, [this] { return stop_ || !asleep_; });
      last_armed = clock::now();
      continue;
    }
    // Ticks every granularity while a deadline is near (or none is armed, lingering); with only
    // far ones it sleeps until the first (arm() wakes it for an earlier one).
    auto next = clock::now() + granularity_;
    if (!by_deadline_.empty() && by_deadline_.begin()->first > next + horizon_)
      next = by_deadline_.begin()->first;
    wake_at_ = next;
    timed_ = true;
    wake_.wait_until(lock, next, [this] { return stop_ || nudged_; });
    timed_ = nudged_ = false; // awake: arm() need not wake it
    const auto now = clock::now();
    while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
      auto k = by_deadline_.begin()->second;
      by_deadline_.erase(by_deadline_.begin());
      auto it = entries_.find(k);
      due.push_back(std::move(it->second.fire));
      entries_.erase(it);
    }
    if (!entries_.empty() || !due.empty())
      last_armed = now;
    if (due.empty())
      continue;
    lock.unlock();
    for (auto& f : due)
      f();
    due.clear();
    lock.lock();
  }
}

} // namespace triad
