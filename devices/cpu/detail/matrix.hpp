#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/detail/bf16_linear.hpp"
#include "devices/cpu/detail/onednn_linear.hpp"
#include "devices/cpu/detail/quant_linear.hpp"
#include "devices/cpu/isa.hpp"

namespace triad::detail {

/// One weight matrix [K][N] on a cpu device's matmul path (cpu_kernel): packed by oneDNN (bf16
/// or f32), or stored as bf16 for triad's own kernels; or, from a model file, kept in its ggml
/// block types for triad's quantized kernels (whatever the path). The backend and triad-bench-cpu's
/// "matmuls alone" use the same class, so both multiply the same way.
class cpu_matrix {
public:
  /// Stores `plain` ([K][N] row-major floats) for `path`'s kernel, in its dtype (and for
  /// own_bf16, its ISA). oneDNN errors throw dnnl::error.
  cpu_matrix(dnnl::engine& eng, unsigned k, unsigned n, const cpu_compute_choice& path,
             const float* plain) {
    if (path.kernel == cpu_kernel::own_bf16)
      own_ = std::make_unique<bf16_linear>(eng, k, n, plain, path.isa);
    else
      packed_ = std::make_unique<onednn_linear>(eng, k, n, path.type(), plain, path.isa);
  }
  /// Keeps `runs` (quant_linear::check()ed rows of input width `k`) quantized; `isa` picks
  /// the kernels, `bf16_prefill` the prefill's type (quant_linear).
  cpu_matrix(dnnl::engine& eng, unsigned k, quantized_matrix runs, vector_isa isa,
             bool bf16_prefill = false)
      : quant_(std::make_unique<quant_linear>(eng, k, std::move(runs), isa, bf16_prefill)) {}
  /// Input width.
  unsigned k() const noexcept { return own_ ? own_->k() : quant_ ? quant_->k() : packed_->k(); }
  /// Output width.
  unsigned n() const noexcept { return own_ ? own_->n() : quant_ ? quant_->n() : packed_->n(); }
  /// Whether inputs must be converted to bf16 first (oneDNN's bf16 matmul).
  bool bf16_inputs() const noexcept { return packed_ != nullptr && packed_->bf16(); }
  /// What runs, e.g. "brg:avx512_core_bf16".
  std::string kernel() const {
    return own_ ? own_->kernel() : quant_ ? quant_->kernel() : packed_->kernel();
  }
  /// Bytes of the weights as stored.
  std::size_t weight_bytes() const {
    return own_ ? own_->weight_bytes() : quant_ ? quant_->weight_bytes() : packed_->weight_bytes();
  }
  /// The quantized weights, when kept so (else null): their rows decode one at a time.
  const quant_linear* quantized() const noexcept { return quant_.get(); }
  /// dst[M][N] (f32) = src x W: `src` is f32, or bf16 bits when bf16_inputs().
  void forward(dnnl::stream& strm, const void* src, float* dst, unsigned m) {
    if (own_)
      own_->forward(strm, static_cast<const float*>(src), dst, m);
    else if (quant_)
      quant_->forward(strm, static_cast<const float*>(src), dst, m);
    else
      packed_->forward(strm, src, dst, m);
  }

private:
  std::unique_ptr<onednn_linear> packed_;
  std::unique_ptr<bf16_linear> own_;
  std::unique_ptr<quant_linear> quant_;
};

} // namespace triad::detail
