#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/defaults.hpp"
#include "runtime/options.hpp"

/// The runtime's own config sections: `[topology]` and `[scheduler]`. Each area declares its
/// sections this way (devices/config.hpp, tools/config.hpp, actors/config.hpp,
/// server/config.hpp); the node composes them (actors/node_config.hpp).
namespace triad {

/// Where the node learns its machine's layout.
enum class topology_source {
  machine,   ///< hwloc discovery of this machine (threads are bound only here)
  xml,       ///< an hwloc XML file (format 2.0), for planning other machines
  synthetic, ///< an hwloc synthetic description such as "pack:2 numa:3 core:43 pu:2"
};

/// "machine", "xml" or "synthetic".
std::string_view to_string(topology_source value) noexcept;

/// `[topology]`: where the topology comes from.
struct topology_config {
  topology_source source = topology_source::machine; ///< `source`: "machine", "xml", "synthetic"
  std::string xml; ///< `xml`: path of the XML file (source = "xml"); relative to the config file
  std::string synthetic; ///< `synthetic`: hwloc synthetic string (source = "synthetic")
  bool bind_threads =
      defaults::topology::bind_threads; ///< `bind_threads`: pin threads (machine only)
  bool operator==(const topology_config&) const = default;
};

/// `[scheduler]`: the per-domain CAF actor systems.
struct scheduler_config {
  /// `orchestration_domains`: NUMA domain ids hosting orchestration actors; empty = automatic.
  std::vector<unsigned> orchestration_domains;
  /// `threads_per_domain`: CAF workers per domain; 0 = the placement plan's count (one per
  /// worker cpu of the domain, one when all its cpus run driver threads).
  std::size_t threads_per_domain = defaults::scheduler::threads_per_domain;
  /// `moderate_sleep_us`: after its polls, an idle worker polls as many times again with a sleep
  /// this long between them before it blocks, in microseconds (0: it blocks at once).
  std::chrono::microseconds moderate_sleep = defaults::scheduler::moderate_sleep;
  /// `poll_attempts`: times an idle worker checks its domain's queue (with a CPU pause after
  /// each) before it sleeps; at least 1.
  std::size_t poll_attempts = defaults::scheduler::poll_attempts;
  /// `virtual_time`: the node's clock jumps over idle gaps (see node_clock): simulated devices
  /// and modelled tools then run as fast as the CPU work allows. Off: real time.
  bool virtual_time = defaults::scheduler::virtual_time;
  bool operator==(const scheduler_config&) const = default;
};

/// The `[topology]` section's keys.
const options::section<topology_config>& topology_section();
/// The `[scheduler]` section's keys.
const options::section<scheduler_config>& scheduler_section();

} // namespace triad
