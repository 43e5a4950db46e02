#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// Element type of weights, activations fed to matmuls, and KV pages.
enum class dtype {
  bf16, ///< bfloat16 (default): half the bytes, AMX on Xeon 4th gen and later
  f32,  ///< float32: exact reference checks, twice the bytes
};

/// Name of a dtype, "bf16" or "f32".
std::string_view to_string(dtype value) noexcept;

/// Bytes of one element of `value`.
constexpr std::size_t size_of(dtype value) noexcept {
  return value == dtype::bf16 ? 2 : 4;
}

/// How a model's weights are stored, for the sim's roofline (memory they take and traffic they
/// cost). The cpu backend multiplies weights in its `dtype` (or a GGUF file's own types).
enum class weight_format {
  dtype, ///< the element type of the device (`dtype`): 2 bytes for bf16, 4 for f32
  bf16,  ///< bfloat16: 2 bytes a weight
  fp8,   ///< 8-bit floats (e4m3, one scale per tensor or block): 1 byte a weight
  /// 4-bit integers in groups of 32 with a bf16 scale each (GPTQ / AWQ style): 4.5 bits a weight
  int4,
};

/// Bytes one weight takes in `format` on a device computing in `type`.
constexpr double bytes_per_weight(weight_format format, dtype type) noexcept {
  switch (format) {
  case weight_format::dtype:
    return static_cast<double>(size_of(type));
  case weight_format::bf16:
    return 2.0;
  case weight_format::fp8:
    return 1.0;
  case weight_format::int4:
    return 4.5 / 8.0;
  }
  return static_cast<double>(size_of(type));
}

/// Decoder families triad computes. All are Llama-style (RMSNorm, rotary positions, grouped-query
/// attention, SwiGLU); they differ in a few parts, which `model_shape` spells out as flags.
enum class model_arch {
  llama, ///< Llama 2 / 3.x, Mistral, TinyLlama, SmolLM2 (GGUF "llama"); the random presets
  qwen2, ///< Qwen2 / 2.5: q, k and v biases, usually tied embeddings
  qwen3, ///< Qwen3: q and k heads RMS-normalised before rotary positions
};

/// GGUF's name of an architecture: "llama", "qwen2" or "qwen3".
std::string_view to_string(model_arch value) noexcept;

/// The shape of a Llama-architecture decoder: what the cpu backend computes and what the sim
/// backend's roofline is fed.
struct model_shape {
  std::string name;            ///< preset name, e.g. "tiny"
  unsigned layers = 0;         ///< decoder blocks
  unsigned hidden = 0;         ///< model width
  unsigned heads = 0;          ///< query heads
  unsigned kv_heads = 0;       ///< key/value heads (grouped-query attention); divides heads
  unsigned head_dim = 0;       ///< width of one head
  unsigned ffn = 0;            ///< SwiGLU inner width
  unsigned vocab = 0;          ///< token ids 0..vocab-1
  unsigned max_context = 0;    ///< longest sequence the rotary tables cover
  double rope_theta = 10000.0; ///< rotary base
  float rms_eps = 1e-5f;       ///< RMSNorm epsilon
  std::uint64_t seed = 0;      ///< seed of the deterministic random weights
  model_arch arch = model_arch::llama; ///< the family (where its parts differ)
  bool qkv_bias = false;               ///< q, k and v projections add a bias (qwen2)
  bool qk_norm = false;     ///< each q and k head RMS-normalised before rotary positions (qwen3)
  bool tied_output = false; ///< the output projection is the embedding, transposed
  /// Rotary pairs are adjacent dimensions (2i, 2i + 1), as a llama GGUF file orders q and k;
  /// else halves apart (i, i + head_dim / 2), as Hugging Face and the random presets do.
  bool rope_adjacent = false;
  /// Per rotary pair, a divisor of its frequency (Llama 3.1's "llama3" scaling, which GGUF files
  /// carry as the tensor rope_freqs.weight); empty: none.
  std::vector<float> rope_freq_factors;
  /// The GGUF file the weights come from; empty for the random presets.
  std::string file;

