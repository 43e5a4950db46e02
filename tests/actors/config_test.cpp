#include "actors/node_config.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace triad;

namespace {

/// This source file's directory; __FILE__ is absolute in CMake builds and relative to the
/// repository root when compiled by hand from there.
std::filesystem::path source_dir() {
  const auto dir = std::filesystem::path{__FILE__}.parent_path();
  BOOST_TEST_REQUIRE(std::filesystem::is_directory(dir),
                     dir << " not found: run the test from the repository root");
  return dir;
}

/// tests/runtime/data, found next to this source file.
std::filesystem::path data_dir() {
  return source_dir().parent_path() / "runtime" / "data";
}

/// The repository's config/ directory.
std::filesystem::path repo_config_dir() {
  return source_dir().parent_path().parent_path() / "config";
}

/// Parses `text` as "triad.toml" and returns the error message, failing the test when the
/// text parses or the error code differs from `code`.
std::string error_of(std::string_view text, errc code = errc::invalid_argument) {
  auto result = parse_config(text, "triad.toml");
  BOOST_TEST_REQUIRE(!result.has_value(), "expected an error for:\n" << text);
  BOOST_TEST(to_string(result.error().code) == to_string(code));
  return result.error().message;
}

/// Checks that `message` contains every fragment.
void check_contains(const std::string& message, std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts) {
    BOOST_TEST((message.find(part) != std::string::npos),
               "message [" << message << "] lacks [" << part << "]");
  }
}

/// A fresh directory under the system temp directory, removed at scope exit.
struct temp_dir {
  std::filesystem::path path;

