#include "grammar/json_schema.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <boost/json/serialize.hpp>

#include "runtime/json_text.hpp"

namespace triad::grammar {

namespace {

namespace json = boost::json;

byte_set range(unsigned lo, unsigned hi) {
  byte_set s;
  for (unsigned c = lo; c <= hi; ++c)
    s.set(c);
  return s;
}

// Repetitions a bounded count may allow beyond its minimum (each is a rule), and the most a
// minimum may require (each is an element).
constexpr std::size_t max_bounded_repeat = 4096;
// Whole digits a number may have (18: an integer fits an int64 exactly).
constexpr std::size_t max_whole_digits = 18;
// Elements a whole grammar may have: a schema is checked against it as it compiles, so no
// request can make the node build a grammar it cannot hold.
constexpr std::size_t max_elements = std::size_t{1} << 20;
// A `pattern`'s length and group nesting (a deeper one would recurse past a thread's stack).
constexpr std::size_t max_pattern_bytes = 4096;
constexpr std::size_t max_pattern_depth = 64;

// Keywords that only describe (ignored beside anything).
const std::set<std::string_view> annotations = {
    "title",    "description", "default",  "examples",  "$schema", "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};

// A JSON value as its literal text, numbers as written in JSON by people (1.5, not 1.5E0).
std::string literal_text(const json::value& v) {
  if (v.is_double()) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v.get_double());
    std::string out{buf, r.ptr};
    if (out.find_first_of(".e") == std::string::npos && out != "inf" && out != "-inf" &&
        out != "nan")
      out += ".0";
    return out;
  }
  return json::serialize(v);
}

// Keywords read, and annotations ignored; any other is refused by name.
const std::set<std::string_view> known_keywords = {
    "type",        "properties", "required", "additionalProperties",
    "items",       "minItems",   "maxItems", "enum",
    "const",       "anyOf",      "allOf",    "$defs",
    "definitions", "$ref",       "title",    "description",
    "default",     "examples",   "$schema",  "$id",
    "$comment",    "deprecated", "readOnly", "writeOnly",
    "pattern",     "minLength",  "maxLength"};

class compiler;

// Reads a regular expression (a JSON Schema `pattern`: ECMAScript syntax) into grammar
// elements of the JSON string text that holds a match: literals, `.`, classes (`[a-z_]`,
// `[^...]` over ASCII), `\\d \\w \\s` and their negations, escapes, groups (`(...)`, `(?:...)`),
// `|`, and `* + ? {n} {n,} {n,m}` (a lazy `?` after them changes nothing here); `^` at the
// start and `$` at the end anchor it, else anything may stand before or after the match.
// Backreferences, lookaround, `\\b`, Unicode classes and anchors elsewhere are refused.
class regex_parser {
public:
  regex_parser(compiler& c, std::string pattern)
      : c_(c)
      , p_(std::move(pattern)) {}
  expected<element> whole();

private:
  expected<element> alternation();
  expected<sequence> concatenation();
  expected<element> atom();
  expected<element> escape_in(std::bitset<128>& ascii, bool& other, bool in_class);
  expected<element> bracket();
  static error refuse(const std::string& why) { return make_error(errc::unsupported, why); }
  bool more() const noexcept { return at_ < p_.size(); }

  compiler& c_;
  std::string p_;
  std::size_t at_ = 0;
  std::size_t depth_ = 0;  // groups open
  std::size_t weight_ = 1; // of the last atom: the copies its nested bounded repeats stack
};

// Compiles JSON grammars: the JSON primitives once each, a rule per schema node, one per `$ref`
// target (declared before it is compiled, so recursion refers to it).
class compiler {
public:
  explicit compiler(const json_options& options)
      : options_(options) {}

  grammar_builder& builder() noexcept { return b_; }

  // -- JSON's own syntax --

  // Whitespace allowed at one place: up to max_whitespace bytes (none: no element).
  void ws(sequence& s) {
    if (options_.max_whitespace == 0)
      return;
    if (!ws_) {
      byte_set w;
      w.set(' ');
      w.set('\t');
      w.set('\n');
      ws_ = b_.repeat(b_.bytes(w), 0, options_.max_whitespace, false, "ws");
    }
    s.push_back(*ws_);
  }

  // `s` followed by a separator: ws ',' ws.
  void comma(sequence& s) {
    ws(s);
    s.push_back(b_.byte(','));
    ws(s);
  }

  element string() {
    if (string_)
      return *string_;
    // One character: printable ASCII but '"' and '\', a well-formed UTF-8 sequence (no
    // overlong forms, no surrogates, at most U+10FFFF), or an escape (surrogates in pairs).
    byte_set ascii = range(0x20, 0x7f);
    ascii.reset('"');
    ascii.reset('\\');
    byte_set escaped;
    for (char c : std::string_view{"\"\\/bfnrt"})
      escaped.set(static_cast<unsigned char>(c));
    const element hex = b_.bytes(range('0', '9') | range('a', 'f') | range('A', 'F'));
    const element d = b_.bytes(range('d', 'd') | range('D', 'D'));
    const byte_set high = range('8', '9') | range('a', 'b') | range('A', 'B');
    const byte_set low = range('c', 'f') | range('C', 'F');
    std::vector<sequence> forms{{b_.bytes(ascii)}};
    for (auto& multibyte : past_ascii())
      forms.push_back(std::move(multibyte));
    const std::vector<sequence> escapes{
        {b_.byte('\\'), b_.bytes(escaped)},
        // \uXXXX, a surrogate only as a high-low pair (a lone one is refused by many
        // parsers, Boost.JSON's among them).
        {b_.byte('\\'), b_.byte('u'), b_.bytes(range('0', '9') | range('a', 'c') | range('A', 'C')),
         hex, hex, hex},
        {b_.byte('\\'), b_.byte('u'), d, b_.bytes(range('0', '7')), hex, hex},
        {b_.byte('\\'), b_.byte('u'), b_.bytes(range('e', 'f') | range('E', 'F')), hex, hex, hex},
        {b_.byte('\\'), b_.byte('u'), d, b_.bytes(high), hex, hex, b_.byte('\\'), b_.byte('u'), d,
         b_.bytes(low), hex, hex},
    };
    forms.insert(forms.end(), escapes.begin(), escapes.end());
    const element ch = b_.choice(std::move(forms), "char");
    char_ = ch;
    const element body = b_.repeat(ch, 0, 0, true, "chars");
    string_ = b_.choice({{b_.byte('"'), body, b_.byte('"')}}, "string");
    return *string_;
  }

