#include "runtime/trace.hpp"
#include "tests/scratch_file.hpp"

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

namespace json = boost::json;

// A trace file's path of its own, removed at the end of the test.
struct scratch_file : triad::test::scratch_file {
  scratch_file()
      : triad::test::scratch_file{"triad-trace-test"} {}
  json::object read() const {
    std::ifstream in{path};
    return json::parse(std::string{std::istreambuf_iterator<char>{in}, {}}).as_object();
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(trace)

BOOST_AUTO_TEST_CASE(a_log_with_no_span_is_an_empty_trace_document) {
  scratch_file f;
  { BOOST_REQUIRE(triad::trace_log::open(f.path)); }
  BOOST_TEST(f.read().at("traceEvents").as_array().empty());
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_written_is_an_error_naming_it) {
  auto log = triad::trace_log::open("/nonexistent-dir/t.json");
  BOOST_REQUIRE(!log);
  BOOST_TEST(log.error().message.find("/nonexistent-dir/t.json") != std::string::npos,
             log.error().message);
}

BOOST_AUTO_TEST_CASE(a_write_that_fails_is_reported_naming_the_file) {
  // /dev/full opens, and every write to it fails with ENOSPC, as on a full disk.
  if (!std::filesystem::exists("/dev/full")) {
    BOOST_TEST_MESSAGE("NOT RUN: this machine has no /dev/full to fill");
    return;
  }
  auto log = triad::trace_log::open("/dev/full");
  BOOST_REQUIRE(log);
  BOOST_TEST(!(*log)->write_error());
  const auto track = (*log)->track("domain0", "writer");
  const auto now = triad::trace_log::clock_type::now();
  for (int i = 0; i < 4000; ++i) // past what a shard holds before it goes to the file
    (*log)->add(track, "span", "test", now, std::chrono::microseconds{1}, "\"n\":1");
  (*log)->flush();
  const auto error = (*log)->write_error();
  BOOST_REQUIRE(error.has_value());
  BOOST_TEST(error->find("/dev/full") != std::string::npos, *error);
  BOOST_TEST(error->find("No space left on device") != std::string::npos, *error);
}

BOOST_AUTO_TEST_CASE(spans_from_many_threads_at_once_are_each_in_the_file_once_on_named_tracks) {
  // More threads than the log has shards, each writing more than a shard holds before it goes
  // to the file.
  constexpr int threads = 12, per_thread = 3000;
  scratch_file f;
  {
    auto log = triad::trace_log::open(f.path);
    BOOST_REQUIRE(log);
    std::vector<std::thread> writers;
    for (int t = 0; t < threads; ++t)
      writers.emplace_back([&log, t] {
        const auto track = (*log)->new_track("domain0", "writer " + std::to_string(t));
        for (int i = 0; i < per_thread; ++i) {
          std::string args = "\"writer\":" + std::to_string(t) + ",\"i\":" + std::to_string(i);
          (*log)->add(track, "span", "test", triad::trace_log::clock_type::now(),
                      std::chrono::microseconds{1}, args);
        }
      });
    for (auto& w : writers)
      w.join();
    BOOST_TEST((*log)->spans() == std::uint64_t{threads * per_thread});
  } // closed: one JSON document
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> names;
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  std::size_t spans = 0;
  const auto doc = f.read();
  for (const auto& v : doc.at("traceEvents").as_array())
    if (v.at("ph") == "M" && v.at("name") == "thread_name")
      names[{v.at("pid").as_int64(), v.at("tid").as_int64()}] = v.at("args").at("name").as_string();
  for (const auto& v : doc.at("traceEvents").as_array()) {
    if (v.at("ph") != "X")
      continue;
    ++spans;
    const auto writer = v.at("args").at("writer").as_int64();
    const bool once = seen.insert({writer, v.at("args").at("i").as_int64()}).second;
    BOOST_TEST(once);
    const std::pair track{v.at("pid").as_int64(), v.at("tid").as_int64()};
    BOOST_TEST(names[track] == "writer " + std::to_string(writer));
  }
  BOOST_TEST(spans == std::size_t{threads * per_thread});
}

BOOST_AUTO_TEST_CASE(a_kept_request_trace_holds_its_spans_and_tracks_and_no_others) {
  scratch_file f;
  auto log = triad::trace_log::open(f.path);
  BOOST_REQUIRE(log);
  (*log)->keep(7, 4);
  const std::uint64_t seven = 7, eight = 8;
  const auto mine = (*log)->new_track("domain0", "request 7", 7);
  const auto other = (*log)->new_track("domain0", "request 8", 0);
  const auto device = (*log)->track("device d0", "driver");
  const auto now = triad::trace_log::clock_type::now();
  std::thread writer{[&] { // from another thread (another shard) too
    (*log)->add(mine, "queue", "request", now, std::chrono::microseconds{5}, {}, {&seven, 1});
  }};
  writer.join();
  (*log)->add(mine, "request", "request", now, std::chrono::microseconds{9}, {}, {&seven, 1});
  (*log)->add(other, "request", "request", now, std::chrono::microseconds{9}, {}, {&eight, 1});
  const std::uint64_t both[] = {7, 8};
  (*log)->add(device, "step", "device", now, std::chrono::microseconds{3}, "\"requests\":\"7,8\"",
              both);
  auto kept = (*log)->trace_of(7);
  BOOST_REQUIRE(kept);
  BOOST_TEST(!(*log)->trace_of(8)); // it did not ask
  const auto doc = json::parse(*kept).as_object();
  BOOST_TEST(doc.at("otherData").at("spans").as_int64() == 3);
  std::multiset<std::string> spans;
  std::set<std::string> tracks;
  for (const auto& v : doc.at("traceEvents").as_array()) {
    if (v.at("ph") == "X")
      spans.insert(std::string{v.at("name").as_string()});
    else if (v.at("name") == "thread_name")
      tracks.insert(std::string{v.at("args").at("name").as_string()});
  }
  BOOST_TEST((spans == std::multiset<std::string>{"queue", "request", "step"}));
  BOOST_TEST((tracks == std::set<std::string>{"request 7", "driver"}));
}

BOOST_AUTO_TEST_SUITE_END()
