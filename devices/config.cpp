#include "devices/config.hpp"

#include <algorithm>

namespace triad {

namespace {

constexpr options::enum_name<device_role> device_role_names[] = {
    {"prefill", device_role::prefill},
    {"decode", device_role::decode},
    {"both", device_role::both},
};
constexpr options::enum_name<device_backend> device_backend_names[] = {
    {"cpu", device_backend::cpu},
    {"sim", device_backend::sim},
    {"cuda", device_backend::cuda},
};
constexpr options::enum_name<model_dtype> model_dtype_names[] = {
    {"auto", model_dtype::automatic},
    {"bf16", model_dtype::bf16},
    {"f32", model_dtype::f32},
};

static_assert(options::contains(cpu_device_profiles, defaults::model::preset),
              "the default model preset must be one of cpu_device_profiles");
static_assert(options::contains(sim_device_profiles, defaults::device::sim_profile),
              "the default sim profile must be a built-in one");
constexpr options::enum_name<weight_format> weight_format_names[] = {
    {"dtype", weight_format::dtype},
    {"bf16", weight_format::bf16},
    {"fp8", weight_format::fp8},
    {"int4", weight_format::int4},
};

// model_config's `weights` initializer must be defaults::model::weights.
static_assert(options::name_of(weight_format_names, model_config{}.weights) ==
              defaults::model::weights);

// model_config's `dtype` initializer must be defaults::model::dtype.
static_assert(options::name_of(model_dtype_names, model_config{}.dtype) == defaults::model::dtype);

/// Reports device key `key`, which only backend `only` takes, given for another backend.
void refuse_for_backend(options::table& t, std::string_view key, std::string_view only,
                        device_backend backend, std::string_view allowed) {
  t.fail(key,
         "only allowed when backend = \"" + std::string{only} +
             "\" (backend = " + options::quote(to_string(backend)) + ")",
         allowed);
}

/// Whether the device's backend was read (a wrong one leaves the backend rules unchecked).
bool backend_known(const options::table& t) {
  return t.state_of("backend") != options::state::invalid;
}

/// What a sim device's `profile` may name, for its error message.
std::string sim_profiles_allowed(const std::vector<std::string>& user) {
  std::string out = options::join(sim_device_profiles, true) + " (built-in)";
  if (user.empty())
    return out + ", or the name of a [[sim_profiles]] entry";
  for (const std::string& name : user)
    out += ", " + options::quote(name);
  return out + " ([[sim_profiles]])";
}

/// `topology_device` and `domain` exclude each other.
void check_device(options::table& t, device_config&) {
  if (!t.has("topology_device") || !t.has("domain"))
    return;
  const bool device_first = t.before("topology_device", "domain");
  const std::string_view later = device_first ? "domain" : "topology_device";
  const std::string_view earlier = device_first ? "topology_device" : "domain";
  t.fail(later,
         "give topology_device or domain, not both (" + t.path(earlier) + " = " +
             t.render(earlier) + ")",
         "either " + t.path("topology_device") + " or " + t.path("domain"));
}

} // namespace

std::string_view to_string(device_role value) noexcept {
  return options::name_of(device_role_names, value);
}

std::string_view to_string(device_backend value) noexcept {
  return options::name_of(device_backend_names, value);
}

std::string_view to_string(model_dtype value) noexcept {
  return options::name_of(model_dtype_names, value);
}

std::string_view to_string(weight_format value) noexcept {
  return options::name_of(weight_format_names, value);
}

const options::section<model_config>& model_section() {
  using c = model_config;
  static const options::section<c> section{
      "model",
      false,
      {
          options::one_of<c>("preset", &c::preset, model_preset_names,
                             "the model; cpu devices run \"tiny\" and \"small\""),
          options::choice("dtype", &c::dtype, model_dtype_names,
                          "element type of weights and KV; \"auto\": bf16 where the CPU runs it "
                          "well"),
          options::choice("weights", &c::weights, weight_format_names,
                          "how sim devices store the weights; cpu devices take \"dtype\""),
          options::integer("page_tokens", &c::page_tokens, {1, 4096}, "tokens per KV page"),
          options::integer("context_tokens", &c::context_tokens, {0, 1 << 24},
                           "the context requests are served in; 0 = the model's own"),
          options::text<c>("path", &c::path, "a path to a .gguf file",
                           "a GGUF model file to serve; empty = the preset's random weights"),
          options::text<c>("served_name", &c::served_name, "a name",
                           "the model name clients see; empty = the file's general.name"),
          options::text<c>("chat_template", &c::chat_template, "a path to a Jinja file",
                           "a chat template instead of the model file's own; empty = the file's"),
      },
      {},
  };
  return section;
}

const options::section<sim_profile_config>& sim_profile_section() {
  using c = sim_profile_config;
  const auto figure = [](std::string_view key, double c::*member, std::string_view doc) {
    return options::number<c>(key, member, options::positive, doc)
        .required(" (every sim profile needs it)");
  };
  static const options::section<c> section{
      "sim_profiles",
      true,
      {
          options::unique_name<c>("sim profile", "sim profiles",
                                  " (every sim profile needs a name)", sim_device_profiles),
          figure("peak_tflops", &c::peak_tflops, "dense TFLOP/s"),
          figure("memory_bandwidth_gb_s", &c::memory_bandwidth_gb_s, "memory bandwidth, GB/s"),
          figure("memory_gib", &c::memory_gib, "device memory, GiB"),
          options::number<c>("link_bandwidth_gb_s", &c::link_bandwidth_gb_s, options::non_negative,
                             "GB/s to a peer device; 0 = none"),
          options::number<c>("step_overhead_us", &c::step_overhead_us, options::non_negative,
                             "microseconds added to every step"),
          options::number<c>("attention_tflops", &c::attention_tflops, options::non_negative,
                             "sustained TFLOP/s of attention; 0 = peak"),
          options::boolean<c>("overlap", &c::overlap,
                              "compute and memory traffic overlap (else they add up)"),
          options::text<c>("source", &c::source, "a string", "where the figures come from"),
      },
      {},
  };
  return section;
}

options::section<device_config> device_section(std::span<const sim_profile_config> declared) {
  using c = device_config;
  std::vector<std::string> user;
  for (const auto& profile : declared)
    if (!profile.name.empty())
      user.push_back(profile.name);

  auto read_profile = [user](options::table& t, c& out) {
    std::string profile;
    const options::state s = t.string("profile", "a profile name", profile);
    if (s != options::state::valid || !backend_known(t))
      return s;
    switch (out.backend) {
    case device_backend::cpu:
      t.fail("profile", "not allowed for backend \"cpu\": the cpu model is set by [model].preset",
             "no profile key for backend \"cpu\"; set the model with [model].preset: " +
                 options::join(cpu_device_profiles, true));
      return options::state::invalid;
    case device_backend::sim:
      if (!options::contains(sim_device_profiles, profile) &&
          std::find(user.begin(), user.end(), profile) == user.end()) {
        t.fail("profile", "not allowed for backend \"sim\"", sim_profiles_allowed(user));
        return options::state::invalid;
      }
      break;
    case device_backend::cuda:
      break;
    }
    out.profile = std::move(profile);
    return s;
  };
  auto read_time_scale = [](options::table& t, c& out) {
    double value = out.time_scale;
    const options::state s = t.number("time_scale", options::non_negative, value);
    if (s != options::state::absent && backend_known(t) && out.backend != device_backend::sim) {
      refuse_for_backend(t, "time_scale", "sim", out.backend,
                         "no time_scale key, or backend = \"sim\"");
      return options::state::invalid;
    }
    if (s == options::state::valid)
      out.time_scale = value;
    return s;
  };
  // An integer key only one backend reads: another backend may leave it at `neutral`.
  const auto backend_integer = [](std::string_view key, options::int_range range, auto c::*member,
                                  std::int64_t neutral, device_backend only,
                                  std::string_view neutral_note) {
    return [=](options::table& t, c& out) {
      std::int64_t value = neutral;
      const options::state s = t.integer(key, range, value);
      if (s == options::state::valid && value != neutral && backend_known(t) &&
          out.backend != only) {
        const auto name = std::string{to_string(only)};
        refuse_for_backend(t, key, name, out.backend,
                           std::to_string(neutral) + ", no " + std::string{key} +
                               " key, or backend = \"" + name + "\"" + std::string{neutral_note});
        return options::state::invalid;
      }
      if (s == options::state::valid)
        out.*member = static_cast<std::remove_reference_t<decltype(out.*member)>>(value);
      return s;
    };
  };
  const auto read_kv_mib =
      backend_integer("kv_mib", {0, std::int64_t{16} * 1024 * 1024}, &c::kv_mib, 0,
                      device_backend::sim, " (a cpu device's KV budget is memory_mib)");
  const auto read_tensor_parallel =
      backend_integer("tensor_parallel", {1, defaults::device::max_tensor_parallel},
                      &c::tensor_parallel, 1, device_backend::sim, "");
  const auto read_compute_cores =
      backend_integer("compute_cores", {0, 4096}, &c::compute_cores, 0, device_backend::cpu, "");

  return options::section<c>{
      "devices",
      true,
      {
          options::unique_name<c>("device", "devices", " (every device needs a name)"),
          options::choice("backend", &c::backend, device_backend_names,
                          "what runs the device's work: \"cpu\" (real), \"sim\" (simulated)"),
          options::choice("role", &c::role, device_role_names, "what the device does"),
          options::text<c>("topology_device", &c::topology_device,
                           "an hwloc OS device name such as \"nvml0\" or \"cuda0\"",
                           "the hwloc OS device this device is", true)
              .written_if([](const c& d) { return !d.topology_device.empty(); }),
          options::integer("domain", &c::domain, options::domain_id_range,
                           "NUMA domain of a device without a topology device"),
          options::custom<c>("profile", "a profile name", "the accelerator a sim device models",
                             read_profile,
                             [](const c& d) -> std::optional<std::string> {
                               if (d.profile.empty())
                                 return std::nullopt;
                               return options::quote(d.profile);
                             }),
          // Written for every sim device; for another backend only when set (an invalid config).
          options::custom<c>("time_scale", options::number_allowed(options::non_negative),
                             "modelled seconds per real second (sim); 0 = never wait",
                             read_time_scale,
                             [](const c& d) -> std::optional<std::string> {
                               if (d.backend != device_backend::sim &&
                                   d.time_scale == defaults::device::time_scale)
                                 return std::nullopt;
                               return options::format_double(d.time_scale);
                             }),
          options::integer("memory_mib", &c::memory_mib, {1, std::int64_t{16} * 1024 * 1024},
                           "memory budget, MiB"),
          // Written for a sim device that sets it; for another backend only when set (invalid).
          options::custom<c>("kv_mib", options::range_allowed({0, std::int64_t{16} * 1024 * 1024}),
                             "KV memory of a sim device, MiB; 0 = its profile's memory minus the "
                             "weights",
                             read_kv_mib,
                             [](const c& d) -> std::optional<std::string> {
                               if (d.kv_mib == 0)
                                 return std::nullopt;
                               return std::to_string(d.kv_mib);
                             }),
          options::custom<c>(
              "tensor_parallel", options::range_allowed({1, defaults::device::max_tensor_parallel}),
              "devices of a sim profile running the model as one tensor-parallel group",
              read_tensor_parallel,
              [](const c& d) -> std::optional<std::string> {
                if (d.tensor_parallel == defaults::device::tensor_parallel)
                  return std::nullopt;
                return std::to_string(d.tensor_parallel);
              }),
          options::integer("queue_capacity", &c::queue_capacity, {1, 1'000'000},
                           "jobs queued to the device's driver thread"),
          options::boolean<c>("prefix_cache", &c::prefix_cache,
                              "keep finished sequences' KV for later prompts"),
          options::integer("burst_steps", &c::burst_steps, {1, 1024},
                           "decode steps one driver job may run back to back"),
          options::boolean<c>("step_kv_fast_tier", &c::step_kv_fast_tier,
                              "keep each step's KV within the fastest memory tier; sequences "
                              "past it wait a step"),
          options::integer("burst_window_us", &c::burst_window_us, {0, 1'000'000},
                           "driver time after which a burst's result goes back to the device"),
          // Written for every cpu device; for another backend only when set (an invalid config).
          options::custom<c>("compute_cores", options::range_allowed({0, 4096}),
                             "cores a cpu device computes on; 0 = automatic", read_compute_cores,
                             [](const c& d) -> std::optional<std::string> {
                               if (d.backend != device_backend::cpu && d.compute_cores == 0)
                                 return std::nullopt;
                               return std::to_string(d.compute_cores);
                             }),
      },
      check_device,
  };
}

} // namespace triad