  // The well-formed UTF-8 sequences of the characters past ASCII (no overlong forms, no
  // surrogates, at most U+10FFFF), one alternative per lead byte range.
  std::vector<sequence> past_ascii() {
    const element cont = b_.bytes(range(0x80, 0xbf));
    return {{b_.bytes(range(0xc2, 0xdf)), cont},
            {b_.byte(0xe0), b_.bytes(range(0xa0, 0xbf)), cont},
            {b_.bytes(range(0xe1, 0xec)), cont, cont},
            {b_.byte(0xed), b_.bytes(range(0x80, 0x9f)), cont},
            {b_.bytes(range(0xee, 0xef)), cont, cont},
            {b_.byte(0xf0), b_.bytes(range(0x90, 0xbf)), cont, cont},
            {b_.bytes(range(0xf1, 0xf3)), cont, cont, cont},
            {b_.byte(0xf4), b_.bytes(range(0x80, 0x8f)), cont, cont}};
  }

  // One character of a JSON string, as JSON writes it (string()'s).
  element character() {
    if (!char_)
      string();
    return *char_;
  }

  // The characters of a regular expression's class as a JSON string writes them: ASCII members
  // (`ascii`, with '"', '\' and control characters escaped) and, where `other`, every
  // character past ASCII.
  element char_class(const std::bitset<128>& ascii, bool other) {
    std::vector<sequence> alternatives;
    byte_set plain;
    for (unsigned c = 0x20; c < 0x80; ++c)
      if (ascii.test(c) && c != '"' && c != '\\' && c != 0x7f)
        plain.set(c);
    if (plain.any())
      alternatives.push_back({b_.bytes(plain)});
    for (unsigned c = 0; c < 0x80; ++c) {
      if (!ascii.test(c) || (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f))
        continue;
      alternatives.push_back(
          b_.literal(json::serialize(json::value(std::string(1, static_cast<char>(c))))
                         .substr(1, std::string::npos)));
      alternatives.back().pop_back(); // the closing quote
    }
    if (other)
      for (auto& multibyte : past_ascii())
        alternatives.push_back(std::move(multibyte));
    if (alternatives.empty())
      alternatives.push_back({b_.bytes(byte_set{})}); // matches nothing
    return b_.choice(std::move(alternatives), "class");
  }

  // A string of `pattern` (ECMAScript syntax, the subset regex_parser reads; unanchored ends
  // match anything there), or of minLength..maxLength characters.
  expected<element> string_schema(const json::object& o, const std::string& path) {
    auto length = bounds(o, "minLength", "maxLength", path);
    if (!length)
      return length.error();
    const auto [min, max] = *length;
    const auto* pattern = o.if_contains("pattern");
    if (pattern == nullptr) {
      if (min == 0 && !max)
        return string();
      if (min > max_bounded_repeat || (max && *max - min > max_bounded_repeat))
        return make_error(errc::unsupported, "json schema: minLength/maxLength at " + path +
                                                 " past " + std::to_string(max_bounded_repeat) +
                                                 " characters; leave them out or lower them");
      const element body = b_.repeat(character(), min, max.value_or(0), !max, "length");
      return b_.choice({{b_.byte('"'), body, b_.byte('"')}}, "string_length");
    }
    if (!pattern->is_string())
      return make_error(errc::invalid_argument,
                        "json schema: pattern at " + path + " must be a string");
    if (o.contains("minLength") || o.contains("maxLength"))
      return make_error(errc::unsupported, "json schema: pattern together with minLength or "
                                           "maxLength at " +
                                               path +
                                               " is not supported; write the length into the "
                                               "pattern ({m,n})");
    regex_parser parse{*this, std::string{pattern->get_string()}};
    auto body = parse.whole();
    if (!body)
      return make_error(errc::unsupported, "json schema: pattern " +
                                               json::serialize(json::value(pattern->get_string())) +
                                               " at " + path + ": " + body.error().message);
    return b_.choice({{b_.byte('"'), *body, b_.byte('"')}}, "string_pattern");
  }

  // -?(0|[1-9][0-9]{0,17}), and for a number (\.[0-9]+)?([eE][+-]?[0-9]{1,2})?: at most 18
  // whole digits and a two-digit exponent, so every JSON parser reads the value (an integer
  // exactly, as an int64; a number without overflow).
  element number(bool integer) {
    auto& cached = integer ? integer_ : number_;
    if (cached)
      return *cached;
    const element digit = b_.bytes(range('0', '9'));
    const element digits = b_.repeat(digit, 1, 0, true, "digits");
    if (!more_digits_)
      more_digits_ = b_.repeat(digit, 0, max_whole_digits - 1, false, "more_digits");
    sequence s{b_.optional(b_.byte('-'), "minus"),
               b_.choice({{b_.byte('0')}, {b_.bytes(range('1', '9')), *more_digits_}}, "whole")};
    if (!integer) {
      s.push_back(b_.optional(b_.choice({{b_.byte('.'), digits}}, "fraction"), "fraction_opt"));
      byte_set e, sign;
      e.set('e');
      e.set('E');
      sign.set('+');
      sign.set('-');
      s.push_back(b_.optional(
          b_.choice({{b_.bytes(e), b_.optional(b_.bytes(sign), "exp_sign"), digit,
                      b_.optional(digit, "exp_digit")}},
                    "exponent"),
          "exponent_opt"));
    }
    cached = b_.choice({std::move(s)}, integer ? "integer" : "number");
    return *cached;
  }

