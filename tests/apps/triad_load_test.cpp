#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/process.hpp"

namespace json = boost::json;
using triad::test::binary;
using triad::test::run_command;

namespace {

// A scratch directory with a node config of zero-time sim devices (a node that answers at
// once) and a small Mooncake trace with one bad line.
struct scratch {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("triad-load-cli-" + std::to_string(::getpid()));
  scratch() {
    std::filesystem::create_directories(dir);
    std::ofstream{dir / "node.toml"} << "[topology]\nbind_threads = false\n"
                                        "[[devices]]\nname = \"prefill0\"\nbackend = \"sim\"\n"
                                        "role = \"prefill\"\ntime_scale = 0\n"
                                        "[[devices]]\nname = \"decode0\"\nbackend = \"sim\"\n"
                                        "role = \"decode\"\ntime_scale = 0\n";
    // The same node, hosting the sandboxed shell (an operator's choice: nothing is hosted by
    // default).
    std::ofstream{dir / "tools.toml"} << "[tools]\nhosted = [\"shell\"]\n"
                                         "[topology]\nbind_threads = false\n"
                                         "[[devices]]\nname = \"prefill0\"\nbackend = \"sim\"\n"
                                         "role = \"prefill\"\ntime_scale = 0\n"
                                         "[[devices]]\nname = \"decode0\"\nbackend = \"sim\"\n"
                                         "role = \"decode\"\ntime_scale = 0\n";
    std::ofstream{dir / "trace.jsonl"}
        << R"({"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [1, 2]})"
           "\n"
           R"({"timestamp": 50, "input_length": 600, "output_length": 3, "hash_ids": [1, 3]})"
           "\n"
           "{broken\n"
           R"({"timestamp": 100, "input_length": 40, "output_length": 2})"
           "\n";
  }
  ~scratch() { std::filesystem::remove_all(dir); }
  std::string path(const char* name) const { return (dir / name).string(); }
  // triad-load on an in-process node of `config` (a file of the scratch) with `args`, its
  // summary to run.json, stderr with stdout.
  triad::test::process_result inproc(const char* config, const std::string& args) const {
    return run_command(binary("triad-load") + " --inproc " + path(config) + " " + args +
                       " --json " + path("run.json") + " 2>&1");
  }
};

std::string slurp(const std::string& path) {
  std::ifstream f{path};
  return {std::istreambuf_iterator<char>{f}, {}};
}

} // namespace

BOOST_AUTO_TEST_SUITE(triad_load)

BOOST_AUTO_TEST_CASE(a_trace_replays_on_an_inproc_node_and_every_output_is_written) {
  scratch s;
  auto r = run_command(binary("triad-load") + " --inproc " + s.path("node.toml") +
                       " --workload trace --trace " + s.path("trace.jsonl") +
                       " --trace-speed 2 --json " + s.path("run.json") + " --jsonl " +
                       s.path("calls.jsonl") + " --csv " + s.path("calls.csv") + " --html " +
                       s.path("report.html") + " 2>" + s.path("stderr.txt"));
  BOOST_REQUIRE_EQUAL(r.status, 0);
  BOOST_TEST(r.out.find("calls 3 (ok 3)") != std::string::npos, r.out);
  auto err = slurp(s.path("stderr.txt"));
  BOOST_TEST(err.find("trace.jsonl:3: skipped: not valid JSON") != std::string::npos, err);
  BOOST_TEST(err.find("3 requests, 1 bad lines skipped") != std::string::npos, err);
  auto run = json::parse(slurp(s.path("run.json"))).as_object();
  BOOST_TEST(run.at("metrics").at("calls_ok").as_int64() == 3);
  BOOST_TEST(run.at("metrics").at("mode").as_string() == "open trace");
  BOOST_TEST(run.at("trace").at("bad_lines").as_int64() == 1);
  BOOST_TEST(slurp(s.path("report.html")).find("<svg") != std::string::npos);
  BOOST_TEST(slurp(s.path("calls.csv")).find("job,turn,call,session") == 0u);
}

BOOST_AUTO_TEST_CASE(a_rate_sweep_reports_one_phase_per_rate) {
  scratch s;
  auto r =
      s.inproc("node.toml", "--sweep 50,100 --requests 10 --input-tokens 32 --output-tokens 4");
  BOOST_REQUIRE_EQUAL(r.status, 0);
  auto phases = json::parse(slurp(s.path("run.json"))).at("sweep").as_array();
  BOOST_REQUIRE(phases.size() == 2u);
  BOOST_TEST(phases[0].at("mode").as_string() == "open poisson:50");
  BOOST_TEST(phases[1].at("mode").as_string() == "open poisson:100");
  BOOST_TEST(phases[1].at("calls_ok").as_int64() == 10);
}

