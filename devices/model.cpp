#include "devices/model.hpp"

namespace triad {

std::string_view to_string(dtype value) noexcept {
  return value == dtype::bf16 ? "bf16" : "f32";
}

std::string_view to_string(model_arch value) noexcept {
  switch (value) {
  case model_arch::llama:
    return "llama";
  case model_arch::qwen2:
    return "qwen2";
  case model_arch::qwen3:
    return "qwen3";
  }
  return "unknown";
}

std::uint64_t model_shape::parameters() const noexcept {
  std::uint64_t q = std::uint64_t{hidden} * heads * head_dim;
  std::uint64_t kv = 2ull * hidden * kv_heads * head_dim;
  std::uint64_t o = std::uint64_t{heads} * head_dim * hidden;
  std::uint64_t mlp = 3ull * hidden * ffn;
  std::uint64_t norms = 2ull * hidden + (qk_norm ? 2ull * head_dim : 0);
  std::uint64_t bias = qkv_bias ? std::uint64_t{heads + 2 * kv_heads} * head_dim : 0;
  std::uint64_t per_layer = q + kv + o + mlp + norms + bias;
  // Input embedding, final norm and the output projection (unless tied to the embedding).
  return per_layer * layers + (tied_output ? 1ull : 2ull) * vocab * hidden + hidden;
}

std::uint64_t model_shape::kv_bytes_per_token(dtype kv) const noexcept {
  return 2ull * layers * kv_heads * head_dim * size_of(kv);
}

double model_shape::flops_per_token(std::uint64_t context) const noexcept {
  // Every weight but the embedding lookup is multiplied once; a tied output projection still is.
  double matmul = 2.0 * static_cast<double>(parameters() - (tied_output ? 0 : std::uint64_t{vocab} * hidden));
  // Scores and weighted values: 2 x 2 x heads x head_dim per cached token per layer.
  double attention = 4.0 * layers * heads * head_dim * static_cast<double>(context + 1);
  return matmul + attention;
}

expected<void> model_shape::validate() const {
  auto bad = [&](const std::string& what) {
    return make_error(errc::invalid_argument, "model '" + name + "': " + what);
  };
  if (layers == 0 || hidden == 0 || heads == 0 || kv_heads == 0 || head_dim == 0 || ffn == 0 ||
      vocab == 0 || max_context == 0)
    return bad("layers, hidden, heads, kv_heads, head_dim, ffn, vocab and max_context must all "
               "be at least 1");
  if (heads % kv_heads != 0)
    return bad("heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
               std::to_string(kv_heads) + ")");
  if (head_dim % 2 != 0)
    return bad("head_dim (" + std::to_string(head_dim) + ") must be even for rotary embedding");
  if (!rope_freq_factors.empty() && rope_freq_factors.size() != head_dim / 2)
    return bad("rope_freq_factors has " + std::to_string(rope_freq_factors.size()) +
               " entries; head_dim / 2 = " + std::to_string(head_dim / 2) + " needed");
  if (file.empty() && vocab < 263)
    return bad("vocab (" + std::to_string(vocab) +
               ") must hold the 256 byte tokens and the 7 special tokens");
  return {};
}

namespace {

// One preset's shape; every preset has the byte tokenizer's 320-token vocabulary.
struct preset_row {
  std::string_view name;
  unsigned layers, hidden, heads, kv_heads, head_dim, ffn, max_context;
  double rope_theta;
  std::uint64_t seed;
};

// "tiny" and "small" are what the cpu backend runs. The Llama 3 shapes are for sim devices
// only (their weights are never built): llama3-8b has 7.0e9 parameters with the 320-token
// vocabulary (the real model's 128256-token embedding and output layer add 1.0e9);
// llama3-70b 68.5e9 (the real vocabulary adds 2.1e9), whose bf16 weights (137 GB) nearly fill
// an H200's 141 GB: the case for a device group.
constexpr preset_row presets[] = {
    {"tiny", 8, 512, 8, 2, 64, 1536, 4096, 10000.0, 0x7417'0001},
    {"small", 12, 1024, 16, 4, 64, 2816, 8192, 10000.0, 0x7417'0002},
    {"llama3-8b", 32, 4096, 32, 8, 128, 14336, 8192, 500000.0, 0x7417'0003},
    {"llama3-70b", 80, 8192, 64, 8, 128, 28672, 8192, 500000.0, 0x7417'0004},
};

} // namespace

expected<model_shape> model_preset(std::string_view name) {
  for (const auto& p : presets) {
    if (p.name != name)
      continue;
    model_shape m;
    m.name = std::string{name};
    m.vocab = 320;
    m.rms_eps = 1e-5f;
    m.layers = p.layers;
    m.hidden = p.hidden;
    m.heads = p.heads;
    m.kv_heads = p.kv_heads;
    m.head_dim = p.head_dim;
    m.ffn = p.ffn;
    m.max_context = p.max_context;
    m.rope_theta = p.rope_theta;
    m.seed = p.seed;
    return m;
  }
  std::string allowed;
  for (const auto& n : model_preset_names())
    allowed += (allowed.empty() ? "" : ", ") + n;
  return make_error(errc::not_found,
                    "unknown model preset '" + std::string{name} + "'; allowed: " + allowed);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets)
    out.emplace_back(p.name);
  return out;
}

} // namespace triad
