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

std::uint64_t model_shape::attention_parameters() const noexcept {
  using u64 = std::uint64_t;
  const u64 norms = 2ull * hidden + (qk_norm ? 2ull * head_dim : 0); // the layer's two RMSNorms
  const u64 o = u64{heads} * head_dim * hidden;
  if (mla()) {
    // Queries through a compressed width (with its norm) or directly; keys and values through
    // the latent (with its norm) and one shared rotary key; per head: head_dim + rope_dim for
    // queries and keys, head_dim for values.
    const u64 q_width = u64{heads} * (head_dim + rope_dim);
    const u64 q = q_lora_rank != 0
                      ? u64{hidden} * q_lora_rank + q_lora_rank + u64{q_lora_rank} * q_width
                      : u64{hidden} * q_width;
    const u64 kv_down = u64{hidden} * (kv_lora_rank + rope_dim) + kv_lora_rank;
    const u64 kv_up = u64{kv_lora_rank} * heads * 2 * head_dim;
    return q + kv_down + kv_up + o + norms;
  }
  const u64 q = u64{hidden} * heads * head_dim;
  const u64 kv = 2ull * hidden * kv_heads * head_dim;
  const u64 bias = qkv_bias ? u64{heads + 2 * kv_heads} * head_dim : 0;
  return q + kv + o + bias + norms;
}

std::uint64_t model_shape::expert_parameters() const noexcept {
  return moe() ? 3ull * hidden * expert_ffn : 0;
}

namespace {

// Weights of the decoder layers when each MoE layer runs `routed` of its experts.
std::uint64_t layer_weights(const model_shape& s, unsigned routed) {
  const unsigned dense = s.moe() ? s.dense_layers : s.layers;
  const std::uint64_t router = std::uint64_t{s.hidden} * s.experts;
  const std::uint64_t moe_mlp =
      std::uint64_t{routed + s.shared_experts} * s.expert_parameters() + router;
  return s.attention_parameters() * s.layers + 3ull * s.hidden * s.ffn * dense +
         moe_mlp * s.moe_layers();
}

} // namespace

std::uint64_t model_shape::parameters() const noexcept {
  // Input embedding, final norm and the output projection (unless tied to the embedding).
  return layer_weights(*this, experts) + (tied_output ? 1ull : 2ull) * vocab * hidden + hidden;
}

std::uint64_t model_shape::active_parameters() const noexcept {
  // The output projection is multiplied whether tied or not; the embedding is a lookup.
  return layer_weights(*this, experts_per_token) + std::uint64_t{vocab} * hidden + hidden;
}

double model_shape::weight_bytes(dtype type) const noexcept {
  return static_cast<double>(parameters()) * bytes_per_weight(weights, type);
}

std::uint64_t model_shape::kv_bytes_per_token(dtype kv) const noexcept {
  if (mla())
    return std::uint64_t{layers} * (kv_lora_rank + rope_dim) * size_of(kv);
  return 2ull * layers * kv_heads * head_dim * size_of(kv);
}

double model_shape::attention_flops_per_position(bool absorbed) const noexcept {
  // Scores (q . k) and weighted values (p x v), 2 FLOPs a multiply-add, per head and layer.
  double per_head = 4.0 * head_dim;
  if (mla())
    per_head = absorbed ? 2.0 * (kv_lora_rank + rope_dim) + 2.0 * kv_lora_rank
                        : 2.0 * (head_dim + rope_dim) + 2.0 * head_dim;
  return per_head * heads * layers;
}

double model_shape::latent_expansion_flops_per_position() const noexcept {
  return mla() ? 2.0 * kv_lora_rank * heads * 2.0 * head_dim * layers : 0.0;
}

expected<void> model_shape::validate() const {
  auto bad = [&](const std::string& what) {
    return make_error(errc::invalid_argument, "model '" + name + "': " + what);
  };
  if (layers == 0 || hidden == 0 || heads == 0 || kv_heads == 0 || head_dim == 0 || vocab == 0 ||
      max_context == 0)
    return bad("layers, hidden, heads, kv_heads, head_dim, vocab and max_context must all be at "
               "least 1");
  if (ffn == 0 && (!moe() || dense_layers != 0))
    return bad("ffn must be at least 1 where a layer has the dense MLP");
  if (moe()) {
    if (experts_per_token == 0 || experts_per_token > experts)
      return bad("experts_per_token (" + std::to_string(experts_per_token) + ") must be 1.." +
                 std::to_string(experts) + " (experts)");
    if (expert_ffn == 0)
      return bad("expert_ffn must be at least 1 in a mixture of experts");
    if (dense_layers >= layers)
      return bad("dense_layers (" + std::to_string(dense_layers) + ") must be below layers (" +
                 std::to_string(layers) + ")");
  } else if (experts_per_token != 0 || shared_experts != 0 || expert_ffn != 0 ||
             dense_layers != 0) {
    return bad("experts_per_token, shared_experts, expert_ffn and dense_layers need experts");
  }
  if (!mla() && (q_lora_rank != 0 || rope_dim != 0))
    return bad("q_lora_rank and rope_dim are for latent attention (kv_lora_rank > 0)");
  if (mla() && rope_dim % 2 != 0)
    return bad("rope_dim (" + std::to_string(rope_dim) + ") must be even for rotary embedding");
  if (heads % kv_heads != 0)
    return bad("heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
               std::to_string(kv_heads) + ")");
  // The rotated width: head_dim, or MLA's rope_dim beside its unrotated head_dim.
  const unsigned rotated = mla() ? rope_dim : head_dim;
  if (!mla() && head_dim % 2 != 0)
    return bad("head_dim (" + std::to_string(head_dim) + ") must be even for rotary embedding");
  if (!rope_freq_factors.empty() && rope_freq_factors.size() != rotated / 2)
    return bad("rope_freq_factors has " + std::to_string(rope_freq_factors.size()) + " entries; " +
               (mla() ? "rope_dim" : "head_dim") + " / 2 = " + std::to_string(rotated / 2) +
               " needed");
  if (file.empty() && vocab < 263)
    return bad("vocab (" + std::to_string(vocab) +
               ") must hold the 256 byte tokens and the 7 special tokens");
  return {};
}

