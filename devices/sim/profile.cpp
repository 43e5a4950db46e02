#include "devices/sim/profile.hpp"

namespace triad {

namespace {

constexpr double tera = 1e12;
constexpr std::uint64_t gb = 1'000'000'000ull;

std::vector<device_profile> builtins() {
  // Step overhead: 20 us per step is an assumption (kernel launch and synchronisation of a
  // batched decode step), the same for every accelerator; no vendor publishes it.
  constexpr double overhead = 20e-6;
  return {
      {"h100", 989 * tera, 3.35 * tera, 80 * gb, 0, 0.9 * tera, overhead,
       "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16 (1979 is the sparse figure), 3.35 TB/s "
       "HBM3, 80 GB, NVLink 900 GB/s",
       false, 0, true},
      {"h200", 989 * tera, 4.8 * tera, 141 * gb, 0, 0.9 * tera, overhead,
       "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense BF16, 4.8 TB/s HBM3e, 141 GB, NVLink 900 GB/s",
       false, 0, true},
      {"b200", 2250 * tera, 8.0 * tera, 180 * gb, 0, 1.8 * tera, overhead,
       "NVIDIA HGX B200 figures: 2250 TFLOP/s dense BF16, 8 TB/s, 180 GB, NVLink 5 1.8 TB/s", false,
       0, true},
      {"gaudi3", 1835 * tera, 3.67 * tera, 128 * gb, 0, 1.2 * tera, overhead,
       "Intel Gaudi 3, Hot Chips 2024: 1835 TFLOP/s matrix BF16, 3.67 TB/s HBM2e, 128 GB; "
       "24 x 200 GbE = 1.2 TB/s scale-out",
       false, 0, true},
      {"sn40l", 638 * tera, 1.6 * tera, 64 * gb, 1536 * gb, 0.2 * tera, overhead,
       "SambaNova SN40L per socket, Hot Chips 2024: 638 TFLOP/s BF16, 64 GB HBM + 1.5 TB DDR, "
       "520 MB SRAM; HBM bandwidth is not clearly published: 1.6 TB/s here is an assumption; "
       "link bandwidth assumed",
       true, 0, true},
      {"sn50", 1600 * tera, 1.8 * tera, 64 * gb, 2048 * gb, 0.2 * tera, overhead,
       "SambaNova SN50 vendor announcement (unverified): 1600 TFLOP/s, 64 GB HBM2E + up to 2 TB "
       "DDR5, 432 MB SRAM, 1.8 TB/s; link bandwidth assumed",
       true, 0, true},
      {"xeon6_amx", 262 * tera, 0.845 * tera, 1536 * gb, 0, 0.1 * tera, overhead,
       "Intel Xeon 6 6980P: 128 P-cores x 1024 BF16 ops/cycle (AMX, 4th-gen figure) x 2.0 GHz "
       "assumed = 262 TFLOP/s; 12 ch MRDIMM-8800 ~845 GB/s theoretical; 1.5 TB assumed",
       true, 0, true},
  };
}

} // namespace

expected<device_profile> builtin_profile(std::string_view name) {
  for (auto& p : builtins())
    if (p.name == name)
      return p;
  std::string allowed;
  for (const auto& n : builtin_profile_names())
    allowed += (allowed.empty() ? "" : ", ") + n;
  return make_error(errc::not_found,
                    "unknown device profile '" + std::string{name} + "'; allowed: " + allowed);
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> out;
  for (auto& p : builtins())
    out.push_back(p.name);
  return out;
}

step_cost estimate_step(const model_shape& s, dtype type, const device_profile& profile,
                        const std::vector<step_work>& work) {
  const double elem = static_cast<double>(size_of(type));
  const double qkv = static_cast<double>(s.heads + 2 * s.kv_heads) * s.head_dim;
  const double attn = static_cast<double>(s.heads) * s.head_dim;
  const double layer_params = s.hidden * qkv + attn * s.hidden + 3.0 * s.hidden * s.ffn;
  const double output_params = static_cast<double>(s.hidden) * s.vocab;
  const double weight_bytes = (layer_params * s.layers + output_params) * elem;
  const double kv_per_token = static_cast<double>(s.kv_bytes_per_token(type));
  step_cost c;
  double tokens = 0, kv_bytes = 0, kv_resident = 0;
  for (const auto& w : work) {
    double n = static_cast<double>(w.new_tokens), ctx = static_cast<double>(w.context);
    tokens += n;
    // Matmuls for the new tokens; logits only for the last one.
    c.flops += 2.0 * layer_params * s.layers * n + 2.0 * output_params;
    // Attention: token i of the chunk sees ctx + i + 1 positions; 2 x 2 FLOPs per head dim.
    double positions = n * ctx + n * (n + 1) / 2;
    c.flops += 4.0 * s.layers * attn * positions;
    c.attention_flops += 4.0 * s.layers * attn * positions;
    // KV: the cached context is read once per step, the new tokens written.
    kv_bytes += (ctx + n) * kv_per_token + n * kv_per_token;
    kv_resident += (ctx + n) * kv_per_token;
  }
  // Activations: each layer reads and writes the hidden state, qkv, attention output and the
  // MLP's inner vectors once per token.
  const double act_per_token = (4.0 * s.hidden + qkv + attn + 3.0 * s.ffn) * elem * s.layers;
  const double act_bytes = tokens * act_per_token;
  c.bytes = weight_bytes + kv_bytes + act_bytes;
  const double attention_rate =
      profile.attention_flops > 0 ? profile.attention_flops : profile.peak_flops;
  double compute =
      (c.flops - c.attention_flops) / profile.peak_flops + c.attention_flops / attention_rate;
  double memory = c.bytes / profile.memory_bandwidth;
  c.compute_bound = compute > memory;
  c.seconds =
      (profile.overlap ? std::max(compute, memory) : compute + memory) + profile.step_overhead;
  c.operational_intensity = c.flops / c.bytes;
  // Resident: weights, every sequence's KV, and one layer's activations of the step's tokens.
  c.capacity_footprint = weight_bytes + kv_resident + tokens * act_per_token / s.layers;
  c.fits = c.capacity_footprint <= static_cast<double>(profile.memory_bytes);
  return c;
}

} // namespace triad