  element literal(std::string_view text, std::string name) {
    return b_.choice({b_.literal(text)}, std::move(name));
  }

  // '[' ws (item (ws ',' ws item){min-1, max-1})? ws ']' (the empty form when min is 0).
  expected<element> array(const element& item, std::size_t min, std::optional<std::size_t> max,
                          const std::string& name) {
    sequence open{b_.byte('[')};
    ws(open);
    sequence close;
    ws(close);
    close.push_back(b_.byte(']'));
    std::vector<sequence> forms;
    if (min == 0) {
      sequence empty = open;
      empty.push_back(b_.byte(']'));
      forms.push_back(std::move(empty));
    }
    if (min > max_bounded_repeat)
      return make_error(errc::unsupported, "json schema: minItems " + std::to_string(min) + " at " +
                                               name + " is more than " +
                                               std::to_string(max_bounded_repeat));
    if (!max || *max > 0) {
      if (max && *max - std::max<std::size_t>(min, 1) > max_bounded_repeat)
        return make_error(errc::unsupported,
                          "json schema: maxItems " + std::to_string(*max) + " at " + name +
                              " allows more than " + std::to_string(max_bounded_repeat) +
                              " items beyond minItems; leave it out or lower it");
      sequence next;
      comma(next);
      next.push_back(item);
      const element more = b_.choice({std::move(next)}, name + "_next");
      const std::size_t lo = min > 0 ? min - 1 : 0;
      sequence full = open;
      full.push_back(item);
      full.push_back(b_.repeat(more, lo, max ? *max - 1 : 0, !max, name + "_items"));
      full.insert(full.end(), close.begin(), close.end());
      forms.push_back(std::move(full));
    }
    return b_.choice(std::move(forms), name);
  }

  // Any JSON value (recursive: declared once).
  element any() {
    if (any_)
      return *any_;
    const std::uint32_t value = b_.declare("value");
    any_ = grammar_builder::ref(value);
    sequence pair{string()};
    ws(pair);
    pair.push_back(b_.byte(':'));
    ws(pair);
    pair.push_back(*any_);
    const element member = b_.choice({std::move(pair)}, "member");
    b_.add(value, {any_object(member)});
    b_.add(value, {*array(*any_, 0, std::nullopt, "array")});
    b_.add(value, {string()});
    b_.add(value, {number(false)});
    b_.add(value, b_.literal("true"));
    b_.add(value, b_.literal("false"));
    b_.add(value, b_.literal("null"));
    return *any_;
  }

  // '{' ws (member (ws ',' ws member)*)? ws '}' of any members.
  element any_object(const element& member) {
    if (any_object_)
      return *any_object_;
    sequence open{b_.byte('{')};
    ws(open);
    sequence empty = open;
    empty.push_back(b_.byte('}'));
    sequence next;
    comma(next);
    next.push_back(member);
    sequence full = open;
    full.push_back(member);
    full.push_back(b_.repeat(b_.choice({std::move(next)}, "member_next"), 0, 0, true, "members"));
    ws(full);
    full.push_back(b_.byte('}'));
    any_object_ = b_.choice({std::move(empty), std::move(full)}, "object");
    return *any_object_;
  }

  element any_object() {
    if (!any_)
      any();
    return *any_object_;
  }

  // -- schemas --

  // The document `$ref`s resolve in: each schema compiled into one grammar has its own.
  void set_root_schema(const json::value& root) {
    root_ = &root;
    refs_.clear();
  }

  // A JSON string of exactly `text`.
  sequence string_literal(const std::string& text) {
    return b_.literal(json::serialize(json::value(text)));
  }