namespace {

// One preset's shape; every preset has the byte tokenizer's 320-token vocabulary. Fields left
// out are 0: a dense, grouped-query model.
struct preset_row {
  std::string_view name;
  unsigned layers, hidden, heads, kv_heads, head_dim, ffn, max_context;
  double rope_theta;
  std::uint64_t seed;
  unsigned experts = 0, experts_per_token = 0, shared_experts = 0, expert_ffn = 0;
  unsigned dense_layers = 0, kv_lora_rank = 0, q_lora_rank = 0, rope_dim = 0;
};

// "tiny" and "small" are what the cpu backend runs. The others are real models' shapes for sim
// devices only (their weights are never built; counts below are with the 320-token vocabulary,
// devices/README.md gives the real vocabularies' share):
// - llama3-8b (7.0e9 parameters) and llama3-70b (68.5e9; Llama 3.1's 128K context), whose bf16
//   weights (137 GB) nearly fill an H200's 141 GB: the case for a device group;
// - mixtral-8x7b (46.4e9, 12.6e9 active) and mixtral-8x22b (140.2e9, 38.8e9 active): 8 experts,
//   2 a token, every layer;
// - deepseek-v3 (669e9, 35.7e9 active): latent attention caching 576 values a token and layer,
//   3 dense layers, then 256 routed experts (8 a token) and one shared.
// clang-format off
constexpr preset_row presets[] = {
    {"tiny", 8, 512, 8, 2, 64, 1536, 4096, 10000.0, 0x7417'0001},
    {"small", 12, 1024, 16, 4, 64, 2816, 8192, 10000.0, 0x7417'0002},
    {"llama3-8b", 32, 4096, 32, 8, 128, 14336, 8192, 500000.0, 0x7417'0003},
    {"llama3-70b", 80, 8192, 64, 8, 128, 28672, 131072, 500000.0, 0x7417'0004},
    {.name = "mixtral-8x7b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
     .head_dim = 128, .ffn = 0, .max_context = 32768, .rope_theta = 1e6, .seed = 0x7417'0005,
     .experts = 8, .experts_per_token = 2, .expert_ffn = 14336},
    {.name = "mixtral-8x22b", .layers = 56, .hidden = 6144, .heads = 48, .kv_heads = 8,
     .head_dim = 128, .ffn = 0, .max_context = 65536, .rope_theta = 1e6, .seed = 0x7417'0006,
     .experts = 8, .experts_per_token = 2, .expert_ffn = 16384},
    {.name = "deepseek-v3", .layers = 61, .hidden = 7168, .heads = 128, .kv_heads = 128,
     .head_dim = 128, .ffn = 18432, .max_context = 163840, .rope_theta = 10000.0,
     .seed = 0x7417'0007, .experts = 256, .experts_per_token = 8, .shared_experts = 1,
     .expert_ffn = 2048, .dense_layers = 3, .kv_lora_rank = 512, .q_lora_rank = 1536,
     .rope_dim = 64},
};
// clang-format on

// The table and the public list of names are one list, in one order.
constexpr bool names_match() {
  if (std::size(presets) != model_preset_names.size())
    return false;
  for (std::size_t i = 0; i < model_preset_names.size(); ++i)
    if (presets[i].name != model_preset_names[i])
      return false;
  return true;
}
static_assert(names_match(), "presets[] and model_preset_names must list the same names");

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
    m.experts = p.experts;
    m.experts_per_token = p.experts_per_token;
    m.shared_experts = p.shared_experts;
    m.expert_ffn = p.expert_ffn;
    m.dense_layers = p.dense_layers;
    m.kv_lora_rank = p.kv_lora_rank;
    m.q_lora_rank = p.q_lora_rank;
    m.rope_dim = p.rope_dim;
    return m;
  }
  std::string allowed;
  for (const auto& n : model_preset_names)
    allowed += (allowed.empty() ? "" : ", ") + std::string{n};
  return make_error(errc::not_found,
                    "unknown model preset '" + std::string{name} + "'; allowed: " + allowed);
}

} // namespace triad
