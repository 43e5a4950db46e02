#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>

namespace triad::bench {

/// A benchmark's output: named metrics and same-run ratios, written as
/// {"metrics": {...}, "ratios": {...}, "quick": bool}.
struct report {
  boost::json::object metrics; ///< absolute figures (noisy on shared machines)
  boost::json::object ratios;  ///< ratios measured in the same run (what to compare)
  bool quick = false;          ///< whether --quick sizes were used

  /// Writes the JSON to `path`; returns false (and prints why) when it cannot.
  bool write(const std::string& path) const;
  /// Prints metrics and ratios, one per line.
  void print() const;
  /// The end of a benchmark: prints, writes `json_path` unless empty; the process's exit code
  /// (1 when the file could not be written).
  int finish(const std::string& json_path) const;
};

/// What every benchmark's command line has: `--json PATH` and `--quick`.
struct common_options {
  std::string json_path; ///< where the report goes (empty: printed only)
  bool quick = false;    ///< smaller inputs, under 60 s
};

/// Whether a file could be written at `path` (it exists and is writable, or its directory is),
/// found without creating it: output paths are checked before a long run, and a run that fails
/// later leaves nothing behind.
bool writable(const std::string& path);

/// A CLI11 check of an output path (writable), so a bad one ends the run before it starts.
inline CLI::Validator writable_path() {
  return {[](std::string& path) { return writable(path) ? std::string{} : "cannot write " + path; },
          "PATH"};
}

/// Adds --json and --quick to `app`; `quick_help` says what --quick shrinks. An unwritable
/// --json path is an error before the run.
inline void add_common_options(CLI::App& app, common_options& out, const std::string& quick_help) {
  app.add_option("--json", out.json_path, "write {\"metrics\", \"ratios\"} to this file")
      ->check(writable_path());
  app.add_flag("--quick", out.quick, quick_help + " (under 60 s)");
}

/// The p-quantile (0..1) of a non-empty sample, nearest rank (copied, so the caller's order is
/// kept).
inline double percentile(std::vector<double> xs, double p) {
  std::sort(xs.begin(), xs.end());
  auto i = static_cast<std::size_t>(p * static_cast<double>(xs.size() - 1) + 0.5);
  return xs[std::min(i, xs.size() - 1)];
}

/// The median of a sample (copied, so the caller's order is kept).
inline double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

} // namespace triad::bench
