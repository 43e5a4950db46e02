// triad-topo: prints a topology (this machine, an hwloc XML file or a synthetic description)
// and the placement plan triad would use on it, as text or JSON.

#include <cstdio>
#include <iostream>
#include <set>

#include <CLI/CLI.hpp>
#include <boost/json/serialize.hpp>

#include "actors/node_config.hpp"
#include "devices/factory.hpp"
#include "runtime/main_guard.hpp"
#include "runtime/memory.hpp"
#include "runtime/placement.hpp"
#include "runtime/report.hpp"
#include "runtime/topology.hpp"

namespace {

// Without --config: the embedded default, except that a topology with accelerators gets one
// device per accelerator (the first OS device of each PCI device), so the plan shows where their
// drivers go.
triad::node_config config_for(const triad::topology_info& topo) {
  auto config = triad::default_config();
  if (topo.devices.empty())
    return config;
  config.devices.clear();
  std::set<std::string> seen_pci;
  for (const auto& acc : topo.devices) {
    if (!acc.pci_bus_id.empty() && !seen_pci.insert(acc.pci_bus_id).second)
      continue;
    triad::device_config dev;
    dev.name = acc.name;
    dev.backend = triad::device_backend::cuda;
    dev.role = triad::device_role::both;
    dev.topology_device = acc.name;
    config.devices.push_back(std::move(dev));
  }
  return config;
}

int fail(const triad::error& err) {
  std::fprintf(stderr, "triad-topo: %s\n", err.message.c_str());
  return 1;
}

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-topo: print a machine's topology and triad's placement plan for it"};
  std::string xml;
  std::string synthetic;
  std::string config_file;
  bool json = false;
  auto* xml_opt =
      app.add_option("--xml", xml, "read the topology from an hwloc XML file (format 2.0)")
          ->check(CLI::ExistingFile);
  app.add_option("--synthetic", synthetic,
                 "use an hwloc synthetic topology, e.g. \"pack:2 numa:3 core:43 pu:2\"")
      ->excludes(xml_opt);
  app.add_option("--config", config_file,
                 "plan with this node config (TOML); default: the embedded default, with one "
                 "device per accelerator when the topology has any");
  app.add_flag("--json", json, "print one JSON object {source, domains, devices, plan, ...}");
  CLI11_PARSE(app, argc, argv);

  triad::node_config config;
  if (!config_file.empty()) {
    auto loaded = triad::load_config(config_file);
    if (!loaded)
      return fail(loaded.error());
    config = std::move(*loaded);
  }
  // Command-line topology beats the config's.
  auto source = config.topology;
  if (!xml.empty()) {
    source.source = triad::topology_source::xml;
    source.xml = xml;
  } else if (!synthetic.empty()) {
    source.source = triad::topology_source::synthetic;
    source.synthetic = synthetic;
  } else if (config_file.empty()) {
    source.source = triad::topology_source::machine;
  }
  auto topo = triad::topology::load(source);
  if (!topo)
    return fail(topo.error());
  if (config_file.empty())
    config = config_for(topo->info());
  auto placement = triad::make_plan(topo->info(), config);
  if (!placement)
    return fail(placement.error());
  auto alloc = triad::process_allocator();
  // What the cpu backend runs on this CPU for the config's dtype (the CPU running triad-topo,
  // whatever topology it plans for).
  const auto& cpu = triad::detect_cpu();
  auto choice = triad::cpu_compute_for(config);
  const std::string kernel = choice ? triad::probe_kernel(*choice) : std::string{};
  if (json) {
    auto out = triad::to_json(topo->info());
    out["config"] = config_file.empty() ? "embedded default" : config_file;
    out["plan"] = triad::to_json(*placement);
    out["allocator"] = {{"name", alloc.name},
                        {"version", alloc.version},
                        {"malloc_is_mimalloc", alloc.malloc_is_mimalloc}};
    boost::json::object c{{"onednn_isa", cpu.onednn_isa},
                          {"native_bf16", cpu.native_bf16},
                          {"own_kernels", std::string{triad::to_string(cpu.own)}},
                          {"config_dtype", std::string{triad::to_string(config.model.dtype)}}};
    if (choice) {
      c["dtype"] = std::string{triad::to_string(choice->type())};
      c["path"] = std::string{triad::to_string(choice->kernel)};
      c["kernel"] = kernel;
      c["reason"] = choice->reason;
    } else {
      c["error"] = choice.error().message;
    }
    out["cpu"] = std::move(c);
    std::cout << boost::json::serialize(out) << "\n";
    return 0;
  }
  std::cout << triad::describe(topo->info());
  std::cout << "config: " << (config_file.empty() ? "embedded default" : config_file) << "\n";
  std::cout << triad::describe(*placement);
  std::cout << "allocator: " << alloc.name << " " << alloc.version
            << (alloc.malloc_is_mimalloc ? " (serves malloc)" : " (NOT serving malloc)") << "\n";
  std::cout << "cpu: " << cpu.describe() << "\n";
  if (choice)
    std::cout << "cpu devices: dtype " << triad::to_string(choice->type()) << ", path "
              << triad::to_string(choice->kernel) << " (" << choice->reason << "), kernel "
              << kernel << "\n";
  else
    std::cout << "cpu devices: " << choice.error().message << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-topo", argc, argv, run);
}
