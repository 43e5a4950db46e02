#include "jinja/value.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
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

// JavaScript's Number.prototype.toString (what JSON.stringify and @huggingface/jinja print):
// the shortest digits that round-trip, in fixed notation for 1e-7 <= |d| < 1e21, else as
// d.ddde+N.
std::string number_text(double d) {
  if (std::isnan(d) || std::isinf(d))
    return "null";
  if (d == 0)
    return "0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci{buf, r.ptr};
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const auto e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int n = std::stoi(sci.substr(e + 1)) + 1; // the decimal point's position
  const int k = static_cast<int>(digits.size());
  std::string out;
  if (k <= n && n <= 21) {
    out = digits + std::string(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out = digits.substr(0, static_cast<std::size_t>(n)) + "." + digits.substr(static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out = "0." + std::string(static_cast<std::size_t>(-n), '0') + digits;
  } else {
    out = digits.substr(0, 1);
    if (k > 1)
      out += "." + digits.substr(1);
    out += (n - 1 >= 0 ? "e+" : "e-") + std::to_string(std::abs(n - 1));
  }
  return sign + out;
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

// Values nest at most this deep when printed or compared; deeper (a list that holds itself)
// prints as "[...]" and compares unequal.
constexpr int max_nesting = 64;

std::string output_at(const value& v, int depth);

void python_repr(const value& v, std::string& out, int depth) {
  if (v.is_string()) {
    out += '\'';
    out += v.s;
    out += '\'';
  } else {
    out += output_at(v, depth);
  }
}


std::string output_at(const value& v, int depth) {
  if (depth > max_nesting && (v.is_list() || v.is_dict()))
    return v.is_list() ? "[...]" : "{...}";
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
      python_repr((*v.items)[i], out, depth + 1);
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
      python_repr(e, out, depth + 1);
    }
    return out + "}";
  }
  case value::kind::callable:
    return "<function>";
  }
  return {};
}

} // namespace

std::string to_output(const value& v) {
  return output_at(v, 0);
}

std::string to_json(const value& v, int indent, int depth) {
  if (depth > max_nesting && (v.is_list() || v.is_dict()))
    return "null";
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

namespace {

bool equal_at(const value& a, const value& b, int depth) {
  if (depth > max_nesting)
    return false;
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
      if (!equal_at((*a.items)[i], (*b.items)[i], depth + 1))
        return false;
    return true;
  case value::kind::dict:
    if (a.members->size() != b.members->size())
      return false;
    for (const auto& [k, e] : *a.members)
      if (!equal_at(e, b.get(k), depth + 1))
        return false;
    return true;
  default:
    return a.fn == b.fn;
  }
}

} // namespace

bool equal(const value& a, const value& b) {
  return equal_at(a, b, 0);
}

value deep_copy(const value& v, int depth) {
  if (depth > max_nesting)
    return value::none();
  if (v.is_list()) {
    array out;
    for (const auto& e : *v.items)
      out.push_back(deep_copy(e, depth + 1));
    return value::list(std::move(out));
  }
  if (v.is_dict()) {
    object out;
    for (const auto& [k, e] : *v.members)
      out.emplace_back(k, deep_copy(e, depth + 1));
    return value::dict(std::move(out));
  }
  return v;
}

} // namespace triad::jinja
