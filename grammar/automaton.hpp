#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.hpp"

namespace triad::grammar {

/// The pushdown automaton of a grammar, built lazily as bytes are tried and shared by every
/// matcher (and request) of that grammar: stacks are hash-consed nodes (a frame and the node
/// under it), a state is the set of stacks that wait for a byte, and each state's transition
/// on each byte is computed once, then looked up. A grammar's stacks are bounded when it is not
/// recursive, so its states are finite and repeat: matching becomes a table walk. Thread-safe.
class automaton {
public:
  /// A state (an index into the automaton's states).
  using state_id = std::uint32_t;
  /// The transition of a refused byte.
  static constexpr state_id refused = 0xffffffffu;

  /// The automaton of `g`, with its start state.
  explicit automaton(std::shared_ptr<const grammar> g);

  /// The state before any byte.
  state_id start() const noexcept { return 0; }
  /// The state after byte `c` from `s`, or `refused`.
  state_id next(state_id s, unsigned char c);

  /// Holds the automaton's lock for many steps (a token mask tries thousands of bytes).
  class session {
  public:
    /// Locks `a` until destroyed.
    explicit session(automaton& a)
        : a_(a)
        , lock_(a.mutex_) {}
    /// automaton::next without taking the lock again.
    state_id next(state_id s, unsigned char c) { return a_.next_locked(s, c); }
    /// automaton::can_end under this lock.
    bool can_end(state_id s) const { return a_.states_[s].can_end; }
    /// automaton::min_rest under this lock.
    std::uint32_t min_rest(state_id s) const { return a_.states_[s].min_rest; }
    /// automaton::top under this lock.
    state_id top(state_id s) { return a_.top_locked(s); }

  private:
    automaton& a_;
    std::lock_guard<std::mutex> lock_;
  };
  /// Whether the bytes that led to `s` are a complete match.
  bool can_end(state_id s) const;
  /// Whether no byte can follow `s`.
  bool done(state_id s) const;
  /// The fewest bytes that end a match from `s` (0 where it may end; `unreachable` where no
  /// finite continuation does): what a budget of tokens must leave room for.
  std::uint32_t min_rest(state_id s) const;
  /// min_rest of a stack no finite continuation ends.
  static constexpr std::uint32_t unreachable = 0x3fffffffu;
  /// The bytes `s` takes.
  byte_set next_bytes(state_id s) const;
  /// The state of `s`'s stacks cut above the longest part below their top frames that all of
  /// them share (on an empty stack): what a token does there, as long as it does not empty a
  /// cut stack, holds whatever lay below the cut (xgrammar's context-independent tokens), and
  /// where one empties, the same part lies below every stack; so a mask can be computed once
  /// per top (token_index::classify) and shared by every state with the same top: all the
  /// strings of a schema share one.
  state_id top(state_id s);
  /// States made so far.
  std::size_t states() const;
  /// The grammar.
  const grammar& rules() const noexcept { return *g_; }
  /// The grammar, shared (to send it where the automaton is rebuilt: a device in another node).
  const std::shared_ptr<const grammar>& shared_rules() const noexcept { return g_; }

private:
  // A position in one alternative of one rule: `pos` is the element that comes next (for a
  // rule being matched, the element after it).
  struct frame {
    std::uint32_t rule;
    std::uint32_t alt;
    std::uint32_t pos;
    bool operator==(const frame&) const = default;
  };
  static constexpr std::uint32_t empty_stack = 0xffffffffu;
  struct node {
    frame top;
    std::uint32_t below; // empty_stack at the bottom
    std::uint32_t depth; // frames in the stack
    std::uint32_t rest;  // the fewest bytes that empty the stack
  };
  struct state {
    std::vector<std::uint32_t> stacks; // sorted node ids, each waiting for a byte set
    bool can_end = false;
    std::uint32_t min_rest = 0; // the fewest bytes to an end
    state_id top = unknown; // see top(); computed at the first need
    byte_set takes;
    std::array<state_id, 256> next;
  };
  static constexpr state_id unknown = 0xfffffffeu;

  state_id next_locked(state_id s, unsigned char c);
  state_id top_locked(state_id s);
  std::uint32_t intern(frame f, std::uint32_t below, std::uint32_t depth);
  // Expands `pending` stacks until each waits for a byte; the state of them (interned).
  state_id close(std::vector<std::uint32_t>& pending);

  std::shared_ptr<const grammar> g_;
  std::vector<std::uint32_t> min_len_; // per rule: its shortest match (unreachable: none)
  mutable std::mutex mutex_;           // guards all below
  std::vector<node> nodes_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> node_index_; // hash -> ids
  std::deque<state> states_;                                                 // stable
  std::unordered_map<std::uint64_t, std::vector<state_id>> state_index_;
};

} // namespace triad::grammar
