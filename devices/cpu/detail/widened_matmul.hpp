#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

namespace triad::detail {

/// Multiplies activations [M][K] (f32) by weights [K][N] stored in a form oneDNN cannot read
/// (bf16 on CPUs without native bf16, ggml blocks), a tile of output columns at a time: the
/// owner widens each tile to f32, then oneDNN's f32 matmul multiplies it. Long prefills: the
/// widening is paid once per tile, the multiply runs at oneDNN's rate.
class widened_matmul {
public:
  /// How a widened tile lies in memory.
  enum class tile_layout {
    k_major,     ///< [K][width]: row i holds weight row i's columns (bf16 panels widen so)
    column_major ///< [width][K]: one output column after another (ggml rows widen so)
  };

  /// Tiles of `tile_columns` of N, laid out as `layout`.
  widened_matmul(dnnl::engine& eng, unsigned k, unsigned n, unsigned tile_columns,
                 tile_layout layout);

  /// dst[M][N] (row-major, leading dim N) = src[M][K] x W, calling `widen(tile, first, width)`
  /// to fill the tile for columns [first, first + width) before each multiply. oneDNN errors
  /// (dnnl::error) propagate.
  template<class Widen>
  void forward(dnnl::stream& strm, const float* src, float* dst, unsigned m, Widen&& widen) {
    float* tile = tile_scratch(std::size_t{k_} * std::min(n_, tile_columns_));
    for (unsigned first = 0; first < n_; first += tile_columns_) {
      const unsigned width = std::min(tile_columns_, n_ - first);
      widen(tile, first, width);
      multiply(strm, src, tile, dst, m, first, width);
    }
  }

  /// oneDNN's implementation name for an M-row multiply, e.g. "brg:avx512_core".
  std::string kernel(unsigned m) const;

private:
  /// dst[.., first..first+width) = src x tile.
  void multiply(dnnl::stream& strm, const float* src, const float* tile, float* dst, unsigned m,
                unsigned first, unsigned width);
  /// A tile `width` wide as oneDNN's weights.
  dnnl::memory::desc tile_desc(unsigned width) const;
  /// The matmul's description for M rows and a tile `width` wide.
  dnnl::matmul::primitive_desc describe(unsigned m, unsigned width) const;
  /// The calling thread's tile, at least `floats` long: one per calling (driver) thread, shared
  /// by every matrix it multiplies.
  static float* tile_scratch(std::size_t floats);

  dnnl::engine* eng_;
  unsigned k_;
  unsigned n_;
  unsigned tile_columns_;
  tile_layout layout_;
  std::map<std::pair<unsigned, unsigned>, dnnl::matmul> primitives_;
};

} // namespace triad::detail
