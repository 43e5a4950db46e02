#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace triad::bench {

/// The steps of one pool of alike devices (one profile and group size, one role) in one
/// setting, counted per cell of oi_cf_grid.
struct oi_cf_panel {
  std::string setting;               ///< the benchmark setting
  std::string role;                  ///< "prefill", "decode" or "both"
  std::string profile;               ///< a built-in sim profile
  std::uint32_t tensor_parallel = 1; ///< devices per group
  std::size_t devices = 0;           ///< groups in the pool
  std::vector<std::uint64_t> steps;  ///< summed over the pool, oi_cf_grid's cells
};

/// Writes an HTML page with one SVG per panel: the pool's steps on the OI/CF plane (log
/// axes, a cell's shade by its step count), the roofline's ridge (peak FLOP/s over the fast
/// tier's bandwidth: steps left of it are memory-bound) and the capacity walls (the fast
/// tier's bytes and all tiers' bytes of the group). Errors name the file.
expected<void> write_oi_cf_report(const std::string& path, const std::string& title,
                                  const std::vector<oi_cf_panel>& panels);

} // namespace triad::bench
