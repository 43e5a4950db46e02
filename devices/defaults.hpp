#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the devices area, in one place (like CAF's `defaults::`); config sections take
/// their initial values from here.
namespace triad::defaults {

namespace model {
/// `[model].preset`: the real transformer model the cpu devices run (one of
/// triad::cpu_device_profiles).
inline constexpr std::string_view preset = "tiny";
/// `[model].dtype`: element type of weights and KV, as written in the config file
/// (triad::model_dtype::automatic): bf16 where the CPU runs it well, else f32, chosen at start.
inline constexpr std::string_view dtype = "auto";
/// `[model].weights`: sim devices store the weights in the element type of `dtype`.
inline constexpr std::string_view weights = "dtype";
/// `[model].page_tokens`: tokens per KV cache page.
inline constexpr std::size_t page_tokens = 16;
} // namespace model

namespace device {
/// Device memory budget when a device entry does not give one.
inline constexpr std::uint64_t memory_mib = 2048;
/// Jobs queued to a device's driver thread.
inline constexpr std::size_t queue_capacity = 256;
/// Devices keep finished sequences' KV pages as a prefix cache (evicted when space is needed).
inline constexpr bool prefix_cache = true;
/// Decode steps one driver job may run back to back for an unchanged batch (sampling on the
/// driver) before the device actor sees the result, when steps are far shorter than a thread
/// hand-off (a sequence that ends, or a message that changes the batch, ends a burst at once).
/// It caps fast (simulated) devices, whose bursts the window does not end: 32 instead of 8 cut
/// triad-bench-orchestration's user CPU per request at 1 session from 295-305 to 185-215 us; 128
/// instead of 32 runs each of its agent turns (up to about 100 tokens) in one job: 5 driver jobs
/// per request instead of 8 with 4-token turns and 16 with 64-token turns.
inline constexpr std::size_t burst_steps = 128;
/// `[[devices]] step_kv_fast_tier`: a step's KV stays within the fastest memory tier.
inline constexpr bool step_kv_fast_tier = true;
/// Driver time in microseconds after which a burst ends and the device actor sees its result
/// (its sequences' lengths, KV pages, statistics). Tokens leave as they are chosen, and a
/// sequence that ends or a message that changes the batch (an admission, a park, a cancel)
/// ends the burst after its current step, so this only bounds how stale the actor's view gets. At
/// 100 us every step of a real model (milliseconds) went back through the actor: 0.86 ms between
/// decode steps of 4.3 ms on the quick Llama Q4_K_M file of triad-bench-models (Zen 4, 2 cores),
/// decode 210-285 tok/s against 271-302 with 50 ms.
inline constexpr std::uint32_t burst_window_us = 50000;
/// Compute cores of a `cpu` device when its entry gives none: 0 = automatic, the placement
/// plan splits its domain's free cores among the domain's cpu devices.
inline constexpr std::size_t compute_cores = 0;
/// Modelled seconds per real second of a `sim` device: 1 waits as long as the modelled step
/// takes, 0 does not wait at all.
inline constexpr double time_scale = 1.0;
/// Accelerator a `sim` device models when its entry gives no profile (a built-in profile).
inline constexpr std::string_view sim_profile = "h100";
/// `link_bandwidth_gb_s` of a `[[sim_profiles]]` entry that gives none: no peer link modelled.
inline constexpr double sim_link_bandwidth_gb_s = 0.0;
/// `step_overhead_us` of a `[[sim_profiles]]` entry that gives none: kernel launch and
/// synchronisation per step, the figure the built-in profiles assume.
inline constexpr double sim_step_overhead_us = 20.0;
/// `tensor_parallel` of a `[[devices]]` entry: devices in its group (1: one device).
inline constexpr std::uint32_t tensor_parallel = 1;
/// Most devices one tensor-parallel group may have.
inline constexpr std::uint32_t max_tensor_parallel = 64;
/// Latency of one all-reduce among a tensor-parallel group (SIMULATED, assumed: a
/// collective's launch and synchronisation, of the order NCCL reports for small messages).
inline constexpr double sim_allreduce_latency_us = 5.0;
/// `source` of a `[[sim_profiles]]` entry that gives none.
inline constexpr std::string_view sim_profile_source = "user config";
} // namespace device

/// The device actor.
namespace device_actor {
/// Sequences a device holds at once (running, waiting or parked); 0: no cap, a device admits
/// while their KV pages fit its memory (every tier of a sim device).
inline constexpr std::size_t max_sequences = 0;
/// Tokens one step may compute (decodes count one each, prefill chunks their length).
inline constexpr std::size_t step_token_budget = 512;
/// Longest prefill chunk of one sequence in one step.
inline constexpr std::size_t max_prefill_chunk = 256;
} // namespace device_actor

} // namespace triad::defaults
