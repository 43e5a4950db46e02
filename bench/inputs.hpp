#pragma once

#include <random>
#include <vector>

#include "devices/tokenizer.hpp"

namespace triad::bench {

/// `n` byte tokens (0..255) drawn from `rng`: prompts whose content does not matter.
inline std::vector<token> random_tokens(std::mt19937& rng, std::size_t n) {
  std::uniform_int_distribution<token> byte{0, 255};
  std::vector<token> out(n);
  for (auto& t : out)
    t = byte(rng);
  return out;
}

} // namespace triad::bench
