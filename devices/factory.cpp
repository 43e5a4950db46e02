#include "devices/factory.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#define XXH_STATIC_LINKING_ONLY // XXH3_state_t on the stack
#include <xxhash.h>

#include "devices/cpu/cpu_backend.hpp"
#include "devices/sim/sim_backend.hpp"

namespace triad {

namespace {

expected<device_profile> resolve_profile(const device_set& node, const std::string& name) {
  const std::string wanted = name.empty() ? std::string{defaults::device::sim_profile} : name;
  for (const auto& p : node.sim_profiles) {
    if (p.name != wanted)
      continue;
    device_profile out;
    out.name = p.name;
    out.peak_flops = p.peak_tflops * 1e12;
    // One tier: a profile from the config gives one memory (its read and write at one rate).
    const double bandwidth = p.memory_bandwidth_gb_s * 1e9;
    out.tiers = {{"memory",
                  static_cast<std::uint64_t>(p.memory_gib * static_cast<double>(1ull << 30)),
                  bandwidth, bandwidth}};
    out.link_bandwidth = p.link_bandwidth_gb_s * 1e9;
    out.step_overhead = p.step_overhead_us * 1e-6;
    out.attention_flops = p.attention_tflops * 1e12;
    out.overlap = p.overlap;
    out.source = p.source;
    return out;
  }
  return builtin_profile(wanted);
}

// What a cpu device computes with, or the config error that stops it.
expected<cpu_compute_choice> check_cpu_device(const device_set& node, const device_config& dev) {
  if (node.model.path.empty() && std::find(cpu_device_profiles.begin(), cpu_device_profiles.end(), node.model.preset) ==
      cpu_device_profiles.end())
    return make_error(errc::invalid_argument, "device '" + dev.name +
                                                  "': backend \"cpu\" runs the presets \"tiny\" "
                                                  "and \"small\"; [model].preset = \"" +
                                                  node.model.preset + "\" is for sim devices only");
  if (node.model.weights != weight_format::dtype)
    return make_error(errc::invalid_argument,
                      "device '" + dev.name +
                          "': backend \"cpu\" stores weights in [model].dtype "
                          "(or a GGUF file's own types); [model].weights = \"" +
                          std::string{to_string(node.model.weights)} +
                          "\" is for sim devices only; allowed for cpu: \"dtype\"");
  auto choice = cpu_compute_for(node);
  if (!choice)
    return make_error(choice.error().code, "device '" + dev.name + "': " + choice.error().message);
  return choice;
}

} // namespace

expected<model_source> open_model(const model_config& model) {
  model_source out;
  if (model.path.empty()) {
    auto shape = model_preset(model.preset);
    if (!shape)
      return shape.error();
    out.shape = std::move(*shape);
    out.shape.weights = model.weights;
    out.served_name = model.served_name.empty() ? "triad-" + model.preset : model.served_name;
    return out;
  }
  // One mapping per path while anyone holds it.
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const gguf_model>> open_files;
  std::shared_ptr<const gguf_model> opened;
  {
    std::lock_guard lock{mutex};
    opened = open_files[model.path].lock();
    if (!opened) {
      auto m = open_gguf_model(model.path);
      if (!m)
        return make_error(m.error().code, "[model].path: " + m.error().message);
      opened = std::make_shared<const gguf_model>(std::move(*m));
      open_files[model.path] = opened;
    }
  }
  out.shape = opened->shape;
  out.shape.weights = model.weights;
  // The file keeps the model object (and so the mapping) alive through an aliasing pointer.
  out.file = std::shared_ptr<const gguf_file>{opened, opened->file.get()};
  out.served_name = model.served_name.empty() ? out.shape.name : model.served_name;
  return out;
}

std::uint64_t model_source::fingerprint() const {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  auto add = [&st](const void* p, std::size_t n) { XXH3_64bits_update(&st, p, n); };
  auto add_text = [&add](std::string_view t) {
    const std::uint64_t n = t.size();
    add(&n, sizeof(n));
    add(t.data(), t.size());
  };
  const auto& s = shape;
  add_text(s.name);
  const std::uint64_t dims[] = {
      s.layers,   s.hidden,  s.heads,       s.kv_heads,     s.head_dim,
      s.ffn,      s.vocab,   s.max_context, s.seed,         static_cast<std::uint64_t>(s.arch),
      s.qkv_bias, s.qk_norm, s.tied_output, s.rope_adjacent};
  add(dims, sizeof(dims));
  // A mixture of experts and latent attention (sim shapes) and the weights' storage.
  const std::uint64_t more[] = {
      s.experts,     s.experts_per_token, s.shared_experts,
      s.expert_ffn,  s.dense_layers,      s.kv_lora_rank,
      s.q_lora_rank, s.rope_dim,          static_cast<std::uint64_t>(s.weights)};
  add(more, sizeof(more));
  add(&s.rope_theta, sizeof(s.rope_theta));
  add(&s.rms_eps, sizeof(s.rms_eps));
  add(s.rope_freq_factors.data(), s.rope_freq_factors.size() * sizeof(float));
  if (file) {
    const std::uint64_t bytes = file->file_bytes();
    add(&bytes, sizeof(bytes));
    for (const auto& key : file->keys())
      add_text(key);
    constexpr std::size_t sample = 4096;
    for (const auto& t : file->tensors()) {
      add_text(t.name);
      const auto type = static_cast<std::uint64_t>(t.type);
      add(&type, sizeof(type));
      add(t.dims.data(), t.dims.size() * sizeof(t.dims[0]));
      const auto n = std::min(sample, t.bytes.size());
      add(t.bytes.data(), n);
      add(t.bytes.data() + (t.bytes.size() - n), n);
    }
  }
  return XXH3_64bits_digest(&st);
}

dtype accelerator_dtype(const device_set& node) noexcept {
  return node.model.dtype == model_dtype::f32 ? dtype::f32 : dtype::bf16;
}

expected<cpu_compute_choice> cpu_compute_for(const device_set& node) {
  return choose_cpu_compute(node.model.dtype, detect_cpu());
}

expected<void> check_backends(const device_set& node) {
  for (const auto& dev : node.devices)
    if (dev.backend == device_backend::cpu)
      if (auto choice = check_cpu_device(node, dev); !choice)
        return choice.error();
  return {};
}

expected<std::unique_ptr<backend>> make_backend(const device_set& node, const device_config& dev,
                                                std::shared_ptr<arena> storage,
                                                const compute_placement& compute) {
  auto source = open_model(node.model);
  if (!source)
    return source.error();
  const auto* shape = &source->shape;
  const std::uint64_t budget = dev.memory_mib << 20;
  switch (dev.backend) {
  case device_backend::cpu: {
    auto choice = check_cpu_device(node, dev);
    if (!choice)
      return choice.error();
    cpu_backend_options o;
    o.shape = *shape;
    o.compute = std::move(*choice);
    o.team = compute.team;
    o.topo = compute.topo;
    o.page_tokens = node.model.page_tokens;
    o.kv_budget_bytes = budget;
    o.storage = std::move(storage);
    o.weights_file = source->file;
    auto b = cpu_backend::create(std::move(o));
    if (!b)
      return make_error(b.error().code, "device '" + dev.name + "': " + b.error().message);
    return std::unique_ptr<backend>{std::move(*b)};
  }
  case device_backend::sim: {
    auto profile = resolve_profile(node, dev.profile);
    if (profile)
      profile = tensor_parallel_group(*profile, dev.tensor_parallel);
    if (!profile)
      return make_error(profile.error().code,
                        "device '" + dev.name + "': " + profile.error().message);
    sim_backend_options o;
    o.shape = *shape;
    o.type = accelerator_dtype(node);
    o.profile = *profile;
    o.page_tokens = node.model.page_tokens;
    o.time_scale = dev.time_scale;
    o.kv_budget_bytes = dev.kv_mib << 20;
    auto b = sim_backend::create(std::move(o));
    if (!b)
      return make_error(b.error().code, "device '" + dev.name + "': " + b.error().message);
    return std::unique_ptr<backend>{std::move(*b)};
  }
  case device_backend::cuda:
    return make_error(errc::unsupported,
                      "device '" + dev.name +
                          "': backend \"cuda\" is not built yet (issue #3 leaves it for a "
                          "machine with a GPU); use \"cpu\" or \"sim\"");
  }
  return make_error(errc::invalid_argument, "device '" + dev.name + "': unknown backend");
}

} // namespace triad
