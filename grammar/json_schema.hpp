#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "grammar/grammar.hpp"
#include "runtime/error.hpp"

namespace triad::grammar {

/// How the JSON grammars lay out their text.
struct json_options {
  /// Whitespace bytes (space, tab, newline) allowed between tokens at each place JSON allows
  /// them; 0 writes compact JSON. Bounded so a model cannot pad forever.
  std::size_t max_whitespace = 0;
};

/// A grammar of the JSON texts valid against `schema`, a subset of what OpenAI's strict mode
/// allows: `type` (object, array, string, number, integer, boolean, null, or a list of them),
/// object `properties` (written in their declared order), `required`, `additionalProperties`
/// (false or absent: only the declared properties; true or a schema, only without properties:
/// any members of it; an object type with neither: any object), numbers of at most 18 whole
/// digits and a two-digit exponent (an integer fits an int64; every parser reads them), array
/// `items`,
/// `minItems`, `maxItems`, string `pattern` (ECMAScript syntax: literals, `.`, ASCII classes and
/// their negations, `\d \w \s`, groups, `|`, quantifiers, `^`/`$` at the ends; unanchored, any
/// text around the match) or `minLength` / `maxLength` (characters), `enum`, `const`, `anyOf`,
/// `allOf` of one schema, `$defs` /
/// `definitions` and `$ref` to them or to "#" (recursion allowed). Annotations (title,
/// description, default, examples, $schema, $id, $comment) are ignored. Any other keyword is an
/// `unsupported` error naming it and where it is (a client gets a 400), never silently dropped;
/// so is a keyword beside `$ref`, `enum`, `const`, `anyOf` or `allOf` (but a `type` beside
/// `enum` and `const`, checked against their values), a schema with no finite document, and one
/// whose grammar would pass 2^20 elements or repeat more than 4096 times.
expected<grammar> from_json_schema(const boost::json::value& schema,
                                   const json_options& options = {});

/// One function a tool-call grammar may call.
struct function_signature {
  std::string name;              ///< the function's name
  boost::json::value parameters; ///< the JSON Schema of its arguments (null: any object)
};

/// How a model family writes tool calls around the JSON of each (`{"name": .., KEY: {..}}`): the
/// bytes before, between and after them. A control token of the syntax stands as its marker
/// byte (call_open_marker, call_close_marker), which the vocabulary gives that token.
struct call_layout {
  std::string before_all;                  ///< once, before the first call
  std::string before_each;                 ///< before each call
  std::string after_each;                  ///< after each call
  std::string between;                     ///< between two calls
  std::string after_all;                   ///< once, after the last call
  std::string arguments_key = "arguments"; ///< the member that holds the arguments
  std::size_t max_calls = 1;               ///< calls one answer may make, at least 1
  /// A newline may follow before_each and precede after_each (Hermes and Qwen write
  /// `<tool_call>\n{...}\n</tool_call>`).
  bool newlines_inside = false;
};

/// What an answer may be instead of tool calls: nothing else under tool_choice "required" or a
/// named function; under "auto", text (which may end in calls where a control token opens them)
/// or, with a JSON response_format, a document of it.
struct call_alternative {
  /// The kinds of alternative.
  enum class kind : std::uint8_t {
    none, ///< calls only
    /// Text or calls, for a layout whose calls open with their JSON (Llama 3: a call is an
    /// answer starting with '{', so text may not start with one). Where a control token opens
    /// calls the text needs no grammar (token_constraint::free_until_call): an error.
    text,
    json, ///< a JSON document valid against `schema` (null: any object) or calls
  };
  kind what = kind::none;    ///< the alternative
  boost::json::value schema; ///< json: the document's schema (null: any object)
};

/// A grammar of one to `layout.max_calls` calls, each to one of `functions` by name with
/// arguments valid against its parameters (each schema compiled as from_json_schema does, its
/// `$ref`s resolved within it; null, `{}` or `true`: any object). Errors: no function; a
/// parameters schema that is not of an object (`"type": "object"`), has no finite document or
/// is not supported, its message starting with the function's name and its index in
/// `functions` in `*failed` (when given); an `instead` schema's error starts "response_format: ".
/// `instead`: what the answer may be rather than calls.
expected<grammar> from_tool_calls(const std::vector<function_signature>& functions,
                                  const call_layout& layout, const json_options& options = {},
                                  std::size_t* failed = nullptr,
                                  const call_alternative& instead = {});

/// A grammar of any JSON value.
grammar any_json(const json_options& options = {});

/// A grammar of any JSON object (response_format "json_object").
grammar any_json_object(const json_options& options = {});

} // namespace triad::grammar
