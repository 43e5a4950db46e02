#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "tests/tools/test_support.hpp"
#include "tools/executor.hpp"

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {} // namespace

BOOST_AUTO_TEST_SUITE(executor)

BOOST_AUTO_TEST_CASE(calls_beyond_the_queue_are_refused_busy_and_the_rest_all_complete) {
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  triad::tool_executor_options o;
  o.concurrency = 2;
  o.queue_capacity = 3;
  auto ex = triad::spawn_tool_executor(dom, triad::test::sleeper_registry(), o);
  BOOST_REQUIRE(ex.has_value());
  {
    caf::scoped_actor self{dom.system()};
    // Seven calls at once: two run, three wait, two are refused at once.
    for (int i = 0; i < 7; ++i)
      self->send(*ex, triad::tool_call_atom::value, std::string{"nap"},
                 std::string{R"({"ms": 300})"});
    int ok = 0, busy = 0;
    for (int i = 0; i < 7; ++i)
      self->receive([&](triad::tool_reply& r) { r.busy ? ++busy : ok += r.ok; },
                    caf::after(30s) >> [] { BOOST_FAIL("a call was lost"); });
    BOOST_TEST(ok == 5);
    BOOST_TEST(busy == 2);
  }
  caf::anon_send_exit(*ex, caf::exit_reason::user_shutdown);
  dom.stop(10s);
}

BOOST_AUTO_TEST_CASE(a_bad_call_is_answered_with_the_reason) {
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  auto ex = triad::spawn_tool_executor(dom, triad::test::sleeper_registry());
  BOOST_REQUIRE(ex.has_value());
  {
    caf::scoped_actor self{dom.system()};
    self->request(*ex, caf::infinite, triad::tool_call_atom::value, std::string{"nap"},
                  std::string{R"({"ms": -5})"})
        .receive(
            [](triad::tool_reply& r) {
              BOOST_TEST(!r.ok);
              BOOST_TEST(r.content.find("arguments.ms") != std::string::npos);
            },
            [](caf::error&) { BOOST_FAIL("no reply"); });
  }
  caf::anon_send_exit(*ex, caf::exit_reason::user_shutdown);
  dom.stop(10s);
}

BOOST_AUTO_TEST_CASE(calls_past_their_deadline_time_out_running_or_waiting_and_others_go_on) {
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  triad::tool_executor_options o;
  o.concurrency = 1;
  auto ex = triad::spawn_tool_executor(dom, triad::test::sleeper_registry(), o);
  BOOST_REQUIRE(ex.has_value());
  {
    caf::scoped_actor self{dom.system()};
    auto call = [&](int ms, std::int64_t deadline_ms) {
      return self->request(*ex, caf::infinite, triad::tool_call_atom::value, std::string{"nap"},
                           "{\"ms\": " + std::to_string(ms) + "}", deadline_ms);
    };
    // The first runs past its deadline; the second waits behind it past its own; the third,
    // with time to spare, runs once the worker is free.
    auto running = call(600, 100);
    auto waiting = call(10, 150);
    auto spared = call(10, 30'000);
    for (auto* h : {&running, &waiting})
      h->receive([](triad::tool_reply&) { BOOST_FAIL("answered past its deadline"); },
                 [](caf::error& e) { BOOST_TEST((e == caf::sec::request_timeout)); });
    spared.receive([](triad::tool_reply& r) { BOOST_TEST(r.ok); },
                   [](caf::error&) { BOOST_FAIL("the call with time left failed"); });
  }
  caf::anon_send_exit(*ex, caf::exit_reason::user_shutdown);
  dom.stop(10s);
}

BOOST_AUTO_TEST_SUITE_END()
