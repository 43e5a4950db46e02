#include "devices/cpu/detail/bf16_linear.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include <immintrin.h>

#include "devices/cpu/detail/kernels.hpp"

// The own kernels are compiled per ISA with target attributes (not target_clones, not global
// -m flags): the caller picks the ISA at run time, so a cap such as DNNL_MAX_CPU_ISA=AVX2 can
// cap these too. Everything taking or returning a vector type is always inlined into a function
// of the same target, so no vector crosses a call between different ABIs.
#define TRIAD_AVX2 __attribute__((target("avx2,fma")))
#define TRIAD_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TRIAD_INLINE inline __attribute__((always_inline))
#define TRIAD_AVX2_STEP __attribute__((target("avx2,fma"), always_inline))
#define TRIAD_AVX512_STEP                                                                          \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), always_inline))

namespace triad::detail {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// Columns per panel.
constexpr unsigned panel = 16;

// Work below this many multiply-adds stays on the calling thread: a parallel region costs more.
constexpr std::size_t parallel_threshold = 1 << 15;

// Most rows of x one kernel call multiplies, all accumulators in registers over the whole of K
// (measured on Zen 4 with AVX-512: 12 rows per call lose a fifth of the FMA rate, 16 half).
constexpr unsigned max_rows_avx512 = 10;
constexpr unsigned max_rows_avx2 = 6;
constexpr unsigned max_rows_scalar = 16;

// Independent accumulator chains over k for `vectors` accumulators per k: enough multiply-adds
// in flight to hide the FMA latency (about 8 vectors) when few rows are multiplied.
constexpr unsigned chains(unsigned vectors) {
  return vectors >= 8 ? 1 : (8 + vectors - 1) / vectors;
}

// Bytes of weights requested ahead of the k row being multiplied. The hardware prefetcher
// alone falls behind once a few rows of x make each weight row cost some FMAs (measured on Zen 4
// with 2 threads: +40% at M = 8, +25% at M = 16, no change at M = 1).
constexpr std::size_t prefetch_distance = 2048;

// Requests the cache lines `prefetch_distance` past CH rows of a panel from k row i on. Past the
// end of a panel they are the next panel's, which the same thread multiplies next.
template<unsigned CH>
TRIAD_INLINE void prefetch_ahead(const std::uint16_t* w, unsigned i) {
  const char* p = reinterpret_cast<const char*>(w + std::size_t{i} * panel) + prefetch_distance;
#pragma GCC unroll 16
  for (unsigned line = 0; line < (CH * panel * 2 + 63) / 64; ++line)
    __builtin_prefetch(p + line * 64);
}

// One call: out[r][j] = x[r][0..k) . panel column j, for r < MB and j < cols. The panel is
// [k][16] bf16; x rows have stride ldx, out rows stride ldo.
using block_fn = void (*)(const std::uint16_t* w, const float* x, std::size_t ldx, unsigned k,
                          float* out, std::size_t ldo, unsigned cols);

// 16 bf16 as 16 floats. The zero-masked forms with a full mask: the unmasked intrinsics of
// GCC 12 pass _mm512_undefined_epi32() through, which trips -Wmaybe-uninitialized.
TRIAD_AVX512 TRIAD_INLINE __m512 widen_avx512(const std::uint16_t* p) {
  __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, h);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16));
}

template<unsigned MB>
TRIAD_AVX512 void block_avx512(const std::uint16_t* w, const float* x, std::size_t ldx, unsigned k,
                               float* out, std::size_t ldo, unsigned cols) {
  constexpr unsigned CH = chains(MB);
  __m512 acc[CH][MB];
#pragma GCC unroll 16
  for (unsigned c = 0; c < CH; ++c)
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r)
      acc[c][r] = _mm512_setzero_ps();
  // k row i into chain c.
  auto step = [&](unsigned c, unsigned i) TRIAD_AVX512_STEP {
    __m512 wv = widen_avx512(w + std::size_t{i} * panel);
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r)
      acc[c][r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + i]), wv, acc[c][r]);
  };
  unsigned i = 0;
  for (; i + CH <= k; i += CH) {
    prefetch_ahead<CH>(w, i);
#pragma GCC unroll 16
    for (unsigned c = 0; c < CH; ++c)
      step(c, i + c);
  }
  for (; i < k; ++i)
    step(0, i);
#pragma GCC unroll 16
  for (unsigned c = 1; c < CH; ++c)
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r)
      acc[0][r] = _mm512_add_ps(acc[0][r], acc[c][r]);
  const auto mask = static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 16
  for (unsigned r = 0; r < MB; ++r)
    _mm512_mask_storeu_ps(out + r * ldo, mask, acc[0][r]);
}

