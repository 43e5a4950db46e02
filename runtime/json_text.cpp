#include "runtime/json_text.hpp"

#include <cmath>
#include <limits>

#include <boost/json/serialize.hpp>

namespace triad {

std::string json_excerpt(const boost::json::value& v, std::size_t max) {
  auto s = boost::json::serialize(v);
  return s.size() > max ? s.substr(0, max - 3) + "..." : s;
}

bool json_whole(const boost::json::value& v, std::int64_t& out) {
  if (v.is_int64()) {
    out = v.get_int64();
    return true;
  }
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return false;
    out = static_cast<std::int64_t>(v.get_uint64());
    return true;
  }
  if (!v.is_double())
    return false;
  double d = v.get_double();
  if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9e18)
    return false;
  out = static_cast<std::int64_t>(d);
  return true;
}

} // namespace triad
