#include "devices/cpu/isa.hpp"

#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/detail/matrix.hpp"

namespace triad {

namespace {

// Bits of dnnl_cpu_isa_t: each ISA value includes the bits of the ones it extends.
bool has_isa(dnnl_cpu_isa_t have, dnnl_cpu_isa_t want) noexcept {
  return (static_cast<unsigned>(have) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

std::string isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_all:
    return "all";
  case dnnl_cpu_isa_sse41:
    return "sse41";
  case dnnl_cpu_isa_avx:
    return "avx";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  case dnnl_cpu_isa_avx2_vnni:
    return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic:
    return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops:
    return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core:
    return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "avx512_core_amx";
  }
  return "isa_" + std::to_string(static_cast<unsigned>(isa));
}

// Whether oneDNN builds a bf16 matmul here (it may refuse even where the ISA bits say yes).
bool bf16_matmul_builds() noexcept {
  try {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc a({16, 64}, dt::bf16, tag::ab);
    dnnl::memory::desc b({64, 64}, dt::bf16, tag::any);
    dnnl::memory::desc c({16, 64}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
    return true;
  } catch (...) {
    return false;
  }
}

cpu_capabilities probe() noexcept {
  cpu_capabilities out;
  try {
    auto isa = static_cast<dnnl_cpu_isa_t>(dnnl::get_effective_cpu_isa());
    out.onednn_isa = isa_name(isa);
    out.native_bf16 = has_isa(isa, dnnl_cpu_isa_avx512_core_bf16) && bf16_matmul_builds();
    __builtin_cpu_init();
    const bool cpu512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const bool cpu2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (cpu512 && has_isa(isa, dnnl_cpu_isa_avx512_core))
      out.own = vector_isa::avx512;
    else if (cpu2 && has_isa(isa, dnnl_cpu_isa_avx2))
      out.own = vector_isa::avx2;
  } catch (...) {
    out.onednn_isa = "unknown";
  }
  return out;
}

} // namespace

std::string_view to_string(vector_isa value) noexcept {
  constexpr std::string_view names[] = {"none", "avx2", "avx512"}; // in enum order
  auto i = static_cast<std::size_t>(value);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(cpu_kernel value) noexcept {
  constexpr std::string_view names[] = {"onednn_bf16", "own_bf16", "onednn_f32"}; // enum order
  auto i = static_cast<std::size_t>(value);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string cpu_capabilities::describe() const {
  return "oneDNN ISA " + onednn_isa + ", triad kernels " + std::string{to_string(own)} +
         (native_bf16 ? ", native bf16" : ", no native bf16");
}

const cpu_capabilities& detect_cpu() noexcept {
  static const cpu_capabilities caps = probe();
  return caps;
}

bool can_run(const cpu_compute_choice& choice, const cpu_capabilities& cpu) noexcept {
  switch (choice.kernel) {
  case cpu_kernel::onednn_bf16:
    return cpu.native_bf16;
  case cpu_kernel::own_bf16:
    return choice.isa != vector_isa::none && choice.isa <= cpu.own;
  case cpu_kernel::onednn_f32:
    return true;
  }
  return false;
}

expected<cpu_compute_choice> choose_cpu_compute(model_dtype wanted, const cpu_capabilities& cpu) {
  cpu_compute_choice out;
  out.isa = cpu.own;
  if (wanted == model_dtype::f32) {
    out.kernel = cpu_kernel::onednn_f32;
    out.reason = "dtype f32 as configured";
    return out;
  }
  const std::string how = wanted == model_dtype::bf16 ? "dtype bf16 as configured" : "dtype auto";
  if (cpu.native_bf16) {
    out.kernel = cpu_kernel::onednn_bf16;
    out.reason = how + ": oneDNN runs bf16 natively (" + cpu.onednn_isa + ")";
    return out;
  }
  if (cpu.own != vector_isa::none) {
    out.kernel = cpu_kernel::own_bf16;
    out.reason = how + ": no native bf16 (" + cpu.onednn_isa + "); bf16 weights widened in " +
                 std::string{to_string(cpu.own)} + " kernels";
    return out;
  }
  if (wanted == model_dtype::bf16)
    return make_error(errc::unsupported,
                      "[model].dtype = \"bf16\": this CPU (oneDNN ISA " + cpu.onednn_isa +
                          ", no AVX2) cannot run bf16; it runs dtype \"f32\" (and \"auto\", "
                          "which is f32 here)");
  out.kernel = cpu_kernel::onednn_f32;
  out.reason = "dtype auto: neither native bf16 nor AVX2 (" + cpu.onednn_isa + "): f32";
  return out;
}

std::string probe_kernel(const cpu_compute_choice& choice) {
  try {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    std::vector<float> plain(64 * 64, 0.5f);
    return detail::cpu_matrix(eng, 64, 64, choice, plain.data()).kernel();
  } catch (const std::exception& e) {
    return std::string{"oneDNN refused it: "} + e.what();
  }
}

} // namespace triad
