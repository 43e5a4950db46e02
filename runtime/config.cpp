#include "runtime/config.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include <toml++/toml.h>

namespace triad {

namespace {

/// An inclusive range of integers a key accepts.
struct int_range {
  std::int64_t min;
  std::int64_t max;
};

constexpr std::int64_t mib_in_16_tib = std::int64_t{16} * 1024 * 1024;
constexpr std::int64_t max_domain_id = std::numeric_limits<unsigned>::max();

constexpr int_range threads_per_domain_range{0, 1024};
constexpr int_range moderate_sleep_us_range{0, 1'000'000};
constexpr int_range poll_attempts_range{1, 100'000'000};
constexpr int_range tools_cores_range{1, 4096};
constexpr int_range queue_capacity_range{1, 1'000'000};
constexpr int_range max_concurrent_requests_range{1, 1'000'000};
constexpr int_range max_body_bytes_range{1, std::int64_t{1} << 30};
constexpr int_range request_deadline_ms_range{0, 86'400'000};
constexpr int_range device_memory_mib_range{1, mib_in_16_tib};
constexpr int_range domain_id_range{0, max_domain_id};
constexpr int_range page_tokens_range{1, 4096};
constexpr int_range burst_steps_range{1, 1024};
constexpr int_range burst_window_us_range{0, 1'000'000};
constexpr int_range compute_cores_range{0, 4096};

constexpr std::size_t max_device_name_length = 64;
constexpr std::string_view device_name_allowed = "1..64 characters from A-Z, a-z, 0-9, '_' and '-'";

constexpr std::string_view root_keys[] = {"topology", "scheduler",     "tools",   "limits",
                                          "model",    "orchestration", "devices", "sim_profiles",
                                          "server",   "mcp_servers"};
constexpr std::string_view mcp_server_keys[] = {"name", "command", "env", "read_only",
                                                "read_write"};
constexpr std::string_view server_keys[] = {"listen",           "port",
                                            "api_key_env",      "allow_scripts",
                                            "max_header_bytes", "header_timeout_ms",
                                            "idle_timeout_ms",  "drain_timeout_ms",
                                            "threads"};
constexpr int_range port_range{0, 65535};
constexpr int_range max_header_bytes_range{1024, 1 << 20};
constexpr int_range server_timeout_ms_range{1, 3'600'000};
constexpr int_range server_threads_range{1, 256};
constexpr std::string_view topology_keys[] = {"source", "xml", "synthetic", "bind_threads"};
constexpr std::string_view scheduler_keys[] = {"orchestration_domains", "threads_per_domain",
                                               "moderate_sleep_us", "poll_attempts"};
constexpr std::string_view tools_keys[] = {"cores", "domains", "queue_capacity", "hosted"};
// What [tools].hosted may name: the built-in tools.
constexpr std::string_view builtin_tool_names[] = {"file_read", "shell", "compile",
                                                   "vector_search"};
constexpr std::string_view limits_keys[] = {"max_concurrent_requests", "max_body_bytes",
                                            "queue_timeout_ms", "request_timeout_ms"};
constexpr std::string_view model_keys[] = {"preset", "dtype", "page_tokens", "context_tokens"};
constexpr int_range context_tokens_range{0, 1 << 24};
constexpr std::string_view orchestration_keys[] = {"kv",
                                                   "layout",
                                                   "schedule",
                                                   "max_waiting",
                                                   "retry_after_ms",
                                                   "tool_deadline_ms",
                                                   "device_slots",
                                                   "device_failure",
                                                   "tool_result_overflow",
                                                   "max_device_retries",
                                                   "busy_backoff_ms"};
constexpr int_range max_waiting_range{0, 1'000'000};
constexpr int_range retry_after_ms_range{1, 600'000};
constexpr int_range tool_deadline_ms_range{1, 86'400'000};
constexpr int_range device_slots_range{0, 65'536};
constexpr int_range max_device_retries_range{0, 16};
constexpr int_range busy_backoff_ms_range{1, 60'000};
constexpr std::string_view device_keys[] = {
    "name",        "backend",         "role",         "topology_device", "domain",
    "profile",     "time_scale",      "memory_mib",   "queue_capacity",  "prefix_cache",
    "burst_steps", "burst_window_us", "compute_cores"};
constexpr std::string_view sim_profile_keys[] = {"name",
                                                 "peak_tflops",
                                                 "memory_bandwidth_gb_s",
                                                 "memory_gib",
                                                 "link_bandwidth_gb_s",
                                                 "step_overhead_us",
                                                 "attention_tflops",
                                                 "overlap",
                                                 "source"};

constexpr bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

static_assert(contains(cpu_device_profiles, defaults::model::preset),
              "the default model preset must be one of cpu_device_profiles");
static_assert(contains(sim_device_profiles, defaults::device::sim_profile),
              "the default sim profile must be a built-in one");

template<class E>
struct enum_name {
  std::string_view name;
  E value;
};

constexpr enum_name<topology_source> topology_source_names[] = {
    {"machine", topology_source::machine},
    {"xml", topology_source::xml},
    {"synthetic", topology_source::synthetic},
};
constexpr enum_name<device_role> device_role_names[] = {
    {"prefill", device_role::prefill},
    {"decode", device_role::decode},
    {"both", device_role::both},
};
constexpr enum_name<device_backend> device_backend_names[] = {
    {"cpu", device_backend::cpu},
    {"sim", device_backend::sim},
    {"cuda", device_backend::cuda},
};
constexpr enum_name<model_dtype> model_dtype_names[] = {
    {"auto", model_dtype::automatic},
    {"bf16", model_dtype::bf16},
    {"f32", model_dtype::f32},
};

constexpr enum_name<kv_policy> kv_policy_names[] = {
    {"discard", kv_policy::discard},
    {"pin", kv_policy::pin},
    {"demote", kv_policy::demote},
};
constexpr enum_name<layout> layout_names[] = {
    {"three_stage", layout::three_stage},
    {"monolithic", layout::monolithic},
};
constexpr enum_name<schedule_policy> schedule_policy_names[] = {
    {"fcfs", schedule_policy::fcfs},
    {"plas", schedule_policy::plas},
};
constexpr enum_name<tool_overflow_policy> tool_overflow_names[] = {
    {"truncate", tool_overflow_policy::truncate},
    {"fail", tool_overflow_policy::fail},
};
constexpr enum_name<device_failure_policy> device_failure_names[] = {
    {"retry", device_failure_policy::retry},
    {"fail", device_failure_policy::fail},
};

template<class E, std::size_t N>
constexpr std::string_view name_of(const enum_name<E> (&names)[N], E value) {
  for (const auto& entry : names)
    if (entry.value == value)
      return entry.name;
  return "unknown";
}

// orchestration_options' initializers must be the defaults:: names.
static_assert(name_of(kv_policy_names, orchestration_options{}.kv) == defaults::orchestration::kv);
static_assert(name_of(layout_names, orchestration_options{}.device_layout) ==
              defaults::orchestration::device_layout);
static_assert(name_of(schedule_policy_names, orchestration_options{}.schedule) ==
              defaults::orchestration::schedule);
static_assert(name_of(tool_overflow_names, orchestration_options{}.tool_result_overflow) ==
              defaults::orchestration::tool_result_overflow);
static_assert(name_of(device_failure_names, orchestration_options{}.device_failure) ==
              defaults::orchestration::device_failure);

// model_config's `dtype` initializer must be defaults::model::dtype.
static_assert(name_of(model_dtype_names, model_config{}.dtype) == defaults::model::dtype);

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

/// Renders `text` as a TOML basic string.
std::string quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
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
  return out;
}

bool is_bare_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
  });
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
std::string render(const toml::node& node) {
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

template<class E, std::size_t N>
std::string enum_allowed(const enum_name<E> (&names)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) {
      out += ", ";
    }
    out += quote(names[i].name);
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

/// A lower bound for a floating-point key: `value > min` when exclusive, `value >= min` else.
struct number_bound {
  double min;
  bool exclusive;
};

constexpr number_bound positive{0.0, true};
constexpr number_bound non_negative{0.0, false};

std::string number_allowed(number_bound bound) {
  return std::string{"a finite number (integer or float) "} + (bound.exclusive ? "> " : ">= ") +
         format_double(bound.min);
}

bool is_valid_device_name(std::string_view name) {
  return name.size() <= max_device_name_length && is_bare_key(name);
}

/// A TOML table being read, with the key path and position used in messages.
struct scope {
  const toml::table& table;
  std::string path; ///< "" for the root, "tools", "devices[1]"
  position pos;     ///< the table's position, reported for keys it lacks

  std::string key_path(std::string_view key) const {
    return path.empty() ? render_key(key) : path + "." + render_key(key);
  }
  position value_pos(const toml::node& node) const { return position_of(node.source(), pos); }
};

/// Whether a key was absent, read, or rejected.
enum class field { absent, valid, invalid };

/// Reads the schema out of a parsed TOML document, remembering the first error in file order.
class reader {
public:
  explicit reader(std::string_view source_name)
      : source_name_(source_name) {}

  /// Reports an error at `pos`; the earliest one in the file is the one returned.
  void fail(position pos, std::string message) {
    if (!first_ || pos < first_->first) {
      first_.emplace(pos, std::move(message));
    }
  }

  /// Reports a value that is not allowed: "path = value: problem; allowed: allowed".
  void fail_value(position pos, std::string_view path, const toml::node& value,
                  std::string_view problem, std::string_view allowed) {
    std::string message{path};
    message += " = ";
    message += render(value);
    message += ": ";
    message += problem;
    message += "; allowed: ";
    message += allowed;
    fail(pos, std::move(message));
  }

  /// Reports a required key that `s` lacks, at the table's own position.
  void fail_missing(const scope& s, std::string_view key, std::string_view why,
                    std::string_view allowed) {
    std::string message = s.key_path(key);
    message += ": missing";
    message += why;
    message += "; allowed: ";
    message += allowed;
    fail(s.pos, std::move(message));
  }

  bool ok() const { return !first_.has_value(); }

  /// "file:line:col".
  std::string location(position pos) const {
    return source_name_ + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column);
  }

  /// The first error, as "file:line:col: message".
  error take_error() const {
    return make_error(errc::invalid_argument, location(first_->first) + ": " + first_->second);
  }

  /// Reports every key of `s` not in `allowed`; `where` names the table ("[tools]").
  void check_keys(const scope& s, std::span<const std::string_view> allowed,
                  std::string_view where) {
    for (const auto& [key, value] : s.table) {
      if (std::find(allowed.begin(), allowed.end(), key.str()) != allowed.end()) {
        continue;
      }
      std::string expected = "unknown key; allowed keys ";
      expected += where;
      expected += ": ";
      expected += join(allowed, false);
      std::string message = s.key_path(key.str());
      message += " = ";
      message += render(value);
      message += ": ";
      message += expected;
      fail(position_of(key.source(), s.value_pos(value)), std::move(message));
    }
  }

  /// The sub-table `key` of `s`, or nullptr when absent or not a table (reported).
  const toml::table* table(const scope& s, std::string_view key) {
    const toml::node* node = s.table.get(key);
    if (node == nullptr) {
      return nullptr;
    }
    if (const auto* sub = node->as_table()) {
      return sub;
    }
    fail_value(s.value_pos(*node), s.key_path(key), *node,
               std::string{"wrong type ("} + std::string{type_name(*node)} + ")",
               "a table [" + s.key_path(key) + "]");
    return nullptr;
  }

  /// Reads an integer within `range` into `out`; `below_min` replaces "out of range" for
  /// values under the minimum.
  template<class T>
  field integer(const scope& s, std::string_view key, int_range range, T& out,
                std::string_view below_min = {}) {
    const toml::node* node = s.table.get(key);
    if (node == nullptr) {
      return field::absent;
    }
    std::int64_t value = 0;
    if (!check_integer(s.value_pos(*node), s.key_path(key), *node, range, value, below_min)) {
      return field::invalid;
    }
    out = static_cast<T>(value);
    return field::valid;
  }

  /// Reads an integer count of `out`'s unit (the key's `_ms` or `_us`) within `range`.
  template<class Rep, class Period>
  field duration(const scope& s, std::string_view key, int_range range,
                 std::chrono::duration<Rep, Period>& out) {
    auto count = static_cast<std::int64_t>(out.count());
    auto state = integer(s, key, range, count);
    if (state == field::valid)
      out = std::chrono::duration<Rep, Period>{count};
    return state;
  }

  /// Reads a boolean into `out`.
  field boolean(const scope& s, std::string_view key, bool& out) {
    const toml::node* node = s.table.get(key);
    if (node == nullptr) {
      return field::absent;
    }
    if (const auto* value = node->as_boolean()) {
      out = value->get();
      return field::valid;
    }
    fail_value(s.value_pos(*node), s.key_path(key), *node, wrong_type(*node), "true, false");
    return field::invalid;
  }

  /// The string at `key`, or nullptr when absent or not a string (reported, `allowed` says
  /// what the key takes).
  const toml::value<std::string>* string(const scope& s, std::string_view key,
                                         std::string_view allowed, field& state) {
    const toml::node* node = s.table.get(key);
    state = field::absent;
    if (node == nullptr) {
      return nullptr;
    }
    if (const auto* value = node->as_string()) {
      state = field::valid;
      return value;
    }
    state = field::invalid;
    fail_value(s.value_pos(*node), s.key_path(key), *node, wrong_type(*node), allowed);
    return nullptr;
  }

  /// A non-empty string at `key` into `out`.
  field non_empty_string(const scope& s, std::string_view key, std::string_view allowed,
                         std::string& out) {
    field state = field::absent;
    const auto* value = string(s, key, allowed, state);
    if (value == nullptr) {
      return state;
    }
    if (value->get().empty()) {
      fail_value(s.value_pos(*value), s.key_path(key), *value, "empty", allowed);
      return field::invalid;
    }
    out = value->get();
    return field::valid;
  }

  /// Reads one of `names` into `out`.
  template<class E, std::size_t N>
  field enumeration(const scope& s, std::string_view key, const enum_name<E> (&names)[N], E& out) {
    field state = field::absent;
    const std::string allowed = enum_allowed(names);
    const auto* value = string(s, key, allowed, state);
    if (value == nullptr) {
      return state;
    }
    for (const auto& entry : names) {
      if (entry.name == value->get()) {
        out = entry.value;
        return field::valid;
      }
    }
    fail_value(s.value_pos(*value), s.key_path(key), *value, "not allowed", allowed);
    return field::invalid;
  }

  /// Reads a string that must be one of `names` into `out`.
  field one_of(const scope& s, std::string_view key, std::span<const std::string_view> names,
               std::string& out) {
    field state = field::absent;
    const std::string allowed = join(names, true);
    const auto* value = string(s, key, allowed, state);
    if (value == nullptr) {
      return state;
    }
    if (!contains(names, value->get())) {
      fail_value(s.value_pos(*value), s.key_path(key), *value, "not allowed", allowed);
      return field::invalid;
    }
    out = value->get();
    return field::valid;
  }

  /// Reads a finite number within `bound` into `out`; TOML integers and floats both count.
  field number(const scope& s, std::string_view key, number_bound bound, double& out) {
    const toml::node* node = s.table.get(key);
    if (node == nullptr) {
      return field::absent;
    }
    const position pos = s.value_pos(*node);
    const std::string path = s.key_path(key);
    double value = 0;
    if (const auto* floating = node->as_floating_point()) {
      value = floating->get();
    } else if (const auto* integer = node->as_integer()) {
      value = static_cast<double>(integer->get());
    } else {
      fail_value(pos, path, *node, wrong_type(*node), number_allowed(bound));
      return field::invalid;
    }
    if (!std::isfinite(value)) {
      fail_value(pos, path, *node, "not a finite number", number_allowed(bound));
      return field::invalid;
    }
    if (bound.exclusive ? !(value > bound.min) : !(value >= bound.min)) {
      fail_value(pos, path, *node, "out of range", number_allowed(bound));
      return field::invalid;
    }
    out = value;
    return field::valid;
  }

  /// Reads an array of distinct domain ids into `out`.
  field domain_ids(const scope& s, std::string_view key, std::vector<unsigned>& out) {
    const toml::node* node = s.table.get(key);
    if (node == nullptr) {
      return field::absent;
    }
    const std::string path = s.key_path(key);
    const std::string allowed = "an array of distinct integers " +
                                std::to_string(domain_id_range.min) + ".." +
                                std::to_string(domain_id_range.max);
    const auto* array = node->as_array();
    if (array == nullptr) {
      fail_value(s.value_pos(*node), path, *node, wrong_type(*node), allowed);
      return field::invalid;
    }
    const position array_pos = s.value_pos(*node);
    std::vector<unsigned> ids;
    bool valid = true;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = (*array)[i];
      const std::string element_path = path + "[" + std::to_string(i) + "]";
      const position element_pos = position_of(element.source(), array_pos);
      std::int64_t id = 0;
      if (!check_integer(element_pos, element_path, element, domain_id_range, id, {})) {
        valid = false;
        continue;
      }
      if (std::find(ids.begin(), ids.end(), static_cast<unsigned>(id)) != ids.end()) {
        fail_value(element_pos, element_path, element, "duplicate domain id", allowed);
        valid = false;
        continue;
      }
      ids.push_back(static_cast<unsigned>(id));
    }
    if (!valid) {
      return field::invalid;
    }
    out = std::move(ids);
    return field::valid;
  }

