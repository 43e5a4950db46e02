#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/process.hpp"

namespace json = boost::json;

// triad-bench-cluster --quick: a 1024-token sequence's KV (64 pages of 2 MiB) crosses to another
// process over UCX shared memory and TCP, every page checked; a load runs with the decode device
// in the node's process and in another; a decode node is killed under load. The JSON has every
// ratio and the figures they come from (their size is this machine's, not asserted), and no
// request was left hanging (the figure the failover measures, asserted).
BOOST_AUTO_TEST_CASE(the_cluster_bench_reports_the_kv_transfer_and_node_ratios) {
  const auto path = std::filesystem::temp_directory_path() / "triad-bench-cluster-test.json";
  auto r = triad::test::run_command(triad::test::binary("triad-bench-cluster") +
                                    " --quick --json " + path.string());
  BOOST_REQUIRE_EQUAL(r.status, 0);
  std::ifstream file{path};
  std::stringstream text;
  text << file.rdbuf();
  std::filesystem::remove(path);
  auto out = json::parse(text.str()).as_object();
  const auto& metrics = out.at("metrics").as_object();
  BOOST_TEST(metrics.at("pages").to_number<double>() == 64.0);
  BOOST_TEST(metrics.at("transfer_bytes").to_number<double>() == 64.0 * 2097152);
  for (const char* name : {"memcpy_gb_per_s", "ucx_shared_memory_gb_per_s", "ucx_tcp_gb_per_s"})
    BOOST_TEST(metrics.at(name).to_number<double>() > 0.0, name);
  const auto& ratios = out.at("ratios").as_object();
  BOOST_TEST(ratios.at("ucx_transfer_over_memcpy").to_number<double>() > 0.0);
  BOOST_TEST(ratios.at("ucx_tcp_transfer_over_memcpy").to_number<double>() > 0.0);
  BOOST_TEST(ratios.at("remote_over_local_decode_throughput").to_number<double>() > 0.0);
  BOOST_TEST(ratios.at("remote_over_local_decode_throughput_cpu").to_number<double>() > 0.0);
  BOOST_TEST(ratios.at("split_over_local_decode_throughput_cpu").to_number<double>() > 0.0);
  // The prefill node's pages reached the decode node: every token it computed was attached
  // (and any its prefix cache gave).
  BOOST_TEST(metrics.at("split_kv_handoff_tokens_cpu").to_number<double>() > 0.0);
  BOOST_TEST(metrics.at("split_kv_handoff_tokens_cpu").to_number<double>() >=
             metrics.at("split_prefilled_tokens_cpu").to_number<double>());
  BOOST_TEST(metrics.at("split_kv_wire_fetch_failures_cpu").to_number<double>() == 0.0);
  BOOST_TEST(ratios.at("failover_lost_requests").to_number<double>() == 0.0);
  BOOST_TEST(metrics.at("failover_sequences_on_killed_node").to_number<double>() >= 1.0);
  BOOST_TEST(metrics.at("failover_completed").to_number<double>() +
                 metrics.at("failover_failed").to_number<double>() ==
             metrics.at("failover_requests").to_number<double>());
}
