#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "runtime/coarse_timers.hpp"

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

BOOST_AUTO_TEST_SUITE(coarse_timers)

BOOST_AUTO_TEST_CASE(a_deadline_fires_once_after_it_passes) {
  triad::coarse_timers timers{5ms};
  std::promise<clock_type::time_point> fired;
  std::atomic<int> times{0};
  const auto deadline = clock_type::now() + 30ms;
  timers.arm(deadline, [&] {
    if (times++ == 0)
      fired.set_value(clock_type::now());
  });
  auto f = fired.get_future();
  BOOST_REQUIRE(f.wait_for(10s) == std::future_status::ready);
  BOOST_TEST((f.get() >= deadline));
  std::this_thread::sleep_for(50ms);
  BOOST_TEST(times.load() == 1);
  BOOST_TEST(timers.armed() == 0u);
}

BOOST_AUTO_TEST_CASE(a_cancelled_deadline_never_fires) {
  triad::coarse_timers timers{5ms};
  std::atomic<int> times{0};
  auto k = timers.arm(clock_type::now() + 20ms, [&] { ++times; });
  timers.cancel(k);
  timers.cancel(k); // twice: ignored
  BOOST_TEST(timers.armed() == 0u);
  // A later deadline armed after it fires; the cancelled one stayed silent.
  std::promise<void> later;
  timers.arm(clock_type::now() + 60ms, [&] { later.set_value(); });
  BOOST_REQUIRE(later.get_future().wait_for(10s) == std::future_status::ready);
  BOOST_TEST(times.load() == 0);
}

BOOST_AUTO_TEST_CASE(a_deadline_armed_after_the_thread_fell_asleep_still_fires) {
  // Linger 0: the thread sleeps without a timeout as soon as nothing is armed.
  triad::coarse_timers timers{5ms, 0ms};
  std::this_thread::sleep_for(30ms);
  std::promise<void> fired;
  timers.arm(clock_type::now() + 10ms, [&] { fired.set_value(); });
  BOOST_TEST((fired.get_future().wait_for(10s) == std::future_status::ready));
}

BOOST_AUTO_TEST_CASE(a_near_deadline_armed_while_only_a_far_one_waits_fires_on_time) {
  // With only a deadline ten minutes away the thread sleeps until it; a near one armed then
  // wakes it, and fires long before the far one.
  triad::coarse_timers timers{5ms};
  timers.arm(clock_type::now() + 600s, [] {});
  std::this_thread::sleep_for(30ms); // the thread is asleep until the far deadline
  std::promise<void> fired;
  timers.arm(clock_type::now() + 10ms, [&] { fired.set_value(); });
  BOOST_TEST((fired.get_future().wait_for(10s) == std::future_status::ready));
  BOOST_TEST(timers.armed() == 1u); // the far one still waits
}

BOOST_AUTO_TEST_CASE(deadlines_fire_in_the_order_they_pass) {
  triad::coarse_timers timers{1ms};
  std::mutex m;
  std::vector<int> order;
  std::promise<void> all;
  const auto now = clock_type::now();
  for (int i : {3, 1, 2})
    timers.arm(now + i * 20ms, [&, i] {
      std::lock_guard<std::mutex> g{m};
      order.push_back(i);
      if (order.size() == 3)
        all.set_value();
    });
  BOOST_REQUIRE(all.get_future().wait_for(10s) == std::future_status::ready);
  BOOST_TEST(order == (std::vector<int>{1, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
