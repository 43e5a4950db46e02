#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/defaults.hpp"
#include "grammar/grammar.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/metrics.hpp"

namespace triad::grammar {

/// Compiled grammars and their token masks, shared by a node's requests: an agent sends the same
/// tools and response_format every turn, so each is compiled once and each of its masks computed
/// once (xgrammar's compiled-grammar cache). Keyed by the text that decides the grammar (what the
/// caller compiles from, options included); keeps at most `capacity` grammars, the least
/// recently used leaving first (a request holding one keeps it alive). Thread-safe.
class grammar_cache {
public:
  /// Counts, for metrics and benchmarks.
  struct stats {
    std::uint64_t hits = 0;     ///< grammars found kept
    std::uint64_t misses = 0;   ///< grammars compiled (find found none)
    std::size_t kept = 0;       ///< grammars kept now
    std::size_t mask_bytes = 0; ///< bytes of their masks (about)
  };

  /// A cache of at most `capacity` grammars (0: keeps none) whose masks take at most about
  /// `mask_bytes` (past it, the least recently used grammars lose theirs).
  explicit grammar_cache(std::size_t capacity = defaults::grammar::cache_grammars,
                         std::size_t mask_bytes = defaults::grammar::cache_mask_bytes);

  /// The grammar kept for `key`, or null (the caller compiles it and calls keep).
  std::shared_ptr<const grammar> find(const std::string& key);
  /// Keeps `rules` for `key` (an existing entry stays: the first compile wins).
  std::shared_ptr<const grammar> keep(const std::string& key, std::shared_ptr<const grammar> rules);
  /// The token masks of `rules` over `vocabulary`: those kept with it where this cache keeps
  /// `rules`, so every request with the grammar shares them; else a new cache of them.
  std::shared_ptr<mask_cache> masks(const std::shared_ptr<const grammar>& rules,
                                    const std::shared_ptr<const token_index>& vocabulary);
  /// The counts so far.
  stats counts() const;
  /// Counts into `registry` from now on: `triad_grammar_cache_hits_total`,
  /// `triad_grammar_cache_misses_total`, `triad_grammar_cache_grammars`.
  void attach(metrics_registry& registry);

private:
  struct entry {
    std::string key;
    std::shared_ptr<const grammar> rules;
    std::shared_ptr<const token_index> vocabulary; // of masks
    std::shared_ptr<mask_cache> masks;             // made at the first need
  };

  std::size_t capacity_;
  std::size_t mask_bytes_;
  mutable std::mutex mutex_;
  std::list<entry> lru_; // most recently used first
  std::unordered_map<std::string, std::list<entry>::iterator> by_key_;
  std::unordered_map<const grammar*, std::list<entry>::iterator> by_rules_;
  std::uint64_t hits_ = 0, misses_ = 0;
  counter* hits_total_ = nullptr; // of attach (null: none)
  counter* misses_total_ = nullptr;
  gauge* kept_gauge_ = nullptr;
};

} // namespace triad::grammar
