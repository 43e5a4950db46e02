#pragma once

#include <memory>
#include <vector>

#include "devices/model.hpp"
#include "runtime/error.hpp"

namespace triad {

/// One decoder block's weights, plain row-major; matmul weights are [in][out] (y = x W).
struct layer_weights {
  std::vector<float> attn_norm; ///< [hidden]
  std::vector<float> wqkv;      ///< [hidden][(heads + 2 kv_heads) head_dim]: q, then k, then v
  std::vector<float> wo;        ///< [heads head_dim][hidden]
  std::vector<float> mlp_norm;  ///< [hidden]
  std::vector<float> wgate_up;  ///< [hidden][2 ffn]: gate, then up
  std::vector<float> wdown;     ///< [ffn][hidden]
  std::vector<float> bqkv;      ///< [(heads + 2 kv_heads) head_dim]; empty without qkv_bias
  std::vector<float> q_norm;    ///< [head_dim]; empty without qk_norm
  std::vector<float> k_norm;    ///< [head_dim]; empty without qk_norm
};

/// All weights of a model as plain floats; values already rounded to the model's dtype, so a
/// reference computed from them sees exactly what the backend multiplies.
struct model_weights {
  std::vector<float> embedding; ///< [vocab][hidden]
  std::vector<layer_weights> layers;
  std::vector<float> final_norm; ///< [hidden]
  std::vector<float> output;     ///< [hidden][vocab]
};

/// Where a backend's weights come from, a layer at a time, so a model is never held whole in
/// plain floats beside its packed copy.
class weight_source {
public:
  /// Sources are owned through the base.
  virtual ~weight_source() = default;
  /// The embedding, final norm and output projection (`layers` empty).
  virtual expected<model_weights> globals() = 0;
  /// Decoder block `index`.
  virtual expected<layer_weights> layer(unsigned index) = 0;
};

/// The shape's deterministic random weights (`generate_weights`) as a source.
std::unique_ptr<weight_source> random_weight_source(const model_shape& shape, dtype type);

/// Every weight of `source` at once (tests and references).
expected<model_weights> load_all(weight_source& source, unsigned layers);

/// Deterministic random weights from `shape.seed` (splitmix64 per tensor): matmul weights
/// uniform with variance 1/fan_in, norm weights 1 +- 0.1, embeddings uniform in [-1, 1).
model_weights generate_weights(const model_shape& shape, dtype type);

/// Rounds a float to the nearest bfloat16 (ties to even) and back.
float round_to_bf16(float x) noexcept;

} // namespace triad
