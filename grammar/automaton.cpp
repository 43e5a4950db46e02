#include "grammar/automaton.hpp"

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace triad::grammar {

namespace {

// Frames a stack may hold: deeper expansion is dropped (a left-recursive grammar would grow
// forever; the builders make none, and JSON nesting this deep is refused).
constexpr std::uint32_t max_depth = 1024;

std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xbf58476d1ce4e5b9ull;
}

} // namespace

automaton::automaton(std::shared_ptr<const grammar> g)
    : g_(std::move(g)) {
  // Each rule's shortest match, to a fixed point (a rule that only recurses stays unreachable).
  const auto& rules = g_->rules();
  min_len_.assign(rules.size(), unreachable);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < rules.size(); ++r)
      for (const auto& alt : rules[r].alternatives) {
        std::uint32_t len = 0;
        for (const auto& e : alt)
          len = std::min(unreachable,
                         len + (e.what == element::kind::bytes ? 1u : min_len_[e.index]));
        if (len < min_len_[r]) {
          min_len_[r] = len;
          changed = true;
        }
      }
  }
  std::lock_guard lock{mutex_};
  std::vector<std::uint32_t> pending;
  for (std::size_t a = 0; a < g_->rules()[0].alternatives.size(); ++a)
    pending.push_back(intern(frame{0, static_cast<std::uint32_t>(a), 0}, empty_stack, 1));
  close(pending);
}

std::uint32_t automaton::intern(frame f, std::uint32_t below, std::uint32_t depth) {
  const std::uint64_t h = mix(mix(mix(mix(0, f.rule), f.alt), f.pos), below);
  auto& ids = node_index_[h];
  for (auto id : ids)
    if (nodes_[id].top == f && nodes_[id].below == below)
      return id;
  // The rest of this frame's alternative, then the stack below it.
  const auto& alt = g_->rules()[f.rule].alternatives[f.alt];
  std::uint32_t rest = below == empty_stack ? 0 : nodes_[below].rest;
  for (std::size_t i = f.pos; i < alt.size(); ++i)
    rest = std::min(unreachable,
                    rest + (alt[i].what == element::kind::bytes ? 1u : min_len_[alt[i].index]));
  nodes_.push_back(node{f, below, depth, rest});
  ids.push_back(static_cast<std::uint32_t>(nodes_.size() - 1));
  return ids.back();
}

automaton::state_id automaton::close(std::vector<std::uint32_t>& pending) {
  const auto& rules = g_->rules();
  std::vector<std::uint32_t> ready;
  std::unordered_set<std::uint32_t> seen; // expanded (a rule reached twice without a byte)
  bool can_end = false;
  while (!pending.empty()) {
    const std::uint32_t id = pending.back();
    pending.pop_back();
    if (id == empty_stack) {
      can_end = true;
      continue;
    }
    const node n = nodes_[id]; // a copy: intern() may grow nodes_
    const auto& alt = rules[n.top.rule].alternatives[n.top.alt];
    if (n.top.pos == alt.size()) { // complete: the frame below goes on after it
      pending.push_back(n.below);
      continue;
    }
    const element e = alt[n.top.pos];
    if (e.what == element::kind::bytes) {
      ready.push_back(id);
      continue;
    }
    if (!seen.insert(id).second)
      continue;
    // The frame resumes after the rule; when the rule is its last element it is done and
    // leaves the stack (so a right-recursive loop keeps the stack's depth).
    std::uint32_t below = n.below, depth = n.depth - 1;
    if (n.top.pos + 1u < alt.size()) {
      below = intern(frame{n.top.rule, n.top.alt, static_cast<std::uint32_t>(n.top.pos + 1)},
                     n.below, n.depth);
      depth = n.depth;
    }
    if (depth + 1 > max_depth)
      continue;
    const auto& child = rules[e.index];
    for (std::size_t a = 0; a < child.alternatives.size(); ++a)
      pending.push_back(intern(frame{e.index, static_cast<std::uint32_t>(a), 0}, below, depth + 1));
  }
  std::sort(ready.begin(), ready.end());
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
  std::uint64_t h = can_end ? 1 : 0;
  for (auto id : ready)
    h = mix(h, id);
  auto& ids = state_index_[h];
  for (auto s : ids)
    if (states_[s].can_end == can_end && states_[s].stacks == ready)
      return s;
  auto& s = states_.emplace_back();
  s.can_end = can_end;
  s.min_rest = can_end ? 0 : unreachable;
  for (auto id : ready) {
    const frame& f = nodes_[id].top;
    s.takes |= g_->sets()[rules[f.rule].alternatives[f.alt][f.pos].index];
    s.min_rest = std::min(s.min_rest, nodes_[id].rest);
  }
  s.stacks = std::move(ready);
  s.next.fill(unknown);
  ids.push_back(static_cast<state_id>(states_.size() - 1));
  return ids.back();
}

