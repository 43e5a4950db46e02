#include "tokenizer/detail/special_matcher.hpp"

#include <algorithm>

namespace triad::detail {

special_matcher::special_matcher(const vocab& v) {
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    const auto kind = v.kinds[id];
    if (kind != token_kind::control && kind != token_kind::user_defined &&
        kind != token_kind::unknown)
      continue;
    const std::string_view s = v.tokens[id];
    if (s.empty())
      continue;
    by_first_[static_cast<unsigned char>(s[0])].push_back(
        {s, static_cast<token>(id), kind != token_kind::user_defined});
  }
  for (auto& list : by_first_)
    std::stable_sort(list.begin(), list.end(), [](const entry& a, const entry& b) {
      return a.spelling.size() > b.spelling.size();
    });
}

special_matcher::found special_matcher::next(std::string_view text, std::size_t from,
                                             bool specials) const {
  for (std::size_t at = from; at < text.size(); ++at) {
    const auto& list = by_first_[static_cast<unsigned char>(text[at])];
    for (const auto& e : list) {
      if (e.control && !specials)
        continue;
      if (text.compare(at, e.spelling.size(), e.spelling) == 0)
        return {at, e.spelling.size(), e.id, e.control};
    }
  }
  return {text.size(), 0, 0, false};
}

} // namespace triad::detail
