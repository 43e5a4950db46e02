#include <future>
#include <map>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "tests/printers.hpp"
#include "tests/tools/test_support.hpp"
#include "tools/builtin.hpp"
#include "tools/executor.hpp"

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

triad::tool_submission nap(int ms, std::uint64_t id, caf::actor to,
                           std::chrono::milliseconds deadline = std::chrono::hours{1}) {
  return {"nap",
          "{\"ms\": " + std::to_string(ms) + "}",
          std::chrono::steady_clock::now() + deadline,
          std::move(to),
          id,
          nullptr,
          0};
}

// Receives `n` results, by call id, failing on a second result for an id.
std::map<std::uint64_t, triad::tool_reply> results(caf::scoped_actor& self, std::size_t n) {
  std::map<std::uint64_t, triad::tool_reply> out;
  for (std::size_t i = 0; i < n; ++i)
    self->receive(
        [&](triad::tool_result_atom, std::uint64_t id, triad::tool_reply& r) {
          BOOST_TEST(out.count(id) == 0u, "a second result for call " << id);
          out[id] = std::move(r);
        },
        caf::after(30s) >> [] { BOOST_FAIL("a submitted call's result was lost"); });
  return out;
}

// A domain and a started executor of `concurrency` workers and `queue` waiting calls; the
// executor's actor is told to exit and the domain stopped at the end.
struct started_executor {
  explicit started_executor(std::size_t concurrency,
                            std::size_t queue = triad::defaults::tool_executor::queue_capacity,
                            std::shared_ptr<const triad::tool_registry> tools = nullptr) {
    triad::tool_executor_options o;
    o.concurrency = concurrency;
    o.queue_capacity = queue;
    start(o, tools);
  }
  // One with the options `o` given whole.
  started_executor(const triad::tool_executor_options& o,
                   std::shared_ptr<const triad::tool_registry> tools) {
    start(o, tools);
  }
  void start(const triad::tool_executor_options& o,
             std::shared_ptr<const triad::tool_registry> tools) {
    auto started =
        triad::tool_executor::start(dom, tools ? tools : triad::test::sleeper_registry(), o);
    BOOST_REQUIRE(started.has_value());
    ex = std::move(started).value();
  }
  ~started_executor() {
    if (ex)
      caf::anon_send_exit(ex->actor(), caf::exit_reason::user_shutdown);
    dom.stop(10s);
  }
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  std::shared_ptr<triad::tool_executor> ex;
};

// True when no message comes within `wait`.
bool nothing_more(caf::scoped_actor& self, std::chrono::milliseconds wait) {
  bool quiet = true;
  self->receive([&](caf::message&) { quiet = false; }, caf::after(wait) >> [] {});
  return quiet;
}

} // namespace

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

BOOST_AUTO_TEST_CASE(submitted_calls_report_straight_to_their_caller_once_each) {
  started_executor f{2, 8};
  caf::scoped_actor self{f.dom.system()};
  // More calls than workers: the workers take the waiting ones themselves.
  for (std::uint64_t id = 1; id <= 6; ++id) {
    auto s = nap(20, id, caf::actor{self});
    BOOST_REQUIRE(f.ex->submit(s) == triad::submit_result::accepted);
  }
  auto got = results(self, 6);
  BOOST_TEST(got.size() == 6u);
  for (auto& [id, r] : got) {
    BOOST_TEST(r.ok, "call " << id << ": " << r.content);
    BOOST_TEST(r.details_json.find("20") != std::string::npos);
  }
  BOOST_TEST(nothing_more(self, 200ms));
}

BOOST_AUTO_TEST_CASE(a_submission_beyond_the_queue_is_refused_at_once_and_left_untouched) {
  started_executor f{1, 1};
  caf::scoped_actor self{f.dom.system()};
  auto running = nap(300, 1, caf::actor{self});
  auto waiting = nap(10, 2, caf::actor{self});
  auto refused = nap(10, 3, caf::actor{self});
  BOOST_REQUIRE(f.ex->submit(running) == triad::submit_result::accepted);
  BOOST_REQUIRE(f.ex->submit(waiting) == triad::submit_result::accepted);
  BOOST_TEST(f.ex->submit(refused) == triad::submit_result::full);
  BOOST_TEST(refused.name == "nap"); // the caller can take it elsewhere
  BOOST_TEST((refused.reply_to == caf::actor{self}));
  auto got = results(self, 2);
  BOOST_TEST(got[1].ok);
  BOOST_TEST(got[2].ok);
  BOOST_TEST(nothing_more(self, 200ms));
}

