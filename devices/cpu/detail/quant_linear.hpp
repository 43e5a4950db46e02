#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "devices/cpu/detail/widened_matmul.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/weights.hpp"

namespace triad::detail {

/// One matmul weight [K][N] kept in ggml block types (q4_0, q8_0, q4_K, q6_K) exactly as a GGUF
/// file stores it: N output rows of K values, in runs of one type each; its bytes are the
/// file's bytes. Up to small_m_limit rows of activations (decode batches, short prompts) run
/// triad's own kernels, chosen at run time: integer kernels on AVX2 and up (see int8_m_limit),
/// else four weight rows at a time decode a block each into floats in L1 and multiply them by
/// every activation row (AVX-512, AVX2, a portable loop). Larger M decodes tiles of rows to
/// f32 (or bf16) for oneDNN's matmul.
class quant_linear {
public:
  /// Largest M the own kernels run. Measured on Zen 4 (2 threads, K 2048 x N 8192, q4_K and
  /// q6_K): at M = 64 the own kernels reach 125-155 GFLOP/s, the widened tiles 95-105; at
  /// M = 256 the widened tiles reach about what the own kernels do at 128.
  static constexpr unsigned small_m_limit = 128;
  /// Up to small_m_limit rows of activations run integer kernels on AVX2 and up: the
  /// activations quantized to int8 (per block of 32 for q8_0 / q4_0, per 256 for q4_K / q6_K,
  /// as llama.cpp's q8_0 and q8_K; they cost about 1e-3 of sum |x||w|) and multiplied by the
  /// weights' integer values. With AVX512_VNNI q4_K and q6_K rows run one kernel for any M:
  /// each super-block unpacked once into four registers of 64 values, `vpdpbusd` for the
  /// products, `vpdpwssd` for the group scales. Elsewhere up to int8_m_limit rows run the int8
  /// kernels (AVX512_VNNI `vpdpbusd` for q8_0 / q4_0, else AVX2 `vpmaddubsw`); above it
  /// q4_K and q6_K rows run int16 kernels (each super-block of four rows prepared once as
  /// value x scale, `vpmaddwd`), q8_0 and q4_0 rows the float kernels.
  /// Measured on Zen 4 (2 threads, 2048 x 8192 q4_K): the VNNI kernel 1.5x the previous int8
  /// kernel at M = 1, 2x at M = 4..8.
  static constexpr unsigned int8_m_limit = 8;
  /// Output rows decoded per oneDNN tile on the large-M path (long prefills).
  static constexpr unsigned tile_columns = 256;

  /// Whether `runs` is a weight of input width `k` and output width `n` these kernels read:
  /// q4_0, q8_0, q4_K or q6_K runs of at least one row, `k` a multiple of each run's block,
  /// each run's bytes exactly its rows, `n` rows in all; the error names what is wrong.
  static expected<void> check(unsigned k, unsigned n, const quantized_matrix& runs);

  /// Takes `runs` (check()ed) of input width `k`; `isa` picks the own kernels; with
  /// `bf16_prefill` (the bf16 dtype on a CPU that multiplies bf16 natively) long prefills
  /// decode the rows to bf16 for oneDNN's bf16 matmul, as the dtype's own weights run, else to
  /// f32.
  quant_linear(dnnl::engine& eng, unsigned k, quantized_matrix runs, vector_isa isa,
               bool bf16_prefill = false);
  quant_linear(const quant_linear&) = delete;            ///< its row groups point into its own runs
  quant_linear& operator=(const quant_linear&) = delete; ///< as above

  /// dst[M][N] (f32, row-major) = src[M][K] (f32, row-major) x W. Runs on the calling thread's
  /// OpenMP team; oneDNN errors (dnnl::error) propagate.
  void forward(dnnl::stream& strm, const float* src, float* dst, unsigned m);
  /// Output row `row` (K values) decoded into `out` (an embedding lookup).
  void decode_row(unsigned row, float* out) const;

  /// What runs, e.g. "triad:q4_K+q6_K_avx512 (M<=16) + onednn f32 brg:avx512_core (prefill)".
  std::string kernel() const;
  /// Input width.
  unsigned k() const noexcept { return k_; }
  /// Output width (rows of all runs).
  unsigned n() const noexcept { return n_; }
  /// Bytes of the stored blocks.
  std::size_t weight_bytes() const noexcept;

private:
  /// Up to four consecutive rows of one run: one unit of the kernels' work.
  struct row_group {
    const std::byte* rows; ///< the first row's blocks
    std::size_t stride;    ///< bytes per row
    ggml_type type;        ///< the run's type
    unsigned row;          ///< first row of the matrix (the output column)
    unsigned count;        ///< 1..4
  };

  /// dst = src x W by the integer kernels (where int8_) and the float kernels, m <=
  /// small_m_limit.
  void forward_small(const float* src, float* dst, unsigned m) const;
  /// Groups [first, last) of thread `thread` of `threads`: contiguous, about equal bytes.
  std::pair<std::size_t, std::size_t> byte_share(unsigned thread, unsigned threads) const;
  /// Rows [first, first + width) decoded as a [width][K] tile.
  void widen(float* tile, unsigned first, unsigned width) const;
  /// The same rows rounded to bf16 (the bf16 prefill).
  void widen(std::uint16_t* tile, unsigned first, unsigned width) const;

  unsigned k_;
  unsigned n_ = 0;
  quantized_matrix runs_;
  std::vector<row_group> groups_;
  std::vector<unsigned> run_first_row_;   ///< the matrix row each run starts at
  std::vector<std::size_t> bytes_before_; ///< bytes of groups_[0..g), and of all at the end
  vector_isa isa_;
  bool int8_ = false;    ///< the integer kernels run here (AVX2)
  bool vnni_ = false;    ///< with AVX512_VNNI
  widened_matmul large_; ///< the prefill path
  std::string prefill_kernel_;
};

} // namespace triad::detail
