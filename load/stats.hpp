#pragma once

#include <cstddef>
#include <vector>

#include <boost/json/object.hpp>

namespace triad::load {

/// The q-quantile (0 <= q <= 1) of ascending `sorted` data, interpolating linearly between the
/// two closest ranks (numpy's default "linear" method, which other serving benchmarks report):
/// rank h = q * (n - 1), value = x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h]).
/// NaN for no data.
double quantile(const std::vector<double>& sorted, double q);

/// A sample summarised: count, mean, min, max and the percentiles triad-load reports.
struct distribution {
  std::size_t count = 0; ///< values
  double mean = 0;       ///< arithmetic mean
  double min = 0;        ///< smallest
  double max = 0;        ///< largest
  double p50 = 0;        ///< median
  double p90 = 0;        ///< 90th percentile
  double p95 = 0;        ///< 95th percentile
  double p99 = 0;        ///< 99th percentile
  double p999 = 0;       ///< 99.9th percentile
};

/// Summarises `values` (any order; empty gives count 0 and zeros).
distribution summarize(std::vector<double> values);

/// {"count", "mean", "min", "max", "p50", "p90", "p95", "p99", "p99.9"}, values times `scale`
/// (e.g. 1e3 to report seconds as milliseconds).
boost::json::object to_json(const distribution& d, double scale = 1.0);

} // namespace triad::load
