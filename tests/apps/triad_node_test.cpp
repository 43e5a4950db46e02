#include <filesystem>
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "tests/process.hpp"

using triad::test::binary;
using triad::test::run_command;

namespace {

// A config file in the temp directory with `model` as its [model] section and one cpu device.
std::string config_file(const std::string& name, const std::string& model) {
  auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream{path} << "[model]\n" << model << "\n[[devices]]\nname = \"cpu0\"\n";
  return path.string();
}

} // namespace

BOOST_AUTO_TEST_SUITE(triad_node)

BOOST_AUTO_TEST_CASE(an_explicit_dtype_this_cpu_cannot_run_exits_2_naming_the_isa) {
  // An SSE4.1 cap makes oneDNN (and triad's own kernels) behave as on a CPU without AVX2.
  auto path = config_file("triad-node-test-bf16.toml", "dtype = \"bf16\"\n");
  // `timeout`: a node that starts anyway is stopped, and the test fails on its status.
  auto r = run_command("DNNL_MAX_CPU_ISA=SSE41 timeout 20 " + binary("triad-node") + " --config " +
                       path + " --port 0 2>&1");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.find("[model].dtype = \"bf16\"") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("sse41") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("\"f32\"") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("terminate") == std::string::npos, r.out); // an error, not an abort
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(a_config_file_error_exits_2) {
  auto path = config_file("triad-node-test-bad.toml", "dtype = \"fp16\"\n");
  auto r =
      run_command("timeout 20 " + binary("triad-node") + " --config " + path + " --port 0 2>&1");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.find("allowed: \"auto\", \"bf16\", \"f32\"") != std::string::npos, r.out);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(trace_options_without_a_trace_file_exit_2_naming_what_they_need) {
  for (const char* option : {"--trace-asked-only", "--kept-traces 3", "--kept-trace-mib 8"}) {
    auto r = run_command(binary("triad-node") + " " + option + " 2>&1");
    BOOST_TEST(r.status == 2, option);
    BOOST_TEST(r.out.find("needs --trace FILE") != std::string::npos, r.out);
  }
}

BOOST_AUTO_TEST_CASE(a_listener_beyond_loopback_without_an_api_key_exits_2) {
  auto path = config_file("triad-node-test-open.toml", "");
  auto r = run_command("timeout 20 " + binary("triad-node") + " --config " + path +
                       " --listen 0.0.0.0 --port 0 2>&1");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.find("api_key_env") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("--insecure") != std::string::npos, r.out);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(by_default_it_hosts_no_tool_and_takes_no_script) {
  // Started, it prints what it serves; `timeout` then stops it (SIGTERM: a clean drain).
  auto path = config_file("triad-node-test-default.toml", "");
  auto r = run_command("timeout -s TERM 10 " + binary("triad-node") + " --config " + path +
                       " --port 0 2>&1");
  BOOST_TEST(r.out.find("hosted tools: none; scripts off") != std::string::npos, r.out);
  auto opened = run_command("timeout -s TERM 10 " + binary("triad-node") + " --config " + path +
                            " --port 0 --host-tools shell,file_read --allow-scripts 2>&1");
  BOOST_TEST(opened.out.find("hosted tools: shell, file_read in ") != std::string::npos,
             opened.out);
  BOOST_TEST(opened.out.find("scripts allowed") != std::string::npos, opened.out);
  // What the tools' sandbox applies here is said once, at start (not without tools).
  BOOST_TEST(opened.out.find("tool sandbox: user_ns, pid_ns, net_ns") != std::string::npos,
             opened.out);
  BOOST_TEST(r.out.find("tool sandbox") == std::string::npos, r.out);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(triad_node_model)

BOOST_AUTO_TEST_CASE(a_model_file_it_cannot_serve_exits_2_naming_the_file) {
  auto path = std::filesystem::temp_directory_path() / "triad-node-test-not-a-model.gguf";
  std::ofstream{path} << "this is not a model";
  auto r = run_command("timeout 20 " + binary("triad-node") + " --model " + path.string() +
                       " --port 0 2>&1");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.find(path.string()) != std::string::npos, r.out);
  BOOST_TEST(r.out.find("not a GGUF file") != std::string::npos, r.out);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