  temp_dir() {
    std::random_device random;
    path = std::filesystem::temp_directory_path() /
           ("triad-config-test-" + std::to_string(random()) + "-" + std::to_string(random()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  std::filesystem::path write(const std::string& name, std::string_view text) const {
    const auto file = path / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out{file, std::ios::binary};
    out << text;
    return file;
  }
};

/// A configuration that sets every field away from its default.
node_config rich_config() {
  node_config config;
  config.topology.source = topology_source::xml;
  config.topology.xml = "/srv/topologies/odd \"name\" \\ with\ttab.xml";
  config.topology.bind_threads = false;
  config.scheduler.orchestration_domains = {2, 0, 7};
  config.scheduler.threads_per_domain = 1024;
  config.scheduler.moderate_sleep = std::chrono::microseconds{1'000'000};
  config.scheduler.poll_attempts = 100'000'000;
  config.tools.cores = 4096;
  config.tools.domains = {1};
  config.tools.queue_capacity = 1;
  config.tools.hosted = {"shell", "file_read"};
  config.limits.max_concurrent_requests = 1;
  config.limits.max_body_bytes = 1ull << 30;
  config.limits.queue_timeout_ms = 0;
  config.limits.request_timeout_ms = 86'400'000;
  config.model.preset = "small";
  config.model.dtype = model_dtype::f32;
  config.model.page_tokens = 4096;
  config.model.context_tokens = 1234;
  config.orchestration.kv = kv_policy::demote;
  config.orchestration.device_layout = layout::monolithic;
  config.orchestration.schedule = schedule_policy::plas;
  config.orchestration.max_waiting = 0;
  config.orchestration.retry_after = std::chrono::milliseconds{600'000};
  config.orchestration.tool_deadline = std::chrono::milliseconds{1};
  config.orchestration.device_slots = 65'536;
  config.orchestration.device_failure = device_failure_policy::fail;
  config.orchestration.max_device_retries = 16;
  config.orchestration.tool_result_overflow = tool_overflow_policy::fail;
  config.mcp_servers.push_back({"fs",
                                {"/usr/bin/node", "/opt/mcp/index.js", "/srv/a b"},
                                {"PATH=/usr/bin", "HOME=/srv"},
                                {"/opt/mcp"},
                                {"/srv/a b"}});

  sim_profile_config fast;
  fast.name = "fast-chip_2";
  fast.peak_tflops = 1234.5;
  fast.memory_bandwidth_gb_s = 0.1; // not exact in binary: must still read back equal
  fast.memory_gib = 96.0;
  fast.link_bandwidth_gb_s = 1.0 / 3.0;
  fast.step_overhead_us = 0.0;
  fast.source = "lab \"bench\" run\n2";
  config.sim_profiles.push_back(fast);

  sim_profile_config odd;
  odd.name = "odd";
  odd.peak_tflops = 1e300;
  odd.memory_bandwidth_gb_s = 5e-324;       // the smallest denormal
  odd.memory_gib = 123456789012345680000.0; // fixed notation is shorter here: exact digits
  config.sim_profiles.push_back(odd);

  device_config sim;
  sim.name = "h200-0";
  sim.backend = device_backend::sim;
  sim.role = device_role::decode;
  sim.topology_device = "nvml0";
  sim.profile = "xeon6_amx";
  sim.time_scale = 0.25;
  sim.memory_mib = 143360;
  sim.kv_mib = 4096;
  sim.queue_capacity = 1'000'000;
  sim.burst_steps = 1;
  sim.step_kv_fast_tier = false;
  sim.burst_window_us = 0;
  config.devices.push_back(sim);

  device_config cpu;
  cpu.name = "cpu_1";
  cpu.backend = device_backend::cpu;
  cpu.role = device_role::both;
  cpu.domain = 0;
  cpu.compute_cores = 4;
  config.devices.push_back(cpu);

  device_config cuda;
  cuda.name = "g";
  cuda.backend = device_backend::cuda;
  cuda.role = device_role::prefill;
  cuda.profile = "anything goes";
  config.devices.push_back(cuda);

  device_config user_sim;
  user_sim.name = "fast0";
  user_sim.backend = device_backend::sim;
  user_sim.profile = "fast-chip_2";
  user_sim.time_scale = 0.0;
  config.devices.push_back(user_sim);
  return config;
}

} // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(enum_names_match_the_file_format) {
  BOOST_TEST(to_string(topology_source::machine) == "machine");
  BOOST_TEST(to_string(topology_source::xml) == "xml");
  BOOST_TEST(to_string(topology_source::synthetic) == "synthetic");
  BOOST_TEST(to_string(device_role::prefill) == "prefill");
  BOOST_TEST(to_string(device_role::decode) == "decode");
  BOOST_TEST(to_string(device_role::both) == "both");
  BOOST_TEST(to_string(device_backend::cpu) == "cpu");
  BOOST_TEST(to_string(device_backend::sim) == "sim");
  BOOST_TEST(to_string(device_backend::cuda) == "cuda");
  BOOST_TEST(to_string(model_dtype::automatic) == "auto");
  BOOST_TEST(to_string(model_dtype::bf16) == "bf16");
  BOOST_TEST(to_string(model_dtype::f32) == "f32");
}

BOOST_AUTO_TEST_CASE(full_file_parses_to_expected_values) {
  const auto result = load_config(data_dir() / "full.toml");
  BOOST_TEST_REQUIRE(result.has_value(), (result ? "" : result.error().to_string()));
  const node_config& c = *result;

  BOOST_TEST((c.topology.source == topology_source::synthetic));
  BOOST_TEST(c.topology.synthetic == "pack:2 numa:3 core:43 pu:2");
  BOOST_TEST(c.topology.xml.empty());
  BOOST_TEST(!c.topology.bind_threads);

  BOOST_TEST((c.scheduler.orchestration_domains == std::vector<unsigned>{0, 3}));
  BOOST_TEST(c.scheduler.threads_per_domain == 8u);
  BOOST_TEST(c.scheduler.moderate_sleep.count() == 50);
  BOOST_TEST(c.scheduler.poll_attempts == 777u);

  BOOST_TEST(c.tools.cores == 4u);
  BOOST_TEST((c.tools.domains == std::vector<unsigned>{1, 2}));
  BOOST_TEST(c.tools.queue_capacity == 128u);

  BOOST_TEST(c.limits.max_concurrent_requests == 64u);
  BOOST_TEST(c.limits.max_body_bytes == 1048576u);

  BOOST_TEST(c.model.preset == "small");
  BOOST_TEST((c.model.dtype == model_dtype::f32));
  BOOST_TEST(c.model.page_tokens == 32u);

  BOOST_TEST_REQUIRE(c.sim_profiles.size() == 2u);
  const sim_profile_config& mine = c.sim_profiles[0];
  BOOST_TEST(mine.name == "my_accel");
  BOOST_TEST(mine.peak_tflops == 400.0);
  BOOST_TEST(mine.memory_bandwidth_gb_s == 2039.5);
  BOOST_TEST(mine.memory_gib == 80.0);
  BOOST_TEST(mine.link_bandwidth_gb_s == 600.0);
  BOOST_TEST(mine.step_overhead_us == 12.5);
  BOOST_TEST(mine.source == "our measurements");
  const sim_profile_config& small = c.sim_profiles[1];
  BOOST_TEST(small.name == "small-chip");
  BOOST_TEST(small.peak_tflops == 1.0);
  BOOST_TEST(small.memory_bandwidth_gb_s == 0.5);
  BOOST_TEST(small.memory_gib == 0.25);
  BOOST_TEST(small.link_bandwidth_gb_s == defaults::device::sim_link_bandwidth_gb_s);
  BOOST_TEST(small.step_overhead_us == defaults::device::sim_step_overhead_us);
  BOOST_TEST(small.source == defaults::device::sim_profile_source);

  BOOST_TEST_REQUIRE(c.devices.size() == 4u);
  const device_config& sim = c.devices[0];
  BOOST_TEST(sim.name == "prefill-h200_0");
  BOOST_TEST((sim.backend == device_backend::sim));
  BOOST_TEST((sim.role == device_role::prefill));
  BOOST_TEST(sim.topology_device == "nvml0");
  BOOST_TEST(!sim.domain.has_value());
  BOOST_TEST(sim.profile == "h200");
  BOOST_TEST(sim.time_scale == 0.5);
  BOOST_TEST(sim.memory_mib == 143360u);
  BOOST_TEST(sim.queue_capacity == 512u);

  const device_config& cpu = c.devices[1];
  BOOST_TEST(cpu.name == "decode0");
  BOOST_TEST((cpu.backend == device_backend::cpu));
  BOOST_TEST((cpu.role == device_role::decode));
  BOOST_TEST(cpu.topology_device.empty());
  BOOST_TEST((cpu.domain == std::optional<unsigned>{2}));
  BOOST_TEST(cpu.profile.empty());
  BOOST_TEST(cpu.time_scale == defaults::device::time_scale);
  BOOST_TEST(cpu.memory_mib == 8192u);
  BOOST_TEST(cpu.queue_capacity == 32u);

  const device_config& gpu = c.devices[2];
  BOOST_TEST(gpu.name == "gpu0");
  BOOST_TEST((gpu.backend == device_backend::cuda));
  BOOST_TEST((gpu.role == device_role::both));
  BOOST_TEST(gpu.profile.empty());
  BOOST_TEST(gpu.memory_mib == defaults::device::memory_mib);
  BOOST_TEST(gpu.queue_capacity == defaults::device::queue_capacity);

  // Names a [[sim_profiles]] entry given further down the file.
  const device_config& user_sim = c.devices[3];
  BOOST_TEST(user_sim.name == "sim-mine");
  BOOST_TEST((user_sim.backend == device_backend::sim));
  BOOST_TEST(user_sim.profile == "my_accel");
  BOOST_TEST(user_sim.time_scale == 0.0);
}

BOOST_AUTO_TEST_CASE(reference_config_is_the_default) {
  const auto result = load_config(repo_config_dir() / "triad.example.toml");
  BOOST_TEST_REQUIRE(result.has_value(), (result ? "" : result.error().to_string()));
  BOOST_TEST((*result == default_config()));
}

BOOST_AUTO_TEST_CASE(reference_config_documents_every_key_of_every_section) {
  // The sections' tables drive the check: a key added to an area's section and not to the
  // reference file fails here, naming it.
  std::ifstream in{repo_config_dir() / "triad.example.toml"};
  BOOST_TEST_REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);

  // Where each section's part of the file starts: its header, or for an array of tables the
  // comment that documents its keys ("zero or more [[devices]] entries").
  const auto start_of = [&](const config_key& k) -> std::size_t {
    const std::string header =
        k.array ? "[[" + std::string{k.section} + "]]" : "[" + std::string{k.section} + "]";
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (lines[i] == header ||
          (k.array && lines[i].find(header + " entries") != std::string::npos))
        return i;
    return lines.size();
  };
  const std::vector<config_key> keys = config_keys();
  std::vector<std::size_t> starts;
  for (const auto& k : keys) {
    BOOST_TEST(!k.doc.empty(), k.section << "." << k.key << " has no doc line");
    BOOST_TEST(!k.allowed.empty(), k.section << "." << k.key << " says nothing it allows");
    const std::size_t start = start_of(k);
    BOOST_TEST_REQUIRE(start < lines.size(), "the reference file has no [" << k.section << "]");
    starts.push_back(start);
  }
  for (std::size_t n = 0; n < keys.size(); ++n) {
    std::size_t end = lines.size();
    for (std::size_t s : starts)
      if (s > starts[n] && s < end)
        end = s;
    const std::string key{keys[n].key};
    const auto documents = [&](const std::string& line) {
      std::size_t at = line.find_first_not_of("# ");
      if (at == std::string::npos || line.compare(at, key.size(), key) != 0)
        return false;
      const std::size_t after = at + key.size();
      return after == line.size() || line[after] == ' ' || line[after] == '=';
    };
    bool found = false;
    for (std::size_t i = starts[n]; i < end && !found; ++i)
      found = documents(lines[i]);
    BOOST_TEST(found,
               "config/triad.example.toml does not document " << keys[n].section << "." << key);
  }
}

BOOST_AUTO_TEST_CASE(missing_keys_take_their_defaults) {
  const auto empty = parse_config("", "triad.toml");
  BOOST_TEST_REQUIRE(empty.has_value());
  BOOST_TEST((*empty == node_config{}));

  const auto result = parse_config("[[devices]]\nname = \"d\"\n", "triad.toml");
  BOOST_TEST_REQUIRE(result.has_value());
  BOOST_TEST_REQUIRE(result->devices.size() == 1u);
  const device_config& d = result->devices[0];
  BOOST_TEST((d.backend == device_backend::cpu));
  BOOST_TEST((d.role == device_role::both));
  BOOST_TEST(d.memory_mib == defaults::device::memory_mib);
  BOOST_TEST(d.queue_capacity == defaults::device::queue_capacity);
  BOOST_TEST(d.time_scale == defaults::device::time_scale);
  BOOST_TEST(d.compute_cores == defaults::device::compute_cores);
  BOOST_TEST(d.profile.empty());
  BOOST_TEST(result->limits.max_body_bytes == defaults::limits::max_body_bytes);
  BOOST_TEST(result->model.preset == defaults::model::preset);
  BOOST_TEST(to_string(result->model.dtype) == defaults::model::dtype);
  BOOST_TEST(result->model.page_tokens == defaults::model::page_tokens);
  BOOST_TEST(result->sim_profiles.empty());

  // A sim device without a profile keeps it empty (defaults::device::sim_profile applies).
  const auto sim = parse_config("[[devices]]\nname = \"s\"\nbackend = \"sim\"\n", "t");
  BOOST_TEST_REQUIRE(sim.has_value());
  BOOST_TEST(sim->devices.at(0).profile.empty());
  BOOST_TEST(sim->devices.at(0).time_scale == defaults::device::time_scale);

  const auto profile = parse_config("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 1\n"
                                    "memory_bandwidth_gb_s = 2\nmemory_gib = 3\n",
                                    "t");
  BOOST_TEST_REQUIRE(profile.has_value(), (profile ? "" : profile.error().to_string()));
  const sim_profile_config& p = profile->sim_profiles.at(0);
  BOOST_TEST(p.link_bandwidth_gb_s == defaults::device::sim_link_bandwidth_gb_s);
  BOOST_TEST(p.step_overhead_us == defaults::device::sim_step_overhead_us);
  BOOST_TEST(p.source == defaults::device::sim_profile_source);
}

BOOST_AUTO_TEST_CASE(default_config_has_a_cpu_prefill_and_decode_device) {
  const node_config c = default_config();
  BOOST_TEST((c.topology.source == topology_source::machine));
  BOOST_TEST(c.scheduler.orchestration_domains.empty());
  BOOST_TEST(c.tools.cores == 1u);
  BOOST_TEST(c.model.preset == "tiny");
  BOOST_TEST((c.model.dtype == model_dtype::automatic));
  BOOST_TEST(c.model.page_tokens == 16u);
  BOOST_TEST(c.sim_profiles.empty());
  BOOST_TEST_REQUIRE(c.devices.size() == 2u);
  BOOST_TEST(c.devices[0].name == "prefill0");
  BOOST_TEST((c.devices[0].role == device_role::prefill));
  BOOST_TEST((c.devices[0].backend == device_backend::cpu));
  BOOST_TEST(c.devices[0].profile.empty());
  BOOST_TEST(c.devices[1].name == "decode0");
  BOOST_TEST((c.devices[1].role == device_role::decode));
  BOOST_TEST((c.devices[1].backend == device_backend::cpu));
  BOOST_TEST(c.devices[1].profile.empty());
  BOOST_TEST(c.devices[1].memory_mib == defaults::device::memory_mib);
}

BOOST_AUTO_TEST_CASE(unknown_top_level_key_is_an_error) {
  const auto message = error_of("[topology]\n"
                                "source = \"machine\"\n"
                                "[network]\n"
                                "port = 8080\n");
  BOOST_TEST(message ==
             "triad.toml:3:2: network = { port = 8080 }: unknown key; allowed keys at "
             "top level: topology, scheduler, tools, limits, model, "
             "orchestration, devices, sim_profiles, server, mcp_servers, kvstore, cluster");

  check_contains(error_of("colour = \"red\"\n"),
                 {"triad.toml:1:1: ", "colour = \"red\"", "unknown key",
                  "topology, scheduler, tools, limits, model, orchestration, devices, "
                  "sim_profiles"});
  // [memory] and [limits].max_queued_requests did nothing: they are gone, and said so.
  check_contains(error_of("[memory]\narena_mib_per_domain = 1024\n"),
                 {"memory = { arena_mib_per_domain = 1024 }", "unknown key"});
  check_contains(error_of("[limits]\nmax_queued_requests = 0\n"),
                 {"limits.max_queued_requests = 0", "unknown key"});
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_table_is_an_error) {
  const auto message = error_of("[tools]\n"
                                "cores = 2\n"
                                "colour = \"red\"\n");
  BOOST_TEST(message == "triad.toml:3:1: tools.colour = \"red\": unknown key; allowed keys in "
                        "[tools]: cores, domains, queue_capacity, hosted, expose_to_all_requests");
}

BOOST_AUTO_TEST_CASE(hosted_tools_must_be_distinct_built_in_names) {
  BOOST_TEST(error_of("[tools]\nhosted = [\"shell\", \"rm_rf\"]\n") ==
             "triad.toml:2:20: tools.hosted[1] = \"rm_rf\": not allowed; allowed: an array of "
             "distinct names from \"file_read\", \"shell\", \"compile\", \"vector_search\"");
  BOOST_TEST(error_of("[tools]\nhosted = [\"shell\", \"shell\"]\n").find("named twice") !=
             std::string::npos);
  BOOST_TEST(error_of("[tools]\nhosted = \"shell\"\n").find("wrong type") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(mcp_servers_are_read_and_checked) {
  auto parsed = parse_config("[[mcp_servers]]\nname = \"fs\"\ncommand = [\"/usr/bin/node\", "
                             "\"x.js\"]\nenv = [\"PATH=/usr/bin\"]\nread_only = [\"/opt\"]\n",
                             "triad.toml");
  BOOST_REQUIRE(parsed.has_value());
  BOOST_REQUIRE(parsed->mcp_servers.size() == 1u);
  BOOST_TEST(parsed->mcp_servers[0].command.size() == 2u);
  BOOST_TEST(default_config().mcp_servers.empty()); // none unless configured
  check_contains(error_of("[[mcp_servers]]\nname = \"fs\"\ncommand = [\"node\"]\n"),
                 {"mcp_servers[0].command", "the program must be an absolute path"});
  check_contains(error_of("[[mcp_servers]]\nname = \"fs\"\ncommand = [\"/bin/x\"]\n"
                          "env = [\"PATH\"]\n"),
                 {"mcp_servers[0].env[0] = \"PATH\"", "not KEY=value"});
  check_contains(error_of("[[mcp_servers]]\ncommand = [\"/bin/x\"]\n"), {"mcp_servers[0]", "name"});
  check_contains(error_of("[[mcp_servers]]\nname = \"a b\"\ncommand = [\"/bin/x\"]\n"),
                 {"mcp_servers[0].name = \"a b\": not a valid name; allowed: 1..64"});
  check_contains(error_of("[[mcp_servers]]\nname = \"fs\"\ncommand = [\"/bin/x\"]\n"
                          "read_write = [\"srv\"]\n"),
                 {"mcp_servers[0].read_write[0] = \"srv\"", "not an absolute path"});
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_device_is_an_error) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"a\"\n"
                                "\n"
                                "[[devices]]\n"
                                "name = \"b\"\n"
                                "  speed = 3\n");
  BOOST_TEST(message == "triad.toml:6:3: devices[1].speed = 3: unknown key; allowed keys in "
                        "[[devices]]: name, backend, role, topology_device, domain, profile, "
                        "time_scale, memory_mib, kv_mib, tensor_parallel, queue_capacity, "
                        "prefix_cache, "
                        "burst_steps, step_kv_fast_tier, burst_window_us, compute_cores");
}

BOOST_AUTO_TEST_CASE(unknown_key_in_model_is_an_error) {
  const auto message = error_of("[model]\n"
                                "preset = \"tiny\"\n"
                                "layers = 12\n");
  BOOST_TEST(message ==
             "triad.toml:3:1: model.layers = 12: unknown key; allowed keys in "
             "[model]: preset, dtype, weights, page_tokens, context_tokens, path, served_name, "
             "chat_template");
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_sim_profile_is_an_error) {
  check_contains(
      error_of("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 1\n"
               "memory_bandwidth_gb_s = 1\nmemory_gib = 1\nclock_ghz = 2.5\n"),
      {"triad.toml:6:1: ", "sim_profiles[0].clock_ghz = 2.5", "unknown key",
       "allowed keys in [[sim_profiles]]: name, peak_tflops, memory_bandwidth_gb_s, "
       "memory_gib, link_bandwidth_gb_s, step_overhead_us, attention_tflops, overlap, source"});
}

BOOST_AUTO_TEST_CASE(wrong_type_is_an_error) {
  check_contains(error_of("[tools]\ncores = \"two\"\n"),
                 {"triad.toml:2:9: ", "tools.cores = \"two\"", "wrong type (string)",
                  "allowed: integer 1..4096"});
  check_contains(error_of("[scheduler]\nthreads_per_domain = 2.5\n"),
                 {"triad.toml:2:22: ", "scheduler.threads_per_domain = 2.5", "wrong type (float)",
                  "allowed: integer 0..1024"});
  check_contains(error_of("[topology]\nbind_threads = \"yes\"\n"),
                 {"triad.toml:2:16: ", "topology.bind_threads = \"yes\"", "wrong type (string)",
                  "allowed: true, false"});
  check_contains(error_of("[[devices]]\nname = 7\n"),
                 {"triad.toml:2:8: ", "devices[0].name = 7", "wrong type (integer)",
                  "allowed: 1..64 characters"});
  check_contains(error_of("tools = 3\n"), {"triad.toml:1:9: ", "tools = 3", "wrong type (integer)",
                                           "allowed: a table [tools]"});
  check_contains(error_of("[devices]\nname = \"a\"\n"),
                 {"triad.toml:1:1: ", "devices = { name = \"a\" }", "wrong type (table)",
                  "allowed: an array of tables [[devices]]"});
  check_contains(error_of("[scheduler]\norchestration_domains = [0, \"1\"]\n"),
                 {"triad.toml:2:29: ", "scheduler.orchestration_domains[1] = \"1\"",
                  "wrong type (string)", "allowed: integer 0..4294967295"});
}

BOOST_AUTO_TEST_CASE(the_server_section_is_read_and_checked) {
  auto parsed = parse_config("[server]\nlisten = \"::1\"\nport = 0\napi_key_env = \"TRIAD_KEY\"\n"
                             "max_header_bytes = 4096\nthreads = 3\nallow_scripts = true\n",
                             "triad.toml");
  BOOST_REQUIRE(parsed.has_value());
  BOOST_TEST(parsed->server.allow_scripts);
  BOOST_TEST(!default_config().server.allow_scripts); // off unless configured
  BOOST_TEST(parsed->server.listen == "::1");
  BOOST_TEST(parsed->server.port == 0u);
  BOOST_TEST(parsed->server.api_key_env == "TRIAD_KEY");
  BOOST_TEST(parsed->server.max_header_bytes == 4096u);
  BOOST_TEST(parsed->server.threads == 3u);
  BOOST_TEST(parsed->server.drain_timeout_ms == defaults::server::drain_timeout_ms);
  check_contains(error_of("[server]\nlisten = \"localhost\"\n"),
                 {"triad.toml:2:10: ", "server.listen = \"localhost\"", "not an IP address"});
  BOOST_TEST(error_of("[server]\nlisten = 1\n") ==
             "triad.toml:2:10: server.listen = 1: wrong type (integer); allowed: an IPv4 or IPv6 "
             "address");
  check_contains(error_of("[server]\nport = 70000\n"),
                 {"server.port = 70000", "out of range", "allowed: integer 0..65535"});
  check_contains(error_of("[server]\ntls = true\n"), {"server.tls", "unknown key"});
}

BOOST_AUTO_TEST_CASE(out_of_range_is_an_error) {
  check_contains(error_of("[limits]\nmax_body_bytes = 2147483648\n"),
                 {"triad.toml:2:18: ", "limits.max_body_bytes = 2147483648", "out of range",
                  "allowed: integer 1..1073741824"});
  check_contains(error_of("[[devices]]\nname = \"d\"\nmemory_mib = -3\n"),
                 {"triad.toml:3:14: ", "devices[0].memory_mib = -3", "out of range",
                  "allowed: integer 1..16777216"});
  check_contains(error_of("[tools]\ndomains = [-1]\n"),
                 {"triad.toml:2:12: ", "tools.domains[0] = -1", "out of range",
                  "allowed: integer 0..4294967295"});
  check_contains(error_of("[[devices]]\nname = \"a\"\nqueue_capacity = 0\n"),
                 {"triad.toml:3:18: ", "devices[0].queue_capacity = 0", "out of range",
                  "allowed: integer 1..1000000"});
  check_contains(error_of("[[devices]]\nname = \"a\"\nburst_steps = 0\n"),
                 {"triad.toml:3:15: ", "devices[0].burst_steps = 0", "out of range",
                  "allowed: integer 1..1024"});
}

BOOST_AUTO_TEST_CASE(zero_tool_cores_is_an_error) {
  const auto message = error_of("[tools]\ncores = 0\n");
  BOOST_TEST(message == "triad.toml:2:9: tools.cores = 0: tools need at least one core; "
                        "allowed: integer 1..4096");
}

BOOST_AUTO_TEST_CASE(bad_enum_value_is_an_error) {
  const auto message = error_of("[topology]\n"
                                "source = \"machine\"\n"
                                "\n"
                                "[[devices]]\n"
                                "name = \"prefill0\"\n"
                                "role = \"prefill\"\n"
                                "\n"
                                "[[devices]]\n"
                                "name = \"decode0\"\n"
                                "backend = \"cpu\"\n"
                                "# the typo below\n"
                                "role = \"decoder\"\n");
  BOOST_TEST(message == "triad.toml:12:8: devices[1].role = \"decoder\": not allowed; allowed: "
                        "\"prefill\", \"decode\", \"both\"");

  check_contains(error_of("[topology]\nsource = \"hwloc\"\n"),
                 {"triad.toml:2:10: ", "topology.source = \"hwloc\"", "not allowed",
                  "\"machine\", \"xml\", \"synthetic\""});
  check_contains(error_of("[[devices]]\nname = \"a\"\nbackend = \"rocm\"\n"),
                 {"triad.toml:3:11: ", "devices[0].backend = \"rocm\"", "not allowed",
                  "\"cpu\", \"sim\", \"cuda\""});
}

BOOST_AUTO_TEST_CASE(profile_must_suit_the_backend) {
  // The backend is read before the profile is checked, wherever it stands in the entry.
  const auto message = error_of("[[devices]]\n"
                                "name = \"a\"\n"
                                "profile = \"tiny\"\n"
                                "backend = \"sim\"\n");
  BOOST_TEST(message == "triad.toml:3:11: devices[0].profile = \"tiny\": not allowed for backend "
                        "\"sim\"; allowed: \"h100\", \"h200\", \"b200\", \"gaudi3\", \"sn40l\", "
                        "\"sn50\", \"xeon6_amx\" (built-in), or the name of a [[sim_profiles]] "
                        "entry");
  BOOST_TEST(parse_config("[[devices]]\nname = \"a\"\nbackend = \"cuda\"\nprofile = \"x\"\n", "t")
                 .has_value());
  BOOST_TEST(parse_config("[[devices]]\nname = \"a\"\nbackend = \"sim\"\nprofile = \"sn50\"\n", "t")
                 .has_value());
}

BOOST_AUTO_TEST_CASE(profile_on_a_cpu_device_is_an_error) {
  // The model of cpu devices comes from [model]; even a preset name is refused here.
  const auto message = error_of("[model]\n"
                                "preset = \"small\"\n"
                                "\n"
                                "[[devices]]\n"
                                "name = \"a\"\n"
                                "backend = \"cpu\"\n"
                                "profile = \"small\"\n");
  BOOST_TEST(message ==
             "triad.toml:7:11: devices[0].profile = \"small\": not allowed for backend "
             "\"cpu\": the cpu model is set by [model].preset; allowed: no profile key "
             "for backend \"cpu\"; set the model with [model].preset: \"tiny\", \"small\"");
  // The backend defaults to cpu.
  check_contains(error_of("[[devices]]\nname = \"a\"\nprofile = \"h200\"\n"),
                 {"triad.toml:3:11: ", "devices[0].profile = \"h200\"",
                  "not allowed for backend \"cpu\"", "[model].preset",
                  "allowed: no profile key for backend \"cpu\"", "\"tiny\", \"small\""});
}

BOOST_AUTO_TEST_CASE(unknown_sim_profile_names_the_built_in_and_user_profiles) {
  const auto message = error_of("[[sim_profiles]]\n"
                                "name = \"chip_a\"\n"
                                "peak_tflops = 100\n"
                                "memory_bandwidth_gb_s = 1000\n"
                                "memory_gib = 64\n"
                                "\n"
                                "[[devices]]\n"
                                "name = \"s0\"\n"
                                "backend = \"sim\"\n"
                                "profile = \"chip_c\"\n"
                                "\n"
                                "[[sim_profiles]]\n"
                                "name = \"chip-b\"\n"
                                "peak_tflops = 200\n"
                                "memory_bandwidth_gb_s = 2000\n"
                                "memory_gib = 32\n");
  BOOST_TEST(message == "triad.toml:10:11: devices[0].profile = \"chip_c\": not allowed for "
                        "backend \"sim\"; allowed: \"h100\", \"h200\", \"b200\", \"gaudi3\", "
                        "\"sn40l\", \"sn50\", \"xeon6_amx\" (built-in), \"chip_a\", \"chip-b\" "
                        "([[sim_profiles]])");
}

BOOST_AUTO_TEST_CASE(orchestration_policies_are_read) {
  auto c = parse_config("[orchestration]\n"
                        "kv = \"discard\"\n"
                        "layout = \"monolithic\"\n"
                        "schedule = \"plas\"\n"
                        "max_waiting = 7\n"
                        "retry_after_ms = 50\n"
                        "tool_deadline_ms = 1500\n"
                        "device_slots = 4\n"
                        "device_failure = \"fail\"\n"
                        "max_device_retries = 0\n"
                        "busy_backoff_ms = 20\n",
                        "triad.toml");
  BOOST_REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().message));
  const auto& o = c->orchestration;
  BOOST_TEST((o.kv == kv_policy::discard));
  BOOST_TEST((o.device_layout == layout::monolithic));
  BOOST_TEST((o.schedule == schedule_policy::plas));
  BOOST_TEST(o.max_waiting == 7u);
  BOOST_TEST(o.retry_after.count() == 50);
  BOOST_TEST(o.tool_deadline.count() == 1500);
  BOOST_TEST(o.device_slots == 4u);
  BOOST_TEST((o.device_failure == device_failure_policy::fail));
  BOOST_TEST(o.max_device_retries == 0u);
  BOOST_TEST(o.busy_backoff.count() == 20);
}

