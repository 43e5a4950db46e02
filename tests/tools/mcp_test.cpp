#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "actors/chat.hpp"
#include "actors/node.hpp"
#include "tests/actors/support.hpp"
#include "tools/mcp.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// The real MCP filesystem server from npm, installed by scripts/test.sh into .cache/mcp (ctest
// passes its script in TRIAD_MCP_FS_SERVER and node in TRIAD_NODE).
std::string server_script() {
  const char* s = std::getenv("TRIAD_MCP_FS_SERVER");
  return s != nullptr ? s : "";
}

struct server_installed {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r{!server_script().empty() && fs::exists(server_script()) &&
                                          std::getenv("TRIAD_NODE") != nullptr};
    r.message() << "the npm package @modelcontextprotocol/server-filesystem is not installed "
                   "(scripts/test.sh installs it into .cache/mcp); MCP tests skipped";
    return r;
  }
};

struct mcp_fixture {
  mcp_fixture() {
    root = fs::temp_directory_path() / ("triad-mcp-" + std::to_string(::getpid()));
    fs::create_directories(root);
    std::ofstream{root / "notes.txt"} << "alpha\nbeta\n";
  }
  ~mcp_fixture() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  triad::mcp_server_config config(std::chrono::milliseconds call_timeout = 15s) {
    triad::mcp_server_config c;
    c.name = "fs";
    c.argv = {std::getenv("TRIAD_NODE"), server_script(), fs::canonical(root).string()};
    c.env = {"PATH=/usr/bin:/bin", "HOME=" + root.string()};
    c.call_timeout = call_timeout;
    // Its sandbox profile: its npm prefix (and node, when not under /usr) read-only, the
    // directory it serves writable.
    auto script = server_script();
    c.read_only = {script.substr(0, script.find("/node_modules/"))};
    std::string node = std::getenv("TRIAD_NODE");
    if (!node.starts_with("/usr/"))
      c.read_only.push_back(fs::path{node}.parent_path().string());
    c.read_write = {fs::canonical(root).string()};
    return c;
  }
  fs::path root;
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(mcp, mcp_fixture, *boost::unit_test::precondition(server_installed{}))

BOOST_AUTO_TEST_CASE(tools_are_listed_and_a_call_round_trips_through_the_registry) {
  auto client = triad::mcp_client::start(config());
  BOOST_REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
  triad::tool_registry registry;
  BOOST_REQUIRE(triad::add_mcp_tools(registry, *client).has_value());
  BOOST_REQUIRE(registry.find("fs__read_text_file") != nullptr);
  BOOST_TEST(registry.list().size() > 3u);
  auto path = (fs::canonical(root) / "notes.txt").string();
  auto out = registry.call("fs__read_text_file", R"({"path": ")" + path + R"("})");
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->content == "alpha\nbeta\n");
  // The server's own schema is enforced before anything is sent.
  BOOST_TEST(!registry.call("fs__read_text_file", R"({"path": 7})"));
  // A path outside its allowed directory is the server's error, passed on.
  auto outside = registry.call("fs__read_text_file", R"({"path": "/etc/shadow"})");
  BOOST_TEST(!outside);
}

BOOST_AUTO_TEST_CASE(the_server_sees_only_its_profile) {
  // A directory of the host outside its profile does not exist in its sandbox: asked to serve
  // one, the server fails to start.
  auto elsewhere =
      fs::temp_directory_path() / ("triad-mcp-elsewhere-" + std::to_string(::getpid()));
  fs::create_directories(elsewhere);
  auto c = config();
  c.argv.back() = fs::canonical(elsewhere).string();
  c.start_timeout = 10s;
  auto client = triad::mcp_client::start(c);
  fs::remove_all(elsewhere);
  BOOST_TEST(!client.has_value());
}

