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
  };

  /// The first spelling at or after `from` (controls only with `specials`).
  found next(std::string_view text, std::size_t from, bool specials) const;

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