  /// Reads an array of strings into `out`; `problem` names what is wrong with one (nullptr: it
  /// is fine).
  template<class Check>
  field strings(const scope& s, std::string_view key, std::string_view allowed,
                std::vector<std::string>& out, Check problem) {
    const toml::node* node = s.table.get(key);
    if (node == nullptr) {
      return field::absent;
    }
    const std::string path = s.key_path(key);
    const auto* array = node->as_array();
    if (array == nullptr) {
      fail_value(s.value_pos(*node), path, *node, wrong_type(*node), allowed);
      return field::invalid;
    }
    const position array_pos = s.value_pos(*node);
    std::vector<std::string> picked;
    bool valid = true;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = (*array)[i];
      const std::string element_path = path + "[" + std::to_string(i) + "]";
      const position element_pos = position_of(element.source(), array_pos);
      const auto* value = element.as_string();
      const char* wrong = value == nullptr ? nullptr : problem(value->get());
      if (value == nullptr || wrong != nullptr) {
        fail_value(element_pos, element_path, element,
                   value == nullptr ? wrong_type(element) : std::string{wrong}, allowed);
        valid = false;
        continue;
      }
      picked.push_back(value->get());
    }
    if (!valid) {
      return field::invalid;
    }
    out = std::move(picked);
    return field::valid;
  }

