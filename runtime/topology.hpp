#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// One NUMA domain: the cores and memory that the runtime schedules as a unit.
struct numa_domain {
  unsigned id = 0;                ///< hwloc logical index; the id used in configs and plans
  unsigned os_index = 0;          ///< the OS's NUMA node number (for membind)
  unsigned package = 0;           ///< logical index of the package (socket) holding it
  std::vector<unsigned> cpus;     ///< OS indices of its PUs (hardware threads), ascending
  std::vector<unsigned> cores;    ///< ids of its cores (indices into topology_info::cores)
  std::uint64_t memory_bytes = 0; ///< local memory
};

/// One physical core and its hardware threads.
struct core_info {
  unsigned id = 0;           ///< hwloc logical core index
  unsigned domain = 0;       ///< the NUMA domain whose cpuset holds it
  std::vector<unsigned> pus; ///< OS indices of its PUs, ascending
};

/// Kind of an accelerator OS device.
enum class device_kind {
  gpu,    ///< hwloc GPU OS device (NVML, RSMI, DRM, ...)
  coproc, ///< hwloc co-processor OS device (CUDA, OpenCL, ...)
};

/// Name of a device kind, e.g. "gpu".
std::string_view to_string(device_kind kind) noexcept;

/// An accelerator OS device and where it sits.
struct accelerator {
  std::string name;                    ///< OS device name, e.g. "nvml3", "cuda0"
  device_kind kind = device_kind::gpu; ///< GPU or co-processor
  std::string subtype;    ///< hwloc subtype where known ("CUDA", "OpenCL", ...), else empty
  std::string pci_bus_id; ///< "dddd:bb:dd.f" of its PCI device, empty if not on PCI
  unsigned domain = 0;    ///< nearest NUMA domain (the first local one)
  std::vector<unsigned> local_domains; ///< every domain hwloc reports as local to it
};

/// A plain snapshot of a topology: what planning needs, free of hwloc handles.
struct topology_info {
  std::string source;               ///< "machine", "xml:PATH" or "synthetic:STRING"
  bool is_this_machine = false;     ///< true only for discovery of the running machine
  std::vector<numa_domain> domains; ///< by id
  std::vector<core_info> cores;     ///< by id
  std::vector<accelerator> devices; ///< GPU and co-processor OS devices, in hwloc order
  unsigned pu_count = 0;            ///< hardware threads in all domains

  /// The device with this OS name, or nullptr.
  const accelerator* find_device(std::string_view name) const noexcept;
};

struct topology_config;

/// An hwloc topology, owned; loads from this machine, an XML file or a synthetic string and
/// binds threads on the real machine.
class topology {
public:
  /// Loads what a `[topology]` section names: the machine, its `xml` file or its `synthetic`
  /// description.
  static expected<topology> load(const topology_config& source);
  /// Discovers the running machine, including PCI and OS devices.
  static expected<topology> load_machine();
  /// Loads an hwloc XML file (format 2.0).
  static expected<topology> load_xml(const std::string& path);
  /// Builds a synthetic topology, e.g. "pack:2 numa:3 core:43 pu:2".
  static expected<topology> load_synthetic(const std::string& description);

  topology(topology&&) noexcept;
  topology& operator=(topology&&) noexcept;
  ~topology();

  /// The snapshot taken at load time.
  const topology_info& info() const noexcept { return info_; }

  /// Binds the calling thread to the given PUs (OS indices). Errors unless this is the
  /// running machine; callers skip binding for XML and synthetic topologies.
  expected<void> bind_this_thread(const std::vector<unsigned>& cpus) const;

  /// The native hwloc handle (`hwloc_topology_t`), for memory binding.
  void* native() const noexcept { return handle_; }

private:
  topology(void* handle, topology_info info);

  void* handle_ = nullptr;
  topology_info info_;
};

} // namespace triad
