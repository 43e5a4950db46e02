#include "load/schedule.hpp"

#include <charconv>
#include <cmath>
#include <random>

namespace triad::load {

namespace {

bool number(std::string_view s, double& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && std::isfinite(out);
}

} // namespace

expected<arrival_spec> parse_arrival(std::string_view text) {
  auto forms = "; allowed: poisson:RATE, gamma:RATE:CV or constant:RATE (RATE and CV > 0)";
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    auto colon = text.find(':', at);
    parts.push_back(text.substr(at, colon - at));
    if (colon == std::string_view::npos)
      break;
    at = colon + 1;
  }
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
  if (!number(parts[1], a.rate) || a.rate <= 0)
    return bad("RATE '" + std::string{parts[1]} + "' is not a number > 0");
  if (want == 3 && (!number(parts[2], a.cv) || a.cv <= 0))
    return bad("CV '" + std::string{parts[2]} + "' is not a number > 0");
  return a;
}

std::string to_string(const arrival_spec& a) {
  auto num = [](double x) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string{buf, r.ptr};
  };
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
