#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "devices/backend.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Checks pages to append to a sequence of `length` tokens (backend::append_pages): the length
/// is whole pages, every page holds `page_tokens` tokens but the last (1..page_tokens), and each
/// has `payload_bytes` bytes, matching its checksum when it carries one (errc::corrupted if
/// not). The tokens they add, or an error naming the first bad page (`what` starts it, e.g.
/// "kv append").
expected<std::size_t> check_appended_pages(seq_id seq, std::size_t length,
                                           std::span<const kv_page> pages, std::size_t page_tokens,
                                           std::size_t payload_bytes, std::string_view what);

/// The page bookkeeping of one device's KV cache, shared by every backend: which pages each
/// sequence holds, and a prefix cache of pages that outlive their sequence. A page is referenced
/// by every sequence that reads it; a full page whose tokens were published stays in the prefix
/// index (keyed by its chain_hash) after its last sequence lets go, and is evicted, least
/// recently released first, only when a reservation needs its space. Only full pages are ever
/// shared, and sequences only append past their length, so no shared page is written again.
class page_table {
public:
  /// A table of `total_pages` pages of `page_tokens` tokens each (both >= 1).
  page_table(std::size_t total_pages, std::size_t page_tokens);

  /// Makes room for `new_length` tokens in each listed sequence (creating unknown ones), all or
  /// nothing, evicting cached pages as needed: errc::exhausted when free and evictable pages do
  /// not suffice.
  expected<void> reserve(std::span<const std::pair<seq_id, std::size_t>> wanted);
  /// Sets a sequence's length (after its K and V were written).
  void set_length(seq_id seq, std::size_t length);
  /// Creates `seq` holding `length` tokens whose KV its caller writes (an import, a stream):
  /// errc::invalid_argument when it exists, errc::exhausted when its pages do not fit.
  expected<void> create(seq_id seq, std::size_t length);
  /// Tokens held for a sequence, 0 when unknown.
  std::size_t length(seq_id seq) const noexcept;
  /// Drops a sequence's references; its published pages stay cached, the others are free.
  void free(seq_id seq);
  /// The page ids of a sequence in order (nullptr when unknown).
  const std::vector<std::uint32_t>* pages(seq_id seq) const noexcept {
    auto it = seqs_.find(seq);
    return it == seqs_.end() ? nullptr : &it->second.pages;
  }

  /// Creates `seq` (unknown so far) on the longest run of cached full pages that matches the
  /// start of `tokens`, leaving at least one token of `tokens` uncovered (its logits are
  /// needed); returns the tokens covered, 0 on a miss (the sequence is then not created).
  std::size_t attach_prefix(seq_id seq, std::span<const token> tokens);
  /// Indexes the full pages of `seq` whose tokens are `tokens` (its first length() tokens, or a
  /// prefix of them), so later sequences can attach them. A page whose content another page
  /// already caches is left private.
  void publish(seq_id seq, std::span<const token> tokens);

  /// The pages of `seq` that hold its first min(length, tokens.size()) tokens (`tokens`: its
  /// tokens from the start), in order: each page's id and identity (chain hash, parent, its
  /// tokens; the last may hold fewer than page_tokens), without bytes, from page `from_page`
  /// on (the pages before still give the chain hashes their start). Empty when unknown.
  std::vector<std::pair<std::uint32_t, kv_page>> pages_of(seq_id seq, std::span<const token> tokens,
                                                          std::size_t from_page = 0) const;

  /// Called when a cached full page is evicted (its memory about to be reused for another
  /// page): the page and its identity (chain hash, parent, tokens; no bytes), while its bytes
  /// are still intact, so a backend can copy the page to a tier below before it is lost.
  using evict_hook = std::function<void(std::uint32_t page, kv_page identity)>;
  /// Sets (or, with an empty function, clears) the eviction hook.
  void on_evict(evict_hook hook) { evict_hook_ = std::move(hook); }

  /// Pages in all.
  std::size_t total_pages() const noexcept { return total_; }
  /// Pages referenced by at least one sequence.
  std::size_t used_pages() const noexcept { return info_.size() - free_.size() - lru_.size(); }
  /// Pages held only by the prefix index (evictable).
  std::size_t cached_pages() const noexcept { return lru_.size(); }
  /// Sequences known.
  std::size_t sequences() const noexcept { return seqs_.size(); }
  /// Tokens per page.
  std::size_t page_tokens() const noexcept { return page_tokens_; }
  /// Pages that hold `tokens` tokens.
  std::size_t pages_for(std::size_t tokens) const noexcept {
    return (tokens + page_tokens_ - 1) / page_tokens_;
  }

private:
  struct page_info {
    std::uint32_t refs = 0;                 // sequences reading it
    bool indexed = false;                   // in index_ under `hash`
    block_hash hash = 0;                    // its chain hash, when indexed
    block_hash parent = 0;                  // its parent's chain hash, when indexed
    std::vector<token> tokens;              // its tokens, when indexed
    std::list<std::uint32_t>::iterator lru; // its place in lru_, when unreferenced and indexed
  };
  struct sequence {
    std::size_t length = 0;
    std::vector<std::uint32_t> pages;
  };

  std::uint32_t take_page();
  void unref(std::uint32_t page);

  std::size_t page_tokens_;
  std::size_t total_; // pages in all
  // Pages handed out at least once (ids 0..size-1); the others were never used, so a large
  // budget costs nothing until it is used.
  std::vector<page_info> info_;
  std::vector<std::uint32_t> free_; // unreferenced, not indexed
  std::list<std::uint32_t> lru_;    // unreferenced, indexed: evicted from the front
  std::unordered_map<block_hash, std::uint32_t> index_;
  std::unordered_map<seq_id, sequence> seqs_;
  evict_hook evict_hook_;
};

} // namespace triad
