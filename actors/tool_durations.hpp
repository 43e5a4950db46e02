#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/defaults.hpp"

namespace triad {

/// The recent durations of each tool, shared by a node's request actors (any thread): the pin
/// policy keeps a parked sequence on its device for the p90 of its tool's durations.
class tool_durations {
public:
  /// Keeps the last `history` durations of each tool (at least one).
  explicit tool_durations(std::size_t history = defaults::orchestration::tool_duration_history)
      : history_(std::max<std::size_t>(history, 1)) {}

  /// Notes one call of `tool` that took `took`.
  void record(const std::string& tool, std::chrono::milliseconds took) {
    std::lock_guard<std::mutex> lock{mutex_};
    auto& seen = seen_[tool];
    seen.push_back(took);
    if (seen.size() > history_)
      seen.pop_front();
  }

  /// The 90th percentile of the tool's recent durations (nearest rank); nothing before its
  /// first call.
  std::optional<std::chrono::milliseconds> p90(const std::string& tool) const {
    std::vector<std::chrono::milliseconds> xs;
    {
      std::lock_guard<std::mutex> lock{mutex_};
      auto it = seen_.find(tool);
      if (it == seen_.end() || it->second.empty())
        return std::nullopt;
      xs.assign(it->second.begin(), it->second.end());
    }
    auto rank = (xs.size() * 9 + 9) / 10; // ceil(0.9 n), 1-based
    auto nth = xs.begin() + static_cast<std::ptrdiff_t>(rank - 1);
    std::nth_element(xs.begin(), nth, xs.end());
    return *nth;
  }

private:
  mutable std::mutex mutex_;
  std::size_t history_;
  std::unordered_map<std::string, std::deque<std::chrono::milliseconds>> seen_;
};

} // namespace triad
