#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace triad {

/// The plane of the OI/CF paper (arXiv 2601.22001): a step's operational intensity (FLOP per
/// byte moved) against its capacity footprint (bytes resident: weights and the KV it reads),
/// binned in quarter decades, so a device can count its modelled steps per cell and a report
/// can draw them over the device's roofline ridge and capacity wall without keeping each step.
struct oi_cf_grid {
  static constexpr int per_decade = 4;        ///< cells per decade on both axes
  static constexpr double oi_low = 0.1;       ///< FLOP/byte at the first cell's lower edge
  static constexpr double cf_low = 1e8;       ///< bytes at the first cell's lower edge
  static constexpr std::size_t oi_cells = 24; ///< 0.1 .. 1e5 FLOP/byte
  static constexpr std::size_t cf_cells = 28; ///< 100 MB .. 1 PB
  static constexpr std::size_t cells = oi_cells * cf_cells; ///< row-major, a row per OI cell

  /// The cell of a step; values past either end count in the edge cells.
  static std::size_t cell(double oi, double cf) noexcept {
    return index(oi, oi_low, oi_cells) * cf_cells + index(cf, cf_low, cf_cells);
  }
  /// The lower edge of OI cell `i` (FLOP/byte); `oi_edge(oi_cells)` is the top edge.
  static double oi_edge(std::size_t i) noexcept { return edge(oi_low, i); }
  /// The lower edge of CF cell `j` (bytes); `cf_edge(cf_cells)` is the top edge.
  static double cf_edge(std::size_t j) noexcept { return edge(cf_low, j); }

private:
  static std::size_t index(double v, double low, std::size_t n) noexcept {
    if (!(v > low)) // below the range, zero, or NaN
      return 0;
    const auto k = static_cast<std::size_t>(std::floor(std::log10(v / low) * per_decade));
    return std::min(k, n - 1);
  }
  static double edge(double low, std::size_t k) noexcept {
    return low * std::pow(10.0, static_cast<double>(k) / per_decade);
  }
};

} // namespace triad
