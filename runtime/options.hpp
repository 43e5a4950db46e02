#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/error.hpp"

/// The machinery of config sections (seastar's per-subsystem option structs are the model): each
/// area declares its section once, as a table of keys (member, allowed values, default from the
/// struct's initializer, one-line doc), and the node composes the areas' sections into its file.
/// Reading, writing back (`render`) and the key lists of error messages are driven by the tables.
namespace triad::options {

// -- values a key allows -------------------------------------------------------------------

/// An inclusive range of integers a key accepts.
struct int_range {
  std::int64_t min; ///< smallest value allowed
  std::int64_t max; ///< largest value allowed
};

/// A lower bound for a floating-point key: `value > min` when exclusive, `value >= min` else.
struct number_bound {
  double min;     ///< the bound
  bool exclusive; ///< whether the bound itself is refused
};

/// NUMA domain ids (hwloc OS indexes): any unsigned integer.
inline constexpr int_range domain_id_range{0, 4294967295};

/// Numbers greater than zero.
inline constexpr number_bound positive{0.0, true};
/// Numbers zero or greater.
inline constexpr number_bound non_negative{0.0, false};

/// The name of one enum value as written in a config file.
template<class E>
struct enum_name {
  std::string_view name; ///< as written in the file
  E value;               ///< the value it stands for
};

/// The name of `value` in `names`, "unknown" when it has none.
template<class E, std::size_t N>
constexpr std::string_view name_of(const enum_name<E> (&names)[N], E value) {
  for (const auto& entry : names)
    if (entry.value == value)
      return entry.name;
  return "unknown";
}

/// Whether `name` is in `names`.
constexpr bool contains(std::span<const std::string_view> names, std::string_view name) {
  for (std::string_view n : names)
    if (n == name)
      return true;
  return false;
}

/// Names joined by ", ", each a TOML string when `quoted`.
std::string join(std::span<const std::string_view> names, bool quoted);
/// "integer MIN..MAX".
std::string range_allowed(int_range range);
/// "an array of distinct integers 0..4294967295": what a list of domain ids takes.
std::string domain_ids_allowed();
/// "a finite number (integer or float) > MIN" (or >=).
std::string number_allowed(number_bound bound);
/// The names of an enum's values, each a TOML string, joined by ", ".
template<class E, std::size_t N>
std::string enum_allowed(const enum_name<E> (&names)[N]) {
  std::vector<std::string_view> list;
  for (const auto& entry : names)
    list.push_back(entry.name);
  return join(list, true);
}

// -- TOML text -----------------------------------------------------------------------------

/// `text` as a TOML basic string.
std::string quote(std::string_view text);

/// Appends `text` to `out` in quotes, escaped as a TOML basic string, which JSON reads the
/// same (\", \\, \b, \t, \n, \f, \r, \u00XX for other control bytes): quote's work, and
/// trace files' strings.
void append_quoted(std::string& out, std::string_view text);
/// A double as a TOML float that reads back to the same value.
std::string format_double(double value);
/// An array of strings as a TOML array.
std::string format_strings(const std::vector<std::string>& values);
/// An array of unsigned integers as a TOML array.
std::string format_ids(const std::vector<unsigned>& values);
/// Whether `key` is a bare TOML key (A-Z, a-z, 0-9, '_', '-'; not empty).
bool is_bare_key(std::string_view key) noexcept;

// -- reading one table ---------------------------------------------------------------------

/// Whether a key was absent, read, or rejected.
enum class state { absent, valid, invalid };

/// One TOML table of a config file as a section reads it (`[tools]`, `devices[1]`). Every read
/// checks type and range and reports what is wrong, with file:line:col, the key path, the value
/// given and what is allowed; the earliest error in the file is the one the parse returns.
class table {
public:
  /// Opaque: made by document.
  struct impl;
  explicit table(impl& self) noexcept
      : self_(&self) {}

  /// Reads an integer within `range`; `below_min` replaces "out of range" under the minimum.
  state integer(std::string_view key, int_range range, std::int64_t& out,
                std::string_view below_min = {});
  /// Reads a boolean.
  state boolean(std::string_view key, bool& out);
  /// Reads a string (a non-empty one when `non_empty`); `allowed` says what the key takes.
  state string(std::string_view key, std::string_view allowed, std::string& out,
               bool non_empty = false);
  /// Reads a finite number within `bound`; TOML integers and floats both count.
  state number(std::string_view key, number_bound bound, double& out);
  /// Reads an array of distinct domain ids (unsigned integers).
  state domain_ids(std::string_view key, std::vector<unsigned>& out);
  /// Reads an array of strings; `problem` names what is wrong with one (nullptr: fine).
  state strings(std::string_view key, std::string_view allowed, std::vector<std::string>& out,
                const std::function<const char*(const std::string&)>& problem);

