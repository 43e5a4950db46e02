#include <sstream>

#include <boost/test/unit_test.hpp>

#include "load/trace.hpp"
#include "load/workload.hpp"

using namespace triad::load;

BOOST_AUTO_TEST_SUITE(trace_replay)

BOOST_AUTO_TEST_CASE(mooncake_lines_parse_and_bad_ones_are_reported_counted_and_skipped) {
  std::istringstream in{
      R"({"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]})"
      "\n"
      R"({"timestamp": 27482, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]})"
      "\n"
      "\n"
      "not json\n"
      R"({"timestamp": -5, "input_length": 10, "output_length": 1})"
      "\n"
      R"({"timestamp": 9, "input_length": 0, "output_length": 1})"
      "\n"
      R"({"timestamp": 9, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]})"
      "\n"
      R"({"timestamp": 9, "input_length": 10, "output_length": 1, "hash_ids": ["a"]})"
      "\n"
      R"([1, 2])"
      "\n"
      R"({"timestamp": 30000.5, "input_length": 8, "output_length": 2})"
      "\n"};
  auto t = parse_mooncake(in);
  BOOST_TEST(t.lines == 9u);
  BOOST_REQUIRE(t.entries.size() == 3u);
  BOOST_TEST(t.entries[1].timestamp_ms == 27482.0);
  BOOST_TEST(t.entries[1].input_length == 600u);
  BOOST_TEST((t.entries[1].hash_ids == std::vector<std::uint64_t>{0, 2}));
  BOOST_TEST(t.entries[2].hash_ids.empty());
  BOOST_TEST(t.entries[2].line == 10u);
  BOOST_REQUIRE(t.problems.size() == 6u);
  BOOST_TEST(t.problems[0].line == 4u);
  BOOST_TEST(t.problems[0].reason.find("not valid JSON") == 0u);
  BOOST_TEST(t.problems[1].reason.find("timestamp") == 0u);
  BOOST_TEST(t.problems[2].reason.find("input_length") == 0u);
  BOOST_TEST(t.problems[3].reason.find("2 ids for input_length 10") != std::string::npos);
  BOOST_TEST(t.problems[4].reason.find("hash_ids") == 0u);
  BOOST_TEST(t.problems[5].reason.find("expected a JSON object") == 0u);
}

BOOST_AUTO_TEST_CASE(equal_hash_ids_give_equal_prompt_prefixes) {
  trace_entry a{0, 1200, 5, {7, 8, 9}, 1}, b{0, 1100, 5, {7, 8, 4}, 2};
  auto pa = trace_prompt(a, 0), pb = trace_prompt(b, 1);
  BOOST_TEST(pa.size() == 1200u);
  BOOST_TEST(pb.size() == 1100u);
  BOOST_TEST(pa.substr(0, 1024) == pb.substr(0, 1024));   // blocks 7 and 8
  BOOST_TEST(pa.substr(1024, 76) != pb.substr(1024, 76)); // block 9 vs 4
  BOOST_TEST(trace_prompt(a, 0) == pa);
}

BOOST_AUTO_TEST_CASE(a_missing_trace_file_is_an_error_naming_it) {
  auto t = read_mooncake("/nonexistent/trace.jsonl");
  BOOST_REQUIRE(!t.has_value());
  BOOST_TEST(t.error().message.find("/nonexistent/trace.jsonl") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(trace_jobs_arrive_at_the_trace_times_scaled_by_the_speed) {
  std::istringstream in{R"({"timestamp": 0, "input_length": 4, "output_length": 2})"
                        "\n"
                        R"({"timestamp": 1500, "input_length": 4, "output_length": 3})"
                        "\n"};
  auto t = parse_mooncake(in);
  workload_options w;
  w.kind = workload_options::trace_replay;
  auto jobs = plan_jobs(w, 0, 1, &t, 3.0);
  BOOST_REQUIRE(jobs.size() == 2u);
  BOOST_TEST(jobs[1].arrival_s == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(jobs[1].turns[0].calls[0].tokens == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
