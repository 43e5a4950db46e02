#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "devices/model.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Public figures of an accelerator that the roofline model runs on. Every built-in profile
/// cites its source; figures only the vendor states are marked so.
struct device_profile {
  std::string name;                    ///< e.g. "h100"
  double peak_flops = 0;               ///< dense bf16 FLOP/s
  double memory_bandwidth = 0;         ///< bytes/s of the memory that holds weights and KV
  std::uint64_t memory_bytes = 0;      ///< capacity of that memory
  std::uint64_t second_tier_bytes = 0; ///< slower memory behind it (SN40L DDR); not modelled yet
  double link_bandwidth = 0;           ///< bytes/s to a peer device (transfers)
  double step_overhead = 0;            ///< seconds added to every step (launch, sync)
  std::string source;                  ///< where the figures come from
  bool vendor_claim = false;           ///< true when a figure is the vendor's word only
  /// Sustained FLOP/s of attention over the KV cache; 0: attention runs at peak_flops (fused
  /// attention kernels on GPUs and RDUs come close). Set for devices whose attention runs
  /// well below their matmul peak, such as this machine's cpu backend.
  double attention_flops = 0;
  /// Whether the device overlaps arithmetic with memory traffic (roofline: the larger of the
  /// two times). false adds the two, for kernels that stream weights and then compute.
  bool overlap = true;
};

/// The built-in profiles: h100, h200, b200, gaudi3, sn40l, sn50, xeon6_amx.
expected<device_profile> builtin_profile(std::string_view name);
/// Names of the built-in profiles.
std::vector<std::string> builtin_profile_names();

/// One sequence's share of a step: `new_tokens` computed on top of `context` cached ones.
struct step_work {
  std::uint64_t context = 0;    ///< tokens already in the KV cache
  std::uint64_t new_tokens = 0; ///< tokens computed in this step (1 for a decode)
};

/// The roofline estimate of one step (simulated).
struct step_cost {
  double flops = 0;           ///< arithmetic of the step
  double bytes = 0;           ///< memory traffic: weights once, KV read and written, activations
  double attention_flops = 0; ///< the part of `flops` spent in attention over the KV cache
  /// max(compute, bytes / bandwidth) + overhead (sum instead of max without overlap), where
  /// compute = (flops - attention_flops) / peak + attention_flops / attention rate.
  double seconds = 0;
  double operational_intensity = 0; ///< flops / bytes
  double capacity_footprint = 0;    ///< weights + activations + KV bytes the step needs resident
  bool fits = true;                 ///< capacity_footprint <= memory_bytes
  bool compute_bound = false;       ///< flops / peak exceeded bytes / bandwidth
};

/// Estimates a step of `work` for `shape` (weights and KV in `type`) on `profile`.
/// FLOPs count every matmul (2 per multiply-add), attention over context + new tokens, and the
/// output projection once per sequence; bytes count weights once per step, the KV each sequence
/// reads and writes, and the activations that cross memory between layers.
step_cost estimate_step(const model_shape& shape, dtype type, const device_profile& profile,
                        const std::vector<step_work>& work);

} // namespace triad