BOOST_AUTO_TEST_CASE(orchestration_values_out_of_range_are_errors) {
  BOOST_TEST(error_of("[orchestration]\nkv = \"keep\"\n") ==
             "triad.toml:2:6: orchestration.kv = \"keep\": not allowed; allowed: \"discard\", "
             "\"pin\", \"demote\"");
  check_contains(error_of("[orchestration]\nbusy_backoff_ms = 0\n"),
                 {"triad.toml:2:19: ", "orchestration.busy_backoff_ms = 0", "1..60000"});
  check_contains(error_of("[orchestration]\nretry_after_ms = 0\n"),
                 {"triad.toml:2:18: ", "orchestration.retry_after_ms = 0", "1..600000"});
  check_contains(error_of("[orchestration]\nmax_device_retries = 17\n"),
                 {"orchestration.max_device_retries = 17", "0..16"});
  check_contains(error_of("[orchestration]\nslots = 3\n"),
                 {"orchestration.slots", "unknown key", "device_slots"});
}

BOOST_AUTO_TEST_CASE(model_preset_must_be_known) {
  const auto message = error_of("[model]\npreset = \"huge\"\n");
  BOOST_TEST(message ==
             "triad.toml:2:10: model.preset = \"huge\": not allowed; allowed: \"tiny\", \"small\", "
             "\"llama3-8b\", \"llama3-70b\", \"mixtral-8x7b\", \"mixtral-8x22b\", \"deepseek-v3\"");
  check_contains(error_of("[model]\npreset = 1\n"),
                 {"triad.toml:2:10: ", "model.preset = 1", "wrong type (integer)",
                  "allowed: \"tiny\", \"small\""});
}

