#pragma once

#include <cstdint>
#include <optional>

#include "runtime/node_clock.hpp"

namespace triad {

/// The one delayed message an actor keeps armed for the earliest of its deadlines (a tool
/// call's timeout, a KV pin's time-to-live): arming for a time well before the armed one arms
/// anew, and the earlier message, numbered, is then recognised as stale when it arrives. Not
/// thread-safe: its owner's actor or mutex guards it.
class deadline_alarm {
public:
  using time_point = node_clock::time_point; ///< the node's clock
  using duration = node_clock::duration;     ///< the node's clock

  /// `slack`: a deadline less than this before the armed one is left to it (one check covers
  /// both), so a stream of near deadlines arms once.
  explicit deadline_alarm(duration slack)
      : slack_(slack) {}

  /// Arms for `t` unless the armed check comes by `t + slack`: the number the owner sends
  /// with its delayed message, or nothing when no message is needed.
  std::optional<std::uint64_t> arm(time_point t) {
    if (armed_ && t + slack_ >= *armed_)
      return std::nullopt;
    armed_ = t;
    return ++number_;
  }

  /// On the owner's message `number`: true (and disarmed) when it is the latest armed, false
  /// when a later arm made it stale.
  bool fire(std::uint64_t number) {
    if (!armed_ || number != number_)
      return false;
    armed_.reset();
    return true;
  }

  /// When the armed check is due (nothing when none is armed).
  std::optional<time_point> armed_at() const { return armed_; }

private:
  duration slack_;
  std::optional<time_point> armed_;
  std::uint64_t number_ = 0;
};

} // namespace triad
