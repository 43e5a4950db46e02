#include "runtime/options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <toml++/toml.h>

namespace triad::options {

namespace {

/// A 1-based line and column in the config text.
struct position {
  std::uint32_t line = 1;
  std::uint32_t column = 1;

  bool operator<(const position& other) const {
    return line != other.line ? line < other.line : column < other.column;
  }
};

/// The start of `region`, or `fallback` where toml++ recorded none.
position position_of(const toml::source_region& region, position fallback) {
  if (region.begin.line == 0) {
    return fallback;
  }
  return {region.begin.line, region.begin.column};
}

/// Renders a key as TOML: bare where it can be, quoted otherwise.
std::string render_key(std::string_view key) {
  return is_bare_key(key) ? std::string{key} : quote(key);
}

/// Appends `node` rendered as inline TOML.
void render_to(std::string& out, const toml::node& node) {
  node.visit([&out](const auto& value) {
    using node_t = std::remove_cvref_t<decltype(value)>;
    if constexpr (std::is_same_v<node_t, toml::table>) {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value) {
        out += first ? " " : ", ";
        first = false;
        out += render_key(key.str());
        out += " = ";
        render_to(out, item);
      }
      out += first ? "}" : " }";
    } else if constexpr (std::is_same_v<node_t, toml::array>) {
      out += '[';
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (i > 0) {
          out += ", ";
        }
        render_to(out, value[i]);
      }
      out += ']';
    } else if constexpr (std::is_same_v<node_t, toml::value<std::string>>) {
      out += quote(value.get());
    } else if constexpr (std::is_same_v<node_t, toml::value<std::int64_t>>) {
      out += std::to_string(value.get());
    } else if constexpr (std::is_same_v<node_t, toml::value<bool>>) {
      out += value.get() ? "true" : "false";
    } else {
      std::ostringstream stream;
      stream << value;
      out += stream.str();
    }
  });
}

/// Renders `node` as inline TOML, shortened to a readable length.
std::string render_node(const toml::node& node) {
  constexpr std::size_t max_length = 80;
  std::string out;
  render_to(out, node);
  if (out.size() > max_length) {
    std::size_t cut = max_length - 3;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) {
      --cut; // never split a UTF-8 sequence
    }
    out.resize(cut);
    out += "...";
  }
  return out;
}

std::string_view type_name(const toml::node& node) {
  switch (node.type()) {
  case toml::node_type::table:
    return "table";
  case toml::node_type::array:
    return "array";
  case toml::node_type::string:
    return "string";
  case toml::node_type::integer:
    return "integer";
  case toml::node_type::floating_point:
    return "float";
  case toml::node_type::boolean:
    return "boolean";
  case toml::node_type::date:
    return "date";
  case toml::node_type::time:
    return "time";
  case toml::node_type::date_time:
    return "date-time";
  case toml::node_type::none:
    break;
  }
  return "nothing";
}

} // namespace

void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  // The common case in one piece: text with nothing to escape.
  const auto plain = std::find_if(text.begin(), text.end(), [](char ch) {
    const auto byte = static_cast<unsigned char>(ch);
    return ch == '"' || ch == '\\' || byte < 0x20 || byte == 0x7f;
  });
  out.append(text.begin(), plain);
  text.remove_prefix(static_cast<std::size_t>(plain - text.begin()));
  for (char ch : text) {
    switch (ch) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\f':
      out += "\\f";
      break;
    case '\r':
      out += "\\r";
      break;
    default: {
      const auto byte = static_cast<unsigned char>(ch);
      if (byte < 0x20 || byte == 0x7f) {
        constexpr char hex[] = "0123456789ABCDEF";
        out += "\\u00";
        out += hex[byte >> 4];
        out += hex[byte & 0xf];
      } else {
        out += ch;
      }
    }
    }
  }
  out += '"';
}

/// Renders `text` as a TOML basic string.
std::string quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  append_quoted(out, text);
  return out;
}

bool is_bare_key(std::string_view key) noexcept {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
  });
}

std::string join(std::span<const std::string_view> names, bool quoted) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) {
      out += ", ";
    }
    out += quoted ? quote(names[i]) : std::string{names[i]};
  }
  return out;
}

std::string range_allowed(int_range range) {
  return "integer " + std::to_string(range.min) + ".." + std::to_string(range.max);
}

/// Renders a double as a TOML float that reads back to the same value: the shortest
/// round-trip form, with ".0" added where it would otherwise read as an integer.
std::string format_double(double value) {
  char buffer[64];
  const auto result = std::to_chars(std::begin(buffer), std::end(buffer), value);
  std::string out{buffer, result.ptr};
  if (out.find_first_of(".en") == std::string::npos) { // "n": nan, inf
    out += ".0";
  }
  return out;
}

