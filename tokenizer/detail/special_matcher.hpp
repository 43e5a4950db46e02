#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace triad::detail {

/// Finds the spellings of a vocabulary's control and added tokens in text, longest first at
/// each position, as Hugging Face's added-token split does.
class special_matcher {
public:
  /// The control, user-defined and unknown tokens of `v` with a non-empty spelling.
  explicit special_matcher(const vocab& v);

  /// A found token: `length` bytes at `at` spell `id`.
  struct found {
    std::size_t at = 0;     ///< byte offset in the text
    std::size_t length = 0; ///< 0: none found
    token id = 0;           ///< the token
    bool control = false;   ///< a control (or unknown) token, not an added one
  };

  /// The first spelling at or after `from` (controls only with `specials`).
  found next(std::string_view text, std::size_t from, bool specials) const;

  /// The first control token spelled in `text`, if any.
  found first_control(std::string_view text) const {
    for (std::size_t at = 0; at < text.size();) {
      auto hit = next(text, at, true);
      if (hit.length == 0 || hit.control)
        return hit;
      at = hit.at + 1;
    }
    return {text.size(), 0, 0, false};
  }

  /// Walks `text` in order: each stretch of plain text (never empty) to `on_text`, each spelled
  /// token's id to `on_token`.
  template<class OnText, class OnToken>
  void split(std::string_view text, bool specials, OnText on_text, OnToken on_token) const {
    std::size_t at = 0;
    while (at < text.size()) {
      auto hit = next(text, at, specials);
      if (hit.at > at)
        on_text(text.substr(at, hit.at - at));
      if (hit.length == 0)
        break;
      on_token(hit.id);
      at = hit.at + hit.length;
    }
  }

private:
  struct entry {
    std::string_view spelling;
    token id;
    bool control;
  };
  // By first byte, longest spelling first.
  std::array<std::vector<entry>, 256> by_first_;
};

} // namespace triad::detail