  /// Reads an array of distinct strings, each one of `names`, into `out`.
  field names(const scope& s, std::string_view key, std::span<const std::string_view> names,
              std::vector<std::string>& out) {
    std::vector<std::string> seen;
    const std::string allowed = "an array of distinct names from " + join(names, true);
    return strings(s, key, allowed, out, [&](const std::string& v) -> const char* {
      if (!contains(names, v))
        return "not allowed";
      if (std::find(seen.begin(), seen.end(), v) != seen.end())
        return "named twice";
      seen.push_back(v);
      return nullptr;
    });
  }

private:
  static std::string wrong_type(const toml::node& node) {
    return "wrong type (" + std::string{type_name(node)} + ")";
  }

  bool check_integer(position pos, std::string_view path, const toml::node& node, int_range range,
                     std::int64_t& out, std::string_view below_min) {
    const auto* value = node.as_integer();
    if (value == nullptr) {
      fail_value(pos, path, node, wrong_type(node), range_allowed(range));
      return false;
    }
    const std::int64_t number = value->get();
    if (number < range.min || number > range.max) {
      const std::string_view problem =
          number < range.min && !below_min.empty() ? below_min : "out of range";
      fail_value(pos, path, node, problem, range_allowed(range));
      return false;
    }
    out = number;
    return true;
  }

