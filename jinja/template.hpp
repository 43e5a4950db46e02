#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "jinja/value.hpp"
#include "runtime/error.hpp"

namespace triad::jinja {

namespace detail {
struct program;
} // namespace detail

/// A Jinja template as Hugging Face chat templates use the language, rendered the way
/// @huggingface/jinja renders it (trim_blocks and lstrip_blocks on, the template's final newline
/// dropped): statements if / for (loop, else, filters on the iterable) / set (names, namespace
/// attributes, blocks) / macro / break / continue; Python-style expressions, filters, tests and
/// string / dict methods; globals raise_exception, namespace, range, strftime_now.
class jinja_template {
public:
  /// Parses `source`; a syntax error names the line and what was expected.
  static expected<jinja_template> parse(std::string_view source);

  /// Renders with `context`'s members as variables (a dict). Errors: raise_exception's message
  /// (errc::invalid_argument), or a type error naming the operation and the types.
  expected<std::string> render(const value& context) const;

private:
  std::shared_ptr<const detail::program> program_;
};

} // namespace triad::jinja
