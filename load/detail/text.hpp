#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace triad::load::detail {

/// A whole string as a finite number ("12", "0.5", "1e3"); false for anything else.
inline bool to_number(std::string_view s, double& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && std::isfinite(out);
}

/// The shortest text that reads back as `x`.
inline std::string number_text(double x) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string{buf, r.ptr};
}

/// The parts of "a:b:c" between the colons (one part when there is none).
inline std::vector<std::string_view> split_colons(std::string_view text) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    auto colon = text.find(':', at);
    parts.push_back(text.substr(at, colon - at));
    if (colon == std::string_view::npos)
      return parts;
    at = colon + 1;
  }
}

} // namespace triad::load::detail
