#include "runtime/placement.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace triad {

namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty())
      out += sep;
    out += item;
  }
  return out;
}

std::string join_ids(const std::vector<unsigned>& ids) {
  std::vector<std::string> parts;
  for (auto id : ids)
    parts.push_back(std::to_string(id));
  return join(parts);
}

std::string device_key(std::size_t index, const placement_device& dev) {
  return "devices[" + std::to_string(index) + "] ('" + dev.name + "')";
}

// Checks that a configured domain id exists and has cores; `what` names the config key.
expected<void> check_domain(const topology_info& topo, unsigned id, const std::string& what) {
  if (id >= topo.domains.size())
    return make_error(errc::not_found, what + ": domain " + std::to_string(id) +
                                           " does not exist; this topology (" + topo.source +
                                           ") has domains 0.." +
                                           std::to_string(topo.domains.size() - 1));
  if (topo.domains[id].cores.empty())
    return make_error(errc::invalid_argument,
                      what + ": domain " + std::to_string(id) +
                          " has no cores (memory-only NUMA node); choose a domain with cores");
  return {};
}

// The domain with cores nearest to `id`: itself, else one in the same package, else the first.
unsigned nearest_compute_domain(const topology_info& topo, unsigned id) {
  if (!topo.domains[id].cores.empty())
    return id;
  for (const auto& d : topo.domains)
    if (!d.cores.empty() && d.package == topo.domains[id].package)
      return d.id;
  for (const auto& d : topo.domains)
    if (!d.cores.empty())
      return d.id;
  return id;
}

} // namespace

const domain_plan& plan::orchestration_domain() const {
  for (const auto& d : domains)
    if (d.orchestration)
      return d;
  return domains.front();
}

const device_placement* plan::find_device(std::string_view name) const noexcept {
  for (const auto& d : devices)
    if (d.name == name)
      return &d;
  return nullptr;
}

