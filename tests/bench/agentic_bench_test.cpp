#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/process.hpp"

namespace json = boost::json;

namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream file{path};
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// What a run of triad-bench-agentic wrote: its exit status, its JSON and (asked for) its HTML.
struct bench_run {
  int status = -1;
  json::object out;
  std::string html;
};

// Runs triad-bench-agentic with `args`, its JSON (and, with `html`, its OI/CF report) to
// temporary files named after `name`, read back and removed.
bench_run run_bench(const std::string& name, const std::string& args, bool html = false) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto json_path = dir / ("triad-bench-agentic-" + name + ".json");
  const auto html_path = dir / ("triad-bench-agentic-" + name + ".html");
  auto r = triad::test::run_command(triad::test::binary("triad-bench-agentic") + " " + args +
                                    " --json " + json_path.string() +
                                    (html ? " --html " + html_path.string() : ""));
  bench_run out;
  out.status = r.status;
  if (r.status == 0)
    out.out = json::parse(read(json_path)).as_object();
  if (html)
    out.html = read(html_path);
  std::filesystem::remove(json_path);
  std::filesystem::remove(html_path);
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(bench_agentic)

// One modelled minute of the datacenter setting (64 sim devices, 3 code-agent sessions) in
// virtual time: the JSON has the ratio, and the HTML report draws each pool's steps on
// the OI/CF plane with the roofline ridge and the capacity walls.
BOOST_AUTO_TEST_CASE(the_datacenter_run_reports_its_speed_and_draws_the_oi_cf_plane) {
  auto r = run_bench("datacenter",
                     "--quick --settings datacenter_three_stage --datacenter-minutes 1", true);
  BOOST_REQUIRE_EQUAL(r.status, 0);
  const auto& out = r.out;
  const auto v = out.at("ratios").as_object().at("modelled_over_wall_seconds").to_number<double>();
  BOOST_TEST((std::isfinite(v) && v > 0), "modelled_over_wall_seconds = " << v);
  const auto dc = out.at("metrics").as_object().at("datacenter_three_stage").as_object();
  BOOST_TEST(dc.at("errors").to_number<double>() == 0.0);
  const auto& html = r.html;
  BOOST_TEST(html.find("<svg") != std::string::npos);
  BOOST_TEST(html.find("prefill pool, 8 x h200 x2") != std::string::npos);
  BOOST_TEST(html.find("decode pool, 12 x sn40l x4") != std::string::npos);
  BOOST_TEST(html.find("ridge ") != std::string::npos);
  BOOST_TEST(html.find("all tiers ") != std::string::npos);     // the SN40L's DDR below its HBM
  BOOST_TEST(html.find(" steps</title>") != std::string::npos); // cells were drawn
}

