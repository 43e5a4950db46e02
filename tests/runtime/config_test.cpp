#include "runtime/config.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>

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
  return source_dir() / "data";
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
  config.memory.arena_mib_per_domain = 16ull * 1024 * 1024;
  config.limits.max_concurrent_requests = 1;
  config.limits.max_queued_requests = 0;
  config.limits.max_body_bytes = 1ull << 30;

  device_config sim;
  sim.name = "h200-0";
  sim.backend = device_backend::sim;
  sim.role = device_role::decode;
  sim.topology_device = "nvml0";
  sim.profile = "xeon6_amx";
  sim.memory_mib = 143360;
  sim.queue_capacity = 1'000'000;
  config.devices.push_back(sim);

  device_config cpu;
  cpu.name = "cpu_1";
  cpu.backend = device_backend::cpu;
  cpu.role = device_role::both;
  cpu.domain = 0;
  config.devices.push_back(cpu);

  device_config cuda;
  cuda.name = "g";
  cuda.backend = device_backend::cuda;
  cuda.role = device_role::prefill;
  cuda.profile = "anything goes";
  config.devices.push_back(cuda);
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

  BOOST_TEST(c.memory.arena_mib_per_domain == 4096u);

  BOOST_TEST(c.limits.max_concurrent_requests == 64u);
  BOOST_TEST(c.limits.max_queued_requests == 0u);
  BOOST_TEST(c.limits.max_body_bytes == 1048576u);

  BOOST_TEST_REQUIRE(c.devices.size() == 3u);
  const device_config& sim = c.devices[0];
  BOOST_TEST(sim.name == "prefill-h200_0");
  BOOST_TEST((sim.backend == device_backend::sim));
  BOOST_TEST((sim.role == device_role::prefill));
  BOOST_TEST(sim.topology_device == "nvml0");
  BOOST_TEST(!sim.domain.has_value());
  BOOST_TEST(sim.profile == "h200");
  BOOST_TEST(sim.memory_mib == 143360u);
  BOOST_TEST(sim.queue_capacity == 512u);

  const device_config& cpu = c.devices[1];
  BOOST_TEST(cpu.name == "decode0");
  BOOST_TEST((cpu.backend == device_backend::cpu));
  BOOST_TEST((cpu.role == device_role::decode));
  BOOST_TEST(cpu.topology_device.empty());
  BOOST_TEST((cpu.domain == std::optional<unsigned>{2}));
  BOOST_TEST(cpu.profile == "small");
  BOOST_TEST(cpu.memory_mib == 8192u);
  BOOST_TEST(cpu.queue_capacity == 32u);

  const device_config& gpu = c.devices[2];
  BOOST_TEST(gpu.name == "gpu0");
  BOOST_TEST((gpu.backend == device_backend::cuda));
  BOOST_TEST((gpu.role == device_role::both));
  BOOST_TEST(gpu.profile.empty());
  BOOST_TEST(gpu.memory_mib == defaults::device::memory_mib);
  BOOST_TEST(gpu.queue_capacity == defaults::device::queue_capacity);
}

BOOST_AUTO_TEST_CASE(reference_config_is_the_default) {
  const auto result = load_config(repo_config_dir() / "triad.example.toml");
  BOOST_TEST_REQUIRE(result.has_value(), (result ? "" : result.error().to_string()));
  BOOST_TEST((*result == default_config()));
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
  BOOST_TEST(result->limits.max_body_bytes == defaults::limits::max_body_bytes);
}

BOOST_AUTO_TEST_CASE(default_config_has_a_cpu_prefill_and_decode_device) {
  const node_config c = default_config();
  BOOST_TEST((c.topology.source == topology_source::machine));
  BOOST_TEST(c.scheduler.orchestration_domains.empty());
  BOOST_TEST(c.tools.cores == 1u);
  BOOST_TEST_REQUIRE(c.devices.size() == 2u);
  BOOST_TEST(c.devices[0].name == "prefill0");
  BOOST_TEST((c.devices[0].role == device_role::prefill));
  BOOST_TEST((c.devices[0].backend == device_backend::cpu));
  BOOST_TEST(c.devices[0].profile == "tiny");
  BOOST_TEST(c.devices[1].name == "decode0");
  BOOST_TEST((c.devices[1].role == device_role::decode));
  BOOST_TEST((c.devices[1].backend == device_backend::cpu));
  BOOST_TEST(c.devices[1].profile == "tiny");
  BOOST_TEST(c.devices[1].memory_mib == defaults::device::memory_mib);
}