BOOST_AUTO_TEST_CASE(a_server_that_crashes_fails_the_call_and_is_restarted_later) {
  auto client = triad::mcp_client::start(config());
  BOOST_REQUIRE(client.has_value());
  auto path = (fs::canonical(root) / "notes.txt").string();
  json::object args{{"path", path}};
  BOOST_REQUIRE((*client)->call("read_text_file", args).has_value());
  ::kill((*client)->pid(), SIGKILL);  // the sandbox's init: the server goes with its namespace
  std::this_thread::sleep_for(200ms); // which the kernel takes down after the init, not at once
  auto failed = (*client)->call("read_text_file", args);
  BOOST_REQUIRE(!failed);
  // Gone before the request was written ("closed its input") or while it was read ("exited").
  BOOST_TEST((failed.error().message.find("exited") != std::string::npos ||
              failed.error().message.find("closed its input") != std::string::npos),
             failed.error().message);
  // After the backoff the next call starts the server again and succeeds.
  triad::expected<triad::tool_output> again = triad::make_error(triad::errc::busy, "not tried");
  for (int i = 0; i < 40 && !again; ++i) {
    std::this_thread::sleep_for(100ms);
    again = (*client)->call("read_text_file", args);
  }
  BOOST_REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.error().message));
  BOOST_TEST(again->content == "alpha\nbeta\n");
}

BOOST_AUTO_TEST_CASE(a_server_killed_in_the_middle_of_a_call_fails_that_call) {
  // A tree of 20000 files makes search_files take long enough to be interrupted.
  for (int d = 0; d < 100; ++d) {
    auto dir = root / std::string{"d"}.append(std::to_string(d));
    fs::create_directories(dir);
    for (int f = 0; f < 200; ++f)
      std::ofstream{dir / std::string{"f"}.append(std::to_string(f)).append(".txt")};
  }
  auto client = triad::mcp_client::start(config());
  BOOST_REQUIRE(client.has_value());
  json::object args{{"path", fs::canonical(root).string()}, {"pattern", "**/f19*.txt"}};
  auto start = std::chrono::steady_clock::now();
  auto whole = (*client)->call("search_files", args);
  auto took = std::chrono::steady_clock::now() - start;
  BOOST_REQUIRE_MESSAGE(whole.has_value(), (whole ? "" : whole.error().message));
  BOOST_TEST_MESSAGE("an uninterrupted search_files took "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                     << " ms");
  int pid = (*client)->pid();
  std::thread killer([pid, took] {
    std::this_thread::sleep_for(took / 4);
    ::kill(pid, SIGKILL);
  });
  auto interrupted = (*client)->call("search_files", args);
  killer.join();
  BOOST_REQUIRE(!interrupted);
  BOOST_TEST(interrupted.error().message.find("exited") != std::string::npos,
             interrupted.error().message);
}

BOOST_AUTO_TEST_CASE(a_node_configured_with_the_server_hosts_its_tools) {
  auto config = triad::default_config();
  config.topology.bind_threads = false;
  for (auto& d : config.devices)
    d.memory_mib = 256;
  auto server = this->config();
  config.mcp_servers.push_back(
      {"fs", server.argv, server.env, server.read_only, server.read_write});
  auto n = triad::node::start(config, {});
  BOOST_REQUIRE_MESSAGE(n.has_value(), (n ? "" : n.error().message));
  triad::chat_request r;
  r.messages = {{"user", "Read the notes."}};
  triad::generation_script s;
  auto path = (fs::canonical(root) / "notes.txt").string();
  s.turns.push_back(
      {2, triad::tool_call_text{"fs__read_text_file", R"({"path": ")" + path + R"("})"}});
  s.turns.push_back({2, std::nullopt});
  r.max_tokens = triad::script_length(s);
  r.script = s;
  triad::test::recorder rec;
  (*n)->submit(std::move(r), rec.callback());
  const auto& end = rec.wait(); // before the check: its message must not read events early
  BOOST_REQUIRE_MESSAGE(end.kind == triad::request_event::done, end.message);
  std::string result;
  for (const auto& e : rec.events)
    if (e.kind == triad::request_event::tool_result)
      result = e.tool_output;
  BOOST_TEST(result == "alpha\nbeta\n");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mcp_start)

BOOST_AUTO_TEST_CASE(a_server_that_never_answers_fails_to_start_with_a_timeout) {
  triad::mcp_server_config c;
  c.name = "mute";
  c.argv = {"/bin/sleep", "1000"};
  c.start_timeout = 500ms;
  auto client = triad::mcp_client::start(c);
  BOOST_REQUIRE(!client);
  BOOST_TEST(client.error().message.find("did not initialize") != std::string::npos);
  BOOST_TEST(client.error().message.find("500 ms") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_relative_program_is_refused) {
  triad::mcp_server_config c;
  c.name = "rel";
  c.argv = {"node"};
  auto client = triad::mcp_client::start(c);
  BOOST_REQUIRE(!client);
  BOOST_TEST(client.error().message.find("absolute") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
