#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/defaults.hpp"
#include "grammar/matcher.hpp"

namespace triad::grammar {

/// A vocabulary prepared for token masks: each token's bytes, sorted so tokens that share a
/// prefix are tried together (the matcher takes the shared bytes once and rolls back only past
/// them; a refused prefix skips every token that starts with it).
class token_index {
public:
  /// `bytes[t]` is what token t appends to the text (empty for control tokens, which no
  /// grammar allows); `end_tokens` end the answer and are allowed only where the grammar may
  /// end (whatever their bytes).
  token_index(std::vector<std::string> bytes, std::vector<std::uint32_t> end_tokens);

  /// Vocabulary size.
  std::size_t size() const noexcept { return bytes_.size(); }
  /// The bytes of token `t` (empty for control and end tokens).
  const std::string& bytes(std::uint32_t t) const noexcept { return bytes_[t]; }
  /// The end tokens, sorted.
  const std::vector<std::uint32_t>& end_tokens() const noexcept { return end_tokens_; }
  /// Whether `t` is one of the end tokens.
  bool is_end(std::uint32_t t) const noexcept {
    return std::binary_search(end_tokens_.begin(), end_tokens_.end(), t);
  }

  /// Sets `allowed` (one bit per token, 32 per word, `(size() + 31) / 32` words) to the tokens
  /// whose bytes `m` accepts from where it is; `m` is left where it was. With `shortest`, only
  /// tokens each of whose bytes brings the match one byte nearer its nearest end (a step on a
  /// shortest completion; automaton::min_rest), and the end tokens where it may end.
  void mask(matcher& m, std::vector<std::uint32_t>& allowed, bool shortest = false) const;
  /// The tokens that may empty a cut stack (automaton::top) before their last byte (what lies
  /// below decides them), grouped by the top's state where one may: as the same part lies
  /// below every stack, one walk of one token's bytes up to there serves its whole group, and
  /// the rest of each token (sorted: shared prefixes walked once, a refused prefix skipped) is
  /// tried from there.
  struct frame_exits {
    /// Tokens that leave the top from the same state.
    struct group {
      std::uint32_t lead = 0;           ///< a token of the group
      std::uint32_t lead_bytes = 0;     ///< its bytes up to where a cut stack may empty
      std::vector<std::uint32_t> tokens; ///< the group's tokens, sorted by their rest
      std::vector<std::uint32_t> rests;  ///< where each one's rest starts
    };
    std::vector<group> groups; ///< by the top's state where a cut stack may empty
  };
  /// What tokens do from `frame`, a state's top (automaton::top): `accepted` (bits, as mask's)
  /// those it takes without emptying a cut stack before their last byte, whatever lies below
  /// the cut; `exits` those that may empty one earlier. The rest it refuses whatever lies
  /// below.
  void classify(automaton::session& walk, automaton::state_id frame,
                std::vector<std::uint32_t>& accepted, frame_exits& exits) const;
  /// Adds to `allowed` the tokens of `exits` (of `from`'s top) that state `from` takes.
  void accept_exits(automaton::session& walk, automaton::state_id from, const frame_exits& exits,
                    std::vector<std::uint32_t>& allowed) const;

private:
  std::vector<std::string> bytes_;
  std::vector<std::uint32_t> end_tokens_;
  std::vector<std::uint32_t> order_;  // token ids by their bytes, empty ones left out
  std::vector<std::uint32_t> common_; // common_[i]: prefix order_[i] shares with order_[i - 1]
  // skip_[k][i]: the first place after i whose token shares fewer than k + 1 bytes with
  // order_[i] (where a refused prefix of 1 or 2 bytes ends: most refusals are that short).
  std::vector<std::uint32_t> skip_[2];
  // The walk of the sorted vocabulary from `from` that mask and classify share: each token's
  // bytes from the path its prefix shares with the one before, a refused prefix skipping every
  // token that starts with it. `decide(t, path)` may settle a token before its next byte (true),
  // `step(path, next)` whether a byte's step counts (false: refused), `whole(t)` gets each token
  // walked to its end.
  template<class Decide, class Step, class Whole>
  void walk_tokens(automaton::session& walk, automaton::state_id from, Decide decide, Step step,
                   Whole whole) const;
  // The place to go on from after the token at place i had its first `refused` bytes refused.
  std::size_t after_refused(std::size_t i, std::size_t refused) const noexcept {
    return refused >= 1 && refused <= 2 ? skip_[refused - 1][i] - 1 : i;
  }
};

/// Token masks of one grammar over one vocabulary, each computed at the first need of its
/// automaton state and kept (states repeat: every byte inside a string; grammar_cache shares one
/// across the requests that send the same schema or tools, as an agent does every turn). A state's
/// mask is what its top (automaton::top) takes whatever lies below (token_index::classify, computed
/// once per top and kept: every string of a schema shares one), plus the tokens leaving the top
/// that the state takes. Thread-safe; keeps at most `max_states` masks and as many tops (then
/// computes the rest each time).
class mask_cache {
public:
  /// Masks of `a`'s grammar over `vocabulary`.
  mask_cache(std::shared_ptr<automaton> a, std::shared_ptr<const token_index> vocabulary,
             std::size_t max_states = defaults::grammar::masks_per_grammar);
  /// The mask at `m`'s state (`m` walks this cache's automaton); valid while the cache lives.
  std::shared_ptr<const std::vector<std::uint32_t>> at(matcher& m) { return at(m.state()); }
  /// The mask at automaton state `s`.
  std::shared_ptr<const std::vector<std::uint32_t>> at(automaton::state_id s);
  /// Whether the mask at state `s` is kept (at() answers at once).
  bool has(automaton::state_id s) const;
  /// Masks kept.
  std::size_t size() const;
  /// Bytes of the masks and per-top token sets kept (about).
  std::size_t bytes() const;
  /// The automaton.
  const std::shared_ptr<automaton>& machine() const noexcept { return a_; }
  /// The vocabulary.
  const token_index& vocabulary() const noexcept { return *vocabulary_; }

private:
  // What a frame's tokens do (token_index::classify).
  struct frame_tokens {
    std::vector<std::uint32_t> accepted;
    token_index::frame_exits exits;
  };

