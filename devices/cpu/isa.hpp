#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "devices/config.hpp"
#include "devices/model.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Vector ISA level of triad's own kernels, chosen at run time (never at build time).
enum class vector_isa : std::uint8_t {
  none,   ///< neither AVX2 nor AVX-512 may be used
  avx2,   ///< AVX2 with FMA, 8 floats per register
  avx512, ///< AVX-512 F/BW/DQ/VL, 16 floats per register
};

/// "none", "avx2" or "avx512".
std::string_view to_string(vector_isa value) noexcept;

/// What this CPU offers the cpu backend, as oneDNN sees it: `DNNL_MAX_CPU_ISA` (e.g. `AVX2`)
/// caps oneDNN and triad's own kernels alike, so one variable makes an AVX-512 machine behave as
/// an AVX2 one for every kernel.
struct cpu_capabilities {
  std::string onednn_isa;   ///< dnnl::get_effective_cpu_isa as a name, e.g. "avx512_core_bf16"
  bool native_bf16 = false; ///< oneDNN runs bf16 matmuls natively (AVX-512 bf16 or AMX)
  vector_isa own = vector_isa::none; ///< widest ISA triad's own kernels may use here
  /// One line for logs: "oneDNN ISA avx2, triad kernels avx2, no native bf16".
  std::string describe() const;
};

/// Probes the CPU once (later calls return the first answer); never throws.
const cpu_capabilities& detect_cpu() noexcept;

/// How a cpu device multiplies activations by its weights.
enum class cpu_kernel : std::uint8_t {
  onednn_bf16, ///< weights packed bf16 by oneDNN, bf16 matmuls (needs native bf16); decode
               ///< batches <= 16 in triad's AVX512_BF16 kernels over the same packed weights
  own_bf16,    ///< weights stored bf16; decode (M <= 128) in triad's AVX2 / AVX-512 kernels that
               ///< widen bf16 in registers, prefill on widened tiles in oneDNN f32 (needs AVX2)
  onednn_f32,  ///< weights f32, oneDNN f32 matmuls (runs everywhere); on AVX-512, decode
               ///< batches <= 16 in triad's kernels over the same packed weights
};

/// "onednn_bf16", "own_bf16" or "onednn_f32".
std::string_view to_string(cpu_kernel value) noexcept;

/// The dtype of the weights and KV pages `kernel` multiplies: bf16 for onednn_bf16 and
/// own_bf16, f32 for onednn_f32.
constexpr dtype weights_dtype(cpu_kernel kernel) noexcept {
  return kernel == cpu_kernel::onednn_f32 ? dtype::f32 : dtype::bf16;
}

/// A resolved `[model].dtype` for the cpu backend.
struct cpu_compute_choice {
  cpu_kernel kernel = cpu_kernel::onednn_f32; ///< the matmul path
  vector_isa isa = vector_isa::none;          ///< ISA of triad's own kernels on this path
  std::string reason;                         ///< why, in a few words, for logs and triad-topo
  /// Weights and KV pages: what the kernel multiplies.
  dtype type() const noexcept { return weights_dtype(kernel); }
};

/// Whether `cpu` runs `choice`: its kernel, and for own_bf16 its ISA (none, or wider than the
/// CPU allows, does not run).
bool can_run(const cpu_compute_choice& choice, const cpu_capabilities& cpu) noexcept;

/// Resolves `wanted` on `cpu`. `auto`: onednn_bf16 where bf16 is native, else own_bf16 where
/// AVX2 or AVX-512 may be used (decode reads half the bytes; see triad-bench-cpu), else
/// onednn_f32. An explicit dtype the CPU cannot run is errc::unsupported naming
/// `[model].dtype`, the CPU's ISA and the values it can run.
expected<cpu_compute_choice> choose_cpu_compute(model_dtype wanted, const cpu_capabilities& cpu);

/// The kernel string a matmul on `choice`'s path reports on this CPU (e.g.
/// "brg:avx512_core_bf16"), from one small matrix built for the purpose; the error text when
/// oneDNN refuses it. Never throws.
std::string probe_kernel(const cpu_compute_choice& choice);

} // namespace triad
