#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <boost/test/unit_test.hpp>

#include "load/schedule.hpp"
#include "load/workload.hpp"
#include "tests/printers.hpp"

using namespace triad::load;

namespace {

// Mean and coefficient of variation of the gaps between consecutive arrivals.
std::pair<double, double> gap_stats(const std::vector<double>& t) {
  std::vector<double> gaps;
  double prev = 0;
  for (auto x : t) {
    gaps.push_back(x - prev);
    prev = x;
  }
  double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
  double var = 0;
  for (auto g : gaps)
    var += (g - mean) * (g - mean);
  var /= static_cast<double>(gaps.size());
  return {mean, std::sqrt(var) / mean};
}

} // namespace

BOOST_AUTO_TEST_SUITE(schedule)

BOOST_AUTO_TEST_CASE(constant_arrivals_are_exactly_evenly_spaced) {
  auto t = arrival_times({arrival_kind::constant, 4.0, 1.0}, 8, 1);
  BOOST_REQUIRE(t.size() == 8u);
  for (std::size_t i = 0; i < t.size(); ++i)
    BOOST_TEST(t[i] == 0.25 * static_cast<double>(i + 1), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(poisson_and_gamma_arrivals_have_the_asked_rate_and_burstiness) {
  const std::size_t n = 200'000;
  auto [mean, cv] = gap_stats(arrival_times({arrival_kind::poisson, 50.0, 1.0}, n, 7));
  BOOST_TEST(mean == 0.02, boost::test_tools::tolerance(0.01)); // within 1 %
  BOOST_TEST(cv == 1.0, boost::test_tools::tolerance(0.02));
  auto [gmean, gcv] = gap_stats(arrival_times({arrival_kind::gamma, 50.0, 3.0}, n, 7));
  BOOST_TEST(gmean == 0.02, boost::test_tools::tolerance(0.03));
  BOOST_TEST(gcv == 3.0, boost::test_tools::tolerance(0.05));
  auto [smean, scv] = gap_stats(arrival_times({arrival_kind::gamma, 50.0, 0.5}, n, 7));
  BOOST_TEST(smean == 0.02, boost::test_tools::tolerance(0.01));
  BOOST_TEST(scv == 0.5, boost::test_tools::tolerance(0.02));
}

BOOST_AUTO_TEST_CASE(a_schedule_depends_on_the_seed_alone) {
  arrival_spec a{arrival_kind::poisson, 10.0, 1.0};
  BOOST_TEST(arrival_times(a, 100, 3) == arrival_times(a, 100, 3));
  BOOST_TEST(arrival_times(a, 100, 3) != arrival_times(a, 100, 4));
  auto t = arrival_times(a, 100, 3);
  BOOST_TEST(std::is_sorted(t.begin(), t.end()));
}

BOOST_AUTO_TEST_CASE(arrival_specs_parse_and_bad_ones_name_the_problem) {
  auto g = parse_arrival("gamma:12.5:2");
  BOOST_REQUIRE(g.has_value());
  BOOST_TEST((g->kind == arrival_kind::gamma));
  BOOST_TEST(g->rate == 12.5);
  BOOST_TEST(g->cv == 2.0);
  BOOST_TEST(to_string(*g) == "gamma:12.5:2");
  for (const char* bad : {"poisson", "poisson:0", "poisson:-1", "gamma:3", "uniform:3",
                          "constant:x", "poisson:1:2"}) {
    auto r = parse_arrival(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!r.has_value());
      BOOST_TEST(r.error().message.find(bad) != std::string::npos);
      BOOST_TEST(r.error().message.find("allowed") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(distributions_parse_and_sample_within_their_bounds) {
  auto u = parse_distribution("uniform:3:8", "--tool-calls");
  BOOST_REQUIRE(u.has_value());
  std::mt19937_64 rng{1};
  for (int i = 0; i < 1000; ++i) {
    auto v = u->sample(rng);
    BOOST_TEST((v >= 3u && v <= 8u));
  }
  auto f = parse_distribution("128", "--input-tokens");
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(f->sample(rng) == 128u);
  auto bad = parse_distribution("uniform:9:3", "--turns");
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message.find("--turns 'uniform:9:3'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(agent_plans_share_the_system_prompt_and_end_each_turn_without_a_tool) {
  workload_options w;
  w.kind = workload_options::agent;
  w.tool_calls = {distribution_spec::uniform, 3, 8};
  auto jobs = plan_jobs(w, 20, 5);
  BOOST_REQUIRE(jobs.size() == 20u);
  for (const auto& j : jobs) {
    BOOST_TEST(j.system_text == jobs[0].system_text); // one shared prefix
    BOOST_TEST(j.system_text.size() == w.system_tokens);
    for (const auto& t : j.turns) {
      BOOST_REQUIRE(t.calls.size() >= 4u);
      BOOST_TEST(t.calls.size() <= 9u);
      BOOST_TEST(t.calls.back().tool_ms < 0);
      for (std::size_t c = 0; c + 1 < t.calls.size(); ++c)
        BOOST_TEST((t.calls[c].tool_ms >= 50 && t.calls[c].tool_ms <= 2000));
    }
  }
  BOOST_TEST(plan_jobs(w, 20, 5)[3].turns[0].user_text == jobs[3].turns[0].user_text);
}

namespace {

// Tokens of a session's conversation after its last answer: the system prompt, every user
// message, every answer's text and every tool result (what the model attends to last).
std::uint64_t final_context(const job_plan& j) {
  std::uint64_t n = j.system_text.size();
  for (const auto& t : j.turns) {
    n += t.user_text.size();
    for (const auto& c : t.calls)
      n += c.tokens + (c.tool_ms >= 0 ? c.result_tokens : 0);
  }
  return n;
}

} // namespace

// The profiles' sessions stay in the shapes load/README.md gives them, over 300 sessions each:
// a code agent's context grows to 32K-128K over 10-50 calls, every profile fits a 128K-token
// (131072) context, chat calls no tool, computer use makes the most calls.
BOOST_AUTO_TEST_CASE(each_workload_profile_plans_sessions_of_its_documented_shape) {
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> context; // min, max
  std::map<std::string, std::uint64_t> most_calls;
  for (const auto& p : workload_profiles()) {
    BOOST_TEST(p.options.kind == workload_options::agent);
    auto jobs = plan_jobs(p.options, 300, 11);
    BOOST_REQUIRE(jobs.size() == 300u);
    auto& [lo, hi] = context[p.name];
    lo = ~0ull;
    for (const auto& j : jobs) {
      lo = std::min(lo, final_context(j));
      hi = std::max(hi, final_context(j));
      std::uint64_t calls = 0;
      for (const auto& t : j.turns)
        calls += t.calls.size() - 1; // the last answer of a turn calls no tool
      most_calls[p.name] = std::max(most_calls[p.name], calls);
    }
    BOOST_TEST(hi <= 131'072u, p.name << ": " << hi);
  }
  BOOST_TEST(context.size() == 4u);
  BOOST_TEST(context["code-agent"].first >= 32'000u, context["code-agent"].first);
  BOOST_TEST(context["code-agent"].second >= 100'000u, context["code-agent"].second);
  BOOST_TEST(most_calls["code-agent"] <= 50u);
  BOOST_TEST(most_calls["chat"] == 0u);
  BOOST_TEST(most_calls["computer-use"] > most_calls["web"]);
  BOOST_TEST(context["chat"].second < context["web"].second);
}

// Each planned call carries its own result length, drawn from tool_result_tokens.
BOOST_AUTO_TEST_CASE(tool_results_take_their_length_from_the_distribution_call_by_call) {
  workload_options w;
  w.kind = workload_options::agent;
  w.tool_result_tokens = {distribution_spec::uniform, 100, 900};
  std::set<std::uint32_t> lengths;
  for (const auto& j : plan_jobs(w, 20, 3))
    for (const auto& t : j.turns)
      for (std::size_t c = 0; c + 1 < t.calls.size(); ++c) {
        BOOST_TEST((t.calls[c].result_tokens >= 100u && t.calls[c].result_tokens <= 900u));
        lengths.insert(t.calls[c].result_tokens);
      }
  BOOST_TEST(lengths.size() > 10u);
}

BOOST_AUTO_TEST_CASE(an_unknown_profile_is_an_error_naming_the_allowed_ones) {
  auto p = find_workload_profile("video");
  BOOST_REQUIRE(!p.has_value());
  BOOST_TEST(p.error().message ==
             "unknown workload profile 'video'; allowed: chat, code-agent, web, computer-use");
  BOOST_TEST(find_workload_profile("web")->name == "web");
}

BOOST_AUTO_TEST_SUITE_END()
