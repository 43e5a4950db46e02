#include "grammar/matcher.hpp"

#include <algorithm>

namespace triad::grammar {

matcher::matcher(std::shared_ptr<automaton> a)
    : a_(std::move(a)) {
  reset();
}

matcher::matcher(std::shared_ptr<const grammar> g)
    : matcher(std::make_shared<automaton>(std::move(g))) {}

void matcher::reset() {
  history_.assign(1, a_->start());
}

bool matcher::accept(unsigned char c) {
  const auto next = a_->next(history_.back(), c);
  if (next == automaton::refused)
    return false;
  history_.push_back(next);
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
  history_.resize(history_.size() - n);
}

} // namespace triad::grammar
