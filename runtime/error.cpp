#include "runtime/error.hpp"

namespace triad {

std::string_view to_string(errc code) noexcept {
  switch (code) {
  case errc::invalid_argument:
    return "invalid_argument";
  case errc::not_found:
    return "not_found";
  case errc::parse_error:
    return "parse_error";
  case errc::unsupported:
    return "unsupported";
  case errc::busy:
    return "busy";
  case errc::exhausted:
    return "exhausted";
  case errc::io_error:
    return "io_error";
  case errc::system_error:
    return "system_error";
  case errc::stopped:
    return "stopped";
  case errc::corrupted:
    return "corrupted";
  case errc::timed_out:
    return "timed_out";
  case errc::overloaded:
    return "overloaded";
  case errc::cancelled:
    return "cancelled";
  case errc::unavailable:
    return "unavailable";
  }
  return "unknown";
}

std::string error::to_string() const {
  std::string out{triad::to_string(code)};
  out += ": ";
  out += message;
  return out;
}

} // namespace triad