  std::string source_name_;
  std::optional<std::pair<position, std::string>> first_;
};

void read_topology(reader& r, const scope& s, topology_config& out) {
  r.check_keys(s, topology_keys, "in [topology]");
  const field source = r.enumeration(s, "source", topology_source_names, out.source);
  r.boolean(s, "bind_threads", out.bind_threads);

  constexpr std::string_view xml_allowed = "path of an hwloc XML file (format 2.0)";
  constexpr std::string_view synthetic_allowed =
      "an hwloc synthetic description such as \"pack:2 numa:3 core:43 pu:2\"";
  const field xml = r.non_empty_string(s, "xml", xml_allowed, out.xml);
  const field synthetic = r.non_empty_string(s, "synthetic", synthetic_allowed, out.synthetic);
  if (source == field::invalid) {
    return; // the key checks below depend on a known source
  }
  const std::string source_text = quote(to_string(out.source));
  const auto check = [&](std::string_view key, field state, topology_source needs,
                         std::string_view allowed) {
    const std::string needs_text = quote(to_string(needs));
    if (out.source == needs && state == field::absent) {
      r.fail_missing(s, key, " (required when topology.source = " + needs_text + ")", allowed);
    } else if (out.source != needs && state != field::absent) {
      const toml::node& node = *s.table.get(key);
      r.fail_value(s.value_pos(node), s.key_path(key), node,
                   "only allowed when topology.source = " + needs_text +
                       " (topology.source = " + source_text + ")",
                   "no " + std::string{key} + " key, or topology.source = " + needs_text);
    }
  };
  check("xml", xml, topology_source::xml, xml_allowed);
  check("synthetic", synthetic, topology_source::synthetic, synthetic_allowed);
}

void read_scheduler(reader& r, const scope& s, scheduler_config& out) {
  r.check_keys(s, scheduler_keys, "in [scheduler]");
  r.domain_ids(s, "orchestration_domains", out.orchestration_domains);
  r.integer(s, "threads_per_domain", threads_per_domain_range, out.threads_per_domain);
  r.duration(s, "moderate_sleep_us", moderate_sleep_us_range, out.moderate_sleep);
  r.integer(s, "poll_attempts", poll_attempts_range, out.poll_attempts);
}

void read_tools(reader& r, const scope& s, tools_config& out) {
  r.check_keys(s, tools_keys, "in [tools]");
  r.integer(s, "cores", tools_cores_range, out.cores, "tools need at least one core");
  r.domain_ids(s, "domains", out.domains);
  r.integer(s, "queue_capacity", queue_capacity_range, out.queue_capacity);
  r.names(s, "hosted", builtin_tool_names, out.hosted);
}

void read_limits(reader& r, const scope& s, limits_config& out) {
  r.check_keys(s, limits_keys, "in [limits]");
  r.integer(s, "max_concurrent_requests", max_concurrent_requests_range,
            out.max_concurrent_requests);
  r.integer(s, "max_body_bytes", max_body_bytes_range, out.max_body_bytes);
  r.integer(s, "queue_timeout_ms", request_deadline_ms_range, out.queue_timeout_ms);
  r.integer(s, "request_timeout_ms", request_deadline_ms_range, out.request_timeout_ms);
}

void read_server(reader& r, const scope& s, server_config& out) {
  r.check_keys(s, server_keys, "in [server]");
  field state = field::absent;
  if (const auto* listen = r.string(s, "listen", "an IPv4 or IPv6 address", state)) {
    unsigned char addr[16];
    if (::inet_pton(AF_INET, listen->get().c_str(), addr) != 1 &&
        ::inet_pton(AF_INET6, listen->get().c_str(), addr) != 1)
      r.fail_value(s.value_pos(*listen), s.key_path("listen"), *listen, "not an IP address",
                   "an IPv4 or IPv6 address, e.g. \"127.0.0.1\" or \"::\"");
    else
      out.listen = listen->get();
  }
  r.integer(s, "port", port_range, out.port);
  state = field::absent;
  if (const auto* env = r.string(s, "api_key_env", "an environment variable name", state))
    out.api_key_env = env->get();
  r.boolean(s, "allow_scripts", out.allow_scripts);
  r.integer(s, "max_header_bytes", max_header_bytes_range, out.max_header_bytes);
  r.integer(s, "header_timeout_ms", server_timeout_ms_range, out.header_timeout_ms);
  r.integer(s, "idle_timeout_ms", server_timeout_ms_range, out.idle_timeout_ms);
  r.integer(s, "drain_timeout_ms", server_timeout_ms_range, out.drain_timeout_ms);
  r.integer(s, "threads", server_threads_range, out.threads);
}

void read_model(reader& r, const scope& s, model_config& out) {
  r.check_keys(s, model_keys, "in [model]");
  r.one_of(s, "preset", model_presets, out.preset);
  r.enumeration(s, "dtype", model_dtype_names, out.dtype);
  r.integer(s, "page_tokens", page_tokens_range, out.page_tokens);
  r.integer(s, "context_tokens", context_tokens_range, out.context_tokens);
}

