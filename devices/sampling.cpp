#include "devices/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace triad {

expected<void> sampling_params::validate() const {
  if (!(temperature >= 0.0f && temperature <= 100.0f))
    return make_error(errc::invalid_argument, "temperature = " + std::to_string(temperature) +
                                                  ": allowed 0 (greedy) to 100");
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return make_error(errc::invalid_argument,
                      "top_p = " + std::to_string(top_p) + ": allowed (0, 1]");
  return {};
}

token_logprobs log_probabilities(std::span<const float> logits, token chosen, std::size_t top) {
  token_logprobs out;
  if (logits.empty())
    return out;
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (float l : logits)
    total += std::exp(static_cast<double>(l) - max_logit);
  const double log_total = max_logit + std::log(total);
  const auto logprob = [&](token t) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(t)]) -
                              log_total);
  };
  if (chosen >= 0 && static_cast<std::size_t>(chosen) < logits.size())
    out.logprob = logprob(chosen);
  top = std::min({top, max_top_logprobs, logits.size()});
  if (top == 0)
    return out;
  // The `top` best by a bounded insertion: one pass, no copy of the vocabulary.
  auto better = [&](token a, token b) {
    return logits[static_cast<std::size_t>(a)] != logits[static_cast<std::size_t>(b)]
               ? logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)]
               : a < b;
  };
  out.top.reserve(top + 1);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const auto t = static_cast<token>(i);
    if (out.top.size() == top && !better(t, out.top.back()))
      continue;
    out.top.insert(std::upper_bound(out.top.begin(), out.top.end(), t, better), t);
    if (out.top.size() > top)
      out.top.pop_back();
  }
  out.top_logprobs.reserve(top);
  for (auto t : out.top)
    out.top_logprobs.push_back(logprob(t));
  return out;
}

token sampler::sample(std::span<const float> logits) {
  auto argmax = [&] {
    return static_cast<token>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  if (params_.temperature <= 0.0f || logits.size() == 1)
    return argmax();
  std::vector<token> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Ties break by lower id so the order (and so the draw) is deterministic.
  auto by_logit = [&](token a, token b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::size_t keep = logits.size();
  if (params_.top_k > 0 && params_.top_k < keep) {
    keep = params_.top_k;
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      by_logit);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  std::vector<double> probs(keep);
  double max_logit = logits[order[0]];
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((logits[order[i]] - max_logit) / params_.temperature);
    total += probs[i];
  }
  if (params_.top_p < 1.0f) {
    double cumulative = 0;
    std::size_t cut = keep;
    for (std::size_t i = 0; i < keep; ++i) {
      cumulative += probs[i] / total;
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = std::accumulate(probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  std::uniform_real_distribution<double> uniform{0.0, total};
  if (!rng_)
    rng_.emplace(params_.seed);
  double draw = uniform(*rng_);
  for (std::size_t i = 0; i < keep; ++i) {
    draw -= probs[i];
    if (draw <= 0)
      return order[i];
  }
  // Rounding left some of the draw: the last token that had a chance (never a masked one).
  for (std::size_t i = keep; i-- > 0;)
    if (probs[i] > 0)
      return order[i];
  return order[0];
}

} // namespace triad
