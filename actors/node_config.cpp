#include "actors/node_config.hpp"

#include <exception>
#include <fstream>
#include <sstream>
#include <system_error>

namespace triad {

namespace {

/// The file's top-level keys, in the order "unknown key" messages list them.
std::vector<std::string_view> top_level_keys() {
  return {topology_section().name,   scheduler_section().name,   tools_section().name,
          limits_section().name,     model_section().name,       orchestration_section().name,
          device_section({}).name,   sim_profile_section().name, server_section().name,
          mcp_server_section().name, kvstore_section().name,     cluster_section().name};
}

/// Calls `f(section, member)` for every section of the node's file, in file order: the one list
/// that reading, writing and the key list follow. Sim profiles come before devices, so a sim
/// device may name a profile defined anywhere in the file.
template<class Config, class F>
void for_each_section(Config& config, F&& f) {
  f(topology_section(), config.topology);
  f(scheduler_section(), config.scheduler);
  f(tools_section(), config.tools);
  f(limits_section(), config.limits);
  f(server_section(), config.server);
  f(model_section(), config.model);
  f(orchestration_section(), config.orchestration);
  f(sim_profile_section(), config.sim_profiles);
  f(device_section(config.sim_profiles), config.devices);
  f(mcp_server_section(), config.mcp_servers);
  f(kvstore_section(), config.kvstore);
  f(cluster_section(), config.cluster);
}

} // namespace

std::vector<config_key> config_keys() {
  std::vector<config_key> out;
  const node_config none;
  for_each_section(none, [&out](const auto& s, const auto&) {
    for (const auto& f : s.fields)
      out.push_back({s.name, s.array, f.key, f.allowed, f.doc});
  });
  return out;
}

expected<node_config> parse_config(std::string_view toml_text, std::string_view source_name) {
  const std::string name = source_name.empty() ? std::string{"<config>"} : std::string{source_name};
  try {
    auto doc = options::document::parse(toml_text, name);
    if (!doc)
      return doc.error();
    const auto keys = top_level_keys();
    doc->check_top_level(keys);
    node_config config;
    for_each_section(config, [&doc](const auto& s, auto& member) { doc->read(s, member); });
    if (auto ok = doc->finish(); !ok)
      return ok.error();
    return config;
  } catch (const std::exception& e) {
    return make_error(errc::system_error, name + ": reading the configuration failed: " + e.what());
  }
}

expected<node_config> load_config(const std::filesystem::path& file) {
  try {
    const std::string name = file.string();
    std::error_code ec;
    const auto status = std::filesystem::status(file, ec);
    if (status.type() == std::filesystem::file_type::not_found ||
        ec == std::errc::no_such_file_or_directory) {
      return make_error(errc::not_found, name + ": config file not found");
    }
    if (ec) {
      return make_error(errc::io_error, name + ": cannot read config file: " + ec.message());
    }
    if (std::filesystem::is_directory(status)) {
      return make_error(errc::io_error, name + ": cannot read config file: it is a directory");
    }
    std::ifstream in{file, std::ios::binary};
    if (!in) {
      return make_error(errc::io_error, name + ": cannot read config file: open failed");
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
      return make_error(errc::io_error, name + ": cannot read config file: read failed");
    }
    expected<node_config> result = parse_config(text.str(), name);
    if (!result) {
      return result;
    }
    topology_config& topology = result->topology;
    if (topology.source == topology_source::xml) {
      const std::filesystem::path xml{topology.xml};
      if (xml.is_relative()) {
        std::filesystem::path resolved = file.parent_path() / xml;
        if (auto absolute = std::filesystem::absolute(resolved, ec); !ec) {
          resolved = std::move(absolute);
        }
        topology.xml = resolved.lexically_normal().string();
      }
    }
    return result;
  } catch (const std::exception& e) {
    return make_error(errc::io_error,
                      file.string() + ": cannot read config file: " + std::string{e.what()});
  }
}

std::string to_toml(const node_config& config) {
  std::string out = "# triad node configuration\n";
  for_each_section(config,
                   [&out](const auto& s, const auto& member) { options::render(out, s, member); });
  return out;
}

node_config default_config() {
  node_config config;
  config.topology.source = topology_source::machine;
  config.tools.cores = defaults::tools::cores;
  config.model.preset = defaults::model::preset;

  device_config prefill;
  prefill.name = "prefill0";
  prefill.backend = device_backend::cpu;
  prefill.role = device_role::prefill;
  config.devices.push_back(std::move(prefill));

  device_config decode;
  decode.name = "decode0";
  decode.backend = device_backend::cpu;
  decode.role = device_role::decode;
  config.devices.push_back(std::move(decode));
  return config;
}

node_config zero_time_sim_config(const std::vector<std::pair<std::string, device_role>>& devices) {
  auto config = default_config();
  config.topology.bind_threads = false;
  config.devices.clear();
  for (const auto& [name, role] : devices) {
    device_config d;
    d.name = name;
    d.backend = device_backend::sim;
    d.role = role;
    d.time_scale = 0;
    config.devices.push_back(d);
  }
  return config;
}

node_config small_kv_config(std::uint64_t host_mib) {
  auto config = default_config();
  config.topology.bind_threads = false;
  config.devices.resize(1);
  config.devices[0].role = device_role::both;
  config.devices[0].memory_mib = 2;
  config.orchestration.device_layout = layout::monolithic;
  config.kvstore.host_mib = host_mib;
  return config;
}

placement_request placement_of(const node_config& config) {
  placement_request request;
  request.orchestration_domains = config.scheduler.orchestration_domains;
  request.tool_cores = config.tools.cores;
  request.tool_domains = config.tools.domains;
  for (const auto& d : config.devices) {
    placement_device p;
    p.name = d.name;
    p.label = std::string{to_string(d.role)};
    p.topology_device = d.topology_device;
    p.domain = d.domain;
    p.computes_on_cpus = d.backend == device_backend::cpu;
    p.compute_cores = d.compute_cores;
    request.devices.push_back(std::move(p));
  }
  return request;
}

expected<plan> make_plan(const topology_info& topo, const node_config& config) {
  return make_plan(topo, placement_of(config));
}

} // namespace triad
