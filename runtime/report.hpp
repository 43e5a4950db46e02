#pragma once

#include <string>

#include <boost/json/object.hpp>

#include "runtime/placement.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// The topology as JSON: `source`, `domains` (id, cpus, cores, memory), `devices` (name, kind,
/// nearest domain). Used by triad-topo and by the node's start-up report.
boost::json::object to_json(const topology_info& topo);

/// The placement plan as JSON: per-domain roles and cpus, per-device driver cores and (cpu
/// devices) `compute_cores` and `compute_cpus` arrays, notes.
boost::json::object to_json(const plan& p);

/// The topology as readable text, one line per domain and device.
std::string describe(const topology_info& topo);

/// The plan as readable text, one line per domain and device (with a cpu device's compute
/// cores and cpus), then the notes.
std::string describe(const plan& p);

/// Compact cpu list such as "0-3,8,10-11".
std::string cpu_list(const std::vector<unsigned>& cpus);

} // namespace triad
