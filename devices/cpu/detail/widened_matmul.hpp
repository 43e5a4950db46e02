#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

namespace triad::detail {

/// Multiplies activations [M][K] (f32) by weights [K][N] stored in a form oneDNN cannot read
/// (bf16 on CPUs without native bf16, ggml blocks), a tile of output columns at a time: the
/// owner widens each tile (to f32, or to bf16 where the CPU multiplies bf16 natively), then
/// oneDNN's matmul of that type multiplies it. Long prefills: the widening is paid once per
/// tile, the multiply runs at oneDNN's rate.
class widened_matmul {
public:
  /// How a widened tile lies in memory.
  enum class tile_layout {
    k_major,     ///< [K][width]: row i holds weight row i's columns (bf16 panels widen so)
    column_major ///< [width][K]: one output column after another (ggml rows widen so)
  };

  /// Tiles of `tile_columns` of N, laid out as `layout`, of f32 (or of bf16 with `bf16`: the
  /// activations are then rounded to bf16 too, as the bf16 dtype's matmuls do).
  widened_matmul(dnnl::engine& eng, unsigned k, unsigned n, unsigned tile_columns,
                 tile_layout layout, bool bf16 = false);

  /// dst[M][N] (row-major, leading dim N) = src[M][K] x W, calling `widen(tile, first, width)`
  /// to fill the tile (float* or, with bf16, std::uint16_t*) for columns [first, first + width)
  /// before each multiply. oneDNN errors (dnnl::error) propagate.
  template<class Widen>
  void forward(dnnl::stream& strm, const float* src, float* dst, unsigned m, Widen&& widen) {
    const std::size_t tile_values = std::size_t{k_} * std::min(n_, tile_columns_);
    const void* a = bf16_ ? static_cast<const void*>(activations_bf16(src, std::size_t{m} * k_))
                          : static_cast<const void*>(src);
    void* tile = scratch(0, tile_values * (bf16_ ? 2 : 4));
    for (unsigned first = 0; first < n_; first += tile_columns_) {
      const unsigned width = std::min(tile_columns_, n_ - first);
      if constexpr (std::is_invocable_v<Widen, std::uint16_t*, unsigned, unsigned>) {
        if (bf16_)
          widen(static_cast<std::uint16_t*>(tile), first, width);
        else
          widen(static_cast<float*>(tile), first, width);
      } else {
        if (bf16_) // a bf16 tile needs a widen that writes bf16
          throw std::logic_error("widened_matmul: bf16 tiles with an f32-only widen");
        widen(static_cast<float*>(tile), first, width);
      }
      multiply(strm, a, tile, dst, m, first, width);
    }
  }

  /// Whether the tiles are bf16.
  bool bf16() const noexcept { return bf16_; }

  /// oneDNN's implementation name for an M-row multiply, e.g. "brg:avx512_core".
  std::string kernel(unsigned m) const;

private:
  /// dst[.., first..first+width) = src x tile.
  void multiply(dnnl::stream& strm, const void* src, const void* tile, float* dst, unsigned m,
                unsigned first, unsigned width);
  /// A tile `width` wide as oneDNN's weights.
  dnnl::memory::desc tile_desc(unsigned width) const;
  /// The matmul's description for M rows and a tile `width` wide.
  dnnl::matmul::primitive_desc describe(unsigned m, unsigned width) const;
  /// The calling thread's buffer `slot` (0: the tile, 1: bf16 activations), at least `bytes`
  /// long: one per calling (driver) thread, shared by every matrix it multiplies.
  static void* scratch(unsigned slot, std::size_t bytes);
  /// `n` activations rounded to bf16, in the calling thread's buffer 1.
  static const std::uint16_t* activations_bf16(const float* src, std::size_t n);

  dnnl::engine* eng_;
  unsigned k_;
  unsigned n_;
  unsigned tile_columns_;
  tile_layout layout_;
  bool bf16_;
  std::map<std::pair<unsigned, unsigned>, dnnl::matmul> primitives_;
};

} // namespace triad::detail
