#include "devices/sim/profile.hpp"

#include <algorithm>
#include <cmath>

#include "devices/defaults.hpp"

namespace triad {

namespace {

constexpr double tera = 1e12;
constexpr std::uint64_t gb = 1'000'000'000ull;

// A GPU's or Gaudi's offload tier: host memory over PCIe 5.0 x16 (32 GT/s x 16 lanes, 128b/130b:
// about 63 GB/s each way, PCI-SIG). Its size is assumed: an eighth of a DGX H100/H200/B200's
// 2 TB of system memory (NVIDIA DGX datasheets), 256 GB per accelerator.
memory_tier host_over_pcie5() {
  return {"host over pcie5", 256 * gb, 63e9, 63e9, true};
}

std::vector<device_profile> builtins() {
  // Step overhead: 20 us per step is an assumption (kernel launch and synchronisation of a
  // batched decode step), the same for every accelerator; no vendor publishes it. Read and
  // write bandwidths are taken equal where a source gives one figure.
  constexpr double overhead = 20e-6;
  return {
      {"h100",
       989 * tera,
       {{"hbm3", 80 * gb, 3.35 * tera, 3.35 * tera}, host_over_pcie5()},
       0.9 * tera,
       overhead,
       "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16 (1979 is the sparse figure), 3.35 TB/s "
       "HBM3, 80 GB, NVLink 900 GB/s; host memory over PCIe 5.0 x16 as its offload tier (size "
       "assumed)",
       false,
       0,
       true},
      {"h200",
       989 * tera,
       {{"hbm3e", 141 * gb, 4.8 * tera, 4.8 * tera}, host_over_pcie5()},
       0.9 * tera,
       overhead,
       "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense BF16, 4.8 TB/s HBM3e, 141 GB, NVLink 900 "
       "GB/s; host memory over PCIe 5.0 x16 as its offload tier (size assumed)",
       false,
       0,
       true},
      {"b200",
       2250 * tera,
       {{"hbm3e", 180 * gb, 8.0 * tera, 8.0 * tera}, host_over_pcie5()},
       1.8 * tera,
       overhead,
       "NVIDIA HGX B200 figures: 2250 TFLOP/s dense BF16, 8 TB/s, 180 GB, NVLink 5 1.8 TB/s; host "
       "memory over PCIe 5.0 x16 as its offload tier (size assumed)",
       false,
       0,
       true},
      {"gaudi3",
       1835 * tera,
       {{"hbm2e", 128 * gb, 3.67 * tera, 3.67 * tera}, host_over_pcie5()},
       1.2 * tera,
       overhead,
       "Intel Gaudi 3, Hot Chips 2024: 1835 TFLOP/s matrix BF16, 3.67 TB/s HBM2e, 128 GB; "
       "24 x 200 GbE = 1.2 TB/s scale-out; host memory over PCIe 5.0 x16 as its offload tier "
       "(size assumed)",
       false,
       0,
       true},
      {"sn40l",
       638 * tera,
       {{"hbm", 64 * gb, 1.6 * tera, 1.6 * tera, true}, {"ddr5", 1536 * gb, 200e9, 200e9, true}},
       0.2 * tera,
       overhead,
       "SambaNova SN40L per socket, Hot Chips 2024: 638 TFLOP/s BF16, three memory tiers: 520 MB "
       "SRAM (not modelled: it stages, it does not hold weights or KV), 64 GB HBM, 1.5 TB DDR; "
       "neither bandwidth is clearly published: HBM 1.6 TB/s and DDR 200 GB/s here are "
       "assumptions; link bandwidth assumed",
       true,
       0,
       true},
      {"sn50",
       1600 * tera,
       {{"hbm2e", 64 * gb, 1.8 * tera, 1.8 * tera}, {"ddr5", 2048 * gb, 200e9, 200e9, true}},
       0.2 * tera,
       overhead,
       "SambaNova SN50 vendor announcement (unverified): 1600 TFLOP/s, 64 GB HBM2E at 1.8 TB/s + "
       "up to 2 TB DDR5 (its bandwidth assumed, 200 GB/s), 432 MB SRAM (not modelled); link "
       "bandwidth assumed",
       true,
       0,
       true},
      {"xeon6_amx",
       262 * tera,
       {{"mrdimm", 1536 * gb, 0.845 * tera, 0.845 * tera, true}},
       0.1 * tera,
       overhead,
       "Intel Xeon 6 6980P: 128 P-cores x 1024 BF16 ops/cycle (AMX, 4th-gen figure) x 2.0 GHz "
       "assumed = 262 TFLOP/s; 12 ch MRDIMM-8800 ~845 GB/s theoretical; 1.5 TB assumed",
       true,
       0,
       true},
  };
}

// Puts `bytes` into the tiers' room left (`room`, taken from), fastest first: the bytes placed
// in each tier. What no tier has room for goes to the last (over its capacity: the step does
// not fit, and says so).
std::vector<double> place(std::vector<double>& room, double bytes) {
  std::vector<double> out(room.size(), 0.0);
  for (std::size_t t = 0; t < room.size() && bytes > 0; ++t) {
    const double here = std::min(bytes, room[t]);
    out[t] += here;
    room[t] -= here;
    bytes -= here;
  }
  if (bytes > 0 && !out.empty())
    out.back() += bytes;
  return out;
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

expected<device_profile> tensor_parallel_group(const device_profile& one, std::uint32_t n) {
  if (n < 1 || n > defaults::device::max_tensor_parallel)
    return make_error(errc::invalid_argument,
                      "profile '" + one.name + "': tensor_parallel = " + std::to_string(n) +
                          "; allowed: 1.." + std::to_string(defaults::device::max_tensor_parallel));
  if (n == 1)
    return one;
  if (one.tensor_parallel != 1)
    return make_error(errc::invalid_argument,
                      "profile '" + one.name + "' is a group already; group single devices");
  if (one.link_bandwidth <= 0)
    return make_error(errc::invalid_argument,
                      "profile '" + one.name + "': tensor_parallel = " + std::to_string(n) +
                          " needs a link bandwidth above 0 (its all-reduces run over it)");
  device_profile g = one;
  const double k = n;
  g.name = std::to_string(n) + "x " + one.name;
  g.peak_flops *= k;
  g.attention_flops *= k;
  for (auto& t : g.tiers) {
    t.bytes *= n;
    t.read_bandwidth *= k;
    t.write_bandwidth *= k;
  }
  g.link_bandwidth *= k;
  g.tensor_parallel = n;
  g.source += "; as a tensor-parallel group of " + std::to_string(n) +
              " (SIMULATED: sums of one device's figures, all-reduce over half its link)";
  return g;
}

expected<void> check_tiers(const device_profile& profile) {
  if (profile.tiers.empty())
    return make_error(errc::invalid_argument,
                      "sim profile '" + profile.name + "': no memory tier; allowed: 1 or more");
  for (const auto& t : profile.tiers)
    if (t.bytes == 0 || !(t.read_bandwidth > 0) || !(t.write_bandwidth > 0))
      return make_error(errc::invalid_argument,
                        "sim profile '" + profile.name + "': memory tier '" + t.name +
                            "' has capacity " + std::to_string(t.bytes) + " bytes, read " +
                            std::to_string(t.read_bandwidth) + " and write " +
                            std::to_string(t.write_bandwidth) + " bytes/s; allowed: each above 0");
  return {};
}

std::uint64_t device_profile::memory_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const auto& t : tiers)
    total += t.bytes;
  return total;
}

double device_profile::memory_bandwidth() const noexcept {
  return tiers.empty() ? 0.0 : tiers.front().read_bandwidth;
}

double device_profile::allreduce_bandwidth() const noexcept {
  return tensor_parallel > 1 ? link_bandwidth / (2.0 * tensor_parallel) : 0.0;
}

namespace {

// Values one token's activations take per layer (hidden state in and out, residual, norm,
// queries, keys and values as computed, attention output, the MLP's inner vectors), averaged
// over the layers (dense MLPs and experts differ in width).
double activations_per_layer(const model_shape& s) {
  const double q = static_cast<double>(s.heads) * (s.head_dim + s.rope_dim) + s.q_lora_rank;
  const double kv =
      s.mla() ? static_cast<double>(s.kv_lora_rank + s.rope_dim) : 2.0 * s.kv_heads * s.head_dim;
  const double attn = static_cast<double>(s.heads) * s.head_dim;
  const double dense = s.moe() ? s.dense_layers : s.layers;
  const double expert_width =
      static_cast<double>(s.experts_per_token + s.shared_experts) * s.expert_ffn;
  const double mlp = (dense * s.ffn + s.moe_layers() * expert_width) / s.layers;
  return 4.0 * s.hidden + q + kv + attn + 3.0 * mlp;
}

} // namespace

step_cost estimate_step(const model_shape& s, dtype type, const device_profile& profile,
                        const std::vector<step_work>& work, double idle_kv_bytes) {
  const double elem = static_cast<double>(size_of(type));
  const double per_weight = bytes_per_weight(s.weights, type);
  // A token multiplies its layers' weights (the experts it is routed to among them); only a
  // sequence's last token multiplies the output projection.
  const double output_params = static_cast<double>(s.hidden) * s.vocab;
  const double layer_active = static_cast<double>(s.active_parameters()) - output_params;
  const double weight_bytes = s.weight_bytes(type);
  const double kv_per_token = static_cast<double>(s.kv_bytes_per_token(type));
  step_cost c;
  double tokens = 0, kv_read = 0, kv_written = 0;
  for (const auto& w : work) {
    double n = static_cast<double>(w.new_tokens), ctx = static_cast<double>(w.context);
    tokens += n;
    // Matmuls for the new tokens; logits only for the last one.
    c.flops += 2.0 * layer_active * n + 2.0 * output_params;
    // Attention: token i of the chunk sees ctx + i + 1 positions. Latent attention takes the
    // cheaper form: over the latent, or over decompressed heads once the cached positions'
    // latents are expanded (a matmul; long prefill chunks, past about 170 tokens on
    // deepseek-v3, take this form, decode and short chunks over long contexts the latent).
    double positions = n * ctx + n * (n + 1) / 2;
    double attention = s.attention_flops_per_position(true) * positions;
    double expansion = 0;
    if (s.mla()) {
      const double heads = s.attention_flops_per_position(false) * positions;
      const double expand = s.latent_expansion_flops_per_position() * ctx;
      if (heads + expand < attention) {
        attention = heads;
        expansion = expand;
      }
    }
    c.flops += attention + expansion;
    c.attention_flops += attention;
    // KV: the cached context is read once per step, the new tokens written; what is read is
    // what the step needs resident.
    kv_read += (ctx + n) * kv_per_token;
    kv_written += n * kv_per_token;
  }
  // Weights read once per step: all but the input embedding (a lookup of a few rows) and the
  // routed experts no token of the step runs. With routing spread evenly, T tokens picking k of
  // E experts each touch E (1 - (1 - k/E)^T) of them per layer: a decode batch of 64 on 8
  // experts, 2 a token, reads all 8.
  double weights_read = static_cast<double>(s.parameters()) - (s.tied_output ? 0 : output_params);
  if (s.moe()) {
    const double experts = s.experts;
    const double touched =
        tokens > 0 ? experts * (1.0 - std::pow(1.0 - s.experts_per_token / experts, tokens)) : 0;
    weights_read -=
        (experts - touched) * static_cast<double>(s.expert_parameters()) * s.moe_layers();
  }
  const double weights_traffic = weights_read * per_weight;
  // Activations: each layer reads and writes the hidden state, qkv, attention output and the
  // MLP's inner vectors once per token (half of it reads, half writes).
  const double act_per_token = activations_per_layer(s) * elem * s.layers;
  const double act_bytes = tokens * act_per_token;
  const double act_resident = tokens * act_per_token / s.layers; // one layer's at a time
  c.bytes = weights_traffic + kv_read + kv_written + act_bytes;
  const double attention_rate =
      profile.attention_flops > 0 ? profile.attention_flops : profile.peak_flops;
  double compute =
      (c.flops - c.attention_flops) / profile.peak_flops + c.attention_flops / attention_rate;
  // Placement, fastest tier first: weights, activations, the step's KV, then the KV of
  // sequences outside the step (held, not read: where a paused session's KV waits).
  const std::size_t n_tiers = profile.tiers.size();
  std::vector<double> room(n_tiers);
  for (std::size_t t = 0; t < n_tiers; ++t)
    room[t] = static_cast<double>(profile.tiers[t].bytes);
  const auto weights_at = place(room, weight_bytes);
  const auto act_at = place(room, act_resident);
  const auto kv_at = place(room, kv_read);
  const auto idle_at = place(room, idle_kv_bytes);
  // Traffic follows placement: KV is read where it lies; the weights read, activation traffic
  // and KV writes go to the tiers that hold them, in proportion (experts spread evenly).
  auto share = [](const std::vector<double>& at, std::size_t t, double total) {
    return total > 0 ? at[t] / total : 0.0;
  };
  c.tier_resident.assign(n_tiers, 0.0);
  c.tier_traffic.assign(n_tiers, 0.0);
  double memory = 0;
  for (std::size_t t = 0; t < n_tiers; ++t) {
    const auto& tier = profile.tiers[t];
    const double a = share(act_at, t, act_resident);
    const double reads =
        share(weights_at, t, weight_bytes) * weights_traffic + a * act_bytes / 2 + kv_at[t];
    const double writes = a * act_bytes / 2 + share(kv_at, t, kv_read) * kv_written;
    c.tier_resident[t] = weights_at[t] + act_at[t] + kv_at[t] + idle_at[t];
    c.tier_traffic[t] = reads + writes;
    const double seconds = (reads > 0 ? reads / tier.read_bandwidth : 0.0) +
                           (writes > 0 ? writes / tier.write_bandwidth : 0.0);
    memory = std::max(memory, seconds);
  }
  c.compute_bound = compute > memory;
  if (profile.tensor_parallel > 1 && profile.allreduce_bandwidth() > 0) {
    // Megatron-style: each layer all-reduces the hidden states after attention and after the
    // MLP; a ring sends and receives 2 (n - 1) / n of them per device.
    const double n = profile.tensor_parallel;
    const double allreduces = 2.0 * s.layers;
    const double per_allreduce = tokens * static_cast<double>(s.hidden) * elem;
    c.allreduce_seconds =
        allreduces * (2.0 * (n - 1) / n * per_allreduce / profile.allreduce_bandwidth() +
                      defaults::device::sim_allreduce_latency_us * 1e-6);
  }
  c.seconds = (profile.overlap ? std::max(compute, memory) : compute + memory) +
              c.allreduce_seconds + profile.step_overhead;
  c.operational_intensity = c.flops / c.bytes;
  // Resident: weights, every sequence's KV, and one layer's activations of the step's tokens.
  c.capacity_footprint = weight_bytes + kv_read + act_resident;
  c.fits = c.capacity_footprint + idle_kv_bytes <= static_cast<double>(profile.memory_bytes());
  return c;
}

} // namespace triad
