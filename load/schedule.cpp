#include "load/schedule.hpp"

#include <charconv>
#include <cmath>
#include <random>

#include "load/detail/text.hpp"

namespace triad::load {

using detail::number_text;
using detail::split_colons;
using detail::to_number;

expected<arrival_spec> parse_arrival(std::string_view text) {
  auto forms = "; allowed: poisson:RATE, gamma:RATE:CV or constant:RATE (RATE and CV > 0)";
  auto parts = split_colons(text);
  arrival_spec a;
  auto bad = [&](std::string why) {
    return make_error(errc::invalid_argument,
                      "arrival '" + std::string{text} + "': " + why + forms);
  };
  if (parts[0] == "poisson")
    a.kind = arrival_kind::poisson;
  else if (parts[0] == "gamma")
    a.kind = arrival_kind::gamma;
  else if (parts[0] == "constant")
    a.kind = arrival_kind::constant;
  else
    return bad("unknown process '" + std::string{parts[0]} + "'");
  std::size_t want = a.kind == arrival_kind::gamma ? 3 : 2;
  if (parts.size() != want)
    return bad("expected " + std::to_string(want - 1) + " number(s) after the name");
  if (!to_number(parts[1], a.rate) || a.rate <= 0)
    return bad("RATE '" + std::string{parts[1]} + "' is not a number > 0");
  if (want == 3 && (!to_number(parts[2], a.cv) || a.cv <= 0))
    return bad("CV '" + std::string{parts[2]} + "' is not a number > 0");
  return a;
}

std::string to_string(const arrival_spec& a) {
  const auto& num = number_text;
  switch (a.kind) {
  case arrival_kind::poisson:
    return "poisson:" + num(a.rate);
  case arrival_kind::gamma:
    return "gamma:" + num(a.rate) + ":" + num(a.cv);
  case arrival_kind::constant:
    return "constant:" + num(a.rate);
  }
  return "unknown";
}

std::vector<double> arrival_times(const arrival_spec& a, std::size_t count, std::uint64_t seed) {
  std::vector<double> out;
  out.reserve(count);
  std::mt19937_64 rng{seed};
  double mean_gap = 1.0 / a.rate;
  // Gamma gaps: shape k = 1 / cv^2, scale = mean / k (mean k * scale = 1 / rate).
  double shape = 1.0 / (a.cv * a.cv);
  std::gamma_distribution<double> gamma{shape, mean_gap / shape};
  std::exponential_distribution<double> expo{a.rate};
  double t = 0;
  for (std::size_t i = 0; i < count; ++i) {
    switch (a.kind) {
    case arrival_kind::poisson:
      t += expo(rng);
      break;
    case arrival_kind::gamma:
      t += gamma(rng);
      break;
    case arrival_kind::constant:
      t = mean_gap * static_cast<double>(i + 1);
      break;
    }
    out.push_back(t);
  }
  return out;
}

} // namespace triad::load
