#include <chrono>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include "tools/builtin.hpp"

namespace fs = std::filesystem;

namespace {

struct tools_fixture {
  tools_fixture() {
    base = fs::temp_directory_path() / ("triad-builtin-" + std::to_string(::getpid()));
    fs::create_directories(base / "workspace" / "src");
    fs::create_directories(base / "work");
    std::ofstream{base / "workspace" / "src" / "notes.txt"} << "one\ntwo\nthree\nfour\n";
    fs::create_symlink("/etc/shadow", base / "workspace" / "shadow-link");
    fs::create_symlink("../../etc/passwd", base / "workspace" / "src" / "up-link");
    BOOST_REQUIRE(triad::add_file_read_tool(registry, base / "workspace").has_value());
    BOOST_REQUIRE(triad::add_shell_tool(registry).has_value());
    BOOST_REQUIRE(triad::add_compile_tool(registry).has_value());
  }
  ~tools_fixture() {
    std::error_code ec;
    fs::remove_all(base, ec);
  }
  std::string refused(const std::string& tool, const std::string& args) {
    auto out = registry.call(tool, args);
    BOOST_REQUIRE_MESSAGE(!out, "expected a refusal, got: " << (out ? out->content : ""));
    return out.error().message;
  }
  fs::path base;
  triad::tool_registry registry;
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(builtin_tools, tools_fixture)

BOOST_AUTO_TEST_CASE(file_read_returns_a_line_range) {
  auto out =
      registry.call("file_read", R"({"path": "src/notes.txt", "start_line": 2, "end_line": 3})");
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->content == "two\nthree\n");
  BOOST_TEST(out->details.at("lines").as_int64() == 4);
}

BOOST_AUTO_TEST_CASE(file_read_refuses_every_way_out_of_the_workspace) {
  BOOST_TEST(refused("file_read", R"({"path": "/etc/shadow"})").find("absolute") !=
             std::string::npos);
  BOOST_TEST(refused("file_read", R"({"path": "../../../../etc/shadow"})").find("outside") !=
             std::string::npos);
  BOOST_TEST(!registry.call("file_read", R"({"path": "shadow-link"})"));
  BOOST_TEST(!registry.call("file_read", R"({"path": "src/up-link"})"));
  BOOST_TEST(refused("file_read", R"({"path": "src/missing.txt"})").find("No such file") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(file_read_of_a_fifo_or_directory_is_refused_at_once) {
  // A FIFO without a writer would block a blocking open (and the tool worker) forever.
  auto fifo = base / "workspace" / "pipe";
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto start = std::chrono::steady_clock::now();
  BOOST_TEST(refused("file_read", R"({"path": "pipe"})").find("a FIFO") != std::string::npos);
  BOOST_TEST(refused("file_read", R"({"path": "src"})").find("a directory") != std::string::npos);
  BOOST_TEST_MESSAGE(
      "refused in "
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s");
}

BOOST_AUTO_TEST_CASE(shell_runs_in_the_sandbox) {
  auto out = registry.call("shell", R"({"command": "echo hi; id -u; ls /tmp"})");
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->details.at("stdout").as_string().starts_with("hi\n"));
  BOOST_TEST(out->details.at("exit_code").as_int64() == 0);
  BOOST_TEST(out->content.find("[exit 0]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(compile_reports_structured_diagnostics) {
  auto out = registry.call("compile", R"({"language": "c++", "flags": ["-std=c++17", "-Wall"],
    "source": "#include <vector>\nint f() { int unused = 1; return 0; }\nint main() {\n  return undefined_name;\n}\n"})");
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(!out->details.at("success").as_bool());
  const auto& diags = out->details.at("diagnostics").as_array();
  BOOST_REQUIRE_MESSAGE(diags.size() >= 2u, boost::json::serialize(out->details));
  bool error_seen = false, warning_seen = false;
  for (const auto& d : diags) {
    if (d.at("severity").as_string() == "error") {
      error_seen = true;
      BOOST_TEST(d.at("line").as_int64() == 4);
      BOOST_TEST(d.at("column").as_int64() == 10);
      BOOST_TEST(d.at("message").as_string().find("undefined_name") != std::string::npos);
    }
    warning_seen = warning_seen || d.at("severity").as_string() == "warning";
  }
  BOOST_TEST(error_seen);
  BOOST_TEST(warning_seen);
}

BOOST_AUTO_TEST_CASE(compile_builds_an_object_from_valid_c) {
  auto out = registry.call("compile", R"({"language": "c", "mode": "object", "flags": ["-O2"],
    "source": "int add(int a, int b) { return a + b; }\n"})");
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->details.at("success").as_bool(), out->content);
  BOOST_TEST(out->details.at("object_bytes").as_uint64() > 0u);
}

BOOST_AUTO_TEST_CASE(compile_refuses_flags_outside_the_allowlist) {
  auto msg = refused(
      "compile",
      R"({"language": "c", "source": "int x;", "flags": ["-O2", "-fplugin=/tmp/evil.so"]})");
  BOOST_TEST(msg.find("flags[1]") != std::string::npos);
  BOOST_TEST(msg.find("-fplugin=/tmp/evil.so") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