automaton::state_id automaton::next(state_id s, unsigned char c) {
  std::lock_guard lock{mutex_};
  return next_locked(s, c);
}

automaton::state_id automaton::next_locked(state_id s, unsigned char c) {
  if (const state_id known = states_[s].next[c]; known != unknown)
    return known;
  state_id result = refused;
  if (states_[s].takes[c]) {
    const auto& rules = g_->rules();
    std::vector<std::uint32_t> moved;
    for (auto id : states_[s].stacks) {
      const node n = nodes_[id];
      if (!g_->sets()[rules[n.top.rule].alternatives[n.top.alt][n.top.pos].index][c])
        continue;
      moved.push_back(
          intern(frame{n.top.rule, n.top.alt, static_cast<std::uint32_t>(n.top.pos + 1)}, n.below,
                 n.depth));
    }
    result = close(moved);
    if (states_[result].stacks.empty() && !states_[result].can_end)
      result = refused; // every stack died (too deep)
  }
  states_[s].next[c] = result;
  return result;
}

automaton::state_id automaton::top(state_id s) {
  std::lock_guard lock{mutex_};
  return top_locked(s);
}

automaton::state_id automaton::top_locked(state_id s) {
  if (states_[s].top == unknown) {
    // Each stack from the bottom up; the cut goes above the longest part all of them share,
    // below every stack's top frame.
    const auto& stacks = states_[s].stacks;
    std::vector<std::vector<std::uint32_t>> chains(stacks.size());
    std::size_t common = std::numeric_limits<std::size_t>::max();
    for (std::size_t i = 0; i < stacks.size(); ++i) {
      for (auto id = stacks[i]; id != empty_stack; id = nodes_[id].below)
        chains[i].push_back(id);
      std::reverse(chains[i].begin(), chains[i].end());
      std::size_t n = 0;
      const std::size_t limit = std::min(common, chains[i].size() - 1);
      while (n < limit && chains[i][n] == chains[0][n])
        ++n;
      common = n;
    }
    // Near the depth limit the cut would prune less than the stacks themselves do: no cut.
    for (const auto& chain : chains)
      if (chain.size() > max_depth / 2)
        common = 0;
    std::vector<std::uint32_t> pending;
    for (const auto& chain : chains) {
      std::uint32_t below = empty_stack;
      for (std::size_t k = common; k < chain.size(); ++k)
        below = intern(nodes_[chain[k]].top, below, static_cast<std::uint32_t>(k - common + 1));
      pending.push_back(below);
    }
    const state_id cut = close(pending); // may add states: states_ is a deque, `s` stays put
    states_[s].top = cut;
  }
  return states_[s].top;
}

bool automaton::can_end(state_id s) const {
  std::lock_guard lock{mutex_};
  return states_[s].can_end;
}

bool automaton::done(state_id s) const {
  std::lock_guard lock{mutex_};
  return states_[s].stacks.empty();
}

std::uint32_t automaton::min_rest(state_id s) const {
  std::lock_guard lock{mutex_};
  return states_[s].min_rest;
}

byte_set automaton::next_bytes(state_id s) const {
  std::lock_guard lock{mutex_};
  return states_[s].takes;
}

std::size_t automaton::states() const {
  std::lock_guard lock{mutex_};
  return states_.size();
}

} // namespace triad::grammar