BOOST_AUTO_TEST_CASE(unknown_top_level_key_is_an_error) {
  const auto message = error_of("[topology]\n"
                                "source = \"machine\"\n"
                                "[network]\n"
                                "port = 8080\n");
  BOOST_TEST(message == "triad.toml:3:2: network = { port = 8080 }: unknown key; allowed keys at "
                        "top level: topology, scheduler, tools, memory, limits, devices");

  check_contains(error_of("colour = \"red\"\n"),
                 {"triad.toml:1:1: ", "colour = \"red\"", "unknown key",
                  "topology, scheduler, tools, memory, limits, devices"});
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_table_is_an_error) {
  const auto message = error_of("[tools]\n"
                                "cores = 2\n"
                                "colour = \"red\"\n");
  BOOST_TEST(message == "triad.toml:3:1: tools.colour = \"red\": unknown key; allowed keys in "
                        "[tools]: cores, domains, queue_capacity");
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
                        "memory_mib, queue_capacity");
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

BOOST_AUTO_TEST_CASE(out_of_range_is_an_error) {
  check_contains(error_of("[limits]\nmax_body_bytes = 2147483648\n"),
                 {"triad.toml:2:18: ", "limits.max_body_bytes = 2147483648", "out of range",
                  "allowed: integer 1..1073741824"});
  check_contains(error_of("[memory]\narena_mib_per_domain = -3\n"),
                 {"triad.toml:2:24: ", "memory.arena_mib_per_domain = -3", "out of range",
                  "allowed: integer 1..16777216"});
  check_contains(error_of("[tools]\ndomains = [-1]\n"),
                 {"triad.toml:2:12: ", "tools.domains[0] = -1", "out of range",
                  "allowed: integer 0..4294967295"});
  check_contains(error_of("[[devices]]\nname = \"a\"\nqueue_capacity = 0\n"),
                 {"triad.toml:3:18: ", "devices[0].queue_capacity = 0", "out of range",
                  "allowed: integer 1..1000000"});
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
                        "\"sn50\", \"xeon6_amx\"");
  check_contains(error_of("[[devices]]\nname = \"a\"\nprofile = \"h200\"\n"),
                 {"triad.toml:3:11: ", "devices[0].profile = \"h200\"",
                  "not allowed for backend \"cpu\"", "allowed: \"tiny\", \"small\""});
  BOOST_TEST(parse_config("[[devices]]\nname = \"a\"\nbackend = \"cuda\"\nprofile = \"x\"\n", "t")
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
  for (std::string_view key :
       {"source = \"machine\"", "bind_threads = true", "orchestration_domains = []",
        "threads_per_domain = 0", "moderate_sleep_us = 0", "poll_attempts = 3000", "cores = 1",
        "domains = []", "queue_capacity = 64", "arena_mib_per_domain = 1024",
        "max_concurrent_requests = 256", "max_queued_requests = 1024", "max_body_bytes = 4194304",
        "memory_mib = 2048", "queue_capacity = 256", "profile = \"tiny\""}) {
    BOOST_TEST((text.find(key) != std::string::npos), "to_toml lacks [" << key << "]");
  }
}

BOOST_AUTO_TEST_CASE(rich_config_round_trips_through_toml) {
  const node_config original = rich_config();
  const std::string text = to_toml(original);
  const auto parsed = parse_config(text, "to_toml");
  BOOST_TEST_REQUIRE(parsed.has_value(), (parsed ? "" : parsed.error().to_string()));
  BOOST_TEST((*parsed == original), "to_toml gave:\n" << text);

  node_config synthetic;
  synthetic.topology.source = topology_source::synthetic;
  synthetic.topology.synthetic = "pack:2 numa:3 core:43 pu:2";
  const auto reparsed = parse_config(to_toml(synthetic), "to_toml");
  BOOST_TEST_REQUIRE(reparsed.has_value());
  BOOST_TEST((*reparsed == synthetic));
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