BOOST_AUTO_TEST_CASE(model_weights_must_be_known) {
  const auto message = error_of("[model]\nweights = \"int8\"\n");
  BOOST_TEST(message == "triad.toml:2:11: model.weights = \"int8\": not allowed; allowed: "
                        "\"dtype\", \"bf16\", \"fp8\", \"int4\"");
}

BOOST_AUTO_TEST_CASE(model_dtype_must_be_known) {
  const auto message = error_of("[model]\ndtype = \"fp16\"\n");
  BOOST_TEST(
      message ==
      "triad.toml:2:9: model.dtype = \"fp16\": not allowed; allowed: \"auto\", \"bf16\", \"f32\"");
}

BOOST_AUTO_TEST_CASE(model_page_tokens_must_be_in_range) {
  const auto message = error_of("[model]\npage_tokens = 0\n");
  BOOST_TEST(message ==
             "triad.toml:2:15: model.page_tokens = 0: out of range; allowed: integer 1..4096");
  check_contains(error_of("[model]\npage_tokens = 4097\n"),
                 {"triad.toml:2:15: ", "model.page_tokens = 4097", "out of range",
                  "allowed: integer 1..4096"});
  check_contains(error_of("[model]\npage_tokens = 16.0\n"),
                 {"triad.toml:2:15: ", "model.page_tokens = 16.0", "wrong type (float)",
                  "allowed: integer 1..4096"});
}