BOOST_AUTO_TEST_CASE(a_submitted_call_past_its_deadline_times_out_once_and_the_next_runs) {
  started_executor f{1};
  caf::scoped_actor self{f.dom.system()};
  auto running = nap(600, 1, caf::actor{self}, 100ms);
  auto waiting = nap(10, 2, caf::actor{self}, 150ms);
  auto spared = nap(10, 3, caf::actor{self});
  for (auto* s : {&running, &waiting, &spared})
    BOOST_REQUIRE(f.ex->submit(*s) == triad::submit_result::accepted);
  auto got = results(self, 3);
  BOOST_TEST(got[1].timed_out);
  BOOST_TEST(!got[1].ok);
  BOOST_TEST(got[1].content.find("'nap' did not answer") != std::string::npos);
  BOOST_TEST(got[2].timed_out);
  BOOST_TEST(got[3].ok);
  BOOST_TEST(!got[3].timed_out);
  // The first call's late result (at 600 ms) is dropped.
  BOOST_TEST(nothing_more(self, 800ms));
}

BOOST_AUTO_TEST_CASE(a_sandboxed_call_past_its_deadline_is_killed_and_its_worker_comes_back) {
  auto tools = std::make_shared<triad::tool_registry>();
  BOOST_REQUIRE(triad::add_shell_tool(*tools).has_value());
  started_executor f{1, 8, tools};
  caf::scoped_actor self{f.dom.system()};
  auto now = std::chrono::steady_clock::now();
  triad::tool_submission slow{
      "shell", R"({"command": "sleep 30; echo woke"})", now + 300ms, caf::actor{self}, 1, nullptr,
      0};
  triad::tool_submission next{
      "shell", R"({"command": "echo next"})", now + 20s, caf::actor{self}, 2, nullptr, 0};
  for (auto* s : {&slow, &next})
    BOOST_REQUIRE(f.ex->submit(*s) == triad::submit_result::accepted);
  auto got = results(self, 2);
  // The executor's sweep answers it timed out, or, first by a few ms, the sandbox's kill at the
  // same deadline ends it with the wall limit: it never sleeps its 30 s.
  BOOST_TEST((got[1].timed_out || got[1].content.find("limit wall") != std::string::npos),
             got[1].content);
  BOOST_TEST(got[1].content.find("woke") == std::string::npos);
  BOOST_TEST(got[2].ok, got[2].content);
  BOOST_TEST(got[2].content.find("next") != std::string::npos);
  // The one worker ran the second call after the first's process was killed at its deadline,
  // not after its 30 s sleep.
  BOOST_TEST((std::chrono::steady_clock::now() - now < 10s));
}

BOOST_AUTO_TEST_CASE(stopping_finishes_the_running_call_answers_the_waiting_and_refuses_more) {
  started_executor f{1};
  caf::scoped_actor self{f.dom.system()};
  auto running = nap(200, 1, caf::actor{self});
  auto waiting = nap(10, 2, caf::actor{self});
  BOOST_REQUIRE(f.ex->submit(running) == triad::submit_result::accepted);
  BOOST_REQUIRE(f.ex->submit(waiting) == triad::submit_result::accepted);
  f.ex->stop();
  auto got = results(self, 2);
  BOOST_TEST(got[1].ok);
  BOOST_TEST(!got[2].ok);
  BOOST_TEST(got[2].content.find("stopped") != std::string::npos);
  auto late = nap(10, 3, caf::actor{self});
  BOOST_TEST(f.ex->submit(late) == triad::submit_result::stopped);
}

BOOST_AUTO_TEST_CASE(a_tool_that_throws_answers_with_the_error_and_its_worker_goes_on) {
  auto tools = triad::test::sleeper_registry();
  auto added = tools->add({"boom", "throws", json::parse(R"({"type": "object"})").as_object()},
                          [](const json::object&) -> triad::expected<triad::tool_output> {
                            throw std::runtime_error{"kaboom"};
                          });
  BOOST_REQUIRE(added.has_value());
  // One worker: it must survive the throw to run the nap.
  started_executor f{1, triad::defaults::tool_executor::queue_capacity, tools};
  caf::scoped_actor self{f.dom.system()};
  triad::tool_submission boom{
      "boom", "{}", std::chrono::steady_clock::time_point::max(), caf::actor{self}, 1, nullptr, 0};
  auto after = nap(10, 2, caf::actor{self});
  BOOST_REQUIRE(f.ex->submit(boom) == triad::submit_result::accepted);
  BOOST_REQUIRE(f.ex->submit(after) == triad::submit_result::accepted);
  auto got = results(self, 2);
  BOOST_TEST(!got[1].ok);
  BOOST_TEST(got[1].content.find("kaboom") != std::string::npos, got[1].content);
  BOOST_TEST(got[2].ok);
}

namespace {

// A registry with "nap" and "stuck": a tool that blocks, uninterruptibly, until the fixture goes
// (as an in-process tool on a hung file system would).
struct stuck_tool {
  stuck_tool() {
    auto added = tools->add(
        {"stuck", "blocks until released", json::parse(R"({"type": "object"})").as_object()},
        [gate = released](const json::object&) -> triad::expected<triad::tool_output> {
          gate.wait();
          return triad::tool_output{"released", {}};
        });
    BOOST_REQUIRE(added.has_value());
  }
  ~stuck_tool() {
    release.set_value();
    // The given-up thread ends once its call returns; it holds nothing of the test's.
    std::this_thread::sleep_for(50ms);
  }
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::shared_ptr<triad::tool_registry> tools = triad::test::sleeper_registry();
};

} // namespace

