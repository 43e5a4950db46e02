#include <unistd.h>

#include <fstream>

#include <boost/test/unit_test.hpp>

#include "actors/node_config.hpp"
#include "load/mock_server.hpp"
#include "load/report.hpp"
#include "load/runner.hpp"
#include "tests/printers.hpp"

using namespace triad::load;

namespace {

std::unique_ptr<target> mock_target(const mock_server& m) {
  auto t = make_http_target({"http://127.0.0.1:" + std::to_string(m.port()) + "/v1", "", "", 1,
                             std::chrono::milliseconds{30'000}});
  BOOST_REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.error().message));
  return std::move(*t);
}

// A mock server answering at once, and an HTTP target of it.
struct instant_mock {
  instant_mock() {
    auto m = mock_server::start({1, std::chrono::microseconds{0}, 64});
    BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
    server = std::move(*m);
    t = mock_target(*server);
  }
  std::unique_ptr<mock_server> server;
  std::unique_ptr<target> t;
};

std::vector<job_plan> chat_jobs(std::size_t n, std::uint32_t out) {
  workload_options w;
  w.input = {distribution_spec::fixed, 32, 0};
  w.output = {distribution_spec::fixed, static_cast<double>(out), 0};
  return plan_jobs(w, n, 1);
}

} // namespace

BOOST_AUTO_TEST_SUITE(runner)

BOOST_AUTO_TEST_CASE(a_closed_loop_run_answers_every_job_and_counts_every_token) {
  auto mock = mock_server::start({1, std::chrono::microseconds{200}, 64});
  BOOST_REQUIRE(mock.has_value());
  auto t = mock_target(**mock);
  BOOST_TEST(t->model() == "mock"); // asked from GET /v1/models
  run_options o;
  o.concurrency = 8;
  o.scripted = false;
  auto r = run(*t, chat_jobs(40, 6), o);
  BOOST_TEST(r.mode == "closed 8");
  BOOST_REQUIRE(r.calls.size() == 40u);
  for (const auto& c : r.calls) {
    BOOST_TEST(c.ok, c.error);
    BOOST_TEST(c.completion_tokens == 6u);
    BOOST_TEST(c.token_s.size() == 6u); // one arrival time per token
    BOOST_TEST(c.intended_s <= c.dispatched_s);
    BOOST_TEST(c.dispatched_s <= c.sent_s);
    BOOST_TEST(c.sent_s <= c.first_token_s);
    BOOST_TEST(c.first_token_s <= c.end_s);
  }
  auto s = summarize(r, {});
  BOOST_TEST(s.calls_ok == 40u);
  BOOST_TEST(s.output_tokens == 240u);
  BOOST_TEST(s.itl.count == 40u * 5u);    // inter-token gaps, one per token after the first
  BOOST_TEST((*mock)->answered() == 41u); // and GET /v1/models
}

BOOST_FIXTURE_TEST_CASE(a_closed_loop_connects_once_per_slot_and_keeps_the_connections_alive,
                        instant_mock) {
  run_options o;
  o.concurrency = 4;
  o.scripted = false;
  auto r = run(*t, chat_jobs(30, 2), o);
  auto s = summarize(r, {});
  BOOST_TEST(s.calls_ok == 30u);
  BOOST_TEST(s.calls_new_connection == 4u); // each later call finds one given back
  std::size_t flagged = 0;
  for (const auto& c : r.calls)
    flagged += c.new_connection ? 1 : 0;
  BOOST_TEST(flagged == 4u);
}

BOOST_FIXTURE_TEST_CASE(an_open_loop_run_sends_on_the_schedule_computed_up_front, instant_mock) {
  run_options o;
  o.arrival = arrival_spec{arrival_kind::constant, 200.0, 1.0};
  o.scripted = false;
  auto r = run(*t, chat_jobs(50, 2), o);
  BOOST_REQUIRE(r.calls.size() == 50u);
  std::vector<double> intended;
  for (const auto& c : r.calls)
    intended.push_back(c.intended_s);
  std::sort(intended.begin(), intended.end());
  for (std::size_t i = 0; i < intended.size(); ++i)
    BOOST_TEST(intended[i] == 0.005 * static_cast<double>(i + 1),
               boost::test_tools::tolerance(1e-9));
  auto s = summarize(r, {});
  BOOST_TEST(s.send_lag.count == 50u);
  BOOST_TEST(s.send_lag.min >= 0.0); // never sent early
}

BOOST_FIXTURE_TEST_CASE(an_open_loop_calls_before_clock_with_its_warm_connections_before_any_send,
                        instant_mock) {
  auto accepted_before = server->accepted(); // the model lookup's connection
  run_options o;
  o.arrival = arrival_spec{arrival_kind::constant, 500.0, 1.0};
  o.scripted = false;
  o.warm_connections = 6;
  std::size_t warmed = 0, answered_then = 1;
  bool all_accepted = false;
  o.before_clock = [&](std::size_t n) {
    warmed = n;
    answered_then = server->answered() - 1; // less the model lookup
    all_accepted = server->await_accepted(accepted_before + n, std::chrono::seconds{10});
  };
  auto r = run(*t, chat_jobs(20, 1), o);
  BOOST_TEST(warmed == 6u);
  BOOST_TEST(answered_then == 0u); // nothing was sent before the clock
  BOOST_TEST(all_accepted);
  BOOST_TEST(r.calls.size() == 20u);
  BOOST_TEST(server->accepted() >= accepted_before + 6u);
}

BOOST_FIXTURE_TEST_CASE(jobs_scheduled_past_the_duration_do_not_start, instant_mock) {
  run_options o;
  o.arrival = arrival_spec{arrival_kind::constant, 100.0, 1.0};
  o.duration_s = 0.2; // 20 of the 50 arrive in time
  o.scripted = false;
  auto r = run(*t, chat_jobs(50, 1), o);
  auto s = summarize(r, {});
  BOOST_TEST(s.jobs_not_started == 30u);
  BOOST_TEST(s.calls == 20u);
}

BOOST_AUTO_TEST_CASE(agent_sessions_on_an_inproc_node_run_their_client_side_tools) {
  auto t = make_inproc_target(triad::zero_time_sim_config());
  BOOST_REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.error().message));
  workload_options w;
  w.kind = workload_options::agent;
  w.turns = {distribution_spec::fixed, 2, 0};
  w.tool_calls = {distribution_spec::fixed, 3, 0};
  w.tool_ms = {distribution_spec::fixed, 5, 0};
  w.think_ms = {distribution_spec::fixed, 10, 0};
  w.system_tokens = 64;
  run_options o;
  o.concurrency = 3;
  auto r = run(**t, plan_jobs(w, 4, 9), o);
  auto s = summarize(r, {0, 0, 0, 60});
  BOOST_TEST(s.jobs_ok == 4u);
  BOOST_TEST(s.calls_ok == 4u * 2u * 4u); // 2 turns of 3 tool calls and an answer
  std::size_t tool_calls = 0;
  for (const auto& c : r.calls)
    tool_calls += c.tool_call;
  BOOST_TEST(tool_calls == 4u * 2u * 3u);
  for (const auto& j : r.jobs)
    BOOST_TEST(j.tool_s == 0.030, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s.session.count == 4u);
  BOOST_TEST(s.goodput_jobs_per_s > 0.0);
  BOOST_TEST(s.cached_tokens > 0u); // the shared system prompt and each session's own history
}