void read_orchestration(reader& r, const scope& s, orchestration_options& out) {
  r.check_keys(s, orchestration_keys, "in [orchestration]");
  r.enumeration(s, "kv", kv_policy_names, out.kv);
  r.enumeration(s, "layout", layout_names, out.device_layout);
  r.enumeration(s, "schedule", schedule_policy_names, out.schedule);
  r.integer(s, "max_waiting", max_waiting_range, out.max_waiting);
  r.duration(s, "retry_after_ms", retry_after_ms_range, out.retry_after);
  r.duration(s, "tool_deadline_ms", tool_deadline_ms_range, out.tool_deadline);
  r.integer(s, "device_slots", device_slots_range, out.device_slots);
  r.enumeration(s, "device_failure", device_failure_names, out.device_failure);
  r.enumeration(s, "tool_result_overflow", tool_overflow_names, out.tool_result_overflow);
  r.integer(s, "max_device_retries", max_device_retries_range, out.max_device_retries);
  r.duration(s, "busy_backoff_ms", busy_backoff_ms_range, out.busy_backoff);
}

/// First occurrence of each device or sim profile name, for the duplicate check.
struct seen_name {
  std::string path;
  position pos;
};

using seen_names = std::map<std::string, seen_name, std::less<>>;

/// What a sim device's `profile` may name: the built-ins and the file's `[[sim_profiles]]`.
struct sim_profile_names {
  std::vector<std::string> user; ///< names given in [[sim_profiles]], in file order, distinct

  bool known(std::string_view name) const {
    return contains(sim_device_profiles, name) ||
           std::find(user.begin(), user.end(), name) != user.end();
  }

  std::string allowed() const {
    std::string out = join(sim_device_profiles, true) + " (built-in)";
    if (user.empty()) {
      return out + ", or the name of a [[sim_profiles]] entry";
    }
    for (const std::string& name : user) {
      out += ", ";
      out += quote(name);
    }
    return out + " ([[sim_profiles]])";
  }
};

void read_sim_profile(reader& r, const scope& s, sim_profile_config& out, seen_names& names,
                      sim_profile_names& declared) {
  r.check_keys(s, sim_profile_keys, "in [[sim_profiles]]");

  const std::string name_allowed = std::string{device_name_allowed} +
                                   "; unique across sim profiles; not a built-in name (" +
                                   join(sim_device_profiles, true) + ")";
  field name_state = field::absent;
  const auto* name = r.string(s, "name", name_allowed, name_state);
  if (name_state == field::absent) {
    r.fail_missing(s, "name", " (every sim profile needs a name)", name_allowed);
  } else if (name != nullptr) {
    const position pos = s.value_pos(*name);
    const std::string path = s.key_path("name");
    const bool builtin = contains(sim_device_profiles, name->get());
    const bool valid = is_valid_device_name(name->get());
    if (valid && !declared.known(name->get())) {
      // Devices may name it even when this entry is otherwise wrong: its own error is enough.
      declared.user.push_back(name->get());
    }
    if (!valid) {
      r.fail_value(pos, path, *name, "not a valid sim profile name", name_allowed);
    } else if (builtin) {
      r.fail_value(pos, path, *name, "the name of a built-in sim profile", name_allowed);
    } else if (auto it = names.find(name->get()); it != names.end()) {
      r.fail_value(pos, path, *name,
                   "duplicate sim profile name, already given by " + it->second.path + " at " +
                       r.location(it->second.pos),
                   "names unique across sim profiles");
    } else {
      names.emplace(name->get(), seen_name{path, pos});
      out.name = name->get();
    }
  }

  const auto required = [&](std::string_view key, double& value) {
    if (r.number(s, key, positive, value) == field::absent) {
      r.fail_missing(s, key, " (every sim profile needs it)", number_allowed(positive));
    }
  };
  required("peak_tflops", out.peak_tflops);
  required("memory_bandwidth_gb_s", out.memory_bandwidth_gb_s);
  required("memory_gib", out.memory_gib);
  r.number(s, "link_bandwidth_gb_s", non_negative, out.link_bandwidth_gb_s);
  r.number(s, "step_overhead_us", non_negative, out.step_overhead_us);
  r.number(s, "attention_tflops", non_negative, out.attention_tflops);
  r.boolean(s, "overlap", out.overlap);

  field source_state = field::absent;
  if (const auto* source = r.string(s, "source", "a string", source_state)) {
    out.source = source->get();
  }
}

/// Reports device key `key`, which only backend `only` takes, given for backend `backend_text`;
/// `allowed` says what may be written instead.
void refuse_for_backend(reader& r, const scope& s, std::string_view key, std::string_view only,
                        const std::string& backend_text, std::string_view allowed) {
  const toml::node& node = *s.table.get(key);
  r.fail_value(s.value_pos(node), s.key_path(key), node,
               "only allowed when backend = \"" + std::string{only} +
                   "\" (backend = " + backend_text + ")",
               allowed);
}