BOOST_AUTO_TEST_CASE(negative_time_scale_is_an_error) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"s\"\n"
                                "backend = \"sim\"\n"
                                "time_scale = -0.5\n");
  BOOST_TEST(message == "triad.toml:4:14: devices[0].time_scale = -0.5: out of range; allowed: "
                        "a finite number (integer or float) >= 0.0");
  check_contains(error_of("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntime_scale = -1\n"),
                 {"triad.toml:4:14: ", "devices[0].time_scale = -1", "out of range", ">= 0.0"});
  check_contains(error_of("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntime_scale = inf\n"),
                 {"triad.toml:4:14: ", "devices[0].time_scale = inf", "not a finite number",
                  "allowed: a finite number (integer or float) >= 0.0"});
  check_contains(error_of("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntime_scale = nan\n"),
                 {"triad.toml:4:14: ", "devices[0].time_scale = nan", "not a finite number"});
  check_contains(error_of("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntime_scale = \"1\"\n"),
                 {"triad.toml:4:14: ", "devices[0].time_scale = \"1\"", "wrong type (string)",
                  "allowed: a finite number"});
  // An integer is a number too.
  const auto integer =
      parse_config("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntime_scale = 3\n", "t");
  BOOST_TEST_REQUIRE(integer.has_value());
  BOOST_TEST(integer->devices.at(0).time_scale == 3.0);
}

