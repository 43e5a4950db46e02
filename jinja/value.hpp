#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "runtime/error.hpp"

namespace triad::jinja {

struct value;
/// A list (shared: Jinja lists and dicts have reference semantics, as in Python).
using array = std::vector<value>;
/// A dict in insertion order.
using object = std::vector<std::pair<std::string, value>>;
/// Keyword arguments of a call.
using kwargs = std::vector<std::pair<std::string, value>>;
/// A function a template can call (globals, macros, bound methods).
using function = std::function<expected<value>(std::vector<value>, kwargs)>;

/// A template value: undefined, none, bool, integer, float, string, list, dict or function.
struct value {
  /// Which of the alternatives it holds.
  enum class kind : std::uint8_t { undefined, none, boolean, integer, number, string, list, dict, callable };

  kind k = kind::undefined;          ///< the alternative
  bool b = false;                    ///< boolean
  std::int64_t i = 0;                ///< integer
  double d = 0;                      ///< number (float)
  std::string s;                     ///< string
  std::shared_ptr<array> items;      ///< list
  std::shared_ptr<object> members;   ///< dict (namespace objects too)
  std::shared_ptr<function> fn;      ///< callable

  /// Constructors of each alternative.
  static value none() { return make(kind::none); }
  static value boolean(bool v) { auto x = make(kind::boolean); x.b = v; return x; }
  static value integer(std::int64_t v) { auto x = make(kind::integer); x.i = v; return x; }
  static value number(double v) { auto x = make(kind::number); x.d = v; return x; }
  static value string(std::string v) { auto x = make(kind::string); x.s = std::move(v); return x; }
  static value list(array v = {}) { auto x = make(kind::list); x.items = std::make_shared<array>(std::move(v)); return x; }
  static value dict(object v = {}) { auto x = make(kind::dict); x.members = std::make_shared<object>(std::move(v)); return x; }
  static value callable(function f) { auto x = make(kind::callable); x.fn = std::make_shared<function>(std::move(f)); return x; }
  /// A JSON value: objects keep their key order; integral numbers become integers (as
  /// JavaScript's and Python's JSON readers give them).
  static value from_json(const boost::json::value& v);

  bool is_undefined() const noexcept { return k == kind::undefined; }
  bool is_none() const noexcept { return k == kind::none; }
  bool is_string() const noexcept { return k == kind::string; }
  bool is_number() const noexcept { return k == kind::integer || k == kind::number; }
  bool is_list() const noexcept { return k == kind::list; }
  bool is_dict() const noexcept { return k == kind::dict; }

  /// Python truthiness: empty strings, lists and dicts, zero, none and undefined are false.
  bool truthy() const noexcept;
  /// The member `key` of a dict, or undefined.
  value get(std::string_view key) const;
  /// Sets (or adds) member `key` of a dict.
  void set(std::string_view key, value v);
  /// Numeric value of an integer or float.
  double as_double() const noexcept { return k == kind::integer ? static_cast<double>(i) : d; }

private:
  static value make(kind k) { value v; v.k = k; return v; }
};

/// How `{{ v }}` prints a value, as @huggingface/jinja does: none as nothing, booleans as
/// true / false, floats with a fraction (1.0), lists and dicts Python-style.
std::string to_output(const value& v);

/// JSON text of a value as @huggingface/jinja's `tojson` writes it: ", " and ": " separators,
/// or with `indent` newlines and that many spaces per level; non-ASCII kept.
std::string to_json(const value& v, int indent = 0, int depth = 0);

/// Structural equality (Python's ==; 1 == 1.0).
bool equal(const value& a, const value& b);

/// A copy sharing no list or dict with `v` (nesting past 64 levels becomes none).
value deep_copy(const value& v, int depth = 0);

} // namespace triad::jinja
