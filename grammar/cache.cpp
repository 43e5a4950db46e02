#include "grammar/cache.hpp"

#include <algorithm>

#include "grammar/automaton.hpp"

namespace triad::grammar {

grammar_cache::grammar_cache(std::size_t capacity, std::size_t mask_bytes)
    : capacity_(capacity)
    , mask_bytes_(mask_bytes) {}

std::shared_ptr<const grammar> grammar_cache::find(const std::string& key) {
  std::lock_guard<std::mutex> guard{mutex_};
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    ++misses_;
    if (misses_total_ != nullptr)
      misses_total_->inc();
    return nullptr;
  }
  ++hits_;
  if (hits_total_ != nullptr)
    hits_total_->inc();
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->rules;
}

std::shared_ptr<const grammar> grammar_cache::keep(const std::string& key,
                                                   std::shared_ptr<const grammar> rules) {
  std::lock_guard<std::mutex> guard{mutex_};
  if (auto it = by_key_.find(key); it != by_key_.end())
    return it->second->rules;
  if (capacity_ == 0 || rules == nullptr)
    return rules;
  while (lru_.size() >= capacity_) {
    by_key_.erase(lru_.back().key);
    by_rules_.erase(lru_.back().rules.get());
    lru_.pop_back();
  }
  lru_.push_front(entry{key, rules, nullptr, nullptr});
  by_key_.emplace(key, lru_.begin());
  by_rules_.emplace(rules.get(), lru_.begin());
  if (kept_gauge_ != nullptr)
    kept_gauge_->set(static_cast<double>(lru_.size()));
  return rules;
}

std::shared_ptr<mask_cache>
grammar_cache::masks(const std::shared_ptr<const grammar>& rules,
                     const std::shared_ptr<const token_index>& vocabulary) {
  auto fresh = [&] {
    return std::make_shared<mask_cache>(std::make_shared<automaton>(rules), vocabulary,
                                        defaults::grammar::masks_per_grammar);
  };
  std::lock_guard<std::mutex> guard{mutex_};
  auto it = by_rules_.find(rules.get());
  if (it == by_rules_.end())
    return fresh();
  auto& e = *it->second;
  if (!e.masks || e.vocabulary != vocabulary) {
    e.masks = fresh(); // the automaton starts empty: cheap to make under the lock
    e.vocabulary = vocabulary;
  }
  // Within the byte budget: the least recently used grammars' masks go first (requests using
  // them keep theirs), this one's last.
  std::size_t total = 0;
  for (const auto& other : lru_)
    if (other.masks)
      total += other.masks->bytes();
  for (auto last = lru_.rbegin(); total > mask_bytes_ && last != lru_.rend(); ++last)
    if (last->masks && &*last != &e) {
      total -= std::min(total, last->masks->bytes());
      last->masks.reset();
    }
  return e.masks;
}

grammar_cache::stats grammar_cache::counts() const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::size_t bytes = 0;
  for (const auto& e : lru_)
    if (e.masks)
      bytes += e.masks->bytes();
  return {hits_, misses_, lru_.size(), bytes};
}

void grammar_cache::attach(metrics_registry& registry) {
  auto hits = registry.add_counter(
      "triad_grammar_cache_hits_total",
      "Grammars (a response_format's, or of calls) requests found kept compiled");
  auto misses = registry.add_counter("triad_grammar_cache_misses_total",
                                     "Grammars requests did not find kept (compiled for them)");
  auto kept = registry.add_gauge("triad_grammar_cache_grammars",
                                 "Grammars kept compiled, with their token masks");
  std::lock_guard<std::mutex> guard{mutex_};
  hits_total_ = hits ? *hits : nullptr;
  misses_total_ = misses ? *misses : nullptr;
  kept_gauge_ = kept ? *kept : nullptr;
}

} // namespace triad::grammar