BOOST_AUTO_TEST_CASE(time_scale_needs_the_sim_backend) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"c\"\n"
                                "time_scale = 1.0\n"
                                "backend = \"cpu\"\n");
  BOOST_TEST(message == "triad.toml:3:14: devices[0].time_scale = 1.0: only allowed when backend "
                        "= \"sim\" (backend = \"cpu\"); allowed: no time_scale key, or backend = "
                        "\"sim\"");
  check_contains(error_of("[[devices]]\nname = \"g\"\nbackend = \"cuda\"\ntime_scale = 2\n"),
                 {"triad.toml:4:14: ", "devices[0].time_scale = 2",
                  "only allowed when backend = \"sim\" (backend = \"cuda\")",
                  "allowed: no time_scale key, or backend = \"sim\""});
}

BOOST_AUTO_TEST_CASE(kv_mib_needs_the_sim_backend) {
  check_contains(error_of("[[devices]]\nname = \"c\"\nbackend = \"cpu\"\nkv_mib = 64\n"),
                 {"triad.toml:4:10: ", "devices[0].kv_mib = 64",
                  "only allowed when backend = \"sim\" (backend = \"cpu\")", "memory_mib"});
  check_contains(error_of("[[devices]]\nname = \"s\"\nbackend = \"sim\"\nkv_mib = -1\n"),
                 {"devices[0].kv_mib = -1", "out of range", "allowed: integer 0..16777216"});
  const auto sim = parse_config("[[devices]]\nname = \"s\"\nbackend = \"sim\"\nkv_mib = 64\n", "t");
  BOOST_TEST_REQUIRE(sim.has_value(), (sim ? "" : sim.error().to_string()));
  BOOST_TEST(sim->devices.at(0).kv_mib == 64u);
}

BOOST_AUTO_TEST_CASE(tensor_parallel_needs_the_sim_backend) {
  check_contains(error_of("[[devices]]\nname = \"c\"\nbackend = \"cpu\"\ntensor_parallel = 2\n"),
                 {"triad.toml:4:19: ", "devices[0].tensor_parallel = 2",
                  "only allowed when backend = \"sim\" (backend = \"cpu\")"});
  check_contains(error_of("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntensor_parallel = 0\n"),
                 {"devices[0].tensor_parallel = 0", "out of range", "allowed: integer 1..64"});
  const auto sim =
      parse_config("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntensor_parallel = 8\n", "t");
  BOOST_TEST_REQUIRE(sim.has_value(), (sim ? "" : sim.error().to_string()));
  BOOST_TEST(sim->devices.at(0).tensor_parallel == 8u);
  // It survives a round trip through the TOML the node writes.
  const auto again = parse_config(triad::to_toml(*sim), "t");
  BOOST_TEST_REQUIRE(again.has_value(), (again ? "" : again.error().to_string()));
  BOOST_TEST(again->devices.at(0).tensor_parallel == 8u);
}

BOOST_AUTO_TEST_CASE(compute_cores_needs_the_cpu_backend) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"s\"\n"
                                "compute_cores = 8\n"
                                "backend = \"sim\"\n");
  BOOST_TEST(message == "triad.toml:3:17: devices[0].compute_cores = 8: only allowed when "
                        "backend = \"cpu\" (backend = \"sim\"); allowed: 0, no compute_cores "
                        "key, or backend = \"cpu\"");
  check_contains(error_of("[[devices]]\nname = \"g\"\nbackend = \"cuda\"\ncompute_cores = 2\n"),
                 {"triad.toml:4:17: ", "devices[0].compute_cores = 2",
                  "only allowed when backend = \"cpu\" (backend = \"cuda\")"});
  check_contains(error_of("[[devices]]\nname = \"c\"\ncompute_cores = 4097\n"),
                 {"triad.toml:3:17: ", "devices[0].compute_cores = 4097", "out of range",
                  "allowed: integer 0..4096"});
  // 0 (automatic) is allowed for every backend; a cpu device takes any count in range.
  const auto sim =
      parse_config("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ncompute_cores = 0\n", "t");
  BOOST_TEST_REQUIRE(sim.has_value(), (sim ? "" : sim.error().to_string()));
  BOOST_TEST(sim->devices.at(0).compute_cores == 0u);
  const auto cpu = parse_config("[[devices]]\nname = \"c\"\ncompute_cores = 12\n", "t");
  BOOST_TEST_REQUIRE(cpu.has_value(), (cpu ? "" : cpu.error().to_string()));
  BOOST_TEST(cpu->devices.at(0).compute_cores == 12u);
}

BOOST_AUTO_TEST_CASE(sim_profile_may_not_reuse_a_built_in_name) {
  const auto message = error_of("[[sim_profiles]]\n"
                                "name = \"h200\"\n"
                                "peak_tflops = 1\n"
                                "memory_bandwidth_gb_s = 1\n"
                                "memory_gib = 1\n");
  BOOST_TEST(message == "triad.toml:2:8: sim_profiles[0].name = \"h200\": the name of a built-in "
                        "sim profile; allowed: 1..64 characters from A-Z, a-z, 0-9, '_' and '-'; "
                        "unique across sim profiles; not a built-in name (\"h100\", \"h200\", "
                        "\"b200\", \"gaudi3\", \"sn40l\", \"sn50\", \"xeon6_amx\")");
  check_contains(error_of("[[sim_profiles]]\nname = \"a b\"\npeak_tflops = 1\n"
                          "memory_bandwidth_gb_s = 1\nmemory_gib = 1\n"),
                 {"triad.toml:2:8: ", "sim_profiles[0].name = \"a b\"",
                  "not a valid sim profile name", "allowed: 1..64 characters"});
  check_contains(error_of("[[sim_profiles]]\npeak_tflops = 1\n"
                          "memory_bandwidth_gb_s = 1\nmemory_gib = 1\n"),
                 {"triad.toml:1:1: ", "sim_profiles[0].name: missing", "allowed: 1..64"});
}

BOOST_AUTO_TEST_CASE(sim_profile_needs_its_figures) {
  const auto message = error_of("[[sim_profiles]]\n"
                                "name = \"p\"\n"
                                "\n"
                                "[[sim_profiles]]\n"
                                "name = \"q\"\n"
                                "memory_bandwidth_gb_s = 1\n"
                                "memory_gib = 1\n");
  // The first entry lacks all three; reported at its header, in key order.
  BOOST_TEST(message == "triad.toml:1:1: sim_profiles[0].peak_tflops: missing (every sim profile "
                        "needs it); allowed: a finite number (integer or float) > 0.0");
  const auto second = error_of("[[sim_profiles]]\n"
                               "name = \"p\"\n"
                               "memory_bandwidth_gb_s = 1\n"
                               "memory_gib = 1\n"
                               "source = \"x\"\n");
  check_contains(second, {"triad.toml:1:1: ", "sim_profiles[0].peak_tflops", "missing",
                          "allowed: a finite number (integer or float) > 0.0"});
  check_contains(error_of("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 0\n"
                          "memory_bandwidth_gb_s = 1\nmemory_gib = 1\n"),
                 {"triad.toml:3:15: ", "sim_profiles[0].peak_tflops = 0", "out of range",
                  "allowed: a finite number (integer or float) > 0.0"});
  check_contains(error_of("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 1\n"
                          "memory_bandwidth_gb_s = -inf\nmemory_gib = 1\n"),
                 {"triad.toml:4:25: ", "sim_profiles[0].memory_bandwidth_gb_s = -inf",
                  "not a finite number", "> 0.0"});
  check_contains(
      error_of("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 1\n"
               "memory_bandwidth_gb_s = 1\nmemory_gib = 1\nstep_overhead_us = -2\n"),
      {"triad.toml:6:20: ", "sim_profiles[0].step_overhead_us = -2", "out of range", ">= 0.0"});
  check_contains(error_of("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 1\n"
                          "memory_bandwidth_gb_s = 1\nmemory_gib = true\n"),
                 {"triad.toml:5:14: ", "sim_profiles[0].memory_gib = true", "wrong type (boolean)",
                  "allowed: a finite number"});
  check_contains(error_of("sim_profiles = 1\n"),
                 {"triad.toml:1:16: ", "sim_profiles = 1", "wrong type (integer)",
                  "allowed: an array of tables [[sim_profiles]]"});
}