void read_device(reader& r, const scope& s, device_config& out, seen_names& names,
                 const sim_profile_names& sim_profiles) {
  r.check_keys(s, device_keys, "in [[devices]]");

  field name_state = field::absent;
  const auto* name = r.string(s, "name", device_name_allowed, name_state);
  if (name_state == field::absent) {
    r.fail_missing(s, "name", " (every device needs a name)", device_name_allowed);
  } else if (name != nullptr) {
    const position pos = s.value_pos(*name);
    const std::string path = s.key_path("name");
    if (!is_valid_device_name(name->get())) {
      r.fail_value(pos, path, *name, "not a valid device name", device_name_allowed);
    } else if (auto it = names.find(name->get()); it != names.end()) {
      r.fail_value(pos, path, *name,
                   "duplicate device name, already given by " + it->second.path + " at " +
                       r.location(it->second.pos),
                   "names unique across devices");
    } else {
      names.emplace(name->get(), seen_name{path, pos});
      out.name = name->get();
    }
  }

  const field backend = r.enumeration(s, "backend", device_backend_names, out.backend);
  r.enumeration(s, "role", device_role_names, out.role);

  const field topology_device = r.non_empty_string(
      s, "topology_device", "an hwloc OS device name such as \"nvml0\" or \"cuda0\"",
      out.topology_device);
  unsigned domain = 0;
  const field domain_state = r.integer(s, "domain", domain_id_range, domain);
  if (domain_state == field::valid) {
    out.domain = domain;
  }
  if (topology_device != field::absent && domain_state != field::absent) {
    const toml::node& device_node = *s.table.get("topology_device");
    const toml::node& domain_node = *s.table.get("domain");
    const bool device_first = s.value_pos(device_node) < s.value_pos(domain_node);
    const std::string_view later_key = device_first ? "domain" : "topology_device";
    const std::string_view earlier_key = device_first ? "topology_device" : "domain";
    const toml::node& later = device_first ? domain_node : device_node;
    const toml::node& earlier = device_first ? device_node : domain_node;
    r.fail_value(s.value_pos(later), s.key_path(later_key), later,
                 "give topology_device or domain, not both (" + s.key_path(earlier_key) + " = " +
                     render(earlier) + ")",
                 "either " + s.key_path("topology_device") + " or " + s.key_path("domain"));
  }

  const std::string backend_text = quote(to_string(out.backend));
  field profile_state = field::absent;
  const auto* profile = r.string(s, "profile", "a profile name", profile_state);
  if (profile != nullptr && backend != field::invalid) {
    const position pos = s.value_pos(*profile);
    const std::string path = s.key_path("profile");
    switch (out.backend) {
    case device_backend::cpu:
      r.fail_value(pos, path, *profile,
                   "not allowed for backend \"cpu\": the cpu model is set by [model].preset",
                   "no profile key for backend \"cpu\"; set the model with [model].preset: " +
                       join(cpu_device_profiles, true));
      break;
    case device_backend::sim:
      if (sim_profiles.known(profile->get())) {
        out.profile = profile->get();
      } else {
        r.fail_value(pos, path, *profile, "not allowed for backend \"sim\"",
                     sim_profiles.allowed());
      }
      break;
    case device_backend::cuda:
      out.profile = profile->get();
      break;
    }
  }

  double time_scale = out.time_scale;
  const field time_scale_state = r.number(s, "time_scale", non_negative, time_scale);
  if (time_scale_state != field::absent && backend != field::invalid &&
      out.backend != device_backend::sim) {
    refuse_for_backend(r, s, "time_scale", "sim", backend_text,
                       "no time_scale key, or backend = \"sim\"");
  } else if (time_scale_state == field::valid) {
    out.time_scale = time_scale;
  }

  r.integer(s, "memory_mib", device_memory_mib_range, out.memory_mib);
  r.integer(s, "queue_capacity", queue_capacity_range, out.queue_capacity);
  r.boolean(s, "prefix_cache", out.prefix_cache);
  r.integer(s, "burst_steps", burst_steps_range, out.burst_steps);
  r.integer(s, "burst_window_us", burst_window_us_range, out.burst_window_us);

  std::size_t compute_cores = out.compute_cores;
  const field compute_cores_state =
      r.integer(s, "compute_cores", compute_cores_range, compute_cores);
  if (compute_cores_state == field::valid && compute_cores != 0 && backend != field::invalid &&
      out.backend != device_backend::cpu) {
    refuse_for_backend(r, s, "compute_cores", "cpu", backend_text,
                       "0, no compute_cores key, or backend = \"cpu\"");
  } else if (compute_cores_state == field::valid) {
    out.compute_cores = compute_cores;
  }
}

/// Reads the array of tables `key` (`[[key]]`), each element with `read`.
void read_mcp_server(reader& r, const scope& s, mcp_server_entry& out, seen_names& names) {
  r.check_keys(s, mcp_server_keys, "in [[mcp_servers]]");
  field name_state = field::absent;
  const auto* name = r.string(s, "name", device_name_allowed, name_state);
  if (name_state == field::absent) {
    r.fail_missing(s, "name", " (every MCP server needs a name: its tools are <name>__<tool>)",
                   device_name_allowed);
  } else if (name != nullptr) {
    const position pos = s.value_pos(*name);
    const std::string path = s.key_path("name");
    if (!is_valid_device_name(name->get())) {
      r.fail_value(pos, path, *name, "not a valid name", device_name_allowed);
    } else if (auto it = names.find(name->get()); it != names.end()) {
      r.fail_value(pos, path, *name,
                   "duplicate MCP server name, already given by " + it->second.path + " at " +
                       r.location(it->second.pos),
                   "names unique across MCP servers");
    } else {
      names.emplace(name->get(), seen_name{path, pos});
      out.name = name->get();
    }
  }
  auto absolute = [](const std::string& v) -> const char* {
    return v.empty() || v[0] != '/' ? "not an absolute path" : nullptr;
  };
  auto anything = [](const std::string&) -> const char* { return nullptr; };
  const field command =
      r.strings(s, "command", "an array: the program's absolute path, then its arguments",
                out.command, anything);
  if (command == field::absent)
    r.fail_missing(s, "command", " (the program to start and its arguments)",
                   "an array: the program's absolute path, then its arguments");
  else if (command == field::valid &&
           (out.command.empty() || out.command[0].empty() || out.command[0][0] != '/')) {
    const toml::node& node = *s.table.get("command");
    r.fail_value(s.value_pos(node), s.key_path("command"), node,
                 "the program must be an absolute path",
                 "an array: the program's absolute path, then its arguments");
  }
  r.strings(s, "env", "an array of \"KEY=value\" strings", out.env,
            [](const std::string& v) -> const char* {
              return v.find('=') == std::string::npos || v[0] == '=' ? "not KEY=value" : nullptr;
            });
  r.strings(s, "read_only", "an array of absolute host paths", out.read_only, absolute);
  r.strings(s, "read_write", "an array of absolute host directories", out.read_write, absolute);
}

template<class Config, class Read>
void read_tables(reader& r, const scope& root, std::string_view key,
                 std::span<const std::string_view> keys, std::vector<Config>& out, Read read) {
  const toml::node* node = root.table.get(key);
  if (node == nullptr) {
    return;
  }
  const std::string element_allowed = "a table with keys " + join(keys, false);
  const auto* array = node->as_array();
  if (array == nullptr) {
    r.fail_value(root.value_pos(*node), key, *node,
                 "wrong type (" + std::string{type_name(*node)} + ")",
                 "an array of tables [[" + std::string{key} + "]] with keys " + join(keys, false));
    return;
  }
  const position array_pos = root.value_pos(*node);
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = (*array)[i];
    const std::string path = std::string{key} + "[" + std::to_string(i) + "]";
    const position pos = position_of(element.source(), array_pos);
    const auto* table = element.as_table();
    if (table == nullptr) {
      r.fail_value(pos, path, element, "wrong type (" + std::string{type_name(element)} + ")",
                   element_allowed);
      continue;
    }
    Config config;
    read(scope{*table, path, pos}, config);
    out.push_back(std::move(config));
  }
}