BOOST_FIXTURE_TEST_CASE(reports_are_written_as_json_lines_csv_and_html, instant_mock) {
  run_options o;
  o.concurrency = 2;
  o.scripted = false;
  auto r = run(*t, chat_jobs(6, 3), o);
  auto s = summarize(r, {1000, 0, 0, 0});
  auto dir =
      std::filesystem::temp_directory_path() / ("triad-load-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string error;
  BOOST_REQUIRE(write_jsonl(r, dir / "calls.jsonl", error));
  BOOST_REQUIRE(write_csv(r, dir / "calls.csv", error));
  BOOST_REQUIRE(write_html(r, s, "test run", dir / "report.html", error));
  auto lines = [](const std::filesystem::path& p) {
    std::ifstream f{p};
    std::size_t n = 0;
    for (std::string l; std::getline(f, l);)
      ++n;
    return n;
  };
  BOOST_TEST(lines(dir / "calls.jsonl") == 6u);
  BOOST_TEST(lines(dir / "calls.csv") == 7u);
  std::ifstream html{dir / "report.html"};
  std::string text{std::istreambuf_iterator<char>{html}, {}};
  BOOST_TEST(text.find("<svg") != std::string::npos);
  BOOST_TEST(text.find("Latency CDFs") != std::string::npos);
  BOOST_TEST(text.find("<script") == std::string::npos); // self-contained, static
  BOOST_TEST(!write_csv(r, "/nonexistent/dir/x.csv", error));
  BOOST_TEST(error.find("/nonexistent/dir/x.csv") != std::string::npos);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