std::string number_allowed(number_bound bound) {
  return std::string{"a finite number (integer or float) "} + (bound.exclusive ? "> " : ">= ") +
         format_double(bound.min);
}

bool is_valid_name(std::string_view name) noexcept {
  return name.size() <= 64 && is_bare_key(name);
}

static_assert(domain_id_range.max == std::numeric_limits<unsigned>::max());

std::string domain_ids_allowed() {
  return "an array of distinct integers " + std::to_string(domain_id_range.min) + ".." +
         std::to_string(domain_id_range.max);
}

std::string format_strings(const std::vector<std::string>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i > 0 ? ", " : "") + quote(values[i]);
  return out + "]";
}

std::string format_ids(const std::vector<unsigned>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// -- errors --------------------------------------------------------------------------------

namespace {

/// The first occurrence of a value claimed unique, for the duplicate message.
struct seen_value {
  std::string path;
  position pos;
};

/// Values claimed unique in one array, by key.
using unique_values =
    std::map<std::string, std::map<std::string, seen_value, std::less<>>, std::less<>>;

/// The errors of one document; the earliest in the file is the one reported.
class errors {
public:
  explicit errors(std::string source_name)
      : source_name_(std::move(source_name)) {}

  void fail(position pos, std::string message) {
    if (!first_ || pos < first_->first)
      first_.emplace(pos, std::move(message));
  }

  /// "file:line:col".
  std::string location(position pos) const {
    return source_name_ + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column);
  }

  expected<void> result() const {
    if (!first_)
      return {};
    return make_error(errc::invalid_argument, location(first_->first) + ": " + first_->second);
  }

private:
  std::string source_name_;
  std::optional<std::pair<position, std::string>> first_;
};

std::string wrong_type(const toml::node& node) {
  return "wrong type (" + std::string{type_name(node)} + ")";
}

} // namespace

struct table::impl {
  errors& errs;
  const toml::table& t;
  std::string path; ///< "" for the root, "tools", "devices[1]"
  position pos;     ///< the table's position, reported for keys it lacks
  unique_values* unique = nullptr;
  std::map<std::string, state, std::less<>> states{};

  impl(errors& e, const toml::table& table, std::string p, position at, unique_values* u = nullptr)
      : errs(e)
      , t(table)
      , path(std::move(p))
      , pos(at)
      , unique(u) {}

  std::string key_path(std::string_view key) const {
    return path.empty() ? render_key(key) : path + "." + render_key(key);
  }
  position value_pos(const toml::node& node) const { return position_of(node.source(), pos); }

  void fail_value(position p, std::string_view at, const toml::node& value,
                  std::string_view problem, std::string_view allowed) {
    std::string message{at};
    message += " = ";
    message += render_node(value);
    message += ": ";
    message += problem;
    message += "; allowed: ";
    message += allowed;
    errs.fail(p, std::move(message));
  }

  state record(std::string_view key, state s) {
    states.insert_or_assign(std::string{key}, s);
    return s;
  }

  bool check_integer(position p, std::string_view at, const toml::node& node, int_range range,
                     std::int64_t& out, std::string_view below_min) {
    const auto* value = node.as_integer();
    if (value == nullptr) {
      fail_value(p, at, node, wrong_type(node), range_allowed(range));
      return false;
    }
    const std::int64_t number = value->get();
    if (number < range.min || number > range.max) {
      const std::string_view problem =
          number < range.min && !below_min.empty() ? below_min : "out of range";
      fail_value(p, at, node, problem, range_allowed(range));
      return false;
    }
    out = number;
    return true;
  }

  /// Checks each element of the array at `key`; `element` returns false for a bad one.
  state each(std::string_view key, std::string_view allowed,
             const std::function<bool(const toml::node&, const std::string&, position)>& element) {
    const toml::node* node = t.get(key);
    if (node == nullptr)
      return state::absent;
    const std::string at = key_path(key);
    const auto* array = node->as_array();
    if (array == nullptr) {
      fail_value(value_pos(*node), at, *node, wrong_type(*node), allowed);
      return state::invalid;
    }
    const position array_pos = value_pos(*node);
    bool valid = true;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& e = (*array)[i];
      if (!element(e, at + "[" + std::to_string(i) + "]", position_of(e.source(), array_pos)))
        valid = false;
    }
    return valid ? state::valid : state::invalid;
  }

  /// Reports every key not in `allowed`; `where` names the table ("in [tools]").
  void check_keys(std::span<const std::string_view> allowed, std::string_view where) {
    for (const auto& [key, value] : t) {
      if (std::find(allowed.begin(), allowed.end(), key.str()) != allowed.end())
        continue;
      std::string message = key_path(key.str());
      message += " = ";
      message += render_node(value);
      message += ": unknown key; allowed keys ";
      message += where;
      message += ": ";
      message += join(allowed, false);
      errs.fail(position_of(key.source(), value_pos(value)), std::move(message));
    }
  }
};