  std::shared_ptr<automaton> a_;
  std::shared_ptr<const token_index> vocabulary_;
  std::size_t max_states_;
  mutable std::mutex mutex_;
  std::unordered_map<automaton::state_id, std::shared_ptr<const std::vector<std::uint32_t>>> kept_;
  std::unordered_map<automaton::state_id, std::shared_ptr<const frame_tokens>> frames_;
};

/// One sequence's constraint: where its output stands in the grammar, and which tokens may
/// come next. The device applies it to each step's logits before sampling and moves it on by
/// the token chosen; an end token is allowed only where the output is complete.
class token_constraint {
public:
  /// Tokens of no budget (the output may run as long as it likes).
  static constexpr std::uint32_t unlimited = 0xffffffffu;
  /// At the start of `masks`' grammar, with `budget` tokens for the whole output, its end
  /// token included (the request's max_tokens left).
  explicit token_constraint(std::shared_ptr<mask_cache> masks, std::uint32_t budget = unlimited);
  /// Sets the logits of the tokens not allowed here to -infinity; false (logits unchanged)
  /// when no token is allowed (the output is complete and the vocabulary has no end token).
  bool apply(std::span<float> logits);
  /// Whether the output can still end within the budget after token `t` (an allowed one),
  /// counting a byte per token from there, as a vocabulary with every byte can always write.
  bool fits(std::uint32_t t);
  /// Sets the logits of every token but those on a shortest way to an end to -infinity
  /// (token_index::mask with `shortest`): where a token the model chose would not fit the
  /// budget, this one does, so an output that could end in its budget does. False (logits
  /// unchanged) when none is.
  bool apply_shortest(std::span<float> logits);
  /// Moves on by token `t`; false when the grammar refuses it (the state does not change).
  bool advance(std::uint32_t t);
  /// Leaves the output free until a token that opens a tool call (its bytes start with
  /// call_open_marker): the grammar (of calls) holds from that token on. For tool_choice "auto"
  /// where a control token opens calls: the text before needs no mask and may hold any token
  /// (a reasoning model's `<think>` too); tokens count against the budget all the same, and a
  /// call that could not close within it is not begun.
  void free_until_call() noexcept {
    waiting_ = true;
    started_waiting_ = true;
  }
  /// How the constraint was made and moved so far: what rebuilds it in another process (a
  /// device on another node) with the same grammar, budget and state.
  struct origin {
    std::shared_ptr<const grammar> rules; ///< the grammar
    std::uint32_t budget = unlimited;     ///< the budget it was made with
    bool free_until_call = false;         ///< whether it was made to wait for a call
    std::vector<std::uint32_t> advanced;  ///< the tokens it moved on by, in order
  };
  /// See origin. Read it before the constraint is handed to a device (which moves it on).
  origin where_from() const;
  /// Starts computing the mask of where the output stands now on the grammar's worker thread,
  /// unless it is kept, so the next apply() finds it ready: the device calls it after advance,
  /// and the mask is computed while its next forward step runs (xgrammar's overlap).
  void prefetch();
  /// Whether the output so far is complete.
  bool complete() const { return waiting_ || m_.can_end(); }

  /// A mask computed ahead (prefetch): whoever claims it first computes it, the worker thread
  /// or apply() (which then does not wait for a worker busy with other masks).
  struct ahead {
    std::atomic<bool> claimed{false};
    std::promise<std::shared_ptr<const std::vector<std::uint32_t>>> result;
    std::shared_future<std::shared_ptr<const std::vector<std::uint32_t>>> ready;
  };

private:
  // Sets the logits of the tokens `mask` does not allow to -infinity, unless it allows none.
  static bool keep_only(const std::vector<std::uint32_t>& mask, std::size_t vocabulary,
                        std::span<float> logits);

  std::shared_ptr<mask_cache> masks_;
  matcher m_;
  std::uint32_t budget_; // tokens left, this step's included
  // Whether a token opens a call (its bytes start with call_open_marker).
  bool opens_call(std::uint32_t t) const;
  // The mask prefetch asked for, of the state m_ is in (reset by advance).
  std::shared_ptr<ahead> pending_;
  bool waiting_ = false; // free_until_call, and no call opened yet
  // -- how it was made and moved (origin) --
  std::uint32_t start_budget_;
  bool started_waiting_ = false;
  std::vector<std::uint32_t> advanced_;
};

/// Whether bit `t` of a mask is set.
inline bool allowed(const std::vector<std::uint32_t>& mask, std::uint32_t t) noexcept {
  return (mask[t / 32] >> (t % 32)) & 1u;
}

} // namespace triad::grammar
