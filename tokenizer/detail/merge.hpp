#pragma once

#include <functional>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "runtime/utf8.hpp"

namespace triad::detail {

/// One piece of a word being merged: bytes [start, start + length) of it; merged-away pieces
/// have length 0. Pieces form a list through prev / next (-1: none).
struct symbol {
  std::size_t start;  ///< first byte
  std::size_t length; ///< bytes (0: merged into its left neighbour)
  int prev;           ///< the piece before, or -1
  int next;           ///< the piece after, or -1
};

/// Merges the characters of `word` pairwise, the pair of best (smallest) priority first and the
/// leftmost among equals, until no adjacent pair has one: `priority(left, right)` (adjacent
/// views into `word`) gives a pair's priority or nothing when the pair does not merge
/// (byte-level BPE: its merge rank; SentencePiece: minus the joined piece's score). Returns the
/// pieces, linked from index 0.
template<class Priority>
std::vector<symbol> merge_pairs(std::string_view word, Priority priority) {
  std::vector<symbol> sym;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t len = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    sym.push_back({i, len, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1});
    i += len;
  }
  if (sym.empty())
    return sym;
  sym.back().next = -1;
  struct pair {
    double priority;
    int left;
    std::size_t left_length, right_length; // when queued: a merge since makes it stale
    bool operator>(const pair& o) const {
      return priority != o.priority ? priority > o.priority : left > o.left;
    }
  };
  std::priority_queue<pair, std::vector<pair>, std::greater<>> queue;
  auto push = [&](int left) {
    if (left < 0 || sym[left].next < 0)
      return;
    const auto& a = sym[left];
    const auto& b = sym[a.next];
    if (std::optional<double> p = priority(word.substr(a.start, a.length), word.substr(b.start, b.length)))
      queue.push({*p, left, a.length, b.length});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i)
    push(i);
  while (!queue.empty()) {
    const auto top = queue.top();
    queue.pop();
    auto& a = sym[top.left];
    if (a.length != top.left_length || a.next < 0 || sym[a.next].length != top.right_length)
      continue; // a side merged since this pair was queued
    auto& b = sym[a.next];
    a.length += b.length;
    b.length = 0;
    a.next = b.next;
    if (a.next >= 0)
      sym[a.next].prev = top.left;
    push(a.prev);
    push(top.left);
  }
  return sym;
}

} // namespace triad::detail