  /// Whether the table has `key`.
  bool has(std::string_view key) const;
  /// What the last read of `key` found (absent when it was never read).
  state state_of(std::string_view key) const;
  /// Reports the value of `key` (which the table has) as not allowed: "path = value: problem;
  /// allowed: allowed".
  void fail(std::string_view key, std::string_view problem, std::string_view allowed);
  /// Reports `key` as missing ("path: missing<why>; allowed: ..."), at the table's position.
  void fail_missing(std::string_view key, std::string_view why, std::string_view allowed);
  /// Claims `value` of `key` as unique across the tables of one array (`[[devices]]`); a second
  /// claim is reported as "duplicate <what>, already given by <path> at <file:line:col>".
  bool claim_unique(std::string_view key, const std::string& value, std::string_view what,
                    std::string_view across);
  /// "devices[1].name".
  std::string path(std::string_view key) const;
  /// The value of `key` as written (inline TOML, shortened).
  std::string render(std::string_view key) const;
  /// Whether `a`'s value comes before `b`'s in the file (both present).
  bool before(std::string_view a, std::string_view b) const;

private:
  impl* self_;
};

// -- sections ------------------------------------------------------------------------------

/// One key of a section over the struct `S`.
template<class S>
struct field {
  std::string_view key; ///< as written in the file
  std::string allowed;  ///< what it takes, as error messages and the reference file say it
  std::string_view doc; ///< one line: what it does
  /// Reads the key into the struct (which holds the default).
  std::function<state(table&, S&)> read;
  /// The key's value as TOML text; nullopt: not written (unset or not applicable).
  std::function<std::optional<std::string>(const S&)> write;

  /// Makes the key required: absent, it is reported as "missing<why>".
  field required(std::string why) && {
    auto inner = std::move(read);
    read = [inner = std::move(inner), key = key, why = std::move(why), allowed = allowed](table& t,
                                                                                          S& out) {
      const state s = inner(t, out);
      if (s == state::absent)
        t.fail_missing(key, why, allowed);
      return s;
    };
    return std::move(*this);
  }

  /// Writes the key only when `when` holds for the struct.
  field written_if(std::function<bool(const S&)> when) && {
    auto inner = std::move(write);
    write = [inner = std::move(inner), when = std::move(when)](const S& s) {
      return when(s) ? inner(s) : std::nullopt;
    };
    return std::move(*this);
  }
};

/// A config section: a table `[name]` (or an array of tables `[[name]]`) read into `S`.
template<class S>
struct section {
  std::string_view name;        ///< the table's key at the file's top level
  bool array = false;           ///< `[[name]]`: any number of tables, read into a vector<S>
  std::vector<field<S>> fields; ///< its keys, in the order they are documented and written
  /// Rules across keys, run after the fields are read (may be empty).
  std::function<void(table&, S&)> check;

