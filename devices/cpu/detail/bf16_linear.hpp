#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/detail/widened_matmul.hpp"
#include "devices/cpu/isa.hpp"

namespace triad::detail {

/// The ISA levels of triad's own kernels (defined with the CPU probe in devices/cpu/isa.hpp).
using vector_isa = triad::vector_isa;

/// One weight matrix [K][N] stored once as bf16 (half the bytes of f32), for CPUs on which
/// oneDNN has no native bf16 matmul. Up to small_m_limit rows (decode batches, short prompts) run
/// the project's own kernels, which widen bf16 to f32 in registers: memory-bound at M = 1..2
/// (the weights read at the machine's read bandwidth), FMA-bound from M of about 8. Larger M
/// (long prefills) widens tiles of columns to f32 and runs oneDNN's f32 matmul.
class bf16_linear {
public:
  /// Largest M the own kernel runs (above it: widened tiles and oneDNN f32). Measured on Zen 4
  /// (2 threads, `small` model shapes): the own kernels beat the widened tiles by 70% at M = 32,
  /// 25% at 64, 20% at 128 and 7% at 256; past 128 the rows of x no longer fit in L2 and the own
  /// kernels do not block M, so longer prefills go to oneDNN.
  static constexpr unsigned small_m_limit = 128;
  /// Columns of weights widened to f32 per oneDNN matmul on the large-M path (a multiple of 16;
  /// measured at M = 32..256: 512 beats 128, 256 and 1024).
  static constexpr unsigned tile_columns = 512;

  /// Rounds `plain` ([K][N] row-major floats) to bf16 (nearest even, as detail::to_bf16) and
  /// stores it in column panels of 16 (panel p = columns 16p..16p+15 as [K][16]; N padded with
  /// zero columns). `isa` picks the own kernels; none runs a portable scalar loop.
  bf16_linear(dnnl::engine& eng, unsigned k, unsigned n, const float* plain, vector_isa isa);

  /// dst[M][N] (f32, row-major, leading dim N) = src[M][K] (f32, row-major) x W. Runs on the
  /// calling thread's OpenMP team; oneDNN errors (dnnl::error) propagate.
  void forward(dnnl::stream& strm, const float* src, float* dst, unsigned m);

  /// What runs, e.g. "triad:bf16_avx512 (M<=128) + onednn f32 brg:avx512_core (prefill)".
  std::string kernel() const;
  /// Input width.
  unsigned k() const noexcept { return k_; }
  /// Output width.
  unsigned n() const noexcept { return n_; }
  /// Bytes of the stored weights (K x N rounded up to 16 x 2).
  std::size_t weight_bytes() const noexcept {
    return std::size_t{panels_} * 16 * k_ * sizeof(std::uint16_t);
  }

private:
  /// dst = src x W by the own kernels, for m <= small_m_limit.
  void forward_small(const float* src, float* dst, unsigned m) const;
  /// dst = src x W by widened tiles and oneDNN's f32 matmul.
  void forward_large(dnnl::stream& strm, const float* src, float* dst, unsigned m);
  /// Widens columns [first, first + width) to f32 [K][width] into `tile`.
  void widen(float* tile, unsigned first, unsigned width);

  /// Frees what std::aligned_alloc returned.
  struct aligned_free {
    /// Calls std::free.
    void operator()(void* p) const noexcept;
  };

  unsigned k_;
  unsigned n_;
  unsigned panels_;
  vector_isa isa_;
  std::unique_ptr<std::uint16_t[], aligned_free> weights_; ///< [panel][K][16], 64-byte aligned
  widened_matmul large_; ///< the prefill path
  std::string prefill_kernel_;
};

} // namespace triad::detail
