#include "runtime/topology.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <hwloc.h>

#include "runtime/config.hpp"

namespace triad {

namespace {

using native_t = hwloc_topology_t;

std::vector<unsigned> os_indices(hwloc_const_bitmap_t set) {
  std::vector<unsigned> out;
  if (set == nullptr)
    return out;
  int i = -1;
  while ((i = hwloc_bitmap_next(set, i)) != -1)
    out.push_back(static_cast<unsigned>(i));
  return out;
}

std::string pci_bus_id(hwloc_obj_t pci) {
  if (pci == nullptr || pci->type != HWLOC_OBJ_PCI_DEVICE)
    return {};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain,
                pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return buf;
}

// Extracts the plain snapshot planning works on.
topology_info snapshot(native_t topo, std::string source, bool is_this_machine) {
  topology_info info;
  info.source = std::move(source);
  info.is_this_machine = is_this_machine;
  int n_numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n_numa; ++i) {
    auto* node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    numa_domain d;
    d.id = node->logical_index;
    d.os_index = node->os_index;
    d.memory_bytes = node->attr != nullptr ? node->attr->numanode.local_memory : 0;
    auto* pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, node);
    d.package = pkg != nullptr ? pkg->logical_index : 0;
    d.cpus = os_indices(node->cpuset);
    info.domains.push_back(std::move(d));
  }
  int n_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < n_cores; ++i) {
    auto* core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    core_info c;
    c.id = core->logical_index;
    c.pus = os_indices(core->cpuset);
    // The core belongs to the domain whose cpuset holds its first PU.
    for (auto& d : info.domains) {
      if (c.pus.empty())
        break;
      if (std::binary_search(d.cpus.begin(), d.cpus.end(), c.pus.front())) {
        c.domain = d.id;
        d.cores.push_back(c.id);
        break;
      }
    }
    info.cores.push_back(std::move(c));
  }
  for (auto& d : info.domains)
    info.pu_count += static_cast<unsigned>(d.cpus.size());
  for (auto* dev = hwloc_get_next_osdev(topo, nullptr); dev != nullptr;
       dev = hwloc_get_next_osdev(topo, dev)) {
    auto type = dev->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_GPU && type != HWLOC_OBJ_OSDEV_COPROC)
      continue;
    accelerator acc;
    acc.name = dev->name != nullptr ? dev->name : "";
    acc.kind = type == HWLOC_OBJ_OSDEV_GPU ? device_kind::gpu : device_kind::coproc;
    acc.subtype = dev->subtype != nullptr ? dev->subtype : "";
    acc.pci_bus_id = pci_bus_id(dev->parent);
    // Local domains: those whose cpus lie inside the device's nearest non-I/O ancestor.
    auto* anchor = hwloc_get_non_io_ancestor_obj(topo, dev);
    for (int i = 0; i < n_numa; ++i) {
      auto* node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      if (anchor != nullptr && anchor->nodeset != nullptr &&
          hwloc_bitmap_isset(anchor->nodeset, node->os_index))
        acc.local_domains.push_back(node->logical_index);
    }
    if (!acc.local_domains.empty())
      acc.domain = acc.local_domains.front();
    info.devices.push_back(std::move(acc));
  }
  return info;
}

expected<native_t> make_native() {
  native_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0)
    return make_error(errc::system_error,
                      std::string{"hwloc_topology_init failed: "} + std::strerror(errno));
  // Keep PCI devices and OS devices so accelerators and their locality are visible.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  return topo;
}

expected<native_t> finish_load(native_t topo, const std::string& what) {
  if (hwloc_topology_load(topo) != 0) {
    int err = errno;
    hwloc_topology_destroy(topo);
    return make_error(errc::parse_error,
                      "hwloc could not load " + what + ": " + std::strerror(err));
  }
  if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU) <= 0) {
    hwloc_topology_destroy(topo);
    return make_error(errc::invalid_argument, what + " describes no processing units");
  }
  return topo;
}

} // namespace

std::string_view to_string(device_kind kind) noexcept {
  return kind == device_kind::gpu ? "gpu" : "coproc";
}

const accelerator* topology_info::find_device(std::string_view name) const noexcept {
  for (const auto& d : devices)
    if (d.name == name)
      return &d;
  return nullptr;
}

topology::topology(void* handle, topology_info info)
    : handle_(handle)
    , info_(std::move(info)) {}

topology::topology(topology&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr))
    , info_(std::move(other.info_)) {}

topology& topology::operator=(topology&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr)
      hwloc_topology_destroy(static_cast<native_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
    info_ = std::move(other.info_);
  }
  return *this;
}

topology::~topology() {
  if (handle_ != nullptr)
    hwloc_topology_destroy(static_cast<native_t>(handle_));
}

expected<topology> topology::load_machine() {
  auto topo = make_native();
  if (!topo)
    return topo.error();
  auto loaded = finish_load(*topo, "this machine's topology");
  if (!loaded)
    return loaded.error();
  return topology{*loaded, snapshot(*loaded, "machine", true)};
}

expected<topology> topology::load_xml(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return make_error(errc::not_found,
                      "topology XML file '" + path + "' does not exist or is not a regular file");
  auto topo = make_native();
  if (!topo)
    return topo.error();
  if (hwloc_topology_set_xml(*topo, path.c_str()) != 0) {
    int err = errno;
    hwloc_topology_destroy(*topo);
    return make_error(errc::parse_error, "hwloc cannot read topology XML file '" + path +
                                             "': " + std::strerror(err) +
                                             " (hwloc 2.9 reads XML format 2.0 only)");
  }
  auto loaded = finish_load(*topo, "topology XML file '" + path + "'");
  if (!loaded)
    return loaded.error();
  return topology{*loaded, snapshot(*loaded, "xml:" + path, false)};
}

expected<topology> topology::load(const topology_config& source) {
  switch (source.source) {
  case topology_source::xml:
    return load_xml(source.xml);
  case topology_source::synthetic:
    return load_synthetic(source.synthetic);
  case topology_source::machine:
    break;
  }
  return load_machine();
}

expected<topology> topology::load_synthetic(const std::string& description) {
  auto topo = make_native();
  if (!topo)
    return topo.error();
  if (hwloc_topology_set_synthetic(*topo, description.c_str()) != 0) {
    hwloc_topology_destroy(*topo);
    return make_error(
        errc::parse_error,
        "invalid synthetic topology '" + description +
            "': expected hwloc synthetic syntax such as 'pack:2 numa:3 core:43 pu:2'");
  }
  auto loaded = finish_load(*topo, "synthetic topology '" + description + "'");
  if (!loaded)
    return loaded.error();
  return topology{*loaded, snapshot(*loaded, "synthetic:" + description, false)};
}

expected<void> topology::bind_this_thread(const std::vector<unsigned>& cpus) const {
  if (!info_.is_this_machine)
    return make_error(errc::unsupported, "cannot bind threads to a topology that is not this "
                                         "machine (" +
                                             info_.source + ")");
  if (cpus.empty())
    return make_error(errc::invalid_argument, "cannot bind a thread to an empty cpu set");
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (auto cpu : cpus)
    hwloc_bitmap_set(set, cpu);
  int rc = hwloc_set_cpubind(static_cast<native_t>(handle_), set, HWLOC_CPUBIND_THREAD);
  int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0)
    return make_error(errc::system_error,
                      std::string{"hwloc_set_cpubind failed: "} + std::strerror(err));
  return {};
}

} // namespace triad