// The capacity-bound comparison with Gaudi 3 prefill, on two code-agent sessions: the ratio at
// equal device count and at equal cost, the latter the former times the fleets' price ratio
// (12 H200 at 32,000 against 4 Gaudi 3 at 15,625 and 8 SN40L at 35,000, the bench's assumed
// prices).
BOOST_AUTO_TEST_CASE(gaudi3_prefill_is_compared_at_equal_device_count_and_at_equal_cost) {
  auto r = run_bench("gaudi3",
                     "--quick --agent-sessions 2 --settings "
                     "code_agent_three_stage_gaudi3,code_agent_monolithic",
                     true);
  BOOST_REQUIRE_EQUAL(r.status, 0);
  const auto& out = r.out;
  const auto& metrics = out.at("metrics").as_object();
  const auto& g3 = metrics.at("code_agent_three_stage_gaudi3").as_object();
  const auto& mono = metrics.at("code_agent_monolithic").as_object();
  BOOST_TEST(g3.at("errors").to_number<double>() == 0.0);
  BOOST_TEST(g3.at("fleet_usd").to_number<double>() == 4 * 15'625.0 + 8 * 35'000.0);
  BOOST_TEST(mono.at("fleet_usd").to_number<double>() == 12 * 32'000.0);
  const auto& ratios = out.at("ratios").as_object();
  const auto count =
      ratios.at("three_stage_gaudi3_over_monolithic_throughput_capacity_bound").to_number<double>();
  const auto cost =
      ratios.at("three_stage_gaudi3_over_monolithic_throughput_per_cost_capacity_bound")
          .to_number<double>();
  BOOST_TEST((std::isfinite(count) && count > 0), "equal count: " << count);
  BOOST_TEST(cost == count * (12 * 32'000.0) / (4 * 15'625.0 + 8 * 35'000.0),
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(ratios.count("three_stage_over_monolithic_throughput_capacity_bound") == 0u);
  // Each pool's peak residency by memory tier: the weights (137 GB of llama3-70b in bf16) in
  // the fastest tier, within its capacity (a Gaudi 3 pair's 256 GB, four H200's 564 GB).
  const auto g3_hbm =
      g3.at("tier_peak_resident_gb").at("prefill gaudi3 x2").at("hbm2e").to_number<double>();
  BOOST_TEST((g3_hbm >= 137 && g3_hbm <= 256), g3_hbm);
  const auto mono_hbm =
      mono.at("tier_peak_resident_gb").at("both h200 x4").at("hbm3e").to_number<double>();
  BOOST_TEST((mono_hbm >= 137 && mono_hbm <= 564), mono_hbm);
  const auto met = g3.at("slo_met_sessions_fraction").to_number<double>();
  BOOST_TEST((met >= 0 && met <= 1), met);
  BOOST_TEST(r.html.find("prefill pool, 2 x gaudi3 x2") != std::string::npos);
}

// Per workload: triad-load's computer-use profile, both layouts, on two sessions: every
// session ends, both ratios of the profile are reported.
BOOST_AUTO_TEST_CASE(a_workload_profile_is_compared_in_both_layouts) {
  auto r = run_bench("profile", "--quick --profile-sessions 2 --settings "
                                "profile_computer_use_three_stage,profile_computer_use_monolithic");
  BOOST_REQUIRE_EQUAL(r.status, 0);
  const auto& out = r.out;
  const auto& metrics = out.at("metrics").as_object();
  for (const char* name : {"profile_computer_use_three_stage", "profile_computer_use_monolithic"}) {
    const auto& m = metrics.at(name).as_object();
    BOOST_TEST(m.at("errors").to_number<double>() == 0.0, name);
    // 20-60 steps of 30-100 tokens each, then a closing answer of 50-200: at least 650 tokens.
    BOOST_TEST(m.at("completion_tokens").to_number<double>() >= 2 * 650.0, name);
  }
  const auto& ratios = out.at("ratios").as_object();
  BOOST_TEST(ratios.at("three_stage_over_monolithic_throughput_computer_use").to_number<double>() >
             0.0);
  BOOST_TEST(ratios.count("monolithic_over_three_stage_session_p99_computer_use") == 1u);
}

// Per context length: two code agents in the 8K band in both layouts and two in the 32K band;
// every session ends, each band's planned contexts stay in the range it aims at (4-8K,
// 16-32K), its sessions prefill about their contexts (monolithic: each prompt token once, the
// generated ones not), the band's ratio is reported.
BOOST_AUTO_TEST_CASE(code_agents_are_compared_per_context_length) {
  auto r =
      run_bench("context", "--quick --agent-sessions 2 --settings "
                           "context_8k_three_stage,context_8k_monolithic,context_32k_monolithic");
  BOOST_REQUIRE_EQUAL(r.status, 0);
  const auto& metrics = r.out.at("metrics").as_object();
  for (const char* name :
       {"context_8k_three_stage", "context_8k_monolithic", "context_32k_monolithic"})
    BOOST_TEST(metrics.at(name).as_object().at("errors").to_number<double>() == 0.0, name);
  auto prefilled = [&](const char* name) {
    return metrics.at(name).as_object().at("prefill_tokens").to_number<double>();
  };
  BOOST_TEST(prefilled("context_8k_monolithic") >= 2 * 3'000.0);
  BOOST_TEST(prefilled("context_8k_monolithic") <= 2 * 10'000.0);
  BOOST_TEST(prefilled("context_32k_monolithic") >= 2 * 12'000.0);
  BOOST_TEST(prefilled("context_32k_monolithic") <= 2 * 40'000.0);
  const auto& ratios = r.out.at("ratios").as_object();
  BOOST_TEST(ratios.at("three_stage_over_monolithic_throughput_context_8k").to_number<double>() >
             0.0);
  BOOST_TEST(ratios.count("three_stage_over_monolithic_throughput_context_32k") == 0u);
  for (const char* band : {"8k", "32k"}) {
    const auto& b = metrics.at("contexts").as_object().at("bands").as_object().at(band).as_object();
    const auto& aimed = b.at("aimed_final_context_tokens").as_array();
    const auto& planned = b.at("planned_final_context_tokens").as_object();
    BOOST_TEST(planned.at("min").to_number<double>() >= aimed.at(0).to_number<double>(), band);
    BOOST_TEST(planned.at("max").to_number<double>() <= aimed.at(1).to_number<double>(), band);
  }
}

// Before any run: a long benchmark does not end in an error it could have found at start.
BOOST_AUTO_TEST_CASE(an_unwritable_report_path_is_an_error_naming_it) {
  const auto json_path = std::filesystem::temp_directory_path() / "triad-bench-agentic-test2.json";
  auto r =
      triad::test::run_command(triad::test::binary("triad-bench-agentic") +
                               " --quick --settings datacenter_three_stage "
                               "--datacenter-minutes 1 --json " +
                               json_path.string() + " --html /nonexistent-dir/report.html 2>&1");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.out.find("--html: cannot write /nonexistent-dir/report.html") != std::string::npos,
             r.out);
  std::filesystem::remove(json_path);
}

// The start checks create nothing: a run refused for its JSON path leaves no empty report.
BOOST_AUTO_TEST_CASE(an_unwritable_json_path_is_refused_before_the_report_is_created) {
  const auto html_path = std::filesystem::temp_directory_path() / "triad-bench-agentic-test4.html";
  std::filesystem::remove(html_path);
  auto r = triad::test::run_command(triad::test::binary("triad-bench-agentic") +
                                    " --quick --settings datacenter_three_stage "
                                    "--datacenter-minutes 1 --json /nonexistent-dir/out.json "
                                    "--html " +
                                    html_path.string() + " 2>&1");
  BOOST_TEST(r.status != 0, r.out);
  BOOST_TEST(r.out.find("--json: cannot write /nonexistent-dir/out.json") != std::string::npos,
             r.out);
  BOOST_TEST(!std::filesystem::exists(html_path));
}

BOOST_AUTO_TEST_SUITE_END()
