#pragma once

#include <memory>
#include <span>
#include <vector>

#include "devices/model.hpp"
#include "gguf/types.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Output rows of a matmul weight kept in a ggml block type, as a GGUF file stores them: `rows`
/// rows of the matrix's input width each, row after row (a row is whole blocks). From a model
/// file the bytes are the file's mapping, shared by every device of the process.
struct quantized_rows {
  ggml_type type = ggml_type::q8_0;  ///< q4_0, q8_0, q4_K or q6_K
  unsigned rows = 0;                 ///< output rows in this run
  std::span<const std::byte> bytes;  ///< rows x (input width / block) x block bytes
  std::shared_ptr<const void> owner; ///< keeps `bytes` alive (the mapped file, or a buffer)
};

/// Rows that own their bytes (tests, benchmarks).
quantized_rows owned_rows(ggml_type type, unsigned rows, std::vector<std::byte> bytes);

/// Whether weights of `type` stay in it on the cpu backend (its quantized kernels read q4_0,
/// q8_0, q4_K and q6_K); f32, f16 and bf16 weights are packed as the device's dtype.
constexpr bool kept_quantized(ggml_type type) noexcept {
  return type == ggml_type::q4_0 || type == ggml_type::q8_0 || type == ggml_type::q4_k ||
         type == ggml_type::q6_k;
}

/// A matmul weight kept quantized: runs of output rows, in order (a fused matrix's parts may
/// differ in type, as q, k and v of a Q4_K_M file do). Empty: the weight is plain floats.
using quantized_matrix = std::vector<quantized_rows>;

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
  // Kept quantized instead (the plain member above is then empty):
  quantized_matrix wqkv_q;     ///< rows q, k, v of wqkv
  quantized_matrix wo_q;       ///< rows of wo
  quantized_matrix wgate_up_q; ///< rows gate, up of wgate_up
  quantized_matrix wdown_q;    ///< rows of wdown
};

/// All weights of a model as plain floats; values already rounded to the model's dtype, so a
/// reference computed from them sees exactly what the backend multiplies.
struct model_weights {
  std::vector<float> embedding; ///< [vocab][hidden]
  std::vector<layer_weights> layers;
  std::vector<float> final_norm; ///< [hidden]
  std::vector<float> output;     ///< [hidden][vocab]
  /// The embedding kept quantized ([vocab] rows of hidden; `embedding` then empty). With a tied
  /// output and no `output`/`output_q`, these rows are the output projection too.
  quantized_matrix embedding_q;
  quantized_matrix output_q; ///< rows of the output projection kept quantized (`output` empty)
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