expected<plan> make_plan(const topology_info& topo, const placement_request& config) {
  std::vector<unsigned> compute;
  for (const auto& d : topo.domains)
    if (!d.cores.empty())
      compute.push_back(d.id);
  if (compute.empty())
    return make_error(errc::invalid_argument,
                      "topology (" + topo.source + ") has no NUMA domain with cores");
  plan result;
  for (const auto& d : topo.domains) {
    domain_plan dp;
    dp.domain = d.id;
    result.domains.push_back(std::move(dp));
  }

  // Orchestration domains.
  auto orchestration = config.orchestration_domains;
  for (auto id : orchestration)
    if (auto ok = check_domain(topo, id, "scheduler.orchestration_domains"); !ok)
      return ok.error();
  if (orchestration.empty())
    orchestration.push_back(compute.front());
  for (auto id : orchestration)
    result.domains[id].orchestration = true;

  // Devices' domains, and the driver cores of sim and cuda devices.
  std::map<unsigned, std::vector<std::string>> drivers_on_core;
  std::size_t round_robin = 0;
  std::set<std::string> names;
  for (std::size_t i = 0; i < config.devices.size(); ++i) {
    const auto& dev = config.devices[i];
    if (!names.insert(dev.name).second)
      return make_error(errc::invalid_argument,
                        device_key(i, dev) + ": name '" + dev.name + "' is used twice");
    device_placement p;
    p.name = dev.name;
    p.topology_device = dev.topology_device;
    p.role = dev.label;
    if (!dev.topology_device.empty()) {
      const auto* acc = topo.find_device(dev.topology_device);
      if (acc == nullptr) {
        std::vector<std::string> have;
        for (const auto& a : topo.devices)
          have.push_back(a.name);
        return make_error(
            errc::not_found,
            device_key(i, dev) + ": topology_device '" + dev.topology_device +
                "' is not in this topology (" + topo.source + "); it has " +
                (have.empty() ? std::string{"no accelerators"} : "accelerators " + join(have)));
      }
      p.domain = nearest_compute_domain(topo, acc->domain);
      if (p.domain != acc->domain)
        result.notes.push_back("device " + dev.name + ": its local domain " +
                               std::to_string(acc->domain) + " has no cores; placed in domain " +
                               std::to_string(p.domain));
    } else if (dev.domain) {
      if (auto ok = check_domain(topo, *dev.domain, device_key(i, dev) + ".domain"); !ok)
        return ok.error();
      p.domain = *dev.domain;
    } else {
      p.domain = compute[round_robin++ % compute.size()];
    }
    const auto& cores = topo.domains[p.domain].cores;
    if (dev.computes_on_cpus && dev.compute_cores > cores.size())
      return make_error(errc::invalid_argument,
                        device_key(i, dev) +
                            ".compute_cores = " + std::to_string(dev.compute_cores) +
                            " exceeds the " + std::to_string(cores.size()) +
                            " cores of its domain " + std::to_string(p.domain) + "; allowed: 0.." +
                            std::to_string(cores.size()) + " (0 = automatic)");
    if (!dev.computes_on_cpus) {
      // A core of its own, from the highest down, else the least-loaded core of the domain.
      unsigned best = cores.back();
      std::size_t best_load = SIZE_MAX;
      for (auto it = cores.rbegin(); it != cores.rend(); ++it) {
        auto found = drivers_on_core.find(*it);
        auto load = found == drivers_on_core.end() ? 0 : found->second.size();
        if (load < best_load) {
          best = *it;
          best_load = load;
        }
      }
      p.driver_core = best;
      p.driver_cpu = topo.cores[best].pus.front();
      drivers_on_core[best].push_back(dev.name);
    }
    result.domains[p.domain].devices.push_back(dev.name);
    result.devices.push_back(std::move(p));
  }

  // Tool cores.
  if (config.tool_cores == 0)
    return make_error(errc::invalid_argument,
                      "tools.cores = 0: tools need at least one core (allowed: 1 or more)");
  std::vector<unsigned> tool_domains = config.tool_domains;
  for (auto id : tool_domains)
    if (auto ok = check_domain(topo, id, "tools.domains"); !ok)
      return ok.error();
  if (tool_domains.empty()) {
    for (auto id : compute)
      if (!result.domains[id].orchestration)
        tool_domains.push_back(id);
    for (auto id : compute)
      if (result.domains[id].orchestration)
        tool_domains.push_back(id);
  }
  std::size_t available = 0;
  for (auto id : tool_domains)
    available += topo.domains[id].cores.size();
  if (config.tool_cores > available)
    return make_error(errc::invalid_argument,
                      "tools.cores = " + std::to_string(config.tool_cores) + " exceeds the " +
                          std::to_string(available) + " cores of the tool domains (" +
                          join_ids(tool_domains) + "); allowed: 1.." + std::to_string(available));
  unsigned wanted = config.tool_cores;
  std::set<unsigned> tool_cores;
  std::vector<unsigned> overlapped;
  for (int pass = 0; pass < 2 && wanted > 0; ++pass) {
    for (auto id : tool_domains) {
      for (auto core : topo.domains[id].cores) {
        if (wanted == 0)
          break;
        bool has_driver = drivers_on_core.count(core) != 0;
        if (has_driver != (pass == 1))
          continue;
        auto& cpus = result.domains[id].tool_cpus;
        const auto& pus = topo.cores[core].pus;
        cpus.insert(cpus.end(), pus.begin(), pus.end());
        tool_cores.insert(core);
        if (has_driver)
          overlapped.push_back(core);
        --wanted;
      }
    }
  }
  if (!overlapped.empty())
    result.notes.push_back("tool cores " + join_ids(overlapped) +
                           " also run driver threads (not enough free cores)");

  // Compute core sets of cpu devices, per domain.
  for (auto id : compute) {
    std::vector<std::size_t> cpu_devices; // indices into config.devices / result.devices
    std::size_t explicit_cores = 0;
    std::size_t automatic = 0;
    for (std::size_t i = 0; i < config.devices.size(); ++i) {
      const auto& dev = config.devices[i];
      if (!dev.computes_on_cpus || result.devices[i].domain != id)
        continue;
      cpu_devices.push_back(i);
      explicit_cores += dev.compute_cores;
      automatic += dev.compute_cores == 0 ? 1 : 0;
    }
    if (cpu_devices.empty())
      continue;
    const std::size_t asked = explicit_cores + automatic;
    const auto& cores = topo.domains[id].cores;
    // The free cores, from the highest down; the lowest of them stays with the workers of an
    // orchestration domain.
    std::vector<unsigned> pool;
    for (auto it = cores.rbegin(); it != cores.rend(); ++it)
      if (tool_cores.count(*it) == 0 && drivers_on_core.count(*it) == 0)
        pool.push_back(*it);
    if (result.domains[id].orchestration && !pool.empty())
      pool.pop_back();
    if (pool.size() < asked) {
      std::vector<std::string> users;
      if (result.domains[id].orchestration)
        users.push_back("actor workers");
      for (auto core : cores)
        if (tool_cores.count(core) != 0) {
          users.push_back("tool processes");
          break;
        }
      for (auto core : cores)
        if (drivers_on_core.count(core) != 0) {
          users.push_back("driver threads");
          break;
        }
      if (!users.empty())
        result.notes.push_back(
            "domain " + std::to_string(id) + ": " + std::to_string(pool.size()) +
            " free cores for the " + std::to_string(asked) +
            " compute cores its cpu devices ask for; compute sets span all of its " +
            std::to_string(cores.size()) + " cores and overlap " + join(users));
      pool.assign(cores.rbegin(), cores.rend());
    }
    // Automatic devices split what explicit ones leave, the remainder to the first.
    const std::size_t rest = pool.size() > explicit_cores ? pool.size() - explicit_cores : 0;
    const std::size_t share = automatic == 0 ? 0 : std::max<std::size_t>(1, rest / automatic);
    std::size_t remainder = automatic == 0 || rest < automatic ? 0 : rest % automatic;
    std::map<unsigned, std::vector<std::string>> devices_on_core;
    std::size_t cursor = 0;
    for (auto i : cpu_devices) {
      const auto& dev = config.devices[i];
      auto& p = result.devices[i];
      std::size_t count = dev.compute_cores;
      if (count == 0) {
        count = share + remainder;
        remainder = 0;
      }
      std::set<unsigned> set;
      for (std::size_t k = 0; k < count; ++k)
        set.insert(pool[(cursor + k) % pool.size()]);
      cursor = (cursor + count) % pool.size();
      p.compute_cores.assign(set.begin(), set.end());
      for (auto core : p.compute_cores) {
        const auto& pus = topo.cores[core].pus;
        p.compute_cpus.insert(p.compute_cpus.end(), pus.begin(), pus.end());
        devices_on_core[core].push_back(p.name);
      }
      std::sort(p.compute_cpus.begin(), p.compute_cpus.end());
      p.driver_core = p.compute_cores.front();
      p.driver_cpu = topo.cores[p.driver_core].pus.front();
      drivers_on_core[p.driver_core].push_back(p.name);
    }
    // Cores several devices compute on, grouped by who shares them.
    std::map<std::vector<std::string>, std::vector<unsigned>> shared;
    for (const auto& [core, users] : devices_on_core)
      if (users.size() > 1)
        shared[users].push_back(core);
    if (!shared.empty()) {
      std::vector<std::string> parts;
      for (const auto& [users, on] : shared)
        parts.push_back(join(users) + (on.size() == 1 ? " on core " : " on cores ") + join_ids(on));
      result.notes.push_back("domain " + std::to_string(id) + ": " + std::to_string(pool.size()) +
                             " cores for the " + std::to_string(asked) +
                             " compute cores its cpu devices ask for; compute sets share cores "
                             "round-robin: " +
                             join(parts, "; "));
    }
  }

  for (auto& p : result.devices) {
    const auto& on_core = drivers_on_core[p.driver_core];
    p.shared_core = on_core.size() > 1;
    for (const auto& other : on_core)
      if (other != p.name)
        p.shares_with.push_back(other);
  }
  for (const auto& [core, names_on_core] : drivers_on_core)
    if (names_on_core.size() > 1)
      result.notes.push_back(
          "driver threads " + join(names_on_core) + " share core " + std::to_string(core) +
          " (domain " + std::to_string(topo.cores[core].domain) + " has fewer cores than devices)");

  // Worker cpus: the domain's cpus minus driver, compute and tool cpus, while that leaves any.
  for (auto& dp : result.domains) {
    if (!dp.active())
      continue;
    std::sort(dp.tool_cpus.begin(), dp.tool_cpus.end());
    const auto& dom = topo.domains[dp.domain];
    std::set<unsigned> busy_cpus; // driver and compute cpus
    for (const auto& [core, names_on_core] : drivers_on_core)
      if (topo.cores[core].domain == dp.domain)
        for (auto pu : topo.cores[core].pus)
          busy_cpus.insert(pu);
    for (const auto& p : result.devices)
      if (p.domain == dp.domain)
        busy_cpus.insert(p.compute_cpus.begin(), p.compute_cpus.end());
    auto without = [&](bool tools_too) {
      std::vector<unsigned> out;
      for (auto cpu : dom.cpus)
        if (busy_cpus.count(cpu) == 0 &&
            (!tools_too || !std::binary_search(dp.tool_cpus.begin(), dp.tool_cpus.end(), cpu)))
          out.push_back(cpu);
      return out;
    };
    dp.worker_cpus = without(true);
    if (dp.worker_cpus.empty()) {
      dp.worker_cpus = without(false);
      if (!dp.worker_cpus.empty() && !dp.tool_cpus.empty())
        result.notes.push_back("domain " + std::to_string(dp.domain) +
                               ": actor workers share cpus with tool processes");
    }
    dp.worker_threads = dp.worker_cpus.size();
    if (dp.worker_cpus.empty()) {
      dp.worker_cpus = dom.cpus;
      dp.worker_threads = 1;
      result.notes.push_back("domain " + std::to_string(dp.domain) +
                             ": actor workers share cpus with driver threads and compute sets "
                             "(no free cpu left); one worker thread");
    }
  }
  return result;
}

} // namespace triad
