#pragma once

#include <vector>

#include "devices/model.hpp"

namespace triad {

/// One decoder block's weights, plain row-major; matmul weights are [in][out] (y = x W).
struct layer_weights {
  std::vector<float> attn_norm; ///< [hidden]
  std::vector<float> wqkv;      ///< [hidden][(heads + 2 kv_heads) head_dim]: q, then k, then v
  std::vector<float> wo;        ///< [heads head_dim][hidden]
  std::vector<float> mlp_norm;  ///< [hidden]
  std::vector<float> wgate_up;  ///< [hidden][2 ffn]: gate, then up
  std::vector<float> wdown;     ///< [ffn][hidden]
};

/// All weights of a model as plain floats; values already rounded to the model's dtype, so a
/// reference computed from them sees exactly what the backend multiplies.
struct model_weights {
  std::vector<float> embedding; ///< [vocab][hidden]
  std::vector<layer_weights> layers;
  std::vector<float> final_norm; ///< [hidden]
  std::vector<float> output;     ///< [hidden][vocab]
};

/// Deterministic random weights from `shape.seed` (splitmix64 per tensor): matmul weights
/// uniform with variance 1/fan_in, norm weights 1 +- 0.1, embeddings uniform in [-1, 1).
model_weights generate_weights(const model_shape& shape, dtype type);

/// Rounds a float to the nearest bfloat16 (ties to even) and back.
float round_to_bf16(float x) noexcept;

} // namespace triad
