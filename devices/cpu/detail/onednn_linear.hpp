#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/detail/packed_small_m.hpp"
#include "devices/model.hpp"

namespace triad::detail {

/// One weight matrix [K][N] packed once into oneDNN's preferred layout, multiplied by
/// activations [M][K] of any M (one cached primitive per M; all share the packed weights). Up to
/// packed_small_m::m_limit rows run triad's own kernels over the same packed weights where it has
/// them for the layout oneDNN chose (AVX-512 brgemm layouts), since oneDNN's brgemm falls short
/// of the read bandwidth at decode batch sizes.
class onednn_linear {
public:
  /// Packs `plain` ([K][N] row-major floats) as `type`; `own` is the widest ISA triad's own
  /// kernels may use (vector_isa::none: oneDNN for every M).
  onednn_linear(dnnl::engine& eng, unsigned k, unsigned n, dtype type, const float* plain,
                vector_isa own = vector_isa::none);

  /// dst[M][N] (f32) = src[M][K] (`type`: bf16 as uint16, or f32) x W.
  void forward(dnnl::stream& strm, const void* src, float* dst, unsigned m);

  /// What runs, e.g. "brg:avx512_core_bf16" or "brg:avx512_core_bf16 + triad:bf16_avx512bf16
  /// (M<=16)".
  std::string kernel() const;
  /// Input width.
  unsigned k() const noexcept { return k_; }
  /// Output width.
  unsigned n() const noexcept { return n_; }
  /// Bytes of the packed weights.
  std::size_t weight_bytes() const { return weights_desc_.get_size(); }
  /// Whether it multiplies bf16 inputs (else f32).
  bool bf16() const noexcept { return src_type_ == dnnl::memory::data_type::bf16; }

private:
  dnnl::matmul& primitive(unsigned m);

  dnnl::engine* eng_;
  unsigned k_;
  unsigned n_;
  dnnl::memory::data_type src_type_;
  dnnl::memory::desc weights_desc_;
  dnnl::memory weights_;
  std::string kernel_;
  std::optional<packed_small_m> small_;
  std::unordered_map<unsigned, dnnl::matmul> primitives_;
};

} // namespace triad::detail
