#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "runtime/error.hpp"

namespace triad {

/// A tool as the model sees it: the OpenAI function-calling shape.
struct tool_spec {
  std::string name;               ///< [A-Za-z0-9_-]{1,64}
  std::string description;        ///< what it does, for the model
  boost::json::object parameters; ///< JSON Schema of the arguments (an object schema)
};

/// What a tool call produced: text for the model plus structured details for clients.
struct tool_output {
  std::string content;         ///< what goes back into the conversation
  boost::json::object details; ///< structured result (exit status, diagnostics, ...)
};

/// A tool's implementation; arguments are already validated against its schema.
using tool_function = std::function<expected<tool_output>(const boost::json::object& arguments)>;

/// Checks `arguments` against a JSON Schema subset (type, properties, required,
/// additionalProperties, enum, minimum, maximum, minLength, maxLength, items, maxItems);
/// the error names the field path, e.g. "arguments.flags[2]: expected string, got 42".
expected<void> validate_arguments(const boost::json::object& schema,
                                  const boost::json::value& arguments);

/// The deadline of the tool call running on this thread (time_point::max(): none). A tool that
/// runs processes ends them by it: run_sandboxed takes it as its wall-clock limit when sooner.
std::chrono::steady_clock::time_point current_call_deadline() noexcept;

/// Sets current_call_deadline() on this thread for its lifetime (the tool executor, around each
/// call it runs).
class call_deadline_scope {
public:
  /// Makes `deadline` this thread's call deadline.
  explicit call_deadline_scope(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Restores the one before.
  ~call_deadline_scope();
  call_deadline_scope(const call_deadline_scope&) = delete;
  call_deadline_scope& operator=(const call_deadline_scope&) = delete;

private:
  std::chrono::steady_clock::time_point previous_;
};

/// All tools of a node, built-in and external, by name.
class tool_registry {
public:
  /// Adds a tool; errors on a bad name, a name already taken, or a schema that is not an
  /// object schema.
  expected<void> add(tool_spec spec, tool_function fn);
  /// The tool's spec, or nullptr.
  const tool_spec* find(std::string_view name) const;
  /// Every tool's spec, by name.
  std::vector<tool_spec> list() const;
  /// Parses `arguments_json`, validates it and runs the tool. Unknown tools, malformed JSON
  /// and schema violations are errors naming the problem; nothing runs then.
  expected<tool_output> call(std::string_view name, std::string_view arguments_json) const;

private:
  struct entry {
    tool_spec spec;
    tool_function fn;
  };
  std::map<std::string, entry, std::less<>> tools_;
};

} // namespace triad
