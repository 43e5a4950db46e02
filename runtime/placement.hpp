#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// A device as the planner sees it: a driver thread, and for a device that computes on this
/// machine's cores, a set of them. (The planner knows no backends or roles: the node says
/// what each device needs, actors/node_config.hpp placement_of.)
struct placement_device {
  std::string name;               ///< the device's config name
  std::string label;              ///< what it does, for reports ("prefill")
  std::string topology_device;    ///< hwloc OS device it stands for, empty if none
  std::optional<unsigned> domain; ///< the configured domain, when it has no topology device
  bool computes_on_cpus = false;  ///< whether it computes on cores of its domain
  std::size_t compute_cores = 0;  ///< cores it computes on; 0 = a share of the free ones
};

/// What one node asks the planner to place.
struct placement_request {
  std::vector<unsigned> orchestration_domains; ///< `[scheduler]`; empty = automatic
  unsigned tool_cores = 1;                     ///< `[tools].cores`
  std::vector<unsigned> tool_domains;          ///< `[tools].domains`; empty = automatic
  std::vector<placement_device> devices;       ///< in config order
};

/// Where one device's actor and driver thread go.
struct device_placement {
  std::string name;            ///< the device's config name
  std::string topology_device; ///< hwloc OS device it stands for, empty if none
  std::string role;            ///< what it does (placement_device::label)
  unsigned domain = 0;         ///< the domain hosting its device actor (nearest to the device)
  /// The core its driver thread binds to; for a `cpu` device the first (lowest) core of
  /// compute_cores, where its OpenMP master thread runs.
  unsigned driver_core = 0;
  unsigned driver_cpu = 0;              ///< the first PU (OS index) of that core
  bool shared_core = false;             ///< true when other drivers bind to the same core
  std::vector<std::string> shares_with; ///< the other drivers on that core
  /// A `cpu` device's compute cores (core ids, ascending) in its domain, where its oneDNN
  /// OpenMP team runs; empty for sim and cuda devices.
  std::vector<unsigned> compute_cores;
  /// The PUs (OS indices, ascending) of compute_cores; empty for sim and cuda devices.
  std::vector<unsigned> compute_cpus;
};

/// What one NUMA domain hosts.
struct domain_plan {
  unsigned domain = 0;               ///< domain id
  bool orchestration = false;        ///< hosts session, request and router actors
  std::vector<unsigned> tool_cpus;   ///< PUs (OS indices) reserved for tool processes
  std::vector<std::string> devices;  ///< device actors homed here
  std::vector<unsigned> worker_cpus; ///< PUs the domain's actor-system workers bind to
  /// Worker threads the domain runs when the config leaves it to the plan: one per worker cpu,
  /// but one when every cpu of the domain runs a driver thread (more workers would only take
  /// turns with the drivers and each other on the same cores).
  std::size_t worker_threads = 0;
  /// True when this domain needs an actor system (it hosts orchestration, tools or devices).
  bool active() const noexcept { return orchestration || !tool_cpus.empty() || !devices.empty(); }
};

/// A placement plan: the pure answer to "who runs where" for one topology and config.
struct plan {
  std::vector<domain_plan> domains;      ///< one entry per topology domain, by id
  std::vector<device_placement> devices; ///< in config order
  std::vector<std::string> notes;        ///< compromises the planner made (sharing, overlap)

  /// The plan of the first orchestration domain.
  const domain_plan& orchestration_domain() const;
  /// The placement of the named device, or nullptr.
  const device_placement* find_device(std::string_view name) const noexcept;
};

/// Plans a node on a topology. Rules:
/// - each device lives in the nearest domain of its topology device (else its configured
///   domain, else domains round-robin); orchestration goes to the configured domains or the
///   first domain with cores;
/// - each sim or cuda device's driver thread gets a core of its own in that domain, from the
///   highest core down, while cores allow, and otherwise shares the least-loaded core there
///   (recorded in shares_with and notes);
/// - tool cores come from the configured tool domains (else the non-orchestration domains,
///   then the orchestration domain), from the lowest core up, avoiding those driver cores
///   while possible;
/// - per domain, the cores available to its `cpu` devices are the domain's cores minus the tool
///   cores planned there, minus the sim/cuda driver cores, and minus one core (the lowest left)
///   kept for actor workers when the domain hosts orchestration, while that leaves at least the
///   cores the domain's cpu devices ask for (one per automatic device); else all of the
///   domain's cores (the sets then overlap workers, tools or drivers: a note says so). A device
///   with `compute_cores = N` takes N of them (an error naming the key when N exceeds the
///   domain's cores); automatic devices split the rest evenly, the remainder to the first.
///   Sets are contiguous core ranges handed out in config order from the highest core down, so
///   two cpu devices' sets are disjoint while the domain has the cores they ask for; when it
///   has fewer (e.g. fewer cores than cpu devices), the ranges wrap round-robin and devices
///   share cores (a note names who shares). A cpu device's driver core is the first (lowest)
///   core of its set, driver_cpu that core's first PU;
/// - workers bind to their domain's cpus minus driver, compute and tool cpus; if that leaves
///   none, minus driver and compute cpus (sharing the tools' cpus); if that leaves none, all of
///   the domain's cpus with one worker thread (notes say so).
/// Errors name the offending config key.
expected<plan> make_plan(const topology_info& topo, const placement_request& config);

} // namespace triad