state table::integer(std::string_view key, int_range range, std::int64_t& out,
                     std::string_view below_min) {
  const toml::node* node = self_->t.get(key);
  if (node == nullptr)
    return self_->record(key, state::absent);
  std::int64_t value = 0;
  if (!self_->check_integer(self_->value_pos(*node), self_->key_path(key), *node, range, value,
                            below_min))
    return self_->record(key, state::invalid);
  out = value;
  return self_->record(key, state::valid);
}

state table::boolean(std::string_view key, bool& out) {
  const toml::node* node = self_->t.get(key);
  if (node == nullptr)
    return self_->record(key, state::absent);
  if (const auto* value = node->as_boolean()) {
    out = value->get();
    return self_->record(key, state::valid);
  }
  self_->fail_value(self_->value_pos(*node), self_->key_path(key), *node, wrong_type(*node),
                    "true, false");
  return self_->record(key, state::invalid);
}

state table::string(std::string_view key, std::string_view allowed, std::string& out,
                    bool non_empty) {
  const toml::node* node = self_->t.get(key);
  if (node == nullptr)
    return self_->record(key, state::absent);
  const auto* value = node->as_string();
  if (value == nullptr) {
    self_->fail_value(self_->value_pos(*node), self_->key_path(key), *node, wrong_type(*node),
                      allowed);
    return self_->record(key, state::invalid);
  }
  if (non_empty && value->get().empty()) {
    self_->fail_value(self_->value_pos(*node), self_->key_path(key), *node, "empty", allowed);
    return self_->record(key, state::invalid);
  }
  out = value->get();
  return self_->record(key, state::valid);
}

state table::number(std::string_view key, number_bound bound, double& out) {
  const toml::node* node = self_->t.get(key);
  if (node == nullptr)
    return self_->record(key, state::absent);
  const position pos = self_->value_pos(*node);
  const std::string at = self_->key_path(key);
  double value = 0;
  if (const auto* floating = node->as_floating_point()) {
    value = floating->get();
  } else if (const auto* integer = node->as_integer()) {
    value = static_cast<double>(integer->get());
  } else {
    self_->fail_value(pos, at, *node, wrong_type(*node), number_allowed(bound));
    return self_->record(key, state::invalid);
  }
  if (!std::isfinite(value)) {
    self_->fail_value(pos, at, *node, "not a finite number", number_allowed(bound));
    return self_->record(key, state::invalid);
  }
  if (bound.exclusive ? !(value > bound.min) : !(value >= bound.min)) {
    self_->fail_value(pos, at, *node, "out of range", number_allowed(bound));
    return self_->record(key, state::invalid);
  }
  out = value;
  return self_->record(key, state::valid);
}

state table::domain_ids(std::string_view key, std::vector<unsigned>& out) {
  const std::string allowed = domain_ids_allowed();
  std::vector<unsigned> ids;
  const state s = self_->each(
      key, allowed, [&](const toml::node& element, const std::string& at, position pos) {
        std::int64_t id = 0;
        if (!self_->check_integer(pos, at, element, domain_id_range, id, {}))
          return false;
        if (std::find(ids.begin(), ids.end(), static_cast<unsigned>(id)) != ids.end()) {
          self_->fail_value(pos, at, element, "duplicate domain id", allowed);
          return false;
        }
        ids.push_back(static_cast<unsigned>(id));
        return true;
      });
  if (s == state::valid)
    out = std::move(ids);
  return self_->record(key, s);
}

state table::strings(std::string_view key, std::string_view allowed, std::vector<std::string>& out,
                     const std::function<const char*(const std::string&)>& problem) {
  std::vector<std::string> picked;
  const state s = self_->each(
      key, allowed, [&](const toml::node& element, const std::string& at, position pos) {
        const auto* value = element.as_string();
        const char* wrong = value == nullptr ? nullptr : problem(value->get());
        if (value == nullptr || wrong != nullptr) {
          self_->fail_value(pos, at, element,
                            value == nullptr ? wrong_type(element) : std::string{wrong}, allowed);
          return false;
        }
        picked.push_back(value->get());
        return true;
      });
  if (s == state::valid)
    out = std::move(picked);
  return self_->record(key, s);
}

bool table::has(std::string_view key) const {
  return self_->t.get(key) != nullptr;
}

state table::state_of(std::string_view key) const {
  auto it = self_->states.find(key);
  return it == self_->states.end() ? state::absent : it->second;
}