  expected<element> schema(const json::value& s, const std::string& path) {
    if (b_.elements() > max_elements)
      return make_error(errc::unsupported, "json schema: at " + path + " the grammar passes " +
                                               std::to_string(max_elements) +
                                               " elements; the schema is too large");
    if (s.is_bool()) {
      if (s.as_bool())
        return any();
      return make_error(errc::unsupported,
                        "json schema: " + path + " is false, which no value matches");
    }
    if (!s.is_object())
      return make_error(errc::invalid_argument, "json schema: " + path +
                                                    " must be an object or a boolean, not " +
                                                    json::serialize(s));
    const auto& o = s.as_object();
    for (const auto& [key, v] : o) {
      (void)v;
      if (!known_keywords.contains(std::string_view{key}))
        return make_error(errc::unsupported,
                          "json schema: keyword '" + std::string{key} + "' at " + path +
                              " is not supported (supported: type, properties, required, "
                              "additionalProperties, items, minItems, maxItems, enum, const, "
                              "anyOf, allOf of one schema, $defs, $ref)");
    }
    // $ref, enum, const, anyOf and allOf stand alone (with annotations; enum and const also
    // with a type their values have): a keyword beside them would be dropped, so it is refused.
    for (std::string_view alone : {"$ref", "enum", "const", "anyOf", "allOf"}) {
      if (!o.contains(alone))
        continue;
      for (const auto& [key, v] : o) {
        (void)v;
        const std::string_view k{key};
        if (k == alone || annotations.contains(k) ||
            (k == "type" && (alone == "enum" || alone == "const")))
          continue;
        return make_error(errc::unsupported, "json schema: keyword '" + std::string{k} + "' at " +
                                                 path + " beside '" + std::string{alone} +
                                                 "' is not supported (put it inside, or in an "
                                                 "allOf of one schema)");
      }
    }
    if (const auto* ref = o.if_contains("$ref"))
      return reference(*ref, path);
    if (const auto* e = o.if_contains("enum")) {
      if (!e->is_array() || e->as_array().empty())
        return make_error(errc::invalid_argument,
                          "json schema: enum at " + path + " must be a non-empty array");
      std::vector<sequence> forms;
      for (const auto& v : e->as_array()) {
        if (auto ok = of_type(o, v, path); !ok)
          return ok.error();
        forms.push_back(b_.literal(literal_text(v)));
      }
      return b_.choice(std::move(forms), path + "/enum");
    }
    if (const auto* c = o.if_contains("const")) {
      if (auto ok = of_type(o, *c, path); !ok)
        return ok.error();
      return literal(literal_text(*c), path + "/const");
    }
    if (const auto* any_of = o.if_contains("anyOf")) {
      if (!any_of->is_array() || any_of->as_array().empty())
        return make_error(errc::invalid_argument,
                          "json schema: anyOf at " + path + " must be a non-empty array");
      std::vector<sequence> forms;
      std::size_t i = 0;
      for (const auto& sub : any_of->as_array()) {
        auto e = schema(sub, path + "/anyOf/" + std::to_string(i++));
        if (!e)
          return e.error();
        forms.push_back({*e});
      }
      return b_.choice(std::move(forms), path + "/anyOf");
    }
    if (const auto* all_of = o.if_contains("allOf")) {
      if (!all_of->is_array() || all_of->as_array().size() != 1)
        return make_error(errc::unsupported, "json schema: allOf at " + path +
                                                 " must hold exactly one schema (merging "
                                                 "several is not supported)");
      return schema(all_of->as_array()[0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (const auto* t = o.if_contains("type")) {
      if (t->is_string()) {
        types.emplace_back(t->as_string());
      } else if (t->is_array() && !t->as_array().empty()) {
        for (const auto& one : t->as_array()) {
          if (!one.is_string())
            return make_error(errc::invalid_argument,
                              "json schema: type at " + path + " lists a non-string");
          types.emplace_back(one.as_string());
        }
      } else {
        return make_error(errc::invalid_argument,
                          "json schema: type at " + path +
                              " must be a string or a non-empty array of strings");
      }
    } else if (o.contains("properties") || o.contains("additionalProperties") ||
               o.contains("required")) {
      types.emplace_back("object");
    } else if (o.contains("items") || o.contains("minItems") || o.contains("maxItems")) {
      types.emplace_back("array");
    } else if (o.contains("pattern") || o.contains("minLength") || o.contains("maxLength")) {
      types.emplace_back("string");
    } else {
      return any();
    }
    std::vector<sequence> forms;
    for (const auto& type : types) {
      auto e = typed(o, type, path);
      if (!e)
        return e.error();
      forms.push_back({*e});
    }
    if (forms.size() == 1)
      return forms[0][0];
    return b_.choice(std::move(forms), path + "/type");
  }

private:
  // Whether `v` (an enum or const value) has the type `o` declares, when it declares one.
  static expected<void> of_type(const json::object& o, const json::value& v,
                                const std::string& path) {
    const auto* t = o.if_contains("type");
    if (t == nullptr)
      return {};
    bool ok = false;
    if (t->is_string())
      ok = json_has_type(v, t->get_string());
    else if (t->is_array())
      for (const auto& one : t->get_array())
        ok = ok || (one.is_string() && json_has_type(v, one.get_string()));
    if (ok)
      return {};
    return make_error(errc::invalid_argument, "json schema: the value " + json::serialize(v) +
                                                  " at " + path + " is not of its type " +
                                                  json::serialize(*t));
  }

  expected<element> typed(const json::object& o, const std::string& type, const std::string& path) {
    if (type == "string")
      return string_schema(o, path);
    if (type == "number")
      return number(false);
    if (type == "integer")
      return number(true);
    if (type == "boolean")
      return b_.choice({b_.literal("true"), b_.literal("false")}, "boolean");
    if (type == "null")
      return literal("null", "null");
    if (type == "array")
      return array_schema(o, path);
    if (type == "object")
      return object_schema(o, path);
    return make_error(errc::invalid_argument,
                      "json schema: type '" + type + "' at " + path +
                          " is not a JSON Schema type (object, array, string, number, integer, "
                          "boolean, null)");
  }

  expected<std::size_t> count(const json::object& o, std::string_view key, const std::string& path,
                              std::size_t fallback) {
    const auto* v = o.if_contains(key);
    if (!v)
      return fallback;
    if (v->is_int64() && v->as_int64() >= 0)
      return static_cast<std::size_t>(v->as_int64());
    if (v->is_uint64())
      return static_cast<std::size_t>(v->as_uint64());
    return make_error(errc::invalid_argument, "json schema: " + std::string{key} + " at " + path +
                                                  " must be a non-negative integer");
  }

  // A count's bounds: `min_key` (0 when absent) and `max_key` (none when absent), not below it.
  expected<std::pair<std::size_t, std::optional<std::size_t>>> bounds(const json::object& o,
                                                                      std::string_view min_key,
                                                                      std::string_view max_key,
                                                                      const std::string& path) {
    auto min = count(o, min_key, path, 0);
    if (!min)
      return min.error();
    if (!o.contains(max_key))
      return std::pair{*min, std::optional<std::size_t>{}};
    auto m = count(o, max_key, path, 0);
    if (!m)
      return m.error();
    if (*m < *min)
      return make_error(errc::invalid_argument, "json schema: " + std::string{max_key} + " " +
                                                    std::to_string(*m) + " at " + path +
                                                    " is below " + std::string{min_key} + " " +
                                                    std::to_string(*min));
    return std::pair{*min, std::optional<std::size_t>{*m}};
  }

  expected<element> array_schema(const json::object& o, const std::string& path) {
    element item = any();
    if (const auto* items = o.if_contains("items")) {
      auto e = schema(*items, path + "/items");
      if (!e)
        return e.error();
      item = *e;
    }
    auto items = bounds(o, "minItems", "maxItems", path);
    if (!items)
      return items.error();
    return array(item, items->first, items->second, path);
  }

  expected<element> object_schema(const json::object& o, const std::string& path) {
    std::vector<std::pair<std::string, const json::value*>> props;
    if (const auto* p = o.if_contains("properties")) {
      if (!p->is_object())
        return make_error(errc::invalid_argument,
                          "json schema: properties at " + path + " must be an object");
      for (const auto& [k, v] : p->as_object())
        props.emplace_back(std::string{k}, &v);
    }
    std::set<std::string> required;
    if (const auto* r = o.if_contains("required")) {
      if (!r->is_array())
        return make_error(errc::invalid_argument,
                          "json schema: required at " + path + " must be an array of names");
      for (const auto& name : r->as_array()) {
        if (!name.is_string())
          return make_error(errc::invalid_argument,
                            "json schema: required at " + path + " lists a non-string");
        const std::string n{name.as_string()};
        if (std::none_of(props.begin(), props.end(), [&](const auto& p) { return p.first == n; }))
          return make_error(errc::invalid_argument, "json schema: required at " + path +
                                                        " names '" + n +
                                                        "', which properties does not declare");
        required.insert(n);
      }
    }
    // Only the declared members, or (without properties) any members of additionalProperties'
    // schema. Both at once would need extra names other than the declared ones, which the
    // grammar cannot say yet: refused.
    std::optional<element> extra;
    const auto* a = o.if_contains("additionalProperties");
    const bool extras = a != nullptr && !(a->is_bool() && !a->as_bool());
    if (extras && !props.empty())
      return make_error(errc::unsupported,
                        "json schema: additionalProperties other than false beside properties at " +
                            path + " is not supported (set it to false, as strict mode does)");
    if (a == nullptr && props.empty() && !o.contains("required"))
      return any_object(); // {"type": "object"}: any object
    if (a != nullptr) {
      if (a->is_bool()) {
        if (a->as_bool())
          extra = any();
      } else {
        auto e = schema(*a, path + "/additionalProperties");
        if (!e)
          return e.error();
        extra = *e;
      }
    }
    // Members k..n given whether one came before (then a comma first): rest[k][c] ::=
    // sep(c) member_k rest[k+1][1] | rest[k+1][c] (the second only when k is optional).
    const std::size_t n = props.size();
    std::vector<std::array<std::uint32_t, 2>> rest(n + 1);
    for (std::size_t k = 0; k <= n; ++k)
      for (int c = 0; c < 2; ++c)
        rest[k][c] = b_.declare(path + "/members" + std::to_string(k) + (c ? "_more" : ""));
    for (int c = 0; c < 2; ++c) {
      b_.add(rest[n][c], {});
      if (extra) {
        sequence s;
        if (c)
          comma(s);
        s.push_back(string());
        ws(s);
        s.push_back(b_.byte(':'));
        ws(s);
        s.push_back(*extra);
        s.push_back(grammar_builder::ref(rest[n][1]));
        b_.add(rest[n][c], std::move(s));
      }
    }
    for (std::size_t k = n; k-- > 0;) {
      auto value = schema(*props[k].second, path + "/properties/" + props[k].first);
      if (!value)
        return value.error();
      sequence member = b_.literal(json::serialize(json::string(props[k].first)));
      ws(member);
      member.push_back(b_.byte(':'));
      ws(member);
      member.push_back(*value);
      for (int c = 0; c < 2; ++c) {
        sequence s;
        if (c)
          comma(s);
        s.insert(s.end(), member.begin(), member.end());
        s.push_back(grammar_builder::ref(rest[k + 1][1]));
        b_.add(rest[k][c], std::move(s));
        if (!required.contains(props[k].first))
          b_.add(rest[k][c], {grammar_builder::ref(rest[k + 1][c])});
      }
    }
    sequence s{b_.byte('{')};
    ws(s);
    s.push_back(grammar_builder::ref(rest[0][0]));
    ws(s);
    s.push_back(b_.byte('}'));
    return b_.choice({std::move(s)}, path);
  }

  expected<element> reference(const json::value& ref, const std::string& path) {
    if (!ref.is_string())
      return make_error(errc::invalid_argument,
                        "json schema: $ref at " + path + " must be a string");
    const std::string target{ref.as_string()};
    if (auto it = refs_.find(target); it != refs_.end())
      return grammar_builder::ref(it->second);
    const json::value* s = nullptr;
    if (target == "#") {
      s = root_;
    } else if (root_->is_object()) {
      for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
        if (!target.starts_with(prefix))
          continue;
        const auto* defs = root_->as_object().if_contains(prefix.substr(2, prefix.size() - 3));
        if (defs && defs->is_object())
          s = defs->as_object().if_contains(target.substr(prefix.size()));
      }
    }
    if (s == nullptr)
      return make_error(errc::unsupported,
                        "json schema: $ref '" + target + "' at " + path +
                            " does not name \"#\" or an entry of $defs or definitions");
    const std::uint32_t r = b_.declare(target);
    refs_.emplace(target, r);
    auto e = schema(*s, target);
    if (!e)
      return e.error();
    b_.add(r, {*e});
    return grammar_builder::ref(r);
  }

  json_options options_;
  grammar_builder b_;
  const json::value* root_ = nullptr;
  std::map<std::string, std::uint32_t> refs_;
  std::optional<element> ws_, string_, char_, number_, integer_, more_digits_, any_, any_object_;
};

// -- regex_parser --

expected<element> regex_parser::whole() {
  auto& b = c_.builder();
  if (p_.size() > max_pattern_bytes)
    return refuse("longer than " + std::to_string(max_pattern_bytes) + " bytes");
  const bool anchored_start = !p_.empty() && p_.front() == '^';
  if (anchored_start)
    ++at_;
  bool anchored_end = false;
  if (p_.size() > at_ && p_.back() == '$') {
    std::size_t slashes = 0; // "\\$" is a dollar
    for (std::size_t i = p_.size() - 1; i > at_ && p_[i - 1] == '\\'; --i)
      ++slashes;
    if (slashes % 2 == 0) {
      anchored_end = true;
      p_.pop_back();
    }
  }
  auto body = alternation();
  if (!body)
    return body;
  if (more())
    return refuse("unexpected '" + std::string(1, p_[at_]) + "' at " + std::to_string(at_));
  if (b.elements() > max_elements)
    return refuse("its grammar passes " + std::to_string(max_elements) + " elements");
  const element anything = b.repeat(c_.character(), 0, 0, true, "pattern_any");
  sequence s;
  if (!anchored_start)
    s.push_back(anything);
  s.push_back(*body);
  if (!anchored_end)
    s.push_back(anything);
  return b.choice({std::move(s)}, "pattern");
}

expected<element> regex_parser::alternation() {
  std::vector<sequence> alternatives;
  std::size_t heaviest = 1;
  for (;;) {
    auto s = concatenation();
    if (!s)
      return s.error();
    heaviest = std::max(heaviest, weight_);
    alternatives.push_back(std::move(*s));
    if (!more() || p_[at_] != '|')
      break;
    ++at_;
  }
  weight_ = heaviest; // the group's, to whoever repeats it
  return c_.builder().choice(std::move(alternatives), "pattern_alt");
}

expected<sequence> regex_parser::concatenation() {
  auto& b = c_.builder();
  sequence s;
  std::size_t heaviest = 1;
  while (more() && p_[at_] != '|' && p_[at_] != ')') {
    weight_ = 1;
    auto a = atom();
    if (!a)
      return a.error();
    const std::size_t inner = weight_;
    bool quantified = false;
    // A quantifier: how often the atom repeats.
    std::size_t min = 1, max = 1;
    bool unbounded = false;
    if (more()) {
      const char q = p_[at_];
      if (q == '*' || q == '+' || q == '?') {
        ++at_;
        quantified = true;
        min = q == '+' ? 1 : 0;
        unbounded = q != '?';
      } else if (q == '{') {
        const auto close = p_.find('}', at_);
        const auto inside =
            close == std::string::npos ? std::string{} : p_.substr(at_ + 1, close - at_ - 1);
        const auto comma = inside.find(',');
        auto number = [](const std::string& t, std::size_t& out) {
          if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos)
            return false;
          out = std::stoul(t);
          return true;
        };
        std::size_t lo = 0, hi = 0;
        const bool ok = number(inside.substr(0, comma), lo) &&
                        (comma == std::string::npos   ? (hi = lo, true)
                         : comma + 1 == inside.size() ? (unbounded = true, true)
                                                      : number(inside.substr(comma + 1), hi));
        if (!ok || (!unbounded && hi < lo))
          return refuse("a quantifier {" + inside + "} is not {n}, {n,} or {n,m} with n <= m");
        if (lo > max_bounded_repeat || (!unbounded && hi - lo > max_bounded_repeat))
          return refuse("a quantifier {" + inside + "} past " + std::to_string(max_bounded_repeat));
        min = lo;
        max = hi;
        at_ = close + 1;
        quantified = true;
      }
      if (quantified && more() && p_[at_] == '?')
        ++at_; // lazy: the same strings
    }
    // Bounded repeats nested in bounded repeats multiply the matcher's stacks: kept within
    // max_bounded_repeat copies (an unbounded one loops in one frame).
    const std::size_t outer = quantified && !unbounded ? std::max<std::size_t>(max, 1) : 1;
    if (inner > max_bounded_repeat / outer)
      return refuse("bounded repeats nested past " + std::to_string(max_bounded_repeat) +
                    " copies");
    heaviest = std::max(heaviest, inner * outer);
    if (min == 1 && max == 1 && !unbounded)
      s.push_back(*a);
    else
      s.push_back(b.repeat(*a, min, max, unbounded, "pattern_repeat"));
  }
  weight_ = heaviest;
  return s;
}

expected<element> regex_parser::atom() {
  auto& b = c_.builder();
  const char c = p_[at_];
  switch (c) {
  case '(': {
    ++at_;
    if (++depth_ > max_pattern_depth)
      return refuse("groups nested deeper than " + std::to_string(max_pattern_depth));
    if (p_.compare(at_, 2, "?:") == 0)
      at_ += 2;
    else if (more() && p_[at_] == '?')
      return refuse("lookaround and named groups are not supported");
    auto inner = alternation();
    if (!inner)
      return inner;
    if (!more() || p_[at_] != ')')
      return refuse("a group is not closed");
    ++at_;
    --depth_;
    return inner;
  }
  case '[':
    return bracket();
  case '.': {
    ++at_;
    std::bitset<128> ascii;
    ascii.set();
    ascii.reset('\n');
    ascii.reset('\r');
    return c_.char_class(ascii, true);
  }
  case '\\': {
    std::bitset<128> ascii;
    bool other = false;
    return escape_in(ascii, other, false);
  }
  case '^':
  case '$':
    return refuse("an anchor ('" + std::string(1, c) + "') only at the start or end");
  case '*':
  case '+':
  case '?':
  case '{':
    return refuse("a quantifier ('" + std::string(1, c) + "') with nothing before it");
  default:
    break;
  }
  // A literal character (UTF-8: its bytes, as a JSON string holds them).
  const auto lead = static_cast<unsigned char>(c);
  if (lead < 0x80) {
    ++at_;
    std::bitset<128> one;
    one.set(lead);
    return c_.char_class(one, false);
  }
  if (lead < 0xc2 || lead > 0xf4)
    return refuse("not UTF-8 at " + std::to_string(at_));
  const std::size_t n = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
  if (at_ + n > p_.size())
    return refuse("not UTF-8 at " + std::to_string(at_));
  const auto bytes = p_.substr(at_, n);
  at_ += n;
  return b.choice({b.literal(bytes)}, "pattern_char");
}

// An escape after '\\': a class (\\d \\w \\s, negated in capitals) added to `ascii` and
// `other`, or one character; its element (ignored inside a class, which builds its own).
expected<element> regex_parser::escape_in(std::bitset<128>& ascii, bool& other, bool in_class) {
  ++at_; // the backslash
  if (!more())
    return refuse("a pattern cannot end in a backslash");
  const char e = p_[at_++];
  std::bitset<128> set;
  bool past_ascii = false;
  auto range_of = [&](char lo, char hi) {
    for (int x = lo; x <= hi; ++x)
      set.set(static_cast<std::size_t>(x));
  };
  switch (e) {
  case 'd':
  case 'D':
    range_of('0', '9');
    break;
  case 'w':
  case 'W':
    range_of('a', 'z');
    range_of('A', 'Z');
    range_of('0', '9');
    set.set('_');
    break;
  case 's':
  case 'S':
    for (char w : std::string_view{" \t\n\r\f\v"})
      set.set(static_cast<unsigned char>(w));
    break;
  case 'n':
    set.set('\n');
    break;
  case 't':
    set.set('\t');
    break;
  case 'r':
    set.set('\r');
    break;
  case 'f':
    set.set('\f');
    break;
  case 'v':
    set.set('\v');
    break;
  case 'u': {
    const auto hex = p_.substr(at_, 4);
    if (hex.size() != 4 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      return refuse("\\u needs four hex digits");
    at_ += 4;
    const auto cp = std::stoul(hex, nullptr, 16);
    if (cp < 0x80) {
      set.set(cp);
      break;
    }
    if (in_class)
      return refuse("a class with characters past ASCII is not supported");
    std::string utf8;
    if (cp < 0x800) {
      utf8 += static_cast<char>(0xc0 | (cp >> 6));
    } else {
      if (cp >= 0xd800 && cp <= 0xdfff)
        return refuse("\\u of a surrogate is not supported");
      utf8 += static_cast<char>(0xe0 | (cp >> 12));
      utf8 += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    }
    utf8 += static_cast<char>(0x80 | (cp & 0x3f));
    return c_.builder().choice({c_.builder().literal(utf8)}, "pattern_char");
  }
  default:
    if (std::isalnum(static_cast<unsigned char>(e)))
      return refuse("the escape \\" + std::string(1, e) +
                    " is not supported (\\d \\D \\w \\W \\s \\S \\n \\t \\r \\f \\v \\uXXXX are)");
    if (static_cast<unsigned char>(e) >= 0x80)
      return refuse("an escaped character past ASCII is not supported");
    set.set(static_cast<unsigned char>(e)); // an escaped punctuation mark is itself
    break;
  }
  if (e == 'D' || e == 'W' || e == 'S') {
    set.flip();
    past_ascii = true;
  }
  ascii |= set;
  other = other || past_ascii;
  return c_.char_class(set, past_ascii);
}

expected<element> regex_parser::bracket() {
  ++at_; // '['
  const bool negated = more() && p_[at_] == '^';
  if (negated)
    ++at_;
  if (more() && p_[at_] == ']')
    return refuse("an empty class ([] or [^]) is not supported");
  std::bitset<128> ascii;
  bool other = false;
  while (more() && p_[at_] != ']') {
    unsigned char lo = static_cast<unsigned char>(p_[at_]);
    if (lo == '\\') {
      std::bitset<128> one;
      bool past = false;
      const auto before = at_;
      auto e = escape_in(one, past, true);
      if (!e)
        return e;
      // A single escaped character may start a range.
      if (one.count() == 1 && !past && at_ + 1 < p_.size() && p_[at_] == '-' &&
          p_[at_ + 1] != ']') {
        std::size_t only = 0;
        while (!one.test(only))
          ++only;
        lo = static_cast<unsigned char>(only);
        (void)before;
      } else {
        ascii |= one;
        other = other || past;
        continue;
      }
    } else {
      if (lo >= 0x80)
        return refuse("a class with characters past ASCII is not supported");
      ++at_;
    }
    if (at_ + 1 < p_.size() && p_[at_] == '-' && p_[at_ + 1] != ']') { // a range
      ++at_;
      unsigned char hi = static_cast<unsigned char>(p_[at_]);
      if (hi == '\\') {
        std::bitset<128> one;
        bool past = false;
        auto e = escape_in(one, past, true);
        if (!e)
          return e;
        if (one.count() != 1 || past)
          return refuse("a range must end in one character");
        std::size_t only = 0;
        while (!one.test(only))
          ++only;
        hi = static_cast<unsigned char>(only);
      } else {
        if (hi >= 0x80)
          return refuse("a class with characters past ASCII is not supported");
        ++at_;
      }
      if (hi < lo)
        return refuse("a range out of order in a class");
      for (unsigned x = lo; x <= hi; ++x)
        ascii.set(x);
    } else {
      ascii.set(lo);
    }
  }
  if (!more())
    return refuse("a class is not closed");
  ++at_; // ']'
  if (negated) {
    ascii.flip();
    other = !other;
  }
  if (ascii.none() && !other)
    return refuse("a class that matches no character");
  return c_.char_class(ascii, other);
}

// The grammar whose root rule (declared first) matches what `body` returns.
template<class Body>
auto with_root(const json_options& options, Body&& body) -> expected<grammar> {
  compiler c{options};
  const std::uint32_t root = c.builder().declare("root");
  auto e = body(c);
  if (!e)
    return e.error();
  c.builder().add(root, {*e});
  if (!c.builder().productive(root))
    return make_error(errc::unsupported,
                      "json schema: no finite JSON document matches it (a $ref that only "
                      "recurses)");
  return c.builder().finish();
}

} // namespace

expected<grammar> from_json_schema(const boost::json::value& schema, const json_options& options) {
  return with_root(options, [&](compiler& c) {
    c.set_root_schema(schema);
    return c.schema(schema, "#");
  });
}

namespace {

// Whether a function's parameters schema leaves its arguments any object: null, true, or an
// object of annotations alone.
bool any_arguments(const json::value& parameters) {
  if (parameters.is_null() || (parameters.is_bool() && parameters.get_bool()))
    return true;
  const auto* o = parameters.if_object();
  return o != nullptr && std::all_of(o->begin(), o->end(), [](const auto& kv) {
           return annotations.count(kv.key()) != 0;
         });
}

} // namespace

expected<grammar> from_tool_calls(const std::vector<function_signature>& functions,
                                  const call_layout& layout, const json_options& options,
                                  std::size_t* failed, const call_alternative& instead) {
  if (functions.empty())
    return make_error(errc::invalid_argument, "tool calls: no function to call");
  return with_root(options, [&](compiler& c) -> expected<element> {
    auto& b = c.builder();
    // The document a JSON alternative asks for, compiled first (each schema resolves its own
    // $refs).
    std::optional<element> document;
    if (instead.what == call_alternative::kind::json) {
      if (instead.schema.is_null()) {
        document = c.any_object();
      } else {
        c.set_root_schema(instead.schema);
        auto d = c.schema(instead.schema, "#");
        if (!d)
          return make_error(d.error().code, "response_format: " + d.error().message);
        const std::uint32_t r = b.declare("document");
        b.add(r, {*d});
        if (!b.productive(r))
          return make_error(errc::unsupported, "response_format: json schema: no finite JSON "
                                               "document matches it (a $ref that only recurses)");
        document = grammar_builder::ref(r);
      }
    }
    // One call: '{' ws "name" ws ':' ws NAME ws ',' ws KEY ws ':' ws ARGUMENTS ws '}', one
    // alternative per function.
    std::vector<sequence> calls;
    for (std::size_t i = 0; i < functions.size(); ++i) {
      const auto& f = functions[i];
      auto refuse = [&](errc code, const std::string& why) {
        if (failed != nullptr)
          *failed = i;
        return make_error(code, "function '" + f.name + "': " + why);
      };
      expected<element> arguments = c.any_object();
      if (!any_arguments(f.parameters)) {
        // The parser takes arguments that are an object (chat.hpp parse_tool_calls).
        const auto* o = f.parameters.if_object();
        const json::value* type = o ? o->if_contains("type") : nullptr;
        if (type == nullptr || !type->is_string() || type->get_string() != "object")
          return refuse(errc::unsupported,
                        "parameters must be an object's schema ({\"type\": \"object\", ...}), "
                        "got " +
                            json::serialize(type ? *type : f.parameters));
        c.set_root_schema(f.parameters);
        arguments = c.schema(f.parameters, "#");
        if (!arguments)
          return refuse(arguments.error().code, arguments.error().message);
        const std::uint32_t r = b.declare("arguments_" + f.name);
        b.add(r, {*arguments});
        if (!b.productive(r))
          return refuse(errc::unsupported,
                        "json schema: no finite JSON document matches its parameters (a $ref "
                        "that only recurses)");
        arguments = grammar_builder::ref(r);
      }
      sequence s{b.byte('{')};
      c.ws(s);
      auto key = c.string_literal("name");
      s.insert(s.end(), key.begin(), key.end());
      c.ws(s);
      s.push_back(b.byte(':'));
      c.ws(s);
      auto name = c.string_literal(f.name);
      s.insert(s.end(), name.begin(), name.end());
      c.comma(s);
      auto args_key = c.string_literal(layout.arguments_key);
      s.insert(s.end(), args_key.begin(), args_key.end());
      c.ws(s);
      s.push_back(b.byte(':'));
      c.ws(s);
      s.push_back(*arguments);
      c.ws(s);
      s.push_back(b.byte('}'));
      calls.push_back(std::move(s));
    }
    sequence call = b.literal(layout.before_each);
    const auto newline = b.optional(b.byte('\n'), "newline");
    if (layout.newlines_inside)
      call.push_back(newline);
    call.push_back(b.choice(std::move(calls), "call"));
    if (layout.newlines_inside)
      call.push_back(newline);
    for (auto e : b.literal(layout.after_each))
      call.push_back(e);
    const element one = b.choice({call}, "tool_call");
    sequence all = b.literal(layout.before_all);
    all.push_back(one);
    if (layout.max_calls > 1) {
      sequence next = b.literal(layout.between);
      next.push_back(one);
      all.push_back(b.repeat(b.choice({std::move(next)}, "next_call"), 0, layout.max_calls - 1,
                             false, "more_calls"));
    }
    for (auto e : b.literal(layout.after_all))
      all.push_back(e);
    const element calls_element = b.choice({std::move(all)}, "tool_calls");
    switch (instead.what) {
    case call_alternative::kind::none:
      return calls_element;
    case call_alternative::kind::json:
      return b.choice({{*document}, {calls_element}}, "document_or_calls");
    case call_alternative::kind::text:
      break;
    }
    // Text: any bytes but the markers (no UTF-8 text has them).
    const byte_set text_bytes = range(0x00, call_open_marker - 1);
    const element text = b.repeat(b.bytes(text_bytes), 0, 0, true, "text");
    const std::string& opening = layout.before_all.empty() ? layout.before_each : layout.before_all;
    if (!opening.empty() && static_cast<unsigned char>(opening.front()) >= call_open_marker)
      return make_error(errc::invalid_argument,
                        "tool calls: text before calls a control token opens needs no grammar "
                        "(token_constraint::free_until_call)");
    // Calls that open with their JSON: white space, then a call or text that does not start
    // one.
    byte_set white;
    for (char w : std::string_view{" \t\r\n"})
      white.set(static_cast<unsigned char>(w));
    byte_set first = text_bytes & ~white;
    first.reset('{');
    const element blank = b.repeat(b.bytes(white), 0, 0, true, "blank");
    const element rest = b.choice({{}, {b.bytes(first), text}, {calls_element}}, "text_or_calls");
    return b.choice({{blank, rest}}, "answer");
  });
}

grammar any_json(const json_options& options) {
  return *with_root(options, [](compiler& c) -> expected<element> { return c.any(); });
}

grammar any_json_object(const json_options& options) {
  return *with_root(options, [](compiler& c) -> expected<element> { return c.any_object(); });
}

} // namespace triad::grammar
