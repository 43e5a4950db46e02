#pragma once

#include <memory>

#include "devices/backend.hpp"
#include "devices/config.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/gguf_model.hpp"
#include "runtime/memory.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// Where a cpu device computes: its OpenMP team, one entry per thread with the PUs (OS
/// indices) of one core of the plan's compute set, and the topology that binds them (null: the
/// team is sized but not bound, as on XML or synthetic topologies).
struct compute_placement {
  std::vector<std::vector<unsigned>> team; ///< empty: the process's default team
  const topology* topo = nullptr;          ///< binds on this machine only
};

/// The model a node serves: its shape and, for a model file, the checked and mapped file.
struct model_source {
  model_shape shape;                     ///< what devices compute and routers plan for
  std::shared_ptr<const gguf_file> file; ///< null: a preset's random weights
  std::string served_name;               ///< the name clients see

  /// Whether the weights come from a file.
  bool from_file() const noexcept { return file != nullptr; }
  /// What identifies the weights, for KV kept beyond this process (the KV store's disk tier):
  /// KV computed by other weights must never be read as this model's. A hash of the shape
  /// (with a preset's seed) and, for a file, of its size, its metadata keys, its tensors'
  /// names, types and shapes, and their first and last 4 KiB.
  std::uint64_t fingerprint() const;
};

/// Opens `[model]`: the GGUF file at `path` (opened and checked whole: architecture, every
/// tensor's shape and type), else the preset. One file is mapped once per process: devices and
/// the node that open the same path share the mapping. Errors name the file and what is wrong.
expected<model_source> open_model(const model_config& model);

/// Checks, before anything starts, that every `[[devices]]` entry can run here: a cpu device
/// needs a model file or a cpu preset and a `[model].dtype` this CPU runs (choose_cpu_compute's error, which
/// names the CPU's ISA and the dtypes it can run). A config error: triad-node exits 2.
expected<void> check_backends(const device_set& node);

/// The dtype sim and cuda devices model: bf16, as accelerators run, unless `[model].dtype` is
/// "f32".
dtype accelerator_dtype(const device_set& node) noexcept;

/// What `[model].dtype` means on this CPU for cpu devices (see choose_cpu_compute).
expected<cpu_compute_choice> cpu_compute_for(const device_set& node);

/// Builds the backend a `[[devices]]` entry asks for: `cpu` runs the `[model]` preset for
/// real, `sim` models the named profile (a built-in or a `[[sim_profiles]]` entry) for the same
/// model; `cuda` is refused in this build with a message saying so. KV pages of a cpu device
/// come from `storage` (the device's domain arena), its budget is the entry's `memory_mib`; a
/// cpu device computes on `compute` (the plan's compute set). Never throws.
expected<std::unique_ptr<backend>> make_backend(const device_set& node, const device_config& dev,
                                                std::shared_ptr<arena> storage,
                                                const compute_placement& compute = {});

} // namespace triad
