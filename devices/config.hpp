#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/defaults.hpp"
#include "devices/model.hpp"
#include "runtime/options.hpp"

/// The devices' config sections: `[model]`, `[[devices]]` and `[[sim_profiles]]`. A key of a
/// device is added here alone: a member of device_config, a line in device_section().
namespace triad {

/// What a device does in the pipeline.
enum class device_role {
  prefill, ///< builds KV caches from prompts
  decode,  ///< generates tokens
  both,    ///< prefill and decode on one device
};

/// Which implementation runs a device's work.
enum class device_backend {
  cpu,  ///< real transformer on this machine's cores (oneDNN)
  sim,  ///< roofline model of a named accelerator (simulated)
  cuda, ///< reserved for an NVIDIA GPU backend, not built yet: a device with it is refused
};

/// Element type of the model's weights and KV cache.
enum class model_dtype {
  automatic, ///< "auto": bf16 where this CPU runs it well, else f32 (chosen at run time)
  bf16,      ///< bfloat16
  f32,       ///< IEEE single precision
};

/// "prefill", "decode" or "both".
std::string_view to_string(device_role value) noexcept;
/// "cpu", "sim" or "cuda".
std::string_view to_string(device_backend value) noexcept;
/// "auto", "bf16" or "f32".
std::string_view to_string(model_dtype value) noexcept;
/// The config's name of a weight format: "dtype", "bf16", "fp8" or "int4".
std::string_view to_string(weight_format value) noexcept;

/// `model.preset` values: presets of the real transformer model the `cpu` devices run.
/// (A `cpu` device takes no `profile`; the model comes from `[model]`.)
inline constexpr std::array<std::string_view, 2> cpu_device_profiles = {"tiny", "small"};
/// The built-in simulated accelerators: `profile` values a `sim` device accepts besides the
/// names of the file's `[[sim_profiles]]`, which may not reuse them.
/// A `cuda` device (not built yet) is refused at start whatever its profile.
inline constexpr std::array<std::string_view, 7> sim_device_profiles = {
    "h100", "h200", "b200", "gaudi3", "sn40l", "sn50", "xeon6_amx"};

/// `[model]`: the transformer model the node serves.
struct model_config {
  /// `preset`: one of model_preset_names (devices/model.hpp); cpu devices run only
  /// cpu_device_profiles ("tiny", "small"), the others are real models' shapes for sim devices.
  std::string preset{defaults::model::preset};
  /// `dtype`: "auto", "bf16" or "f32"; the default is defaults::model::dtype. "auto" is
  /// resolved per machine by the cpu backend (devices/cpu/isa.hpp); sim devices count bf16.
  model_dtype dtype = model_dtype::automatic;
  /// `weights`: how a sim device stores the weights, "dtype" (as `dtype`), "bf16", "fp8" or
  /// "int4"; cpu devices take only "dtype". Default defaults::model::weights.
  weight_format weights = weight_format::dtype;
  /// `page_tokens`: tokens per KV cache page, 1..4096.
  std::size_t page_tokens = defaults::model::page_tokens;
  /// `context_tokens`: the context requests are served in, at most the model's (a smaller one
  /// bounds each request's KV and compute); 0: the model's own. Prompts with their max_tokens
  /// and tool outputs are fitted to it.
  std::uint32_t context_tokens = 0;
  /// `path`: a GGUF model file (llama, qwen2, qwen3) whose weights, tokenizer and chat template
  /// the node serves; empty: `preset` with random weights and the byte tokenizer.
  std::string path;
  /// `served_name`: the model name clients see; empty: the file's `general.name`, or
  /// "triad-<preset>".
  std::string served_name;
  /// `chat_template`: a file with a Jinja chat template used instead of the model file's own
  /// `tokenizer.chat_template`; empty: the file's.
  std::string chat_template;
  bool operator==(const model_config&) const = default;
};

/// One `[[sim_profiles]]` entry: a user-defined accelerator a `sim` device can name as its
/// `profile`. Figures are decimal units (1 GB/s = 1e9 bytes/s) except memory_gib (2^30 bytes).
struct sim_profile_config {
  /// `name`: required; letters, digits, '_' and '-'; unique among sim profiles and none of
  /// sim_device_profiles.
  std::string name;
  double peak_tflops = 0;           ///< `peak_tflops`: required; dense TFLOP/s, > 0
  double memory_bandwidth_gb_s = 0; ///< `memory_bandwidth_gb_s`: required; GB/s, > 0
  double memory_gib = 0;            ///< `memory_gib`: required; device memory in GiB, > 0
  /// `link_bandwidth_gb_s`: GB/s to a peer device, >= 0; 0 = none.
  double link_bandwidth_gb_s = defaults::device::sim_link_bandwidth_gb_s;
  /// `step_overhead_us`: microseconds added to every step, >= 0.
  double step_overhead_us = defaults::device::sim_step_overhead_us;
  /// `attention_tflops`: sustained TFLOP/s of attention over the KV cache, >= 0; 0 = peak.
  double attention_tflops = 0;
  /// `overlap`: whether compute and memory traffic overlap (step = the larger); false adds them.
  bool overlap = true;
  /// `source`: where the figures come from.
  std::string source{defaults::device::sim_profile_source};
  bool operator==(const sim_profile_config&) const = default;
};

/// One `[[devices]]` entry.
struct device_config {
  std::string name;                             ///< `name`: unique; letters, digits, '_' and '-'
  device_backend backend = device_backend::cpu; ///< `backend`: "cpu", "sim", "cuda"
  device_role role = device_role::both;         ///< `role`: "prefill", "decode", "both"
  /// `topology_device`: the hwloc OS device (e.g. "nvml3", "cuda0") this device is; empty = none.
  std::string topology_device;
  /// `domain`: NUMA domain for a device without a topology device; empty = automatic.
  std::optional<unsigned> domain;
  /// `profile`: backend "sim": a built-in (sim_device_profiles) or `[[sim_profiles]]` name,
  /// empty = defaults::device::sim_profile; backend "cuda": any string; backend "cpu": always
  /// empty (the model comes from `[model]`).
  std::string profile;
  /// `time_scale`: modelled seconds per real second, finite and >= 0; 0 = never wait. Only
  /// given for backend "sim".
  double time_scale = defaults::device::time_scale;
  std::uint64_t memory_mib = defaults::device::memory_mib; ///< `memory_mib`: memory budget, >= 1
  /// `kv_mib`: KV memory of a sim device (a device whose memory is the bottleneck); 0 = its
  /// profile's memory tiers together minus the weights. Only given for backend "sim".
  std::uint64_t kv_mib = 0;
  /// `tensor_parallel`: devices of the profile that run the model as one tensor-parallel group,
  /// 1..defaults::device::max_tensor_parallel; the router and the KV store see the group as one
  /// device. Above 1 only for backend "sim".
  std::uint32_t tensor_parallel = defaults::device::tensor_parallel;
  std::size_t queue_capacity = defaults::device::queue_capacity; ///< `queue_capacity`, >= 1
  /// `prefix_cache`: keep finished sequences' KV pages for later prompts with the same start.
  bool prefix_cache = defaults::device::prefix_cache;
  /// `burst_steps`: decode steps one driver job may run back to back, 1..1024 (1: none).
  std::size_t burst_steps = defaults::device::burst_steps;
  /// `step_kv_fast_tier`: each step's sequences hold at most the KV the device's fastest
  /// memory tier holds beside the weights (sim profiles with tiers); the others wait a step.
  bool step_kv_fast_tier = defaults::device::step_kv_fast_tier;
  /// `burst_window_us`: driver time after which a burst's tokens go out, 0..1000000.
  std::uint32_t burst_window_us = defaults::device::burst_window_us;
  /// `compute_cores`: cores of the device's domain its compute (oneDNN, OpenMP team) runs on,
  /// 0..4096; 0 = automatic (the placement plan splits the domain's free cores among its cpu
  /// devices, see make_plan). Non-zero only for backend "cpu".
  std::size_t compute_cores = defaults::device::compute_cores;
  bool operator==(const device_config&) const = default;
};

/// The devices' part of a node configuration (actors/node_config.hpp converts to it): what
/// backends are built from. It refers to the configuration, which must outlive it.
struct device_set {
  const model_config& model;                        ///< `[model]`
  std::span<const sim_profile_config> sim_profiles; ///< `[[sim_profiles]]`
  std::span<const device_config> devices;           ///< `[[devices]]`
};

/// The `[model]` section's keys.
const options::section<model_config>& model_section();
/// The `[[sim_profiles]]` section's keys.
const options::section<sim_profile_config>& sim_profile_section();
/// The `[[devices]]` section's keys; a sim device's `profile` may name a built-in profile or
/// one of `declared` (the file's `[[sim_profiles]]`, read first).
options::section<device_config> device_section(std::span<const sim_profile_config> declared);

} // namespace triad
