#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "devices/model.hpp"
#include "runtime/error.hpp"

namespace triad {

/// One memory a device holds weights and KV in (SIMULATED figures, cited by the profile): how
/// much it holds and how fast a step reads and writes it. A device's tiers are separate
/// channels: a step reads each at once, so the slowest tier's share bounds its memory time.
struct memory_tier {
  std::string name;           ///< e.g. "hbm3e", "ddr5", "host over pcie5"
  std::uint64_t bytes = 0;    ///< capacity
  double read_bandwidth = 0;  ///< bytes/s a step reads it at
  double write_bandwidth = 0; ///< bytes/s a step writes it at
  bool assumed = false;       ///< true when a figure is an assumption, not a published one
};

/// Public figures of an accelerator that the roofline model runs on. Every built-in profile
/// cites its source; figures only the vendor states are marked so.
struct device_profile {
  std::string name;      ///< e.g. "h100"
  double peak_flops = 0; ///< dense bf16 FLOP/s
  /// Its memories, fastest first (HBM, then DDR or host memory over a link): a step's data
  /// fills them in that order (weights, activations, the step's KV, then KV it does not read).
  std::vector<memory_tier> tiers;
  double link_bandwidth = 0; ///< bytes/s to a peer device (transfers)
  double step_overhead = 0;  ///< seconds added to every step (launch, sync)
  std::string source;        ///< where the figures come from
  bool vendor_claim = false; ///< true when a figure is the vendor's word only
  /// Sustained FLOP/s of attention over the KV cache; 0: attention runs at peak_flops (fused
  /// attention kernels on GPUs and RDUs come close). Set for devices whose attention runs
  /// well below their matmul peak, such as this machine's cpu backend.
  double attention_flops = 0;
  /// Whether the device overlaps arithmetic with memory traffic (roofline: the larger of the
  /// two times). false adds the two, for kernels that stream weights and then compute.
  bool overlap = true;
  /// Devices running the model as one tensor-parallel group (1: one device); a group's figures
  /// above are the sum of its devices' (see tensor_parallel_group).
  std::uint32_t tensor_parallel = 1;
  /// The capacity of every tier together: what weights and KV can take at most.
  std::uint64_t memory_bytes() const noexcept;
  /// The fastest tier's read bandwidth (the roofline's slope); 0 without tiers.
  double memory_bandwidth() const noexcept;
  /// Bytes/s each device of a group sends (and receives) to the next in an all-reduce ring:
  /// half of one device's link (a group's link_bandwidth is the sum of its devices'); 0 for
  /// one device.
  double allreduce_bandwidth() const noexcept;
};

/// Whether `profile` has tiers a step can use: at least one, each with capacity and both
/// bandwidths above 0 (errc::invalid_argument naming the tier otherwise).
expected<void> check_tiers(const device_profile& profile);

/// The built-in profiles: h100, h200, b200, gaudi3, sn40l, sn50, xeon6_amx.
expected<device_profile> builtin_profile(std::string_view name);
/// Names of the built-in profiles.
std::vector<std::string> builtin_profile_names();

/// `n` devices of `one` as one tensor-parallel group (SIMULATED): FLOP/s, every tier's capacity
/// and bandwidths, and the link to other devices (each holds its shard of the KV) n times one
/// device's; the all-reduce ring runs at half the link (its figure counts both directions).
/// n = 1 gives `one`; n outside 1..defaults::device::max_tensor_parallel is an error.
expected<device_profile> tensor_parallel_group(const device_profile& one, std::uint32_t n);

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
  /// capacity_footprint plus the KV held for sequences outside the step fit the tiers.
  bool fits = true;
  bool compute_bound = false; ///< the arithmetic took longer than the memory traffic
  /// A tensor-parallel group's all-reduces (two per layer of the tokens' hidden states, ring,
  /// plus their latency), added to `seconds` (not overlapped: an assumption); 0 for one device.
  double allreduce_seconds = 0;
  /// Per tier (the profile's order): bytes held (weights, activations, KV of the step and of
  /// the sequences outside it, placed fastest first) and bytes read and written by the step.
  std::vector<double> tier_resident, tier_traffic;
};

/// Estimates a step of `work` for `shape` (weights and KV in `type`) on `profile`, with
/// `idle_kv_bytes` of KV held for sequences outside the step (a paused session's) taking room.
/// FLOPs count every matmul a token runs (2 per multiply-add; of a mixture of experts, its
/// routed and shared experts), attention over context + new tokens, and the output projection
/// once per sequence; bytes count the weights once per step (of the routed experts, those the
/// step's tokens touch, routing spread evenly), the KV each sequence reads and writes, and the
/// activations that cross memory between layers. Weights take `shape.weights`' bytes. Each datum is
/// read and written at the bandwidth of the tier it is placed in; the memory time is the slowest
/// tier's (the tiers are separate channels). A tensor-parallel group adds its all-reduces.
step_cost estimate_step(const model_shape& shape, dtype type, const device_profile& profile,
                        const std::vector<step_work>& work, double idle_kv_bytes = 0);

} // namespace triad