BOOST_AUTO_TEST_CASE(duplicate_sim_profile_names_are_an_error) {
  const auto message = error_of("[[sim_profiles]]\n"
                                "name = \"p\"\n"
                                "peak_tflops = 1\n"
                                "memory_bandwidth_gb_s = 1\n"
                                "memory_gib = 1\n"
                                "[[sim_profiles]]\n"
                                "name = \"p\"\n"
                                "peak_tflops = 2\n"
                                "memory_bandwidth_gb_s = 2\n"
                                "memory_gib = 2\n");
  BOOST_TEST(message == "triad.toml:7:8: sim_profiles[1].name = \"p\": duplicate sim profile "
                        "name, already given by sim_profiles[0].name at triad.toml:2:8; allowed: "
                        "names unique across sim profiles");
  // A sim profile and a device may share a name.
  BOOST_TEST(parse_config("[[sim_profiles]]\nname = \"p\"\npeak_tflops = 1\n"
                          "memory_bandwidth_gb_s = 1\nmemory_gib = 1\n"
                          "[[devices]]\nname = \"p\"\nbackend = \"sim\"\nprofile = \"p\"\n",
                          "t")
                 .has_value());
}

BOOST_AUTO_TEST_CASE(missing_device_name_is_an_error) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"a\"\n"
                                "\n"
                                "[[devices]]\n"
                                "role = \"decode\"\n");
  check_contains(message, {"triad.toml:4:1: ", "devices[1].name", "missing",
                           "allowed: 1..64 characters from A-Z, a-z, 0-9, '_' and '-'"});
}

BOOST_AUTO_TEST_CASE(invalid_device_name_is_an_error) {
  check_contains(error_of("[[devices]]\nname = \"a b\"\n"),
                 {"triad.toml:2:8: ", "devices[0].name = \"a b\"", "not a valid device name",
                  "allowed: 1..64 characters"});
  check_contains(error_of("[[devices]]\nname = \"\"\n"), {"devices[0].name = \"\""});
  const std::string long_name(65, 'x');
  check_contains(error_of("[[devices]]\nname = \"" + long_name + "\"\n"),
                 {"triad.toml:2:8: ", "devices[0].name = \"xxxx", "not a valid device name"});
  BOOST_TEST(
      parse_config("[[devices]]\nname = \"" + std::string(64, 'x') + "\"\n", "t").has_value());
}

BOOST_AUTO_TEST_CASE(duplicate_device_names_are_an_error) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"gpu0\"\n"
                                "[[devices]]\n"
                                "name = \"gpu1\"\n"
                                "[[devices]]\n"
                                "name = \"gpu0\"\n");
  BOOST_TEST(message == "triad.toml:6:8: devices[2].name = \"gpu0\": duplicate device name, "
                        "already given by devices[0].name at triad.toml:2:8; allowed: names "
                        "unique across devices");
}

BOOST_AUTO_TEST_CASE(duplicate_domain_ids_are_an_error) {
  check_contains(error_of("[scheduler]\norchestration_domains = [0, 1, 0]\n"),
                 {"triad.toml:2:32: ", "scheduler.orchestration_domains[2] = 0",
                  "duplicate domain id", "allowed: an array of distinct integers"});
  check_contains(error_of("[tools]\ndomains = 1\n"),
                 {"triad.toml:2:11: ", "tools.domains = 1", "wrong type (integer)",
                  "allowed: an array of distinct integers"});
}

BOOST_AUTO_TEST_CASE(xml_source_needs_an_xml_path) {
  const auto message = error_of("[topology]\nsource = \"xml\"\n");
  BOOST_TEST(message == "triad.toml:1:1: topology.xml: missing (required when topology.source = "
                        "\"xml\"); allowed: path of an hwloc XML file (format 2.0)");

  check_contains(error_of("[topology]\nsource = \"synthetic\"\n"),
                 {"triad.toml:1:1: ", "topology.synthetic", "missing", "pack:2 numa:3"});
  check_contains(error_of("[topology]\nsource = \"xml\"\nxml = \"\"\n"),
                 {"triad.toml:3:7: ", "topology.xml = \"\"", "empty", "allowed: path of"});
}

BOOST_AUTO_TEST_CASE(xml_path_needs_the_xml_source) {
  const auto message = error_of("[topology]\nxml = \"a.xml\"\n");
  BOOST_TEST(message == "triad.toml:2:7: topology.xml = \"a.xml\": only allowed when "
                        "topology.source = \"xml\" (topology.source = \"machine\"); allowed: no "
                        "xml key, or topology.source = \"xml\"");
}

BOOST_AUTO_TEST_CASE(topology_device_and_domain_together_are_an_error) {
  const auto message = error_of("[[devices]]\n"
                                "name = \"a\"\n"
                                "topology_device = \"nvml0\"\n"
                                "domain = 1\n");
  BOOST_TEST(message == "triad.toml:4:10: devices[0].domain = 1: give topology_device or "
                        "domain, not both (devices[0].topology_device = \"nvml0\"); allowed: "
                        "either devices[0].topology_device or devices[0].domain");

  // Reported at whichever of the two comes second.
  check_contains(error_of("[[devices]]\nname = \"a\"\ndomain = 1\ntopology_device = \"nvml0\"\n"),
                 {"triad.toml:4:19: ", "devices[0].topology_device = \"nvml0\"", "not both"});
}

BOOST_AUTO_TEST_CASE(syntax_error_is_a_parse_error) {
  const auto message = error_of("[tools]\ncores = \n", errc::parse_error);
  check_contains(message, {"triad.toml:2:9: ", "TOML syntax error: ", "expected value"});

  check_contains(error_of("[tools]\ncores = 1\ncores = 2\n", errc::parse_error),
                 {"triad.toml:3:", "TOML syntax error", "cores"});
}

BOOST_AUTO_TEST_CASE(no_exception_escapes) {
  BOOST_CHECK_NO_THROW((void)parse_config("name = \"\xff\xfe\"\n", "triad.toml"));
  const auto result = parse_config("name = \"\xff\xfe\"\n", "triad.toml");
  BOOST_TEST_REQUIRE(!result.has_value());
  BOOST_TEST(to_string(result.error().code) == to_string(errc::parse_error));
}

BOOST_AUTO_TEST_CASE(first_error_in_file_order_is_reported) {
  // [[devices]] is read after [tools], yet its error comes first in the file.
  const auto message = error_of("[[devices]]\n"
                                "name = \"a\"\n"
                                "role = \"x\"\n"
                                "[tools]\n"
                                "cores = 0\n");
  check_contains(message, {"triad.toml:3:8: ", "devices[0].role = \"x\""});
}