/// Reads a section table with `read` when present.
template<class Config, class Read>
void read_section(reader& r, const scope& root, std::string_view key, Config& out, Read read) {
  if (const toml::table* table = r.table(root, key)) {
    read(r, scope{*table, std::string{key}, position_of(table->source(), root.pos)}, out);
  }
}

node_config read_config(reader& r, const toml::table& document) {
  const scope root{document, "", position_of(document.source(), position{})};
  r.check_keys(root, root_keys, "at top level");
  node_config config;
  read_section(r, root, "topology", config.topology, read_topology);
  read_section(r, root, "scheduler", config.scheduler, read_scheduler);
  read_section(r, root, "tools", config.tools, read_tools);
  read_section(r, root, "limits", config.limits, read_limits);
  read_section(r, root, "server", config.server, read_server);
  read_section(r, root, "model", config.model, read_model);
  read_section(r, root, "orchestration", config.orchestration, read_orchestration);

  // Sim profiles first: a sim device may name one defined anywhere in the file.
  sim_profile_names sim_profiles;
  seen_names profile_names;
  read_tables(r, root, "sim_profiles", sim_profile_keys, config.sim_profiles,
              [&](const scope& s, sim_profile_config& out) {
                read_sim_profile(r, s, out, profile_names, sim_profiles);
              });
  seen_names device_names;
  read_tables(r, root, "devices", device_keys, config.devices,
              [&](const scope& s, device_config& out) {
                read_device(r, s, out, device_names, sim_profiles);
              });
  seen_names mcp_names;
  read_tables(
      r, root, "mcp_servers", mcp_server_keys, config.mcp_servers,
      [&](const scope& s, mcp_server_entry& out) { read_mcp_server(r, s, out, mcp_names); });
  return config;
}

void append_ids(std::string& out, const std::vector<unsigned>& ids) {
  out += '[';
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) {
      out += ", ";
    }
    out += std::to_string(ids[i]);
  }
  out += "]\n";
}

template<class T>
void append_value(std::string& out, std::string_view key, const T& value) {
  out += key;
  out += " = ";
  if constexpr (std::is_same_v<T, bool>) {
    out += value ? "true" : "false";
  } else if constexpr (std::is_integral_v<T>) {
    out += std::to_string(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    out += format_double(value);
  } else if constexpr (std::is_same_v<T, std::vector<unsigned>>) {
    append_ids(out, value);
    return;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    out += '[';
    for (std::size_t i = 0; i < value.size(); ++i)
      out += (i > 0 ? ", " : "") + quote(value[i]);
    out += ']';
  } else {
    out += quote(value);
  }
  out += '\n';
}

} // namespace

std::string_view to_string(kv_policy value) noexcept {
  return name_of(kv_policy_names, value);
}

std::string_view to_string(layout value) noexcept {
  return name_of(layout_names, value);
}

std::string_view to_string(schedule_policy value) noexcept {
  return name_of(schedule_policy_names, value);
}

std::string_view to_string(tool_overflow_policy value) noexcept {
  return name_of(tool_overflow_names, value);
}

std::string_view to_string(device_failure_policy value) noexcept {
  return name_of(device_failure_names, value);
}

std::string_view to_string(topology_source value) noexcept {
  switch (value) {
  case topology_source::machine:
    return "machine";
  case topology_source::xml:
    return "xml";
  case topology_source::synthetic:
    return "synthetic";
  }
  return "unknown";
}

std::string_view to_string(device_role value) noexcept {
  switch (value) {
  case device_role::prefill:
    return "prefill";
  case device_role::decode:
    return "decode";
  case device_role::both:
    return "both";
  }
  return "unknown";
}

std::string_view to_string(device_backend value) noexcept {
  switch (value) {
  case device_backend::cpu:
    return "cpu";
  case device_backend::sim:
    return "sim";
  case device_backend::cuda:
    return "cuda";
  }
  return "unknown";
}

std::string_view to_string(model_dtype value) noexcept {
  return name_of(model_dtype_names, value);
}

expected<node_config> parse_config(std::string_view toml_text, std::string_view source_name) {
  const std::string name = source_name.empty() ? std::string{"<config>"} : std::string{source_name};
  try {
    toml::table document;
    try {
      document = toml::parse(toml_text, std::string_view{name});
    } catch (const toml::parse_error& e) {
      const position pos = position_of(e.source(), position{});
      return make_error(errc::parse_error,
                        name + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) +
                            ": TOML syntax error: " + std::string{e.description()});
    }
    reader r{name};
    node_config config = read_config(r, document);
    if (!r.ok()) {
      return r.take_error();
    }
    return config;
  } catch (const std::exception& e) {
    return make_error(errc::system_error, name + ": reading the configuration failed: " + e.what());
  }
}

expected<node_config> load_config(const std::filesystem::path& file) {
  try {
    const std::string name = file.string();
    std::error_code ec;
    const auto status = std::filesystem::status(file, ec);
    if (status.type() == std::filesystem::file_type::not_found ||
        ec == std::errc::no_such_file_or_directory) {
      return make_error(errc::not_found, name + ": config file not found");
    }
    if (ec) {
      return make_error(errc::io_error, name + ": cannot read config file: " + ec.message());
    }
    if (std::filesystem::is_directory(status)) {
      return make_error(errc::io_error, name + ": cannot read config file: it is a directory");
    }
    std::ifstream in{file, std::ios::binary};
    if (!in) {
      return make_error(errc::io_error, name + ": cannot read config file: open failed");
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
      return make_error(errc::io_error, name + ": cannot read config file: read failed");
    }
    expected<node_config> result = parse_config(text.str(), name);
    if (!result) {
      return result;
    }
    topology_config& topology = result->topology;
    if (topology.source == topology_source::xml) {
      const std::filesystem::path xml{topology.xml};
      if (xml.is_relative()) {
        std::filesystem::path resolved = file.parent_path() / xml;
        if (auto absolute = std::filesystem::absolute(resolved, ec); !ec) {
          resolved = std::move(absolute);
        }
        topology.xml = resolved.lexically_normal().string();
      }
    }
    return result;
  } catch (const std::exception& e) {
    return make_error(errc::io_error,
                      file.string() + ": cannot read config file: " + std::string{e.what()});
  }
}

