#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "runtime/bridge.hpp"
#include "runtime/node_clock.hpp"

using namespace std::chrono_literals;
using triad::node_clock;
using real_clock = std::chrono::steady_clock;

BOOST_AUTO_TEST_SUITE(node_clock_suite)

BOOST_AUTO_TEST_CASE(in_real_time_it_reads_and_sleeps_as_the_steady_clock) {
  BOOST_REQUIRE(!node_clock::is_virtual());
  const auto real0 = real_clock::now();
  const auto t0 = node_clock::now();
  BOOST_TEST((t0 >= real0));
  node_clock::sleep_for(20ms);
  BOOST_TEST((real_clock::now() - real0 >= 20ms));
  BOOST_TEST((node_clock::at(node_clock::now(), [] {}) == 0u)); // no callbacks in real time
}

BOOST_AUTO_TEST_CASE(when_nothing_is_busy_it_jumps_to_the_next_deadline) {
  auto on = node_clock::virtual_time::start();
  BOOST_REQUIRE(on.has_value());
  BOOST_TEST(node_clock::is_virtual());
  node_clock::busy_scope counted;
  const auto real0 = real_clock::now();
  const auto t0 = node_clock::now();
  node_clock::sleep_for(1h);
  BOOST_TEST((node_clock::now() - t0 >= 1h));
  BOOST_TEST((real_clock::now() - real0 < 30s)); // an hour skipped, not waited
  BOOST_TEST(node_clock::statistics().jumps >= 1u);
  BOOST_TEST(node_clock::statistics().skipped_s > 3000.0);
}

BOOST_AUTO_TEST_CASE(it_does_not_jump_while_another_thread_is_busy) {
  auto on = node_clock::virtual_time::start();
  BOOST_REQUIRE(on.has_value());
  std::atomic<bool> counting{false}, released{false};
  real_clock::time_point released_at;
  std::thread worker{[&] {
    {
      node_clock::busy_scope counted;
      counting = true;
      std::this_thread::sleep_for(200ms); // busy for 200 ms of real time: the clock waits
      released_at = real_clock::now();
      released = true;
    }
  }};
  while (!counting.load()) // the worker counts before this thread sleeps
    std::this_thread::yield();
  {
    node_clock::busy_scope counted;
    const auto t0 = node_clock::now();
    node_clock::sleep_for(1h);
    BOOST_TEST(released.load()); // woken only once the worker was idle
    BOOST_TEST((real_clock::now() >= released_at));
    BOOST_TEST((node_clock::now() - t0 >= 1h));
  }
  worker.join();
}