BOOST_AUTO_TEST_CASE(
    agent_sessions_call_a_tool_the_node_hosts_and_the_summary_says_where_kv_waited) {
  scratch s;
  auto r = s.inproc("tools.toml",
                    "--workload agent --requests 2 --concurrency 2 --turns 1 --tool-calls "
                    "fixed:2 --output-tokens fixed:4 --hosted-tool shell --hosted-tool-args "
                    "'{\"command\": \"echo ran\"}'");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  // One request per session (the node ran both calls of its turn itself).
  BOOST_TEST(r.out.find("calls 2 (ok 2)") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("server-side tool calls 4: KV kept on the device across") !=
                 std::string::npos,
             r.out);
  auto m = json::parse(slurp(s.path("run.json"))).at("metrics").as_object();
  BOOST_TEST(m.at("server_tool_calls").as_int64() == 4);
  BOOST_TEST(m.at("kv_kept_calls").as_int64() + m.at("kv_stored_calls").as_int64() == 4);
}

BOOST_AUTO_TEST_CASE(sampled_calls_traces_are_written_beside_the_report_and_linked_from_it) {
  scratch s;
  auto r = run_command(binary("triad-load") + " --inproc " + s.path("node.toml") +
                       " --requests 6 --concurrency 2 --input-tokens 64 --output-tokens 4"
                       " --sample-traces 0.5 --seed 3 --html " +
                       s.path("report.html") + " --jsonl " + s.path("calls.jsonl") + " --csv " +
                       s.path("calls.csv") + " 2>&1");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  auto report = slurp(s.path("report.html"));
  BOOST_TEST(report.find("Sampled request traces") != std::string::npos);
  // Every linked trace is there, a trace-event document of that request with its stages.
  std::size_t links = 0;
  for (auto at = report.find("<a href='./report-traces/"); at != std::string::npos;
       at = report.find("<a href='./report-traces/", at + 1)) {
    auto end = report.find('\'', at + 9);
    auto file = s.dir / report.substr(at + 9, end - at - 9);
    BOOST_REQUIRE_MESSAGE(std::filesystem::exists(file), file);
    auto doc = json::parse(slurp(file.string())).as_object();
    BOOST_TEST(doc.at("otherData").at("spans").as_int64() > 3);
    BOOST_TEST(slurp(file.string()).find("\"name\":\"prefill\"") != std::string::npos);
    ++links;
  }
  // About half of the six calls asked (the draw is the seed's), and each came back.
  BOOST_TEST(links >= 1u);
  BOOST_TEST(links <= 5u);
  BOOST_TEST(r.out.find(std::to_string(links) + " of " + std::to_string(links) +
                        " sampled calls' traces written") != std::string::npos,
             r.out);
  // The in-process node traced exactly those calls (to its own file, closed when it stopped).
  std::set<std::string> linked, traced;
  for (auto at = report.find("-request"); at != std::string::npos;
       at = report.find("-request", at + 1))
    linked.insert(report.substr(at + 8, report.find(".json", at) - at - 8));
  auto node_trace = json::parse(slurp((s.dir / "report-traces" / "node-trace.json").string()));
  for (const auto& e : node_trace.at("traceEvents").as_array())
    if (e.at("name") == "thread_name") {
      const std::string track{e.at("args").at("name").as_string()};
      if (track.rfind("request ", 0) == 0) // "request <id>" and "request <id> messages"
        traced.insert(track.substr(8, track.find(' ', 8) - 8));
    }
  BOOST_TEST(linked.size() == links);
  BOOST_TEST((traced == linked));
  // The per-call outputs name them too: a sampled call's request id, the others' none.
  std::set<std::string> listed;
  std::istringstream lines{slurp(s.path("calls.jsonl"))};
  for (std::string line; std::getline(lines, line);) {
    const auto call = json::parse(line).as_object();
    if (call.contains("traced"))
      listed.insert(std::string{call.at("request_id").as_string()});
    else
      BOOST_TEST(!call.contains("request_id"));
  }
  BOOST_TEST((listed == linked));
  const auto csv = slurp(s.path("calls.csv"));
  BOOST_TEST(csv.substr(0, csv.find('\n')).ends_with(",traced,request_id"));
  for (const auto& id : linked)
    BOOST_TEST(csv.find(",1," + id + "\n") != std::string::npos, id);
}

