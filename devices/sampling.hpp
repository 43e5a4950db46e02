#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>

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