BOOST_AUTO_TEST_CASE(default_config_round_trips_through_toml) {
  const node_config original = default_config();
  const std::string text = to_toml(original);
  const auto parsed = parse_config(text, "to_toml");
  BOOST_TEST_REQUIRE(parsed.has_value(), (parsed ? "" : parsed.error().to_string()));
  BOOST_TEST((*parsed == original), "to_toml gave:\n" << text);
  // Every field is written out, defaults included.
  for (std::string_view key : {"source = \"machine\"",
                               "bind_threads = true",
                               "orchestration_domains = []",
                               "threads_per_domain = 0",
                               "moderate_sleep_us = 0",
                               "poll_attempts = 20000",
                               "cores = 1",
                               "domains = []",
                               "queue_capacity = 64",
                               "max_concurrent_requests = 256",
                               "max_body_bytes = 4194304",
                               "[model]",
                               "preset = \"tiny\"",
                               "dtype = \"auto\"",
                               "page_tokens = 16",
                               "memory_mib = 2048",
                               "queue_capacity = 256",
                               "compute_cores = 0",
                               "[server]",
                               "listen = \"127.0.0.1\"",
                               "port = 8080"}) {
    BOOST_TEST((text.find(key) != std::string::npos), "to_toml lacks [" << key << "]");
  }
  // cpu devices carry no profile and no time_scale.
  BOOST_TEST((text.find("profile =") == std::string::npos), "to_toml gave:\n" << text);
  BOOST_TEST((text.find("time_scale") == std::string::npos), "to_toml gave:\n" << text);
}

BOOST_AUTO_TEST_CASE(rich_config_round_trips_through_toml) {
  const node_config original = rich_config();
  const std::string text = to_toml(original);
  const auto parsed = parse_config(text, "to_toml");
  BOOST_TEST_REQUIRE(parsed.has_value(), (parsed ? "" : parsed.error().to_string()));
  BOOST_TEST((*parsed == original), "to_toml gave:\n" << text);
  // Doubles are TOML floats, integral ones included.
  for (std::string_view key :
       {"time_scale = 0.25", "time_scale = 0.0", "peak_tflops = 1234.5", "memory_gib = 96.0",
        "step_overhead_us = 0.0", "memory_bandwidth_gb_s = 0.1", "peak_tflops = 1e+300",
        "memory_gib = 123456789012345683968.0", "link_bandwidth_gb_s = 0.0",
        "step_overhead_us = 20.0", "source = \"user config\"", "[[sim_profiles]]",
        "dtype = \"f32\""}) {
    BOOST_TEST((text.find(key) != std::string::npos), "to_toml lacks [" << key << "]");
  }

  node_config synthetic;
  synthetic.topology.source = topology_source::synthetic;
  synthetic.topology.synthetic = "pack:2 numa:3 core:43 pu:2";
  const auto reparsed = parse_config(to_toml(synthetic), "to_toml");
  BOOST_TEST_REQUIRE(reparsed.has_value());
  BOOST_TEST((*reparsed == synthetic));
}

BOOST_AUTO_TEST_CASE(sim_device_may_name_a_profile_defined_after_it) {
  const std::string text = "[[devices]]\n"
                           "name = \"s0\"\n"
                           "backend = \"sim\"\n"
                           "profile = \"late\"\n"
                           "time_scale = 0.25\n"
                           "\n"
                           "[[sim_profiles]]\n"
                           "name = \"late\"\n"
                           "peak_tflops = 312.5\n"
                           "memory_bandwidth_gb_s = 1555\n"
                           "memory_gib = 40\n"
                           "link_bandwidth_gb_s = 300\n"
                           "step_overhead_us = 7.5\n"
                           "source = \"A100 40GB datasheet\"\n";
  const auto parsed = parse_config(text, "triad.toml");
  BOOST_TEST_REQUIRE(parsed.has_value(), (parsed ? "" : parsed.error().to_string()));
  BOOST_TEST_REQUIRE(parsed->devices.size() == 1u);
  BOOST_TEST(parsed->devices[0].profile == "late");
  BOOST_TEST(parsed->devices[0].time_scale == 0.25);
  BOOST_TEST_REQUIRE(parsed->sim_profiles.size() == 1u);
  const sim_profile_config& late = parsed->sim_profiles[0];
  BOOST_TEST(late.name == "late");
  BOOST_TEST(late.peak_tflops == 312.5);
  BOOST_TEST(late.memory_bandwidth_gb_s == 1555.0);
  BOOST_TEST(late.memory_gib == 40.0);
  BOOST_TEST(late.link_bandwidth_gb_s == 300.0);
  BOOST_TEST(late.step_overhead_us == 7.5);
  BOOST_TEST(late.source == "A100 40GB datasheet");

  const std::string rendered = to_toml(*parsed);
  const auto again = parse_config(rendered, "to_toml");
  BOOST_TEST_REQUIRE(again.has_value(), (again ? "" : again.error().to_string()));
  BOOST_TEST((*again == *parsed), "to_toml gave:\n" << rendered);
  for (std::string_view key : {"memory_bandwidth_gb_s = 1555.0", "memory_gib = 40.0",
                               "time_scale = 0.25", "profile = \"late\""}) {
    BOOST_TEST((rendered.find(key) != std::string::npos), "to_toml lacks [" << key << "]");
  }
}

BOOST_AUTO_TEST_CASE(load_config_resolves_xml_against_the_file_directory) {
  const temp_dir dir;
  const auto file = dir.write("conf/triad.toml", "[topology]\n"
                                                 "source = \"xml\"\n"
                                                 "xml = \"../topologies/box.xml\"\n");
  const auto result = load_config(file);
  BOOST_TEST_REQUIRE(result.has_value(), (result ? "" : result.error().to_string()));
  const auto expected = (dir.path / "topologies" / "box.xml").lexically_normal();
  BOOST_TEST(result->topology.xml == expected.string());
  BOOST_TEST(std::filesystem::path{result->topology.xml}.is_absolute());

  const auto absolute = dir.write("abs.toml", "[topology]\n"
                                              "source = \"xml\"\n"
                                              "xml = \"/srv/box.xml\"\n");
  const auto kept = load_config(absolute);
  BOOST_TEST_REQUIRE(kept.has_value());
  BOOST_TEST(kept->topology.xml == "/srv/box.xml");

  // parse_config keeps the path as written.
  const auto as_written =
      parse_config("[topology]\nsource = \"xml\"\nxml = \"box.xml\"\n", "triad.toml");
  BOOST_TEST_REQUIRE(as_written.has_value());
  BOOST_TEST(as_written->topology.xml == "box.xml");
}

BOOST_AUTO_TEST_CASE(load_config_reports_a_missing_file_by_path) {
  const temp_dir dir;
  const auto missing = dir.path / "nowhere.toml";
  const auto result = load_config(missing);
  BOOST_TEST_REQUIRE(!result.has_value());
  BOOST_TEST(to_string(result.error().code) == to_string(errc::not_found));
  check_contains(result.error().message, {missing.string()});

  const auto directory = load_config(dir.path);
  BOOST_TEST_REQUIRE(!directory.has_value());
  BOOST_TEST(to_string(directory.error().code) == to_string(errc::io_error));
  check_contains(directory.error().message, {dir.path.string()});
}

BOOST_AUTO_TEST_CASE(load_config_errors_name_the_file) {
  const temp_dir dir;
  const auto file = dir.write("bad.toml", "[tools]\ncores = 0\n");
  const auto result = load_config(file);
  BOOST_TEST_REQUIRE(!result.has_value());
  check_contains(result.error().message, {file.string() + ":2:9: ", "tools.cores = 0"});
}

BOOST_AUTO_TEST_SUITE_END()
