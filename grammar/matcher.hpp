#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"

namespace triad::grammar {

/// Matches bytes against a grammar one at a time, as a pushdown automaton that keeps every
/// parse still possible (a set of stacks: a grammar may be ambiguous for a while, as anyOf
/// branches with a common prefix are). Bytes it cannot take are refused and change nothing;
/// accepted bytes can be rolled back, so a token mask can try each vocabulary entry.
class matcher {
public:
  /// A matcher at the start of `g`'s root rule.
  explicit matcher(std::shared_ptr<const grammar> g);

  /// Takes byte `c` when the grammar allows it here; false (and no change) when not.
  bool accept(unsigned char c);
  /// Takes all of `bytes`, or none (false) when the grammar refuses one of them.
  bool accept(std::string_view bytes);
  /// Undoes the last `n` accepted bytes (at most accepted()).
  void rollback(std::size_t n);
  /// Bytes accepted since the start (less those rolled back).
  std::size_t accepted() const noexcept { return states_.size() - 1; }
  /// Whether the bytes so far are a complete match of the root rule (an end token may come).
  bool can_end() const noexcept { return states_.back().can_end; }
  /// Whether no byte can follow (the match is complete and nothing may extend it).
  bool done() const noexcept { return states_.back().stacks.empty(); }
  /// The bytes the grammar allows next.
  byte_set next_bytes() const;
  /// Back to the start.
  void reset();
  /// The grammar matched.
  const grammar& rules() const noexcept { return *g_; }

private:
  // A position in one alternative of one rule: `pos` is the element that comes next (for a
  // rule being matched, the element after it).
  struct frame {
    std::uint32_t rule;
    std::uint16_t alt;
    std::uint16_t pos;
    bool operator==(const frame&) const = default;
    auto operator<=>(const frame&) const = default;
  };
  using stack = std::vector<frame>;
  // The parses possible after some bytes: each stack's top frame waits for a byte set.
  struct state {
    std::vector<stack> stacks;
    bool can_end = false;
  };

  // Expands `pending` (stacks whose top may be complete or wait for a rule) until every stack
  // waits for a byte; into `out`.
  void close(std::vector<stack>& pending, state& out) const;

  std::shared_ptr<const grammar> g_;
  std::vector<state> states_; // states_[i]: after i accepted bytes
};

} // namespace triad::grammar
