#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/automaton.hpp"
#include "grammar/grammar.hpp"

namespace triad::grammar {

/// Matches bytes against a grammar one at a time, keeping every parse still possible (a
/// grammar may be ambiguous for a while, as anyOf branches with a common prefix are): a walk
/// over the grammar's automaton, with its history so accepted bytes can be rolled back. Bytes
/// it cannot take are refused and change nothing.
class matcher {
public:
  /// A matcher at the start of `a`'s grammar (the automaton is shared: what one matcher
  /// computed, the others look up).
  explicit matcher(std::shared_ptr<automaton> a);
  /// A matcher with an automaton of its own.
  explicit matcher(std::shared_ptr<const grammar> g);

  /// Takes byte `c` when the grammar allows it here; false (and no change) when not.
  bool accept(unsigned char c);
  /// Takes all of `bytes`, or none (false) when the grammar refuses one of them.
  bool accept(std::string_view bytes);
  /// Undoes the last `n` accepted bytes (at most accepted()).
  void rollback(std::size_t n);
  /// Bytes accepted since the start (less those rolled back).
  std::size_t accepted() const noexcept { return history_.size() - 1; }
  /// Whether the bytes so far are a complete match of the root rule (an end token may come).
  bool can_end() const { return a_->can_end(history_.back()); }
  /// Whether no byte can follow (the match is complete and nothing may extend it).
  bool done() const { return a_->done(history_.back()); }
  /// The bytes the grammar allows next.
  byte_set next_bytes() const { return a_->next_bytes(history_.back()); }
  /// The fewest bytes that complete the match from here (automaton::min_rest).
  std::uint32_t min_rest() const { return a_->min_rest(history_.back()); }
  /// The automaton's state now.
  automaton::state_id state() const noexcept { return history_.back(); }
  /// The automaton walked.
  automaton& machine() const noexcept { return *a_; }
  /// Back to the start.
  void reset();

private:
  std::shared_ptr<automaton> a_;
  std::vector<automaton::state_id> history_; // history_[i]: after i accepted bytes
};

} // namespace triad::grammar