BOOST_AUTO_TEST_CASE(callbacks_run_in_deadline_order_and_a_cancelled_one_never) {
  auto on = node_clock::virtual_time::start();
  BOOST_REQUIRE(on.has_value());
  // Counted before arming: with nothing busy the clock's thread could jump to the first
  // deadline while this thread still arms an earlier one (seen: {2, 1}).
  node_clock::busy_scope counted;
  std::mutex m;
  std::vector<int> ran;
  const auto t0 = node_clock::now();
  auto push = [&](int k) {
    return [&, k] {
      std::lock_guard<std::mutex> g{m};
      ran.push_back(k);
    };
  };
  BOOST_TEST(node_clock::at(t0 + 2s, push(2)) != 0u);
  BOOST_TEST(node_clock::at(t0 + 1s, push(1)) != 0u);
  auto third = node_clock::at(t0 + 3s, push(3));
  BOOST_TEST(node_clock::cancel(third));
  BOOST_TEST(!node_clock::cancel(third)); // once
  node_clock::sleep_until(t0 + 5s);
  std::lock_guard<std::mutex> g{m};
  BOOST_TEST((ran == std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_CASE(a_timer_set_cancels_one_or_all_and_arms_nothing_once_closed) {
  auto on = node_clock::virtual_time::start();
  BOOST_REQUIRE(on.has_value());
  node_clock::busy_scope counted; // before arming: else the clock may run the first meanwhile
  std::atomic<int> ran{0};
  const auto t0 = node_clock::now();
  node_clock::timer_set set;
  auto count = [&] { ++ran; };
  auto first = set.arm(t0 + 1s, count);
  BOOST_TEST(first != 0u);
  BOOST_TEST(set.arm(t0 + 2s, count) != 0u);
  BOOST_TEST(set.arm(t0 + 3s, count) != 0u);
  BOOST_TEST(set.size() == 3u);
  BOOST_TEST(set.cancel(first));
  BOOST_TEST(!set.cancel(first)); // once
  node_clock::sleep_until(t0 + 2500ms); // the second ran, the third waits
  BOOST_TEST(ran.load() == 1);
  BOOST_TEST(set.size() == 1u);
  set.cancel_all();
  BOOST_TEST(set.size() == 0u);
  BOOST_TEST(set.arm(t0 + 4s, count) == 0u); // closed
  node_clock::sleep_until(t0 + 5s);
  BOOST_TEST(ran.load() == 1);
}

// Virtual time and a driver thread made in it (it counts its jobs); the driver ends first.
struct virtual_driver {
  std::unique_ptr<node_clock::virtual_time> on;
  std::unique_ptr<triad::driver_thread> driver;

  virtual_driver() {
    auto clock = node_clock::virtual_time::start();
    BOOST_REQUIRE(clock.has_value());
    on = std::move(*clock);
    triad::driver_options o;
    o.name = "clock-test";
    auto d = triad::driver_thread::start(o);
    BOOST_REQUIRE(d.has_value());
    driver = std::move(*d);
  }

  void submit(triad::driver_job job) {
    BOOST_REQUIRE(driver->try_submit(std::move(job)) == triad::submit_result::accepted);
  }
};

BOOST_FIXTURE_TEST_CASE(a_driver_job_counts_busy_until_it_has_run, virtual_driver) {
  std::atomic<bool> done{false};
  real_clock::time_point done_at;
  // A job that works 200 ms of real time (not waiting on the clock), then one that sleeps a
  // modelled minute: this thread's hour must not pass before the work is done.
  node_clock::busy_scope counted;
  submit([&] {
    std::this_thread::sleep_for(200ms);
    done_at = real_clock::now();
    done = true;
  });
  submit([] { node_clock::sleep_for(1min); });
  const auto t0 = node_clock::now();
  node_clock::sleep_for(1h);
  BOOST_TEST(done.load());
  BOOST_TEST((real_clock::now() >= done_at));
  BOOST_TEST((node_clock::now() - t0 >= 1h));
  driver->stop();
}

BOOST_FIXTURE_TEST_CASE(a_job_queued_behind_a_sleeping_job_does_not_hold_the_clock,
                        virtual_driver) {
  std::atomic<bool> second_ran{false};
  {
    // Counted before submitting: else the driver, alone busy, could jump the hour at once.
    node_clock::busy_scope counted;
    submit([] { node_clock::sleep_for(1h); });
    submit([&] { second_ran = true; });
    const auto real0 = real_clock::now();
    const auto t0 = node_clock::now();
    node_clock::sleep_for(1min); // the queued job cannot run before the hour: the clock jumps
    BOOST_TEST((node_clock::now() - t0 >= 1min));
    BOOST_TEST((real_clock::now() - real0 < 30s));
    BOOST_TEST(!second_ran.load());
  }
  driver->stop(); // the hour passes at once, then the queued job runs
  BOOST_TEST(second_ran.load());
}

BOOST_AUTO_TEST_CASE(a_second_virtual_time_is_refused_and_real_time_returns_after) {
  {
    auto on = node_clock::virtual_time::start();
    BOOST_REQUIRE(on.has_value());
    auto again = node_clock::virtual_time::start();
    BOOST_REQUIRE(!again.has_value());
    BOOST_TEST(again.error().message.find("virtual time is on already") != std::string::npos);
  }
  BOOST_TEST(!node_clock::is_virtual());
  const auto drift = node_clock::now() - real_clock::now();
  BOOST_TEST((drift < 1s)); // steady_clock's time again
}

BOOST_AUTO_TEST_SUITE_END()
