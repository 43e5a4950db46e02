#include "grammar/matcher.hpp"

#include <algorithm>

namespace triad::grammar {

namespace {

// Frames a stack may hold: deeper expansion is dropped (a left-recursive grammar would grow
// forever; the builders make none, and JSON nesting this deep is refused).
constexpr std::size_t max_depth = 1024;

} // namespace

matcher::matcher(std::shared_ptr<const grammar> g)
    : g_(std::move(g)) {
  reset();
}

void matcher::reset() {
  states_.clear();
  std::vector<stack> start;
  for (std::size_t a = 0; a < g_->rules()[0].alternatives.size(); ++a)
    start.push_back({frame{0, static_cast<std::uint16_t>(a), 0}});
  state s;
  close(start, s);
  states_.push_back(std::move(s));
}

void matcher::close(std::vector<stack>& pending, state& out) const {
  const auto& rules = g_->rules();
  std::vector<stack> seen; // expanded already (a rule reached twice without a byte between)
  while (!pending.empty()) {
    stack st = std::move(pending.back());
    pending.pop_back();
    if (st.empty()) {
      out.can_end = true;
      continue;
    }
    const frame f = st.back();
    const auto& alt = rules[f.rule].alternatives[f.alt];
    if (f.pos == alt.size()) { // complete: the parent goes on after it
      st.pop_back();
      pending.push_back(std::move(st));
      continue;
    }
    const element e = alt[f.pos];
    if (e.what == element::kind::bytes) {
      out.stacks.push_back(std::move(st));
      continue;
    }
    if (std::find(seen.begin(), seen.end(), st) != seen.end())
      continue;
    seen.push_back(st);
    // The parent resumes after the rule; when the rule is its last element the parent is done
    // and leaves the stack (so a right-recursive loop keeps the stack's depth).
    ++st.back().pos;
    if (st.back().pos == alt.size())
      st.pop_back();
    if (st.size() >= max_depth)
      continue;
    const auto& child = rules[e.index];
    for (std::size_t a = 0; a < child.alternatives.size(); ++a) {
      stack next = st;
      next.push_back(frame{e.index, static_cast<std::uint16_t>(a), 0});
      pending.push_back(std::move(next));
    }
  }
  std::sort(out.stacks.begin(), out.stacks.end());
  out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end()), out.stacks.end());
}

bool matcher::accept(unsigned char c) {
  const auto& rules = g_->rules();
  const auto& sets = g_->sets();
  std::vector<stack> moved;
  for (const auto& st : states_.back().stacks) {
    const frame& f = st.back();
    if (!sets[rules[f.rule].alternatives[f.alt][f.pos].index][c])
      continue;
    moved.push_back(st);
    ++moved.back().back().pos;
  }
  if (moved.empty())
    return false;
  state next;
  close(moved, next);
  states_.push_back(std::move(next));
  return true;
}

bool matcher::accept(std::string_view bytes) {
  std::size_t taken = 0;
  for (char c : bytes) {
    if (!accept(static_cast<unsigned char>(c))) {
      rollback(taken);
      return false;
    }
    ++taken;
  }
  return true;
}

void matcher::rollback(std::size_t n) {
  n = std::min(n, accepted());
  states_.resize(states_.size() - n);
}

byte_set matcher::next_bytes() const {
  const auto& rules = g_->rules();
  byte_set out;
  for (const auto& st : states_.back().stacks) {
    const frame& f = st.back();
    out |= g_->sets()[rules[f.rule].alternatives[f.alt][f.pos].index];
  }
  return out;
}

} // namespace triad::grammar
