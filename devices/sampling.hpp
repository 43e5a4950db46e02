#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "devices/tokenizer.hpp"
#include "runtime/error.hpp"

namespace triad {

/// How the next token is chosen from logits; the same params, seed and logits give the same
/// tokens, so runs are reproducible.
struct sampling_params {
  float temperature = 0.0f; ///< 0 = greedy (argmax); otherwise logits are divided by it
  unsigned top_k = 0;       ///< keep the k most likely tokens; 0 = all
  float top_p = 1.0f;       ///< keep the smallest set whose probability reaches p; 1 = all
  std::uint64_t seed = 0;   ///< seeds the per-request random stream

  /// Checks ranges: temperature in [0, 100], top_p in (0, 1].
  expected<void> validate() const;
};

/// A chosen token's log probability under the model and its most likely alternatives: the log
/// softmax of the step's logits as the model gives them (before temperature, top-k, top-p and
/// any grammar mask), as OpenAI's `logprobs` report them.
struct token_logprobs {
  float logprob = 0;               ///< the chosen token's
  std::vector<token> top;          ///< the most likely tokens, most likely first (ties: lower id)
  std::vector<float> top_logprobs; ///< their log probabilities
};

/// Most alternatives a step reports (OpenAI's top_logprobs allows 0..20).
inline constexpr std::size_t max_top_logprobs = 20;

/// The log probabilities of `chosen` and of the `top` (at most max_top_logprobs) most likely
/// tokens after `logits`.
token_logprobs log_probabilities(std::span<const float> logits, token chosen, std::size_t top);

/// A per-request sampler: owns the seeded random stream.
class sampler {
public:
  /// A sampler for one request.
  explicit sampler(const sampling_params& params)
      : params_(params) {}

  /// Picks a token from `logits` (one per vocabulary id).
  token sample(std::span<const float> logits);

private:
  sampling_params params_;
  // Seeded at the first random draw: greedy and scripted sequences never draw, and seeding the
  // 312-word state costs about as much as admitting the sequence.
  std::optional<std::mt19937_64> rng_;
};

} // namespace triad
