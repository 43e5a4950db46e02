#include "grammar/token_mask.hpp"

#include <algorithm>

namespace triad::grammar {

token_index::token_index(std::vector<std::string> bytes, std::vector<std::uint32_t> end_tokens)
    : bytes_(std::move(bytes))
    , end_tokens_(std::move(end_tokens)) {
  std::sort(end_tokens_.begin(), end_tokens_.end());
  for (std::uint32_t t = 0; t < bytes_.size(); ++t)
    if (!bytes_[t].empty() && !std::binary_search(end_tokens_.begin(), end_tokens_.end(), t))
      order_.push_back(t);
  std::sort(order_.begin(), order_.end(),
            [&](std::uint32_t a, std::uint32_t b) { return bytes_[a] < bytes_[b]; });
  common_.resize(order_.size());
  for (std::size_t i = 1; i < order_.size(); ++i) {
    const auto& a = bytes_[order_[i - 1]];
    const auto& b = bytes_[order_[i]];
    std::size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n])
      ++n;
    common_[i] = static_cast<std::uint32_t>(n);
  }
}

void token_index::mask(matcher& m, std::vector<std::uint32_t>& allowed) const {
  allowed.assign((bytes_.size() + 31) / 32, 0u);
  const std::size_t base = m.accepted();
  // `taken`: bytes of the previous token the matcher holds; `refused`: the length of the
  // previous token's prefix the grammar refused (its last byte refused), 0 when none was.
  std::size_t taken = 0, refused = 0;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const std::uint32_t t = order_[i];
    const std::string& b = bytes_[t];
    const std::size_t shared = i == 0 ? 0 : common_[i];
    // A token that starts with a refused prefix is refused too.
    if (refused != 0 && shared >= refused)
      continue;
    refused = 0;
    if (taken > shared) {
      m.rollback(taken - shared);
      taken = shared;
    }
    while (taken < b.size() && m.accept(static_cast<unsigned char>(b[taken])))
      ++taken;
    if (taken == b.size())
      allowed[t / 32] |= 1u << (t % 32);
    else
      refused = taken + 1;
  }
  m.rollback(m.accepted() - base);
  if (m.can_end())
    for (auto t : end_tokens_)
      if (t < bytes_.size())
        allowed[t / 32] |= 1u << (t % 32);
}

} // namespace triad::grammar