TRIAD_AVX2 TRIAD_INLINE __m256 widen_avx2(const std::uint16_t* p) {
  __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template<unsigned MB>
TRIAD_AVX2 void block_avx2(const std::uint16_t* w, const float* x, std::size_t ldx, unsigned k,
                           float* out, std::size_t ldo, unsigned cols) {
  // A panel row is two vectors of 8: acc[c][r][h] holds columns 8h..8h+7.
  constexpr unsigned CH = chains(MB * 2);
  __m256 acc[CH][MB][2];
#pragma GCC unroll 16
  for (unsigned c = 0; c < CH; ++c)
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r)
      acc[c][r][0] = acc[c][r][1] = _mm256_setzero_ps();
  auto step = [&](unsigned c, unsigned i) TRIAD_AVX2_STEP {
    __m256 lo = widen_avx2(w + std::size_t{i} * panel);
    __m256 hi = widen_avx2(w + std::size_t{i} * panel + 8);
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r) {
      __m256 xv = _mm256_broadcast_ss(x + r * ldx + i);
      acc[c][r][0] = _mm256_fmadd_ps(xv, lo, acc[c][r][0]);
      acc[c][r][1] = _mm256_fmadd_ps(xv, hi, acc[c][r][1]);
    }
  };
  unsigned i = 0;
  for (; i + CH <= k; i += CH) {
    prefetch_ahead<CH>(w, i);
#pragma GCC unroll 16
    for (unsigned c = 0; c < CH; ++c)
      step(c, i + c);
  }
  for (; i < k; ++i)
    step(0, i);
#pragma GCC unroll 16
  for (unsigned c = 1; c < CH; ++c)
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r) {
      acc[0][r][0] = _mm256_add_ps(acc[0][r][0], acc[c][r][0]);
      acc[0][r][1] = _mm256_add_ps(acc[0][r][1], acc[c][r][1]);
    }
#pragma GCC unroll 16
  for (unsigned r = 0; r < MB; ++r) {
    if (cols == panel) {
      _mm256_storeu_ps(out + r * ldo, acc[0][r][0]);
      _mm256_storeu_ps(out + r * ldo + 8, acc[0][r][1]);
    } else {
      alignas(32) float tmp[panel];
      _mm256_store_ps(tmp, acc[0][r][0]);
      _mm256_store_ps(tmp + 8, acc[0][r][1]);
      std::memcpy(out + r * ldo, tmp, cols * sizeof(float));
    }
  }
}

// Widens `rows` full rows of a panel to floats, row r at out + r * ldo (the large-M path).
TRIAD_AVX512 void widen_rows_avx512(const std::uint16_t* w, unsigned rows, float* out,
                                    std::size_t ldo) {
  for (unsigned r = 0; r < rows; ++r)
    _mm512_storeu_ps(out + r * ldo, widen_avx512(w + std::size_t{r} * panel));
}
TRIAD_AVX2 void widen_rows_avx2(const std::uint16_t* w, unsigned rows, float* out,
                                std::size_t ldo) {
  for (unsigned r = 0; r < rows; ++r) {
    _mm256_storeu_ps(out + r * ldo, widen_avx2(w + std::size_t{r} * panel));
    _mm256_storeu_ps(out + r * ldo + 8, widen_avx2(w + std::size_t{r} * panel + 8));
  }
}
// Also the first `cols` columns only.
void widen_rows_scalar(const std::uint16_t* w, unsigned rows, float* out, std::size_t ldo,
                       unsigned cols) {
  for (unsigned r = 0; r < rows; ++r)
    for (unsigned j = 0; j < cols; ++j)
      out[r * ldo + j] = from_bf16(w[std::size_t{r} * panel + j]);
}

// Portable fallback: any block of up to max_rows_scalar rows.
void block_scalar(const std::uint16_t* w, const float* x, std::size_t ldx, unsigned k,
                  unsigned rows, float* out, std::size_t ldo, unsigned cols) {
  float acc[max_rows_scalar][panel] = {};
  for (unsigned i = 0; i < k; ++i) {
    float wv[panel];
    for (unsigned j = 0; j < panel; ++j)
      wv[j] = from_bf16(w[std::size_t{i} * panel + j]);
    for (unsigned r = 0; r < rows; ++r) {
      float xv = x[r * ldx + i];
      for (unsigned j = 0; j < panel; ++j)
        acc[r][j] += xv * wv[j];
    }
  }
  for (unsigned r = 0; r < rows; ++r)
    std::memcpy(out + r * ldo, acc[r], cols * sizeof(float));
}

// Kernels by rows; entry 0 is unused.
template<unsigned... R>
constexpr std::array<block_fn, sizeof...(R) + 1>
avx512_table(std::integer_sequence<unsigned, R...>) {
  return {nullptr, &block_avx512<R + 1>...};
}
template<unsigned... R>
constexpr std::array<block_fn, sizeof...(R) + 1> avx2_table(std::integer_sequence<unsigned, R...>) {
  return {nullptr, &block_avx2<R + 1>...};
}
constexpr auto avx512_kernels =
    avx512_table(std::make_integer_sequence<unsigned, max_rows_avx512>{});
constexpr auto avx2_kernels = avx2_table(std::make_integer_sequence<unsigned, max_rows_avx2>{});

template<class T>
T* aligned_array(std::size_t count) {
  std::size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, std::max<std::size_t>(bytes, 64));
  if (p == nullptr)
    throw std::bad_alloc();
  return static_cast<T*>(p);
}

} // namespace

