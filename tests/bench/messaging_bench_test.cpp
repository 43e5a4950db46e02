#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/process.hpp"

namespace json = boost::json;

BOOST_AUTO_TEST_SUITE(bench_messaging)

// The benchmark's JSON carries the names the issue gives; values are finite and positive.
// Timings are not asserted (this machine is shared and noisy); homed executions off home are.
BOOST_AUTO_TEST_CASE(quick_run_writes_metrics_and_ratios) {
  auto path = std::filesystem::temp_directory_path() / "triad-bench-messaging-test.json";
  auto r = triad::test::run_command(triad::test::binary("triad-bench-messaging") +
                                    " --quick --json " + path.string());
  BOOST_REQUIRE_EQUAL(r.status, 0);
  std::ifstream file{path};
  std::stringstream text;
  text << file.rdbuf();
  auto out = json::parse(text.str()).as_object();
  const auto& ratios = out.at("ratios").as_object();
  for (const char* name :
       {"homed_over_raw_throughput", "cross_over_local_rtt", "bridge_over_raw_throughput"}) {
    BOOST_TEST_REQUIRE(ratios.contains(name), name);
    auto v = ratios.at(name).to_number<double>();
    BOOST_TEST((std::isfinite(v) && v > 0), name << " = " << v);
  }
  const auto& metrics = out.at("metrics").as_object();
  for (const char* name :
       {"raw_throughput_msgs_per_s", "homed_throughput_msgs_per_s", "bridge_throughput_msgs_per_s",
        "raw_rtt_us", "homed_rtt_us", "cross_domain_rtt_us"})
    BOOST_TEST(metrics.at(name).to_number<double>() > 0, name);
  BOOST_TEST(metrics.at("off_home_executions").to_number<std::int64_t>() == 0);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
