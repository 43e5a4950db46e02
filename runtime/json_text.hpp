#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

namespace triad {

/// A value as JSON text for an error message, cut to `max` characters ("..." at the end when
/// cut), so a huge value does not flood the message.
std::string json_excerpt(const boost::json::value& v, std::size_t max = 60);

/// A JSON number that is a whole number (an integer, or a float such as 3.0) within int64,
/// into `out`; false for anything else.
bool json_whole(const boost::json::value& v, std::int64_t& out);

/// Whether `v` has the JSON Schema type `type` ("string", "number", "integer" (a float such as
/// 3.0 counts), "boolean", "null", "array", "object"); false for any other name.
bool json_has_type(const boost::json::value& v, std::string_view type);

} // namespace triad
