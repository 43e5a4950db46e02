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

bool json_has_type(const boost::json::value& v, std::string_view type) {
  if (type == "number")
    return v.is_number();
  if (type == "integer")
    return v.is_int64() || v.is_uint64() ||
           (v.is_double() &&
            v.get_double() == static_cast<double>(static_cast<long long>(v.get_double())));
  if (type == "string")
    return v.is_string();
  if (type == "boolean")
    return v.is_bool();
  if (type == "null")
    return v.is_null();
  if (type == "array")
    return v.is_array();
  if (type == "object")
    return v.is_object();
  return false;
}

} // namespace triad
