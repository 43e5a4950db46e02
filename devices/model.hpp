#pragma once

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

  /// Weights of all matmuls, embeddings and norms.
  std::uint64_t parameters() const noexcept;
  /// Bytes of K and V for one token across all layers at `kv`.
  std::uint64_t kv_bytes_per_token(dtype kv) const noexcept;
  /// Multiply-adds x 2 of one token's forward pass with `context` earlier tokens in cache.
  double flops_per_token(std::uint64_t context) const noexcept;
  /// Checks the shape's internal rules (heads divisible by kv_heads, head_dim even, a random
  /// preset's vocabulary holds the byte tokenizer, ...).
  expected<void> validate() const;
};

/// The built-in presets, by name: "tiny" (about 24M parameters) and "small" (about 135M), which
/// the cpu backend runs, and "llama3-8b" and "llama3-70b" (Llama 3's shapes), which only sim
/// devices run.
/// Shapes are documented in devices/README.md.
expected<model_shape> model_preset(std::string_view name);

/// Names of the built-in presets.
std::vector<std::string> model_preset_names();

} // namespace triad
