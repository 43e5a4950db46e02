#include "load/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace triad::load {

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty())
    return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  double h = q * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<std::size_t>(std::floor(h));
  auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

distribution summarize(std::vector<double> values) {
  distribution d;
  if (values.empty())
    return d;
  std::sort(values.begin(), values.end());
  d.count = values.size();
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(d.count);
  d.min = values.front();
  d.max = values.back();
  d.p50 = quantile(values, 0.50);
  d.p90 = quantile(values, 0.90);
  d.p95 = quantile(values, 0.95);
  d.p99 = quantile(values, 0.99);
  d.p999 = quantile(values, 0.999);
  return d;
}

boost::json::object to_json(const distribution& d, double scale) {
  return {{"count", d.count},     {"mean", d.mean * scale}, {"min", d.min * scale},
          {"max", d.max * scale}, {"p50", d.p50 * scale},   {"p90", d.p90 * scale},
          {"p95", d.p95 * scale}, {"p99", d.p99 * scale},   {"p99.9", d.p999 * scale}};
}

} // namespace triad::load
