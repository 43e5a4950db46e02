#include <array>
#include <atomic>
#include <future>
#include <latch>
#include <thread>

#include <sched.h>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "runtime/bridge.hpp"
#include "runtime/domains.hpp"
#include "tests/printers.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

std::unique_ptr<triad::driver_thread>
start_driver(std::size_t capacity,
             std::chrono::microseconds idle_poll = triad::defaults::bridge::idle_poll) {
  auto d = triad::driver_thread::start({.name = "test.driver",
                                        .capacity = capacity,
                                        .cpus = {},
                                        .topo = nullptr,
                                        .idle_poll = idle_poll});
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  return std::move(d).value();
}

} // namespace

BOOST_AUTO_TEST_SUITE(bridge)

BOOST_AUTO_TEST_CASE(a_full_queue_refuses_instead_of_blocking_or_growing) {
  auto driver = start_driver(4);
  std::latch started{1};
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> ran{0};
  BOOST_REQUIRE(driver->try_submit([&, gate] {
    started.count_down();
    gate.wait();
    ++ran;
  }) == triad::submit_result::accepted);
  started.wait();
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(driver->try_submit([&] { ++ran; }) == triad::submit_result::accepted);
  BOOST_TEST(driver->try_submit([&] { ++ran; }) == triad::submit_result::full);
  BOOST_TEST(driver->try_submit([&] { ++ran; }) == triad::submit_result::full);
  auto s = driver->stats();
  BOOST_TEST(s.queued == 4u);
  BOOST_TEST(s.refused == 2u);
  release.set_value();
  driver->stop();
  BOOST_TEST(ran.load() == 4);
  BOOST_TEST(driver->stats().completed == 4u);
}

