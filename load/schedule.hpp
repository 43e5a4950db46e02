#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"

namespace triad::load {

/// How requests (or sessions) arrive in an open-loop run.
enum class arrival_kind : std::uint8_t {
  poisson,  ///< exponential gaps at `rate` per second (memoryless)
  gamma,    ///< gamma-distributed gaps at `rate` per second with coefficient of variation `cv`:
            ///< cv 1 is Poisson, cv > 1 bursty, cv < 1 smoother
  constant, ///< exactly 1 / rate apart
};

/// An arrival process: "poisson:RATE", "gamma:RATE:CV" or "constant:RATE" on the command line.
struct arrival_spec {
  arrival_kind kind = arrival_kind::poisson; ///< the process
  double rate = 1.0;                         ///< arrivals per second, > 0
  double cv = 1.0;                           ///< gamma only: std-dev / mean of the gaps, > 0
};

/// Parses "poisson:10", "gamma:10:2.5" or "constant:4"; errors name the text and the forms.
expected<arrival_spec> parse_arrival(std::string_view text);

/// "poisson:10", ... (what parse_arrival reads back).
std::string to_string(const arrival_spec& a);

/// The intended send times, in seconds from the start, of `count` arrivals: computed up front
/// from `seed`, so a run's schedule does not depend on how fast the client or server is (no
/// coordinated omission). The first arrival is at its first gap, not at 0.
std::vector<double> arrival_times(const arrival_spec& a, std::size_t count, std::uint64_t seed);

} // namespace triad::load
