#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace triad::grammar {

/// Bytes 0xF8..0xFF never occur in UTF-8 text. A vocabulary gives the control token that opens
/// a tool call (`<tool_call>`, `[TOOL_CALLS]`) this byte, so a grammar can require the token
/// where the call syntax wants it.
inline constexpr unsigned char call_open_marker = 0xf8;
/// The byte of the control token that closes a tool call (`</tool_call>`).
inline constexpr unsigned char call_close_marker = 0xf9;

/// A set of bytes one position of the grammar accepts (a character class over UTF-8 bytes).
using byte_set = std::bitset<256>;

/// One element of a rule's alternative: a byte from a set, or a whole rule.
struct element {
  /// What the element stands for.
  enum class kind : std::uint8_t {
    bytes, ///< one byte of `sets()[index]`
    rule,  ///< a match of `rules()[index]`
  };
  kind what = kind::bytes; ///< bytes or rule
  std::uint32_t index = 0; ///< into grammar::sets() or grammar::rules()
};

/// One alternative: elements matched in order (empty: matches the empty string).
using sequence = std::vector<element>;

/// A named rule: it matches any one of its alternatives.
struct rule {
  std::string name;                   ///< for errors and printing, e.g. "object_1"
  std::vector<sequence> alternatives; ///< at least one
};

/// A context-free grammar over bytes: rule 0 is the root. Built by grammar_builder (or the JSON
/// Schema compiler), read by the matcher, which expands rules top-down: a left-recursive rule
/// (a schema's `$ref` to itself with nothing before it) matches nothing through that
/// alternative rather than looping.
class grammar {
public:
  /// The rules; rules()[0] is the root.
  const std::vector<rule>& rules() const noexcept { return rules_; }
  /// The byte sets elements refer to (each distinct set once).
  const std::vector<byte_set>& sets() const noexcept { return sets_; }
  /// The grammar in a BNF-like text, one rule per line (for errors, logs and tests).
  std::string to_string() const;

private:
  friend class grammar_builder;
  std::vector<rule> rules_;
  std::vector<byte_set> sets_;
};

/// Builds a grammar: rules are declared first (so they can refer to each other, recursion
/// included), then given their alternatives.
class grammar_builder {
public:
  /// A new rule without alternatives yet; returns its index. The first rule declared is the root.
  std::uint32_t declare(std::string name);
  /// Adds an alternative to rule `r`.
  void add(std::uint32_t r, sequence alternative);
  /// The element for one byte of `set`.
  element bytes(const byte_set& set);
  /// The element for one byte `c`.
  element byte(unsigned char c);
  /// The element for rule `r`.
  static element ref(std::uint32_t r) noexcept { return {element::kind::rule, r}; }
  /// The elements of a literal string, one per byte.
  sequence literal(std::string_view text);
  /// A rule matching `e` between `min` and `max` times (max = unbounded when `unbounded`):
  /// bounded repetition nests optional rules; the unbounded tail is right-recursive, which the
  /// matcher runs as a loop (a rule's last element replaces its frame).
  element repeat(const element& e, std::size_t min, std::size_t max, bool unbounded,
                 std::string name);
  /// A rule matching `e` or nothing.
  element optional(const element& e, std::string name);
  /// A rule matching any one of `alternatives`.
  element choice(std::vector<sequence> alternatives, std::string name);
  /// The grammar; the builder is left empty.
  grammar finish();
  /// Elements in all rules so far (what a grammar costs to hold and match).
  std::size_t elements() const noexcept { return elements_; }
  /// Whether rule `r` can match some finite string, given the rules so far (a rule that only
  /// recurses into itself cannot).
  bool productive(std::uint32_t r) const;

private:
  grammar g_;
  std::size_t elements_ = 0;
};

} // namespace triad::grammar