BOOST_AUTO_TEST_CASE(every_accepted_job_runs_exactly_once_under_concurrent_producers) {
  constexpr int producers = 4;
  constexpr int per_producer = 20000;
  auto driver = start_driver(64);
  std::vector<std::atomic<int>> runs(producers * per_producer);
  std::vector<std::atomic<bool>> accepted(producers * per_producer);
  std::atomic<int> full{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < per_producer; ++i) {
        auto id = p * per_producer + i;
        // Half the producers retry on full, half give up: both paths must stay exact.
        for (;;) {
          auto r = driver->try_submit([&runs, id] { runs[id].fetch_add(1); });
          if (r == triad::submit_result::accepted) {
            accepted[id] = true;
            break;
          }
          ++full;
          if (p % 2 == 1)
            break;
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  driver->stop();
  int accepted_count = 0;
  for (std::size_t id = 0; id < runs.size(); ++id) {
    if (accepted[id]) {
      ++accepted_count;
      BOOST_TEST_REQUIRE(runs[id].load() == 1, "job " << id << " ran " << runs[id].load());
    } else {
      BOOST_TEST_REQUIRE(runs[id].load() == 0, "refused job " << id << " ran");
    }
  }
  auto s = driver->stats();
  BOOST_TEST(s.accepted == static_cast<std::size_t>(accepted_count));
  BOOST_TEST(s.completed == s.accepted);
  BOOST_TEST(s.refused == static_cast<std::size_t>(full.load()));
  BOOST_TEST(s.queued == 0u);
}

BOOST_AUTO_TEST_CASE(jobs_apart_in_time_run_whether_the_driver_polls_or_sleeps_between) {
  // A job 1 ms after the last finds the driver asleep (no polling, or polling for 200 us) or
  // still polling (50 ms): either way it runs, once.
  for (auto poll : {std::chrono::microseconds{0}, std::chrono::microseconds{200},
                    std::chrono::microseconds{50'000}}) {
    auto driver = start_driver(4, poll);
    for (int i = 0; i < 20; ++i) {
      std::promise<void> done;
      auto ran = done.get_future();
      BOOST_REQUIRE(driver->try_submit([&done] { done.set_value(); }) ==
                    triad::submit_result::accepted);
      BOOST_REQUIRE_MESSAGE(ran.wait_for(std::chrono::seconds{10}) == std::future_status::ready,
                            "job " << i << " did not run (idle_poll " << poll.count() << " us)");
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    driver->stop();
    BOOST_TEST(driver->stats().completed == 20u);
  }
}

BOOST_AUTO_TEST_CASE(stop_drains_accepted_jobs_then_refuses) {
  auto driver = start_driver(256);
  std::atomic<int> ran{0};
  for (int i = 0; i < 200; ++i)
    BOOST_REQUIRE(driver->try_submit([&] {
      std::this_thread::sleep_for(std::chrono::microseconds{50});
      ++ran;
    }) == triad::submit_result::accepted);
  driver->stop();
  BOOST_TEST(ran.load() == 200);
  BOOST_TEST(driver->try_submit([] {}) == triad::submit_result::stopped);
}

// A job counting its runs in `runs` and its live objects (moved-from ones included) in `live`,
// with `Pad` bytes besides.
template<std::size_t Pad>
struct counting_job {
  int* runs;
  int* live;
  std::array<char, Pad> pad{};
  counting_job(int* r, int* l)
      : runs(r)
      , live(l) {
    ++*live;
  }
  counting_job(counting_job&& o) noexcept
      : runs(o.runs)
      , live(o.live) {
    ++*live;
  }
  ~counting_job() { --*live; }
  void operator()() { ++*runs; }
};

BOOST_AUTO_TEST_CASE(a_job_is_kept_once_and_freed_once_whether_stored_inline_or_on_the_heap) {
  auto check = [](auto tag) {
    using job_t = counting_job<decltype(tag)::value>;
    int runs = 0, live = 0;
    {
      triad::driver_job a{job_t{&runs, &live}};
      BOOST_TEST(live == 1);
      triad::driver_job b{std::move(a)}; // moved: still one object
      BOOST_TEST(live == 1);
      BOOST_TEST(!a);
      triad::driver_job c{job_t{&runs, &live}};
      BOOST_TEST(live == 2);
      c = std::move(b); // c's own job is freed, b's moves in
      BOOST_TEST(live == 1);
      c();
      c();
      BOOST_TEST(runs == 2);
    }
    BOOST_TEST(live == 0); // freed with the last holder
  };
  check(std::integral_constant<std::size_t, 8>{});   // inline
  check(std::integral_constant<std::size_t, 200>{}); // on the heap
  static_assert(sizeof(counting_job<8>) <= triad::detail::unique_function::inline_size);
  static_assert(sizeof(counting_job<200>) > triad::detail::unique_function::inline_size);
  // Both kinds through a driver, where the queue moves them.
  int runs = 0, live = 0;
  auto driver = start_driver(4);
  BOOST_REQUIRE(driver->try_submit(counting_job<8>{&runs, &live}) ==
                triad::submit_result::accepted);
  BOOST_REQUIRE(driver->try_submit(counting_job<200>{&runs, &live}) ==
                triad::submit_result::accepted);
  driver->stop(); // joins: the counts are the driver's last writes
  BOOST_TEST(runs == 2);
  BOOST_TEST(live == 0);
}

BOOST_AUTO_TEST_CASE(completions_reach_a_homed_actor_as_messages) {
  auto topo = triad::topology::load_synthetic("numa:1 core:2 pu:1");
  BOOST_REQUIRE(topo.has_value());
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  constexpr int jobs = 500;
  std::promise<int> sum_promise;
  auto sink = dom.spawn([&](triad::homed_actor* self) -> caf::behavior {
    auto got = std::make_shared<int>(0);
    auto sum = std::make_shared<int>(0);
    return {[=, &sum_promise](int x) {
      *sum += x;
      if (++*got == jobs) {
        sum_promise.set_value(*sum);
        self->quit();
      }
    }};
  });
  auto driver = start_driver(16);
  for (int i = 1; i <= jobs; ++i)
    while (driver->try_submit_reply(sink, [i] { return i; }) != triad::submit_result::accepted)
      std::this_thread::yield();
  auto fut = sum_promise.get_future();
  BOOST_REQUIRE(fut.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  BOOST_TEST(fut.get() == jobs * (jobs + 1) / 2);
}

BOOST_AUTO_TEST_CASE(a_throwing_job_is_counted_and_the_driver_keeps_running) {
  auto driver = start_driver(8);
  std::atomic<int> ran{0};
  BOOST_REQUIRE(driver->try_submit([] { throw std::runtime_error{"boom"}; }) ==
                triad::submit_result::accepted);
  BOOST_REQUIRE(driver->try_submit([&] { ++ran; }) == triad::submit_result::accepted);
  driver->stop();
  BOOST_TEST(ran.load() == 1);
  BOOST_TEST(driver->stats().failed == 1u);
  BOOST_TEST(driver->stats().completed == 2u);
}

BOOST_AUTO_TEST_CASE(an_abandoned_driver_refuses_at_once_and_runs_its_stuck_job_to_the_end) {
  auto driver = start_driver(4);
  std::promise<void> release;
  auto released = release.get_future().share();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::latch started{1};
  BOOST_REQUIRE(driver->try_submit([&started, released, finished] {
    started.count_down();
    released.wait(); // stuck until the test lets it go
    finished->store(true);
  }) == triad::submit_result::accepted);
  started.wait();
  auto* raw = driver.get();
  BOOST_TEST(raw->try_submit([] {}) == triad::submit_result::accepted); // before: accepted
  triad::driver_thread::abandon(std::move(driver)); // returns while the job is stuck
  BOOST_TEST(!driver);
  BOOST_TEST(!finished->load());
  // Still alive while its job is stuck, and refusing.
  BOOST_TEST(raw->try_submit([] {}) == triad::submit_result::stopped);
  release.set_value();
  // The thread runs its stuck job and the one queued behind it, then deletes the driver (the
  // ASan build's leak check would report a driver nobody deleted).
  for (int i = 0; i < 2000 && !finished->load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  BOOST_TEST(finished->load());
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
}

BOOST_AUTO_TEST_CASE(the_driver_binds_to_its_core_on_this_machine) {
  auto topo = triad::topology::load_machine();
  BOOST_REQUIRE(topo.has_value());
  unsigned cpu = topo->info().domains.front().cpus.back();
  auto d = triad::driver_thread::start(
      {.name = "test.pinned", .capacity = 4, .cpus = {cpu}, .topo = &*topo});
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST((*d)->bound());
  std::promise<std::vector<int>> seen;
  BOOST_REQUIRE((*d)->try_submit([&] { seen.set_value(triad::test::this_thread_cpus()); }) ==
                triad::submit_result::accepted);
  BOOST_TEST(seen.get_future().get() == std::vector<int>{static_cast<int>(cpu)});
}

BOOST_AUTO_TEST_CASE(bad_options_are_errors) {
  auto zero =
      triad::driver_thread::start({.name = "zero", .capacity = 0, .cpus = {}, .topo = nullptr});
  BOOST_REQUIRE(!zero);
  BOOST_TEST(zero.error().message.find("capacity 0") != std::string::npos);
  auto topo = triad::topology::load_synthetic("numa:1 core:2 pu:1");
  BOOST_REQUIRE(topo.has_value());
  auto foreign =
      triad::driver_thread::start({.name = "syn", .capacity = 1, .cpus = {0}, .topo = &*topo});
  BOOST_REQUIRE(!foreign);
  BOOST_TEST(foreign.error().code == triad::errc::unsupported);
}

BOOST_AUTO_TEST_SUITE_END()