void bf16_linear::aligned_free::operator()(void* p) const noexcept {
  std::free(p);
}

bf16_linear::bf16_linear(dnnl::engine& eng, unsigned k, unsigned n, const float* plain,
                         vector_isa isa)
    : k_(k)
    , n_(n)
    , panels_((n + panel - 1) / panel)
    , isa_(isa)
    , large_(eng, k, n, tile_columns, widened_matmul::tile_layout::k_major) {
  std::size_t count = std::size_t{k} * n;
  std::vector<std::uint16_t> staged(count);
  to_bf16(plain, staged.data(), count);
  std::size_t stored = std::size_t{panels_} * panel * k;
  weights_.reset(aligned_array<std::uint16_t>(stored));
  std::memset(weights_.get(), 0, stored * sizeof(std::uint16_t));
  for (unsigned p = 0; p < panels_; ++p) {
    unsigned cols = std::min(panel, n - p * panel);
    std::uint16_t* dst = weights_.get() + std::size_t{p} * k * panel;
    for (unsigned i = 0; i < k; ++i)
      std::memcpy(dst + std::size_t{i} * panel, staged.data() + std::size_t{i} * n + p * panel,
                  cols * sizeof(std::uint16_t));
  }
  // The name of the prefill implementation; primitives that run are made in forward(), on the
  // calling thread's OpenMP team.
  prefill_kernel_ = large_.kernel(small_m_limit + 1);
}

std::string bf16_linear::kernel() const {
  std::string own = isa_ == vector_isa::none ? "scalar" : std::string{to_string(isa_)};
  return "triad:bf16_" + own + " (M<=" + std::to_string(small_m_limit) + ") + onednn f32 " +
         prefill_kernel_ + " (prefill)";
}

void bf16_linear::forward(dnnl::stream& strm, const float* src, float* dst, unsigned m) {
  if (m == 0)
    return;
  if (m <= small_m_limit)
    forward_small(src, dst, m);
  else
    forward_large(strm, src, dst, m);
}

void bf16_linear::forward_small(const float* src, float* dst, unsigned m) const {
  const unsigned max_rows = isa_ == vector_isa::avx512 ? max_rows_avx512
                            : isa_ == vector_isa::avx2 ? max_rows_avx2
                                                       : max_rows_scalar;
  // Rows split into equal blocks; each panel runs all blocks while its weights are in cache.
  // Panels in parallel: each thread reads one contiguous run of panels.
  const unsigned blocks = (m + max_rows - 1) / max_rows;
  const std::size_t stride = std::size_t{k_} * panel;
  const bool parallel = stride * panels_ * m >= parallel_threshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (unsigned p = 0; p < panels_; ++p) {
    const std::uint16_t* w = weights_.get() + p * stride;
    const unsigned cols = std::min(panel, n_ - p * panel);
    unsigned first = 0;
    for (unsigned b = 0; b < blocks; ++b) {
      const unsigned rows = (m - first) / (blocks - b);
      const float* x = src + std::size_t{first} * k_;
      float* out = dst + std::size_t{first} * n_ + p * panel;
      if (isa_ == vector_isa::avx512)
        avx512_kernels[rows](w, x, k_, k_, out, n_, cols);
      else if (isa_ == vector_isa::avx2)
        avx2_kernels[rows](w, x, k_, k_, out, n_, cols);
      else
        block_scalar(w, x, k_, k_, rows, out, n_, cols);
      first += rows;
    }
  }
}

void bf16_linear::widen(float* tile, unsigned first, unsigned width) {
  // Chunks of rows of every panel of the tile: each chunk reads contiguous runs of panels and
  // writes whole rows of the tile.
  constexpr unsigned chunk = 64;
  const unsigned chunks = (k_ + chunk - 1) / chunk;
  const unsigned p0 = first / panel;
  const unsigned tile_panels = (width + panel - 1) / panel;
#pragma omp parallel for schedule(static) if (std::size_t{k_} * width >= parallel_threshold)
  for (unsigned c = 0; c < chunks; ++c) {
    const unsigned end = std::min(k_, (c + 1) * chunk);
    for (unsigned q = 0; q < tile_panels; ++q) {
      const std::uint16_t* w = weights_.get() + std::size_t{p0 + q} * k_ * panel;
      const unsigned cols = std::min(panel, width - q * panel);
      const std::uint16_t* rows = w + std::size_t{c} * chunk * panel;
      float* out = tile + std::size_t{c} * chunk * width + q * panel;
      if (cols == panel && isa_ == vector_isa::avx512)
        widen_rows_avx512(rows, end - c * chunk, out, width);
      else if (cols == panel && isa_ == vector_isa::avx2)
        widen_rows_avx2(rows, end - c * chunk, out, width);
      else
        widen_rows_scalar(rows, end - c * chunk, out, width, cols);
    }
  }
}

void bf16_linear::forward_large(dnnl::stream& strm, const float* src, float* dst, unsigned m) {
  large_.forward(strm, src, dst, m,
                 [&](float* tile, unsigned first, unsigned width) { widen(tile, first, width); });
}

} // namespace triad::detail