BOOST_AUTO_TEST_CASE(a_traced_call_past_its_deadline_still_writes_its_span_marked_timed_out) {
  auto path = std::filesystem::temp_directory_path() /
              ("triad-executor-trace-" + std::to_string(::getpid()) + ".json");
  {
    auto log = triad::trace_log::open(path);
    BOOST_REQUIRE(log);
    started_executor f{1};
    caf::scoped_actor self{f.dom.system()};
    auto late = nap(300, 1, caf::actor{self}, 50ms), next = nap(10, 2, caf::actor{self});
    late.trace = next.trace = *log;
    late.trace_id = 7, next.trace_id = 8;
    for (auto* s : {&late, &next})
      BOOST_REQUIRE(f.ex->submit(*s) == triad::submit_result::accepted);
    auto got = results(self, 2);
    BOOST_TEST(got[1].timed_out);
    BOOST_TEST(got[2].ok);
    // The late call's worker returns after its answer went out (at 300 ms), then writes it.
    for (int i = 0; i < 200 && (*log)->spans() < 2; ++i)
      std::this_thread::sleep_for(10ms);
    BOOST_TEST((*log)->spans() == 2u);
  } // the log closes: one document
  std::ifstream in{path};
  auto doc = json::parse(std::string{std::istreambuf_iterator<char>{in}, {}});
  std::filesystem::remove(path);
  std::map<std::int64_t, json::object> by_request;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> tracks;
  for (const auto& e : doc.at("traceEvents").as_array())
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      tracks[{e.at("pid").as_int64(), e.at("tid").as_int64()}] =
          e.at("args").at("name").as_string();
  for (const auto& e : doc.at("traceEvents").as_array())
    if (e.at("ph") == "X") {
      by_request[e.at("args").at("request").as_int64()] = e.at("args").as_object();
      const std::pair track{e.at("pid").as_int64(), e.at("tid").as_int64()};
      BOOST_TEST(tracks[track] == "tool worker 0"); // the one worker ran both
    }
  BOOST_REQUIRE(by_request.size() == 2u);
  BOOST_TEST(by_request[7].at("ok") == false);
  BOOST_TEST(by_request[7].at("timed_out") == true);
  BOOST_TEST(by_request[8].at("ok") == true);
  BOOST_TEST(!by_request[8].contains("timed_out"));
}

BOOST_AUTO_TEST_CASE(a_worker_stuck_past_its_deadline_and_the_grace_is_replaced) {
  stuck_tool stuck;
  triad::tool_executor_options o;
  o.concurrency = 1;
  o.stuck_grace = 100ms;
  started_executor f{o, stuck.tools};
  auto& ex = f.ex;
  {
    caf::scoped_actor self{f.dom.system()};
    triad::tool_submission blocked{
        "stuck", "{}", std::chrono::steady_clock::now() + 50ms, caf::actor{self}, 1, nullptr, 0};
    auto after = nap(10, 2, caf::actor{self});
    BOOST_REQUIRE(ex->submit(blocked) == triad::submit_result::accepted);
    BOOST_REQUIRE(ex->submit(after) == triad::submit_result::accepted);
    // The one worker never comes back from "stuck": the nap runs on its replacement.
    auto got = results(self, 2);
    BOOST_TEST(got[1].timed_out);
    BOOST_TEST(got[2].ok, got[2].content);
    BOOST_TEST(ex->abandoned_workers() == 1u);
    // And the executor goes on serving.
    auto again = nap(10, 3, caf::actor{self});
    BOOST_REQUIRE(ex->submit(again) == triad::submit_result::accepted);
    BOOST_TEST(results(self, 1)[3].ok);
  }
}

BOOST_AUTO_TEST_CASE(stopping_gives_up_a_worker_stuck_past_its_deadline_instead_of_waiting) {
  stuck_tool stuck;
  triad::tool_executor_options o;
  o.concurrency = 1;
  o.stuck_grace = std::chrono::hours{1}; // never replaced by a sweep
  started_executor f{o, stuck.tools};
  auto& ex = f.ex;
  {
    caf::scoped_actor self{f.dom.system()};
    triad::tool_submission blocked{
        "stuck", "{}", std::chrono::steady_clock::now() + 50ms, caf::actor{self}, 1, nullptr, 0};
    BOOST_REQUIRE(ex->submit(blocked) == triad::submit_result::accepted);
    BOOST_TEST(results(self, 1)[1].timed_out);
    BOOST_TEST(ex->abandoned_workers() == 0u);
    ex->stop(); // returns although the worker is still stuck
    BOOST_TEST(ex->abandoned_workers() == 1u);
    auto late = nap(10, 2, caf::actor{self});
    BOOST_TEST(ex->submit(late) == triad::submit_result::stopped);
  }
}

BOOST_AUTO_TEST_SUITE_END()
