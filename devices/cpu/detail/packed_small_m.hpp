#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/isa.hpp"

namespace triad::detail {

/// triad's own multiply of a few rows of activations (decode batches) by weights that oneDNN
/// packed for its AVX-512 brgemm: `BA16a64b2a` (bf16, K in pairs) or `BA16a64b` (f32), i.e.
/// 64-column panels, each contiguous over K. At M = 1 oneDNN 2.6's brgemm reads such weights at
/// 0.6-0.7 of the machine's read bandwidth (triad-bench-cpu, Zen 4); these kernels stream them
/// (AVX-512, with AVX512_BF16 dot products for bf16), on the calling thread's OpenMP team.
class packed_small_m {
public:
  /// Largest M these kernels run; oneDNN's brgemm takes larger M. Measured on Zen 4 (2 threads,
  /// `small` model shapes): the own kernels are ahead up to M = 16 and behind from 32.
  static constexpr unsigned m_limit = 16;

  /// The kernels for weights [K][N] of `type` that oneDNN packed as `packed`, when triad has
  /// them for that layout and this ISA (`isa` avx512, and AVX512_BF16 for bf16); else nullopt.
  static std::optional<packed_small_m> for_weights(const dnnl::memory::desc& packed, unsigned k,
                                                   unsigned n, dtype type, vector_isa isa);

  /// dst[M][N] (f32, row-major) = src[M][K] (bf16 bits or f32, as the weights; row-major) x W,
  /// for 1 <= m <= m_limit. `packed` is the weights' data in the layout given to for_weights.
  void forward(const void* packed, const void* src, float* dst, unsigned m) const;

  /// What runs, e.g. "triad:bf16_avx512bf16".
  std::string name() const;

private:
  packed_small_m(unsigned k, unsigned n, bool bf16);

  unsigned k_;
  unsigned n_;
  bool bf16_;
  std::size_t panel_elements_; ///< elements per 64-column panel (K padded to the K block)
};

} // namespace triad::detail
