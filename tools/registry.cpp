#include "tools/registry.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "runtime/json_text.hpp"

namespace triad {

namespace {

namespace json = boost::json;

std::string kind_of(const json::value& v) {
  switch (v.kind()) {
  case json::kind::null:
    return "null";
  case json::kind::bool_:
    return "boolean";
  case json::kind::int64:
  case json::kind::uint64:
    return "integer";
  case json::kind::double_:
    return "number";
  case json::kind::string:
    return "string";
  case json::kind::array:
    return "array";
  case json::kind::object:
    return "object";
  }
  return "unknown";
}

std::string shown(const json::value& v) {
  return json_excerpt(v);
}

expected<void> check(const json::object& schema, const json::value& v, const std::string& path) {
  auto fail = [&](std::string what) {
    return make_error(errc::invalid_argument, path + ": " + std::move(what));
  };
  if (const auto* t = schema.if_contains("type"); t != nullptr && t->is_string()) {
    std::string_view type = t->get_string();
    if (!json_has_type(v, type))
      return fail("expected " + std::string{type} + ", got " + kind_of(v) + " " + shown(v));
  }
  if (const auto* e = schema.if_contains("enum"); e != nullptr && e->is_array()) {
    bool found = false;
    std::string allowed;
    for (const auto& x : e->get_array()) {
      found = found || x == v;
      allowed += (allowed.empty() ? "" : ", ") + json::serialize(x);
    }
    if (!found)
      return fail("value " + shown(v) + " not allowed; allowed: " + allowed);
  }
  if (v.is_number()) {
    double x = v.to_number<double>();
    if (const auto* m = schema.if_contains("minimum");
        m != nullptr && m->is_number() && x < m->to_number<double>())
      return fail("value " + shown(v) + " is below the minimum " + shown(*m));
    if (const auto* m = schema.if_contains("maximum");
        m != nullptr && m->is_number() && x > m->to_number<double>())
      return fail("value " + shown(v) + " is above the maximum " + shown(*m));
  }
  if (v.is_string()) {
    auto n = v.get_string().size();
    if (const auto* m = schema.if_contains("maxLength");
        m != nullptr && m->is_number() && n > m->to_number<std::size_t>())
      return fail("string of " + std::to_string(n) + " characters is longer than maxLength " +
                  shown(*m));
    if (const auto* m = schema.if_contains("minLength");
        m != nullptr && m->is_number() && n < m->to_number<std::size_t>())
      return fail("string of " + std::to_string(n) + " characters is shorter than minLength " +
                  shown(*m));
  }
  if (v.is_array()) {
    const auto& a = v.get_array();
    if (const auto* m = schema.if_contains("maxItems");
        m != nullptr && m->is_number() && a.size() > m->to_number<std::size_t>())
      return fail(std::to_string(a.size()) + " items, more than maxItems " + shown(*m));
    if (const auto* items = schema.if_contains("items"); items != nullptr && items->is_object())
      for (std::size_t i = 0; i < a.size(); ++i)
        if (auto ok = check(items->get_object(), a[i], path + "[" + std::to_string(i) + "]"); !ok)
          return ok;
  }
  if (v.is_object()) {
    const auto& o = v.get_object();
    const json::object* props = nullptr;
    if (const auto* p = schema.if_contains("properties"); p != nullptr && p->is_object())
      props = &p->get_object();
    if (const auto* req = schema.if_contains("required"); req != nullptr && req->is_array())
      for (const auto& name : req->get_array())
        if (name.is_string() && !o.contains(name.get_string()))
          return fail("missing required field '" + std::string{name.get_string()} + "'");
    bool closed = false;
    if (const auto* ap = schema.if_contains("additionalProperties"); ap != nullptr && ap->is_bool())
      closed = !ap->get_bool();
    for (const auto& [key, value] : o) {
      const json::value* sub = props != nullptr ? props->if_contains(key) : nullptr;
      if (sub == nullptr) {
        if (closed) {
          std::string allowed;
          if (props != nullptr)
            for (const auto& [k, unused] : *props)
              allowed += (allowed.empty() ? "" : ", ") + std::string{k};
          return fail("unknown field '" + std::string{key} + "'; allowed: " + allowed);
        }
        continue;
      }
      if (sub->is_object())
        if (auto ok = check(sub->get_object(), value, path + "." + std::string{key}); !ok)
          return ok;
    }
  }
  return {};
}

bool valid_tool_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

} // namespace

expected<void> validate_arguments(const boost::json::object& schema,
                                  const boost::json::value& arguments) {
  return check(schema, arguments, "arguments");
}

expected<void> tool_registry::add(tool_spec spec, tool_function fn) {
  if (!valid_tool_name(spec.name))
    return make_error(errc::invalid_argument, "tool name '" + spec.name +
                                                  "' not allowed; allowed: 1-64 characters of "
                                                  "A-Z, a-z, 0-9, '_' and '-'");
  if (tools_.count(spec.name) != 0)
    return make_error(errc::invalid_argument, "tool '" + spec.name + "' is already registered");
  const auto* type = spec.parameters.if_contains("type");
  if (type == nullptr || !type->is_string() || type->get_string() != "object")
    return make_error(errc::invalid_argument, "tool '" + spec.name +
                                                  "': parameters must be a JSON Schema with "
                                                  "\"type\": \"object\"");
  auto name = spec.name;
  tools_.emplace(std::move(name), entry{std::move(spec), std::move(fn)});
  return {};
}

const tool_spec* tool_registry::find(std::string_view name) const {
  auto it = tools_.find(name);
  return it == tools_.end() ? nullptr : &it->second.spec;
}

std::vector<tool_spec> tool_registry::list() const {
  std::vector<tool_spec> out;
  for (const auto& [name, e] : tools_)
    out.push_back(e.spec);
  return out;
}

expected<tool_output> tool_registry::call(std::string_view name,
                                          std::string_view arguments_json) const {
  auto it = tools_.find(name);
  if (it == tools_.end()) {
    std::string have;
    for (const auto& [n, e] : tools_)
      have += (have.empty() ? "" : ", ") + n;
    return make_error(errc::not_found, "unknown tool '" + std::string{name} +
                                           "'; registered: " + (have.empty() ? "none" : have));
  }
  boost::system::error_code ec;
  auto args = json::parse(arguments_json, ec);
  if (ec)
    return make_error(errc::parse_error, "tool '" + std::string{name} +
                                             "': arguments are not valid JSON: " + ec.message());
  if (auto ok = validate_arguments(it->second.spec.parameters, args); !ok)
    return make_error(errc::invalid_argument,
                      "tool '" + std::string{name} + "': " + ok.error().message);
  return it->second.fn(args.as_object());
}

namespace {
thread_local std::chrono::steady_clock::time_point call_deadline =
    std::chrono::steady_clock::time_point::max();
} // namespace

std::chrono::steady_clock::time_point current_call_deadline() noexcept {
  return call_deadline;
}

call_deadline_scope::call_deadline_scope(std::chrono::steady_clock::time_point deadline) noexcept
    : previous_(call_deadline) {
  call_deadline = deadline;
}

call_deadline_scope::~call_deadline_scope() {
  call_deadline = previous_;
}

} // namespace triad
