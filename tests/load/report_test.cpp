#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <boost/test/unit_test.hpp>

#include "load/report.hpp"
#include "load/runner.hpp"

using namespace triad::load;

namespace {

// A node's trace of request 7: its root span and two stages on its own track, a device job and
// a tool call on theirs.
const char* trace_of_7 =
    R"({"displayTimeUnit":"ms","otherData":{"request":7,"spans":5,"truncated":false},"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"domain0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"request 7"}},
{"name":"thread_name","ph":"M","pid":2,"tid":1,"args":{"name":"driver"}},
{"name":"prefill","cat":"request","ph":"X","pid":1,"tid":3,"ts":1000.000,"dur":2000.000},
{"name":"decode","cat":"request","ph":"X","pid":1,"tid":3,"ts":3000.000,"dur":5000.000},
{"name":"steps","cat":"device","ph":"X","pid":2,"tid":1,"ts":3100.000,"dur":400.000,"args":{"requests":"7"}},
{"name":"tool nap","cat":"tool","ph":"X","pid":3,"tid":2,"ts":5000.000,"dur":100.000,"args":{"request":7,"ok":true}},
{"name":"request","cat":"request","ph":"X","pid":1,"tid":3,"ts":999.999,"dur":7000.001}
]})";

} // namespace

BOOST_AUTO_TEST_SUITE(report)

BOOST_AUTO_TEST_CASE(a_requests_trace_reads_into_its_stages_from_its_start) {
  sampled_trace t;
  t.request_id = "7";
  std::string error;
  BOOST_REQUIRE_MESSAGE(read_trace(trace_of_7, t, error), error);
  BOOST_TEST(t.spans == 5u);
  BOOST_TEST(t.device_spans == 1u);
  BOOST_TEST(t.tool_spans == 1u);
  BOOST_TEST(t.request_ms == 7.0, boost::test_tools::tolerance(1e-6));
  BOOST_REQUIRE_EQUAL(t.stages.size(), 2u);
  BOOST_TEST(t.stages[0].name == "prefill");
  BOOST_TEST(t.stages[0].start_ms == 0.0, boost::test_tools::tolerance(1e-3));
  BOOST_TEST(t.stages[1].start_ms == 2.0, boost::test_tools::tolerance(1e-3));
}

BOOST_AUTO_TEST_CASE(a_trace_without_the_requests_root_span_is_an_error) {
  sampled_trace t;
  t.request_id = "8"; // the document is request 7's
  std::string error;
  BOOST_TEST(!read_trace(trace_of_7, t, error));
  BOOST_TEST(error == "the trace of request 8 has no span of the whole request");
  sampled_trace u;
  u.request_id = "7";
  BOOST_TEST(!read_trace("<html>proxy error</html>", u, error));
  BOOST_TEST(error == "the trace of request 7 is not a trace-event document");
}

BOOST_AUTO_TEST_CASE(sampled_traces_are_linked_and_their_text_escaped) {
  auto dir =
      std::filesystem::temp_directory_path() / ("triad-report-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  sampled_trace linked;
  linked.request_id = "7";
  std::string error;
  BOOST_REQUIRE(read_trace(trace_of_7, linked, error));
  linked.file = "it's #1-traces/job0-turn0-call0-request7.json";
  sampled_trace missing;
  missing.error = "<b>no</b> trace: 'gone'";
  run_result r;
  summary s;
  BOOST_REQUIRE(write_html(r, s, "t", dir / "r.html", error, {linked, missing}));
  std::ifstream in{dir / "r.html"};
  std::string html{std::istreambuf_iterator<char>{in}, {}};
  std::filesystem::remove_all(dir);
  BOOST_TEST(html.find("href='./it%27s%20%231-traces/job0-turn0-call0-request7.json'") !=
             std::string::npos);
  BOOST_TEST(html.find("&lt;b&gt;no&lt;/b&gt; trace: &#39;gone&#39;") != std::string::npos);
  BOOST_TEST(html.find("<b>no</b>") == std::string::npos);
  BOOST_TEST(html.find("(1 device, 1 tool)") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
