#include "devices/page_table.hpp"

#include <string>

#include "runtime/checksum.hpp"

namespace triad {

page_table::page_table(std::size_t total_pages, std::size_t page_tokens)
    : page_tokens_(page_tokens == 0 ? 1 : page_tokens)
    , total_(total_pages) {}

std::uint32_t page_table::take_page() {
  std::uint32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else if (info_.size() < total_) { // a page never used before
    page = static_cast<std::uint32_t>(info_.size());
    info_.emplace_back();
  } else { // evict the least recently released cached page
    page = lru_.front();
    lru_.pop_front();
    auto& evicted = info_[page];
    index_.erase(evicted.hash);
    evicted.indexed = false;
    if (evict_hook_)
      evict_hook_(page, kv_page{evicted.hash, evicted.parent, std::move(evicted.tokens), {}});
    evicted.tokens.clear();
  }
  info_[page].refs = 1;
  return page;
}

void page_table::unref(std::uint32_t page) {
  auto& p = info_[page];
  if (--p.refs != 0)
    return;
  if (p.indexed)
    p.lru = lru_.insert(lru_.end(), page);
  else
    free_.push_back(page);
}

expected<void> page_table::create(seq_id seq, std::size_t length) {
  if (seqs_.count(seq) != 0)
    return make_error(errc::invalid_argument,
                      "kv cache: sequence " + std::to_string(seq) + " exists already");
  std::pair<seq_id, std::size_t> want{seq, length};
  if (auto ok = reserve({&want, 1}); !ok)
    return ok;
  set_length(seq, length);
  return {};
}

expected<void> page_table::reserve(std::span<const std::pair<seq_id, std::size_t>> wanted) {
  std::size_t needed = 0;
  for (const auto& [id, new_length] : wanted) {
    auto it = seqs_.find(id);
    std::size_t have = it == seqs_.end() ? 0 : it->second.pages.size();
    auto want = pages_for(new_length);
    if (want > have)
      needed += want - have;
  }
  auto available = free_.size() + lru_.size() + (total_ - info_.size());
  if (needed > available)
    return make_error(errc::exhausted, "kv cache: step needs " + std::to_string(needed) +
                                           " more pages, " + std::to_string(available) + " of " +
                                           std::to_string(total_) + " free or evictable");
  for (const auto& [id, new_length] : wanted) {
    auto& s = seqs_[id];
    auto want = pages_for(new_length);
    while (s.pages.size() < want)
      s.pages.push_back(take_page());
  }
  return {};
}

void page_table::set_length(seq_id seq, std::size_t length) {
  seqs_[seq].length = length;
}

std::size_t page_table::length(seq_id seq) const noexcept {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

void page_table::free(seq_id seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return;
  // Deepest pages first into the LRU list: a prefix's tail is evicted before its head, which
  // later prefixes are likelier to share.
  for (auto p = it->second.pages.rbegin(); p != it->second.pages.rend(); ++p)
    unref(*p);
  seqs_.erase(it);
}

std::size_t page_table::attach_prefix(seq_id seq, std::span<const token> tokens) {
  if (tokens.empty() || seqs_.count(seq) != 0)
    return 0;
  std::vector<std::uint32_t> hit;
  block_hash parent = root_hash;
  // Whole pages only, and one token left over.
  for (std::size_t at = 0; at + page_tokens_ < tokens.size(); at += page_tokens_) {
    parent = chain_hash(parent, tokens.subspan(at, page_tokens_));
    auto it = index_.find(parent);
    if (it == index_.end())
      break;
    hit.push_back(it->second);
  }
  if (hit.empty())
    return 0;
  for (auto page : hit) {
    auto& p = info_[page];
    if (p.refs++ == 0)
      lru_.erase(p.lru);
  }
  auto& s = seqs_[seq];
  s.pages = std::move(hit);
  s.length = s.pages.size() * page_tokens_;
  return s.length;
}

expected<std::size_t> check_appended_pages(seq_id seq, std::size_t length,
                                           std::span<const kv_page> pages, std::size_t page_tokens,
                                           std::size_t payload_bytes, std::string_view what) {
  if (length % page_tokens != 0)
    return make_error(errc::invalid_argument,
                      std::string{what} + ": sequence " + std::to_string(seq) + " holds " +
                          std::to_string(length) + " tokens, not whole pages of " +
                          std::to_string(page_tokens));
  std::size_t added = 0;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    const auto& p = pages[i];
    const bool last = i + 1 == pages.size();
    const bool tokens_ok =
        last ? !p.tokens.empty() && p.tokens.size() <= page_tokens : p.tokens.size() == page_tokens;
    if (!tokens_ok || p.bytes.size() != payload_bytes)
      return make_error(
          errc::invalid_argument,
          std::string{what} + ": page " + std::to_string(i) + " of " +
              std::to_string(pages.size()) + " has " + std::to_string(p.tokens.size()) +
              " tokens and " + std::to_string(p.bytes.size()) + " bytes; pages have " +
              std::to_string(page_tokens) + " tokens (the last 1.." + std::to_string(page_tokens) +
              ") and " + std::to_string(payload_bytes) + " bytes");
    if (p.checksum != 0 && block_checksum(std::as_bytes(std::span{p.bytes})) != p.checksum)
      return make_error(errc::corrupted, std::string{what} + ": page " + std::to_string(i) +
                                             " of " + std::to_string(pages.size()) +
                                             " does not match the checksum it left with");
    added += p.tokens.size();
  }
  return added;
}

std::vector<std::pair<std::uint32_t, kv_page>>
page_table::pages_of(seq_id seq, std::span<const token> tokens, std::size_t from_page) const {
  std::vector<std::pair<std::uint32_t, kv_page>> out;
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return out;
  const auto covered = std::min(it->second.length, tokens.size());
  block_hash parent = root_hash;
  for (std::size_t at = 0, p = 0; at < covered && p < it->second.pages.size();
       at += page_tokens_, ++p) {
    auto page_tokens = tokens.subspan(at, std::min(page_tokens_, covered - at));
    const auto hash = chain_hash(parent, page_tokens);
    if (p >= from_page) { // the pages before only give the chain its start
      kv_page page;
      page.parent = parent;
      page.hash = hash;
      page.tokens.assign(page_tokens.begin(), page_tokens.end());
      out.emplace_back(it->second.pages[p], std::move(page));
    }
    parent = hash;
  }
  return out;
}

void page_table::publish(seq_id seq, std::span<const token> tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return;
  const auto& s = it->second;
  auto full = std::min(s.length, tokens.size()) / page_tokens_;
  block_hash parent = root_hash;
  for (std::size_t p = 0; p < full && p < s.pages.size(); ++p) {
    auto& info = info_[s.pages[p]];
    if (info.indexed) { // attached from the cache or published before: its hash is known
      parent = info.hash;
      continue;
    }
    auto page_tokens = tokens.subspan(p * page_tokens_, page_tokens_);
    auto hash = chain_hash(parent, page_tokens);
    if (index_.emplace(hash, s.pages[p]).second) {
      info.indexed = true;
      info.hash = hash;
      info.parent = parent;
      info.tokens.assign(page_tokens.begin(), page_tokens.end());
    } // else attached from the cache, published before, or cached as another page
    parent = hash;
  }
}

} // namespace triad