  // -- mixture of experts and multi-head latent attention (shapes only sim devices run) --

  /// Routed experts of each MoE layer (SwiGLU MLPs of width expert_ffn); 0: a dense model.
  unsigned experts = 0;
  unsigned experts_per_token = 0; ///< routed experts each token runs (top-k)
  unsigned shared_experts = 0;    ///< experts every token runs besides its routed ones
  unsigned expert_ffn = 0;        ///< SwiGLU inner width of one expert
  /// Leading layers with the dense MLP (width ffn) instead of experts (DeepSeek-V3: 3).
  unsigned dense_layers = 0;
  /// Multi-head latent attention: K and V are cached as one latent of this width per token and
  /// layer (plus rope_dim of rotary key); 0: grouped-query attention with kv_heads heads.
  unsigned kv_lora_rank = 0;
  unsigned q_lora_rank = 0; ///< MLA's query compression width; 0: a full query projection
  /// MLA: rotary width of each query and key head beside its head_dim (no-rotary part); the
  /// value heads are head_dim wide.
  unsigned rope_dim = 0;
  /// How the weights are stored (their bytes in the sim); the config's `[model].weights`.
  weight_format weights = weight_format::dtype;

  /// Whether the MLPs past dense_layers are routed experts.
  bool moe() const noexcept { return experts != 0; }
  /// Whether attention is multi-head latent attention.
  bool mla() const noexcept { return kv_lora_rank != 0; }
  /// Weights of all matmuls, embeddings and norms: what the device holds.
  std::uint64_t parameters() const noexcept;
  /// Weights one token is multiplied by (every matmul but the routed experts it does not run,
  /// the output projection included, the embedding lookup not): what its FLOPs count.
  std::uint64_t active_parameters() const noexcept;
  /// Weights of one decoder layer's attention (projections, biases, norms).
  std::uint64_t attention_parameters() const noexcept;
  /// Weights of one routed expert (0 for a dense model).
  std::uint64_t expert_parameters() const noexcept;
  /// Layers whose MLP is routed experts.
  unsigned moe_layers() const noexcept { return moe() ? layers - dense_layers : 0; }
  /// Bytes of the weights in `weights` on a device computing in `type`.
  double weight_bytes(dtype type) const noexcept;
  /// Bytes of K and V for one token across all layers at `kv` (MLA: the latent and rotary key).
  std::uint64_t kv_bytes_per_token(dtype kv) const noexcept;
  /// Attention FLOPs of one token over one cached position across all layers: scores and
  /// weighted values. MLA attends over the latent (`absorbed`: the up-projections folded into
  /// the query and output) or over decompressed heads.
  double attention_flops_per_position(bool absorbed) const noexcept;
  /// MLA: FLOPs of expanding one cached position's latent into every head's key and value
  /// across all layers, which attending over decompressed heads needs first; 0 without MLA.
  double latent_expansion_flops_per_position() const noexcept;
  /// Checks the shape's internal rules (heads divisible by kv_heads, head_dim even, a random
  /// preset's vocabulary holds the byte tokenizer, ...).
  expected<void> validate() const;
};

/// The built-in presets, by name: "tiny" (about 24M parameters) and "small" (about 135M), which
/// the cpu backend runs, and shapes of real models only sim devices run: "llama3-8b",
/// "llama3-70b", "mixtral-8x7b", "mixtral-8x22b" (MoE) and "deepseek-v3" (MLA + MoE).
/// Shapes are documented in devices/README.md.
expected<model_shape> model_preset(std::string_view name);

/// Names of the built-in presets (the config's allowed `[model].preset` values), in the order of
/// the table in devices/README.md.
inline constexpr std::array<std::string_view, 7> model_preset_names = {
    "tiny", "small", "llama3-8b", "llama3-70b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"};

} // namespace triad
