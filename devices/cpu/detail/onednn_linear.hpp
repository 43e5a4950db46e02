#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/model.hpp"

namespace triad::detail {

/// One weight matrix [K][N] packed once into oneDNN's preferred layout, multiplied by
/// activations [M][K] of any M (one cached primitive per M; all share the packed weights).
class onednn_linear {
public:
  /// Packs `plain` ([K][N] row-major floats) as `type`.
  onednn_linear(dnnl::engine& eng, unsigned k, unsigned n, dtype type, const float* plain);

  /// dst[M][N] (f32) = src[M][K] (`type`: bf16 as uint16, or f32) x W.
  void forward(dnnl::stream& strm, const void* src, float* dst, unsigned m);

  /// The oneDNN implementation that runs, e.g. "brg:avx512_core_amx_bf16".
  const std::string& kernel() const noexcept { return kernel_; }
  /// Input width.
  unsigned k() const noexcept { return k_; }
  /// Output width.
  unsigned n() const noexcept { return n_; }
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
  std::unordered_map<unsigned, dnnl::matmul> primitives_;
};

} // namespace triad::detail
