#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/config.hpp"
#include "cluster/config.hpp"
#include "devices/config.hpp"
#include "kvstore/config.hpp"
#include "runtime/config.hpp"
#include "runtime/error.hpp"
#include "runtime/placement.hpp"
#include "server/config.hpp"
#include "tools/config.hpp"

namespace triad {

/// The whole node configuration, as read from a TOML file: the areas' sections, composed.
struct node_config {
  topology_config topology;                     ///< `[topology]` (runtime)
  scheduler_config scheduler;                   ///< `[scheduler]` (runtime)
  tools_config tools;                           ///< `[tools]` (tools)
  limits_config limits;                         ///< `[limits]` (actors)
  server_config server;                         ///< `[server]` (server; triad-node only)
  model_config model;                           ///< `[model]` (devices)
  orchestration_options orchestration;          ///< `[orchestration]` (actors)
  std::vector<device_config> devices;           ///< `[[devices]]` (devices)
  std::vector<sim_profile_config> sim_profiles; ///< `[[sim_profiles]]` (devices)
  std::vector<mcp_server_entry> mcp_servers;    ///< `[[mcp_servers]]` (tools; none by default)
  kvstore_config kvstore;                       ///< `[kvstore]` (kvstore)
  cluster_config cluster;                       ///< `[cluster]` (cluster)
  bool operator==(const node_config&) const = default;
  /// The devices' part, for the devices area (devices/factory.hpp).
  operator device_set() const noexcept { return {model, sim_profiles, devices}; }
};

/// One key of the node's file, as its section declares it.
struct config_key {
  std::string_view section; ///< "devices"
  bool array = false;       ///< whether the section is an array of tables (`[[devices]]`)
  std::string_view key;     ///< "burst_steps"
  std::string allowed;      ///< what it takes
  std::string_view doc;     ///< one line: what it does
};

/// Every key of the node's file, section by section in file order: what the reference file
/// (config/triad.example.toml) documents.
std::vector<config_key> config_keys();

/// Parses a node configuration from TOML text; `source_name` names it in error messages.
/// Unknown keys, wrong types and values out of range are errors naming file, line, key,
/// the value given and what is allowed. The first error in file order is returned:
/// errc::parse_error for TOML syntax, errc::invalid_argument for the schema. Never throws.
expected<node_config> parse_config(std::string_view toml_text, std::string_view source_name);

/// Reads and parses a node configuration file; a relative `topology.xml` is resolved
/// against the file's directory (made absolute). A missing file is errc::not_found, an
/// unreadable one errc::io_error, both naming the path. Never throws.
expected<node_config> load_config(const std::filesystem::path& file);

/// Renders a configuration as TOML, every field included, that parse_config reads back to
/// an equal value when the configuration is valid.
std::string to_toml(const node_config& config);

/// The embedded default: this machine's topology, the "tiny" model, one cpu prefill and one
/// cpu decode device.
node_config default_config();

/// The embedded default with threads unbound and `devices` (name, role) as zero-time sim
/// devices (time_scale 0: a step costs only its simulated logits): a node whose CPU time is
/// triad's own, for tests and overhead benchmarks.
node_config zero_time_sim_config(const std::vector<std::pair<std::string, device_role>>& devices = {
                                     {"prefill0", device_role::prefill},
                                     {"decode0", device_role::decode}});

/// The embedded default with threads unbound and one cpu device (both roles, monolithic
/// layout) whose KV budget is 2 MiB (16 or 32 pages of the tiny model, f32 or bf16), with a
/// KV store of `host_mib` (0: none): for workloads that outgrow a device's memory (tests,
/// triad-bench-kv).
node_config small_kv_config(std::uint64_t host_mib);

/// What the placement planner places for this configuration: its devices (a cpu device
/// computes on cores of its domain), tool cores and orchestration domains.
placement_request placement_of(const node_config& config);

/// Plans a node on a topology (make_plan of placement_of(config)).
expected<plan> make_plan(const topology_info& topo, const node_config& config);

} // namespace triad
