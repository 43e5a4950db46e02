#pragma once

#include <ostream>
#include <string>

#include "runtime/bridge.hpp"
#include "runtime/error.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// Lets Boost.Test print error codes in failed assertions.
inline std::ostream& operator<<(std::ostream& os, errc code) {
  return os << to_string(code);
}

/// Lets Boost.Test print submit results in failed assertions.
inline std::ostream& operator<<(std::ostream& os, submit_result value) {
  return os << to_string(value);
}

/// Lets Boost.Test print device kinds in failed assertions.
inline std::ostream& operator<<(std::ostream& os, device_kind value) {
  return os << to_string(value);
}

/// The error's message, or nothing when there is none: for BOOST_REQUIRE_MESSAGE on an
/// `expected`.
template<class T>
std::string why(const expected<T>& e) {
  return e ? std::string{} : e.error().message;
}

} // namespace triad
