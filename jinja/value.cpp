#include "jinja/value.hpp"

#include <charconv>
#include <cmath>

namespace triad::jinja {

value value::from_json(const boost::json::value& v) {
  switch (v.kind()) {
  case boost::json::kind::null:
    return none();
  case boost::json::kind::bool_:
    return boolean(v.get_bool());
  case boost::json::kind::int64:
    return integer(v.get_int64());
  case boost::json::kind::uint64:
    return integer(static_cast<std::int64_t>(v.get_uint64()));
  case boost::json::kind::double_: {
    double d = v.get_double();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9e15)
      return integer(static_cast<std::int64_t>(d));
    return number(d);
  }
  case boost::json::kind::string:
    return string(std::string{v.get_string()});
  case boost::json::kind::array: {
    array out;
    for (const auto& e : v.get_array())
      out.push_back(from_json(e));
    return list(std::move(out));
  }
  case boost::json::kind::object: {
    object out;
    for (const auto& [k, e] : v.get_object())
      out.emplace_back(std::string{k}, from_json(e));
    return dict(std::move(out));
  }
  }
  return {};
}

bool value::truthy() const noexcept {
  switch (k) {
  case kind::undefined:
  case kind::none:
    return false;
  case kind::boolean:
    return b;
  case kind::integer:
    return i != 0;
  case kind::number:
    return d != 0;
  case kind::string:
    return !s.empty();
  case kind::list:
    return !items->empty();
  case kind::dict:
    return !members->empty();
  case kind::callable:
    return true;
  }
  return false;
}

value value::get(std::string_view key) const {
  if (k == kind::dict)
    for (const auto& [name, v] : *members)
      if (name == key)
        return v;
  return {};
}

void value::set(std::string_view key, value v) {
  if (k != kind::dict)
    return;
  for (auto& [name, existing] : *members)
    if (name == key) {
      existing = std::move(v);
      return;
    }
  members->emplace_back(std::string{key}, std::move(v));
}

namespace {

std::string number_text(double d) {
  // JavaScript's shortest round-trip form (JSON.stringify), which std::to_chars also gives.
  if (std::isnan(d) || std::isinf(d))
    return "null";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string{buf, r.ptr};
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20) {
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

void python_repr(const value& v, std::string& out) {
  if (v.is_string()) {
    out += '\'';
    out += v.s;
    out += '\'';
  } else {
    out += to_output(v);
  }
}

} // namespace

std::string to_output(const value& v) {
  switch (v.k) {
  case value::kind::undefined:
    return {};
  case value::kind::none:
    return {};
  case value::kind::boolean:
    return v.b ? "true" : "false";
  case value::kind::integer:
    return std::to_string(v.i);
  case value::kind::number: {
    auto t = number_text(v.d);
    if (t.find_first_of(".e") == std::string::npos)
      t += ".0";
    return t;
  }
  case value::kind::string:
    return v.s;
  case value::kind::list: {
    std::string out = "[";
    for (std::size_t i = 0; i < v.items->size(); ++i) {
      if (i)
        out += ", ";
      python_repr((*v.items)[i], out);
    }
    return out + "]";
  }
  case value::kind::dict: {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, e] : *v.members) {
      if (!first)
        out += ", ";
      first = false;
      out += '\'' + k + "': ";
      python_repr(e, out);
    }
    return out + "}";
  }
  case value::kind::callable:
    return "<function>";
  }
  return {};
}

std::string to_json(const value& v, int indent, int depth) {
  switch (v.k) {
  case value::kind::undefined:
  case value::kind::none:
  case value::kind::callable:
    return "null";
  case value::kind::boolean:
    return v.b ? "true" : "false";
  case value::kind::integer:
    return std::to_string(v.i);
  case value::kind::number:
    return number_text(v.d);
  case value::kind::string: {
    std::string out;
    json_string(v.s, out);
    return out;
  }
  case value::kind::list:
  case value::kind::dict: {
    const std::string pad = indent ? "\n" + std::string(static_cast<std::size_t>(indent * depth), ' ') : "";
    const std::string child = indent ? pad + std::string(static_cast<std::size_t>(indent), ' ') : "";
    const std::string sep = indent ? "," : ", ";
    std::vector<std::string> parts;
    if (v.k == value::kind::list) {
      for (const auto& e : *v.items)
        parts.push_back(to_json(e, indent, depth + 1));
    } else {
      for (const auto& [k, e] : *v.members) {
        std::string key;
        json_string(k, key);
        parts.push_back(key + ": " + to_json(e, indent, depth + 1));
      }
    }
    const char open = v.k == value::kind::list ? '[' : '{';
    const char close = v.k == value::kind::list ? ']' : '}';
    std::string out(1, open);
    if (indent && !parts.empty()) {
      for (std::size_t i = 0; i < parts.size(); ++i)
        out += (i ? sep : std::string{}) + child + parts[i];
      out += pad;
    } else {
      for (std::size_t i = 0; i < parts.size(); ++i)
        out += (i ? sep : std::string{}) + parts[i];
    }
    out += close;
    return out;
  }
  }
  return "null";
}

bool equal(const value& a, const value& b) {
  if (a.is_number() && b.is_number())
    return a.as_double() == b.as_double();
  if (a.k != b.k)
    return false;
  switch (a.k) {
  case value::kind::undefined:
  case value::kind::none:
    return true;
  case value::kind::boolean:
    return a.b == b.b;
  case value::kind::string:
    return a.s == b.s;
  case value::kind::list:
    if (a.items->size() != b.items->size())
      return false;
    for (std::size_t i = 0; i < a.items->size(); ++i)
      if (!equal((*a.items)[i], (*b.items)[i]))
        return false;
    return true;
  case value::kind::dict:
    if (a.members->size() != b.members->size())
      return false;
    for (const auto& [k, e] : *a.members)
      if (!equal(e, b.get(k)))
        return false;
    return true;
  default:
    return a.fn == b.fn;
  }
}

} // namespace triad::jinja