  /// The keys, in order.
  std::vector<std::string_view> keys() const {
    std::vector<std::string_view> out;
    for (const auto& f : fields)
      out.push_back(f.key);
    return out;
  }
};

// -- field makers --------------------------------------------------------------------------

namespace detail {

template<class T>
struct is_duration : std::false_type {};
template<class Rep, class Period>
struct is_duration<std::chrono::duration<Rep, Period>> : std::true_type {};

template<class T>
struct is_optional : std::false_type {};
template<class T>
struct is_optional<std::optional<T>> : std::true_type {};

} // namespace detail

/// An integer key (an integral, std::chrono::duration or std::optional<integral> member; a
/// duration's count is written in its own unit, which the key's name says: `_ms`, `_us`).
template<class S, class M>
field<S> integer(std::string_view key, M S::*member, int_range range, std::string_view doc,
                 std::string_view below_min = {}) {
  field<S> f{key, range_allowed(range), doc, {}, {}};
  f.read = [key, range, member, below_min](table& t, S& s) {
    std::int64_t value = 0;
    const state result = t.integer(key, range, value, below_min);
    if (result == state::valid) {
      if constexpr (detail::is_duration<M>::value)
        s.*member = M{static_cast<typename M::rep>(value)};
      else if constexpr (detail::is_optional<M>::value)
        s.*member = static_cast<typename M::value_type>(value);
      else
        s.*member = static_cast<M>(value);
    }
    return result;
  };
  f.write = [member](const S& s) -> std::optional<std::string> {
    if constexpr (detail::is_duration<M>::value)
      return std::to_string(static_cast<std::int64_t>((s.*member).count()));
    else if constexpr (detail::is_optional<M>::value)
      return (s.*member) ? std::optional{std::to_string(*(s.*member))} : std::nullopt;
    else
      return std::to_string(s.*member);
  };
  return f;
}

/// A boolean key.
template<class S>
field<S> boolean(std::string_view key, bool S::*member, std::string_view doc) {
  field<S> f{key, "true, false", doc, {}, {}};
  f.read = [key, member](table& t, S& s) { return t.boolean(key, s.*member); };
  f.write = [member](const S& s) -> std::optional<std::string> {
    return (s.*member) ? "true" : "false";
  };
  return f;
}

/// A string key; `problem` (optional) names what is wrong with a value, nullptr when fine.
template<class S>
field<S> text(std::string_view key, std::string S::*member, std::string allowed,
              std::string_view doc, bool non_empty = false,
              std::function<const char*(const std::string&)> problem = {}) {
  field<S> f{key, std::move(allowed), doc, {}, {}};
  f.read = [key, member, allowed = f.allowed, non_empty, problem](table& t, S& s) {
    std::string value;
    state result = t.string(key, allowed, value, non_empty);
    if (result == state::valid && problem) {
      if (const char* wrong = problem(value)) {
        t.fail(key, wrong, allowed);
        return state::invalid;
      }
    }
    if (result == state::valid)
      s.*member = std::move(value);
    return result;
  };
  f.write = [member](const S& s) -> std::optional<std::string> { return quote(s.*member); };
  return f;
}

/// A string key that must be one of `names` (stored as the string).
template<class S>
field<S> one_of(std::string_view key, std::string S::*member,
                std::span<const std::string_view> names, std::string_view doc) {
  const std::string allowed = join(names, true);
  return text<S>(key, member, allowed, doc, false, [names](const std::string& v) -> const char* {
    return contains(names, v) ? nullptr : "not allowed";
  });
}

/// An enum key written as one of `names`.
template<class S, class E, std::size_t N>
field<S> choice(std::string_view key, E S::*member, const enum_name<E> (&names)[N],
                std::string_view doc) {
  field<S> f{key, enum_allowed(names), doc, {}, {}};
  const enum_name<E>* first = names;
  f.read = [key, member, first, allowed = f.allowed](table& t, S& s) {
    std::string value;
    const state result = t.string(key, allowed, value);
    if (result != state::valid)
      return result;
    for (std::size_t i = 0; i < N; ++i) {
      if (first[i].name == value) {
        s.*member = first[i].value;
        return state::valid;
      }
    }
    t.fail(key, "not allowed", allowed);
    return state::invalid;
  };
  f.write = [member, first](const S& s) -> std::optional<std::string> {
    for (std::size_t i = 0; i < N; ++i)
      if (first[i].value == s.*member)
        return quote(first[i].name);
    return quote("unknown");
  };
  return f;
}

/// A floating-point key within `bound`.
template<class S>
field<S> number(std::string_view key, double S::*member, number_bound bound, std::string_view doc) {
  field<S> f{key, number_allowed(bound), doc, {}, {}};
  f.read = [key, member, bound](table& t, S& s) { return t.number(key, bound, s.*member); };
  f.write = [member](const S& s) -> std::optional<std::string> { return format_double(s.*member); };
  return f;
}

/// An array of distinct NUMA domain ids.
template<class S>
field<S> domain_ids(std::string_view key, std::vector<unsigned> S::*member, std::string_view doc) {
  field<S> f{key, domain_ids_allowed(), doc, {}, {}};
  f.read = [key, member](table& t, S& s) { return t.domain_ids(key, s.*member); };
  f.write = [member](const S& s) -> std::optional<std::string> { return format_ids(s.*member); };
  return f;
}

/// An array of strings; `problem` names what is wrong with one (nullptr: fine).
template<class S>
field<S> strings(std::string_view key, std::vector<std::string> S::*member, std::string allowed,
                 std::string_view doc,
                 std::function<const char*(const std::string&)> problem = {}) {
  field<S> f{key, std::move(allowed), doc, {}, {}};
  f.read = [key, member, allowed = f.allowed, problem](table& t, S& s) {
    return t.strings(key, allowed, s.*member, [&problem](const std::string& v) -> const char* {
      return problem ? problem(v) : nullptr;
    });
  };
  f.write = [member](const S& s) -> std::optional<std::string> {
    return format_strings(s.*member);
  };
  return f;
}

/// An array of distinct strings, each one of `names`.
template<class S>
field<S> names(std::string_view key, std::vector<std::string> S::*member,
               std::span<const std::string_view> names, std::string_view doc) {
  field<S> f = strings<S>(key, member, "an array of distinct names from " + join(names, true), doc);
  f.read = [key, member, names, allowed = f.allowed](table& t, S& s) {
    std::vector<std::string> seen;
    return t.strings(key, allowed, s.*member, [&](const std::string& v) -> const char* {
      if (!contains(names, v))
        return "not allowed";
      for (const auto& earlier : seen)
        if (earlier == v)
          return "named twice";
      seen.push_back(v);
      return nullptr;
    });
  };
  return f;
}

/// A key read and written by the section's own functions.
template<class S>
field<S> custom(std::string_view key, std::string allowed, std::string_view doc,
                std::function<state(table&, S&)> read,
                std::function<std::optional<std::string>(const S&)> write) {
  return field<S>{key, std::move(allowed), doc, std::move(read), std::move(write)};
}

/// What an entry's name may be: "1..64 characters from A-Z, a-z, 0-9, '_' and '-'".
inline constexpr std::string_view name_allowed = "1..64 characters from A-Z, a-z, 0-9, '_' and '-'";
/// Whether `name` is such a name.
bool is_valid_name(std::string_view name) noexcept;

/// The `name` key of an array's entries (S::name): required, a valid name (name_allowed), unique
/// across the entries and none of `reserved`. `noun` names an entry in messages ("device":
/// "not a valid device name", "duplicate device name", "the name of a built-in device");
/// `invalid` (when given) replaces the problem of a name that is not valid.
template<class S>
field<S> unique_name(std::string_view noun, std::string_view across, std::string_view missing_why,
                     std::span<const std::string_view> reserved = {},
                     std::string_view invalid = {}) {
  std::string allowed{name_allowed};
  if (!reserved.empty())
    allowed += "; unique across " + std::string{across} + "; not a built-in name (" +
               join(reserved, true) + ")";
  const std::string what = std::string{noun} + " name";
  auto read = [noun, what, across, reserved, allowed, invalid](table& t, S& out) {
    std::string name;
    const state s = t.string("name", allowed, name);
    if (s != state::valid)
      return s;
    if (!is_valid_name(name)) {
      t.fail("name", invalid.empty() ? "not a valid " + what : std::string{invalid}, allowed);
      return state::invalid;
    }
    if (contains(reserved, name)) {
      t.fail("name", "the name of a built-in " + std::string{noun}, allowed);
      return state::invalid;
    }
    if (!t.claim_unique("name", name, what, across))
      return state::invalid;
    out.name = std::move(name);
    return s;
  };
  auto write = [](const S& s) -> std::optional<std::string> { return quote(s.name); };
  return custom<S>("name", allowed, "a unique name", read, write)
      .required(std::string{missing_why});
}

// -- documents -----------------------------------------------------------------------------

/// A config file being read against the sections the node composes. Errors are collected; the
/// earliest in the file is the one `finish` returns.
class document {
public:
  /// Parses `text` as TOML; a syntax error is errc::parse_error naming file, line and column.
  static expected<document> parse(std::string_view text, std::string_view source_name);