void table::fail(std::string_view key, std::string_view problem, std::string_view allowed) {
  const toml::node& node = *self_->t.get(key);
  self_->fail_value(self_->value_pos(node), self_->key_path(key), node, problem, allowed);
  self_->record(key, state::invalid);
}

void table::fail_missing(std::string_view key, std::string_view why, std::string_view allowed) {
  std::string message = self_->key_path(key);
  message += ": missing";
  message += why;
  message += "; allowed: ";
  message += allowed;
  self_->errs.fail(self_->pos, std::move(message));
}

bool table::claim_unique(std::string_view key, const std::string& value, std::string_view what,
                         std::string_view across) {
  if (self_->unique == nullptr)
    return true;
  auto& seen = (*self_->unique)[std::string{key}];
  const toml::node& node = *self_->t.get(key);
  if (auto it = seen.find(value); it != seen.end()) {
    self_->fail_value(self_->value_pos(node), self_->key_path(key), node,
                      "duplicate " + std::string{what} + ", already given by " + it->second.path +
                          " at " + self_->errs.location(it->second.pos),
                      "names unique across " + std::string{across});
    self_->record(key, state::invalid);
    return false;
  }
  seen.emplace(value, seen_value{self_->key_path(key), self_->value_pos(node)});
  return true;
}

std::string table::path(std::string_view key) const {
  return self_->key_path(key);
}

std::string table::render(std::string_view key) const {
  const toml::node* node = self_->t.get(key);
  return node == nullptr ? std::string{} : render_node(*node);
}

bool table::before(std::string_view a, std::string_view b) const {
  return self_->value_pos(*self_->t.get(a)) < self_->value_pos(*self_->t.get(b));
}

// -- documents -----------------------------------------------------------------------------

struct document::impl {
  toml::table root;
  errors errs;
  position root_pos;
};

document::document(std::unique_ptr<impl> self) noexcept
    : self_(std::move(self)) {}
document::document(document&&) noexcept = default;
document& document::operator=(document&&) noexcept = default;
document::~document() = default;

expected<document> document::parse(std::string_view text, std::string_view source_name) {
  const std::string name = source_name.empty() ? std::string{"<config>"} : std::string{source_name};
  try {
    toml::table root = toml::parse(text, std::string_view{name});
    const position root_pos = position_of(root.source(), position{});
    return document{std::unique_ptr<impl>(new impl{std::move(root), errors{name}, root_pos})};
  } catch (const toml::parse_error& e) {
    const position pos = position_of(e.source(), position{});
    return make_error(errc::parse_error,
                      name + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) +
                          ": TOML syntax error: " + std::string{e.description()});
  }
}

void document::check_top_level(std::span<const std::string_view> keys) {
  table::impl root{self_->errs, self_->root, "", self_->root_pos};
  root.check_keys(keys, "at top level");
}

void document::read_table(std::string_view name, std::span<const std::string_view> keys,
                          const std::function<void(table&)>& read) {
  const toml::node* node = self_->root.get(name);
  if (node == nullptr)
    return;
  table::impl root{self_->errs, self_->root, "", self_->root_pos};
  const auto* sub = node->as_table();
  if (sub == nullptr) {
    root.fail_value(root.value_pos(*node), render_key(name), *node, wrong_type(*node),
                    "a table [" + render_key(name) + "]");
    return;
  }
  table::impl self{self_->errs, *sub, std::string{name},
                   position_of(sub->source(), self_->root_pos)};
  self.check_keys(keys, "in [" + std::string{name} + "]");
  table t{self};
  read(t);
}

void document::read_array(std::string_view name, std::span<const std::string_view> keys,
                          const std::function<void(table&)>& read) {
  const toml::node* node = self_->root.get(name);
  if (node == nullptr)
    return;
  table::impl root{self_->errs, self_->root, "", self_->root_pos};
  const auto* array = node->as_array();
  if (array == nullptr) {
    root.fail_value(root.value_pos(*node), name, *node, wrong_type(*node),
                    "an array of tables [[" + std::string{name} + "]] with keys " +
                        join(keys, false));
    return;
  }
  const std::string element_allowed = "a table with keys " + join(keys, false);
  const position array_pos = root.value_pos(*node);
  unique_values unique;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = (*array)[i];
    const std::string path = std::string{name} + "[" + std::to_string(i) + "]";
    const position pos = position_of(element.source(), array_pos);
    const auto* sub = element.as_table();
    if (sub == nullptr) {
      root.fail_value(pos, path, element, wrong_type(element), element_allowed);
      continue;
    }
    table::impl self{self_->errs, *sub, path, pos, &unique};
    self.check_keys(keys, "in [[" + std::string{name} + "]]");
    table t{self};
    read(t);
  }
}

expected<void> document::finish() const {
  return self_->errs.result();
}

} // namespace triad::options
