#include "runtime/report.hpp"

#include <boost/json/array.hpp>

namespace triad {

namespace {

boost::json::array ids(const std::vector<unsigned>& values) {
  boost::json::array out;
  for (auto v : values)
    out.emplace_back(v);
  return out;
}

boost::json::array strings(const std::vector<std::string>& values) {
  boost::json::array out;
  for (const auto& v : values)
    out.emplace_back(v);
  return out;
}

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

} // namespace

std::string cpu_list(const std::vector<unsigned>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!out.empty())
      out += ',';
    out += std::to_string(cpus[i]);
    if (j > i)
      out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

boost::json::object to_json(const topology_info& topo) {
  boost::json::object out;
  out["source"] = topo.source;
  out["is_this_machine"] = topo.is_this_machine;
  out["pus"] = topo.pu_count;
  out["cores"] = topo.cores.size();
  boost::json::array domains;
  for (const auto& d : topo.domains) {
    boost::json::object o;
    o["id"] = d.id;
    o["os_index"] = d.os_index;
    o["package"] = d.package;
    o["cpus"] = ids(d.cpus);
    o["cores"] = ids(d.cores);
    o["memory_bytes"] = d.memory_bytes;
    domains.emplace_back(std::move(o));
  }
  out["domains"] = std::move(domains);
  boost::json::array devices;
  for (const auto& a : topo.devices) {
    boost::json::object o;
    o["name"] = a.name;
    o["kind"] = to_string(a.kind);
    o["subtype"] = a.subtype;
    o["pci_bus_id"] = a.pci_bus_id;
    o["domain"] = a.domain;
    o["local_domains"] = ids(a.local_domains);
    devices.emplace_back(std::move(o));
  }
  out["devices"] = std::move(devices);
  return out;
}

boost::json::object to_json(const plan& p) {
  boost::json::object out;
  boost::json::array domains;
  for (const auto& d : p.domains) {
    if (!d.active())
      continue;
    boost::json::object o;
    o["domain"] = d.domain;
    o["orchestration"] = d.orchestration;
    o["tool_cpus"] = ids(d.tool_cpus);
    o["devices"] = strings(d.devices);
    o["worker_cpus"] = ids(d.worker_cpus);
    o["worker_threads"] = d.worker_threads;
    domains.emplace_back(std::move(o));
  }
  out["domains"] = std::move(domains);
  boost::json::array devices;
  for (const auto& d : p.devices) {
    boost::json::object o;
    o["name"] = d.name;
    o["topology_device"] = d.topology_device;
    o["role"] = d.role;
    o["domain"] = d.domain;
    o["driver_core"] = d.driver_core;
    o["driver_cpu"] = d.driver_cpu;
    o["shared_core"] = d.shared_core;
    o["shares_with"] = strings(d.shares_with);
    o["compute_cores"] = ids(d.compute_cores);
    o["compute_cpus"] = ids(d.compute_cpus);
    devices.emplace_back(std::move(o));
  }
  out["devices"] = std::move(devices);
  out["notes"] = strings(p.notes);
  return out;
}

std::string describe(const topology_info& topo) {
  std::string out = "topology " + topo.source + ": " + std::to_string(topo.domains.size()) +
                    " NUMA domains, " + std::to_string(topo.cores.size()) + " cores, " +
                    std::to_string(topo.pu_count) + " PUs, " + std::to_string(topo.devices.size()) +
                    " accelerators\n";
  for (const auto& d : topo.domains)
    out += "  domain " + std::to_string(d.id) + " (package " + std::to_string(d.package) +
           "): " + std::to_string(d.cores.size()) + " cores, cpus " + cpu_list(d.cpus) + ", " +
           gib(d.memory_bytes) + "\n";
  for (const auto& a : topo.devices)
    out += "  device " + a.name + " (" + std::string{to_string(a.kind)} +
           (a.subtype.empty() ? "" : " " + a.subtype) +
           (a.pci_bus_id.empty() ? "" : ", pci " + a.pci_bus_id) + "): nearest domain " +
           std::to_string(a.domain) + "\n";
  return out;
}

std::string describe(const plan& p) {
  std::string out = "placement plan:\n";
  for (const auto& d : p.domains) {
    if (!d.active())
      continue;
    out += "  domain " + std::to_string(d.domain) + ":" +
           (d.orchestration ? " orchestration," : "") + " " + std::to_string(d.worker_threads) +
           (d.worker_threads == 1 ? " worker" : " workers") + " on cpus " + cpu_list(d.worker_cpus);
    if (!d.tool_cpus.empty())
      out += ", tools on cpus " + cpu_list(d.tool_cpus);
    out += "\n";
  }
  for (const auto& d : p.devices) {
    out += "  device " + d.name + " (" + d.role +
           (d.topology_device.empty() ? "" : ", " + d.topology_device) + "): domain " +
           std::to_string(d.domain) + ", driver on core " + std::to_string(d.driver_core) +
           " (cpu " + std::to_string(d.driver_cpu) + ")" + (d.shared_core ? ", shared" : "");
    if (!d.compute_cores.empty())
      out += ", compute on " + std::to_string(d.compute_cores.size()) +
             (d.compute_cores.size() == 1 ? " core " : " cores ") + cpu_list(d.compute_cores) +
             " (cpus " + cpu_list(d.compute_cpus) + ")";
    out += "\n";
  }
  for (const auto& n : p.notes)
    out += "  note: " + n + "\n";
  return out;
}

} // namespace triad