  document(document&&) noexcept;
  document& operator=(document&&) noexcept;
  ~document();

  /// Reports every top-level key not in `keys`.
  void check_top_level(std::span<const std::string_view> keys);

  /// Reads the table `[s.name]`, when present, into `out`.
  template<class S>
  void read(const section<S>& s, S& out) {
    read_table(s.name, s.keys(), [&](table& t) { read_fields(s, t, out); });
  }

  /// Reads the array of tables `[[s.name]]`, when present, into `out` (one element per table,
  /// kept even when it has errors).
  template<class S>
  void read(const section<S>& s, std::vector<S>& out) {
    read_array(s.name, s.keys(), [&](table& t) {
      S element;
      read_fields(s, t, element);
      out.push_back(std::move(element));
    });
  }

  /// The first error in file order ("file:line:col: message", errc::invalid_argument), or
  /// nothing.
  expected<void> finish() const;

private:
  struct impl;
  explicit document(std::unique_ptr<impl> self) noexcept;

  template<class S>
  static void read_fields(const section<S>& s, table& t, S& out) {
    for (const auto& f : s.fields)
      f.read(t, out);
    if (s.check)
      s.check(t, out);
  }

  void read_table(std::string_view name, std::span<const std::string_view> keys,
                  const std::function<void(table&)>& read);
  void read_array(std::string_view name, std::span<const std::string_view> keys,
                  const std::function<void(table&)>& read);

  std::unique_ptr<impl> self_;
};

// -- writing -------------------------------------------------------------------------------

/// Appends `value` as the table `[s.name]` (or one `[[s.name]]` element): a blank line, the
/// header, then "key = value" for every key that is written.
template<class S>
void render(std::string& out, const section<S>& s, const S& value) {
  out += s.array ? "\n[[" : "\n[";
  out += s.name;
  out += s.array ? "]]\n" : "]\n";
  for (const auto& f : s.fields) {
    if (auto text = f.write(value)) {
      out += f.key;
      out += " = ";
      out += *text;
      out += '\n';
    }
  }
}

/// Appends every element of an array section.
template<class S>
void render(std::string& out, const section<S>& s, const std::vector<S>& values) {
  for (const S& value : values)
    render(out, s, value);
}

} // namespace triad::options