// A profile's sessions with some of its figures overridden: one computer-use session of two
// steps with short screenshots, on a zero-time node.
BOOST_AUTO_TEST_CASE(a_workload_profile_runs_with_the_options_given_beside_it_overriding_it) {
  scratch s;
  auto r = s.inproc("node.toml",
                    "--profile computer-use --requests 1 --concurrency 1 --tool-calls fixed:2 "
                    "--tool-result-tokens fixed:40 --system-tokens 64 --user-tokens fixed:20 "
                    "--output-tokens fixed:4 --call-tokens fixed:4 --tool-ms fixed:1");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  BOOST_TEST(r.out.find("workload agent (profile computer-use)") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("calls 3 (ok 3)") != std::string::npos, r.out);
  auto out = json::parse(slurp(s.path("run.json"))).as_object();
  BOOST_TEST(out.at("profile").as_string() == "computer-use");
}

BOOST_AUTO_TEST_CASE(bad_options_and_unreachable_servers_are_clear_errors) {
  auto chat_hosted =
      run_command(binary("triad-load") + " --url http://127.0.0.1:1/v1 --hosted-tool shell 2>&1");
  BOOST_TEST(chat_hosted.status == 2);
  BOOST_TEST(chat_hosted.out.find("--hosted-tool shell: only for --workload agent") !=
                 std::string::npos,
             chat_hosted.out);
  auto bad_args = run_command(binary("triad-load") +
                              " --url http://127.0.0.1:1/v1 --workload agent --hosted-tool shell "
                              "--hosted-tool-args '[1]' 2>&1");
  BOOST_TEST(bad_args.status == 2);
  BOOST_TEST(bad_args.out.find("--hosted-tool-args [1]: not a JSON object") != std::string::npos,
             bad_args.out);
  auto bad_arrival =
      run_command(binary("triad-load") + " --url http://127.0.0.1:1/v1 --arrival burst:3 2>&1");
  BOOST_TEST(bad_arrival.status == 2);
  BOOST_TEST(bad_arrival.out.find("arrival 'burst:3': unknown process") != std::string::npos,
             bad_arrival.out);
  auto unreachable = run_command(binary("triad-load") + " --url http://127.0.0.1:1/v1 2>&1");
  BOOST_TEST(unreachable.status == 2);
  BOOST_TEST(unreachable.out.find("--url http://127.0.0.1:1/v1: cannot connect") !=
                 std::string::npos,
             unreachable.out);
  auto no_trace = run_command(binary("triad-load") + " --url http://x/v1 --workload trace 2>&1");
  BOOST_TEST(no_trace.status == 2);
  BOOST_TEST(no_trace.out.find("--workload trace needs --trace FILE") != std::string::npos);
  auto traces_nowhere =
      run_command(binary("triad-load") + " --url http://127.0.0.1:1/v1 --sample-traces 0.1 2>&1");
  BOOST_TEST(traces_nowhere.status == 2);
  BOOST_TEST(traces_nowhere.out.find("--sample-traces: the traces are written beside the --html "
                                     "report") != std::string::npos,
             traces_nowhere.out);
  auto bad_dist =
      run_command(binary("triad-load") + " --url http://127.0.0.1:1/v1 --turns uniform:5:1 2>&1");
  BOOST_TEST(bad_dist.out.find("--turns 'uniform:5:1'") != std::string::npos, bad_dist.out);
  auto bad_profile =
      run_command(binary("triad-load") + " --url http://127.0.0.1:1/v1 --profile video 2>&1");
  BOOST_TEST(bad_profile.status == 2);
  BOOST_TEST(bad_profile.out.find("--profile: unknown workload profile 'video'; allowed: chat, "
                                  "code-agent, web, computer-use") != std::string::npos,
             bad_profile.out);
  auto profile_trace = run_command(
      binary("triad-load") + " --url http://127.0.0.1:1/v1 --profile web --workload trace 2>&1");
  BOOST_TEST(profile_trace.status == 2);
  BOOST_TEST(
      profile_trace.out.find("--profile web: profiles are agent sessions; drop --workload trace") !=
          std::string::npos,
      profile_trace.out);
}

BOOST_AUTO_TEST_SUITE_END()