std::string to_toml(const node_config& config) {
  std::string out = "# triad node configuration\n\n[topology]\n";
  append_value(out, "source", std::string{to_string(config.topology.source)});
  if (!config.topology.xml.empty()) {
    append_value(out, "xml", config.topology.xml);
  }
  if (!config.topology.synthetic.empty()) {
    append_value(out, "synthetic", config.topology.synthetic);
  }
  append_value(out, "bind_threads", config.topology.bind_threads);

  out += "\n[scheduler]\n";
  append_value(out, "orchestration_domains", config.scheduler.orchestration_domains);
  append_value(out, "threads_per_domain", config.scheduler.threads_per_domain);
  append_value(out, "moderate_sleep_us",
               static_cast<std::int64_t>(config.scheduler.moderate_sleep.count()));
  append_value(out, "poll_attempts", config.scheduler.poll_attempts);

  out += "\n[tools]\n";
  append_value(out, "cores", config.tools.cores);
  append_value(out, "domains", config.tools.domains);
  append_value(out, "queue_capacity", config.tools.queue_capacity);
  append_value(out, "hosted", config.tools.hosted);

  out += "\n[limits]\n";
  append_value(out, "max_concurrent_requests", config.limits.max_concurrent_requests);
  append_value(out, "max_body_bytes", config.limits.max_body_bytes);
  append_value(out, "queue_timeout_ms", config.limits.queue_timeout_ms);
  append_value(out, "request_timeout_ms", config.limits.request_timeout_ms);

  out += "\n[server]\n";
  append_value(out, "listen", config.server.listen);
  append_value(out, "port", config.server.port);
  append_value(out, "api_key_env", config.server.api_key_env);
  append_value(out, "allow_scripts", config.server.allow_scripts);
  append_value(out, "max_header_bytes", config.server.max_header_bytes);
  append_value(out, "header_timeout_ms", config.server.header_timeout_ms);
  append_value(out, "idle_timeout_ms", config.server.idle_timeout_ms);
  append_value(out, "drain_timeout_ms", config.server.drain_timeout_ms);
  append_value(out, "threads", config.server.threads);

  out += "\n[model]\n";
  append_value(out, "preset", config.model.preset);
  append_value(out, "dtype", std::string{to_string(config.model.dtype)});
  append_value(out, "page_tokens", config.model.page_tokens);
  append_value(out, "context_tokens", config.model.context_tokens);

  const auto& o = config.orchestration;
  out += "\n[orchestration]\n";
  append_value(out, "kv", std::string{to_string(o.kv)});
  append_value(out, "layout", std::string{to_string(o.device_layout)});
  append_value(out, "schedule", std::string{to_string(o.schedule)});
  append_value(out, "max_waiting", o.max_waiting);
  append_value(out, "retry_after_ms", static_cast<std::int64_t>(o.retry_after.count()));
  append_value(out, "tool_deadline_ms", static_cast<std::int64_t>(o.tool_deadline.count()));
  append_value(out, "device_slots", o.device_slots);
  append_value(out, "device_failure", std::string{to_string(o.device_failure)});
  append_value(out, "tool_result_overflow", std::string{to_string(o.tool_result_overflow)});
  append_value(out, "max_device_retries", o.max_device_retries);
  append_value(out, "busy_backoff_ms", static_cast<std::int64_t>(o.busy_backoff.count()));

  for (const sim_profile_config& profile : config.sim_profiles) {
    out += "\n[[sim_profiles]]\n";
    append_value(out, "name", profile.name);
    append_value(out, "peak_tflops", profile.peak_tflops);
    append_value(out, "memory_bandwidth_gb_s", profile.memory_bandwidth_gb_s);
    append_value(out, "memory_gib", profile.memory_gib);
    append_value(out, "link_bandwidth_gb_s", profile.link_bandwidth_gb_s);
    append_value(out, "step_overhead_us", profile.step_overhead_us);
    append_value(out, "attention_tflops", profile.attention_tflops);
    append_value(out, "overlap", profile.overlap);
    append_value(out, "source", profile.source);
  }

  for (const device_config& device : config.devices) {
    out += "\n[[devices]]\n";
    append_value(out, "name", device.name);
    append_value(out, "backend", std::string{to_string(device.backend)});
    append_value(out, "role", std::string{to_string(device.role)});
    if (!device.topology_device.empty()) {
      append_value(out, "topology_device", device.topology_device);
    }
    if (device.domain) {
      append_value(out, "domain", *device.domain);
    }
    if (!device.profile.empty()) {
      append_value(out, "profile", device.profile);
    }
    // Written for every sim device; for another backend only when set (an invalid config).
    if (device.backend == device_backend::sim ||
        device.time_scale != defaults::device::time_scale) {
      append_value(out, "time_scale", device.time_scale);
    }
    append_value(out, "memory_mib", device.memory_mib);
    append_value(out, "queue_capacity", device.queue_capacity);
    append_value(out, "prefix_cache", device.prefix_cache);
    append_value(out, "burst_steps", device.burst_steps);
    append_value(out, "burst_window_us", device.burst_window_us);
    // Written for every cpu device; for another backend only when set (an invalid config).
    if (device.backend == device_backend::cpu || device.compute_cores != 0) {
      append_value(out, "compute_cores", device.compute_cores);
    }
  }
  for (const mcp_server_entry& server : config.mcp_servers) {
    out += "\n[[mcp_servers]]\n";
    append_value(out, "name", server.name);
    append_value(out, "command", server.command);
    append_value(out, "env", server.env);
    append_value(out, "read_only", server.read_only);
    append_value(out, "read_write", server.read_write);
  }
  return out;
}

node_config default_config() {
  node_config config;
  config.topology.source = topology_source::machine;
  config.tools.cores = defaults::tools::cores;
  config.model.preset = defaults::model::preset;

  device_config prefill;
  prefill.name = "prefill0";
  prefill.backend = device_backend::cpu;
  prefill.role = device_role::prefill;
  config.devices.push_back(std::move(prefill));

  device_config decode;
  decode.name = "decode0";
  decode.backend = device_backend::cpu;
  decode.role = device_role::decode;
  config.devices.push_back(std::move(decode));
  return config;
}

node_config zero_time_sim_config(const std::vector<std::pair<std::string, device_role>>& devices) {
  auto config = default_config();
  config.topology.bind_threads = false;
  config.devices.clear();
  for (const auto& [name, role] : devices) {
    device_config d;
    d.name = name;
    d.backend = device_backend::sim;
    d.role = role;
    d.time_scale = 0;
    config.devices.push_back(d);
  }
  return config;
}

} // namespace triad
