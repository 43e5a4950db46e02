#include "devices/cpu/detail/packed_small_m.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include <immintrin.h>

// One target for both layouts: the f32 kernels use no AVX512_BF16 instruction (they are only
// called where AVX-512 may be used; the bf16 ones only where AVX512_BF16 is present too).
// Everything taking or returning a vector type is always inlined into a function of this target.
#define TRIAD_AVX512_BF16                                                                          \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define TRIAD_AVX512_BF16_STEP                                                                     \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma"), always_inline))

namespace triad::detail {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// Columns per panel, and 16-float vectors per panel row.
constexpr unsigned panel = 64;
constexpr unsigned vectors = panel / 16;

// Most rows one call multiplies: 4 accumulators a row, all in registers over the whole of K.
constexpr unsigned max_rows = 6;

// Work below this many multiply-adds stays on the calling thread: a parallel region costs more.
constexpr std::size_t parallel_threshold = 1 << 15;

// Independent accumulator chains: enough multiply-adds in flight (about 8 vectors) to hide
// their latency when few rows are multiplied.
constexpr unsigned chains(unsigned rows) {
  return rows * vectors >= 8 ? 1 : 2;
}

// Bytes of weights requested ahead of the row being multiplied (one panel row is 256 bytes,
// four cache lines).
constexpr std::size_t prefetch_distance = 2048;

// One call: out[r][j] = x[r] . panel column j, for r < MB and j < cols. A panel row is 64
// columns x 2 k (bf16, pairs interleaved) or 64 columns x 1 k (f32); `steps` rows (K / 2
// rounded up, or K). x rows have stride ldx elements, out rows ldo floats.
using block_fn = void (*)(const void* w, const void* x, std::size_t ldx, unsigned k, float* out,
                          std::size_t ldo, unsigned cols);

template<unsigned MB, bool BF16>
TRIAD_AVX512_BF16 void block(const void* wp, const void* xp, std::size_t ldx, unsigned k,
                             float* out, std::size_t ldo, unsigned cols) {
  constexpr unsigned CH = chains(MB);
  const auto* w = static_cast<const char*>(wp);
  __m512 acc[CH][MB][vectors];
#pragma GCC unroll 16
  for (unsigned c = 0; c < CH; ++c)
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r)
#pragma GCC unroll 4
      for (unsigned v = 0; v < vectors; ++v)
        acc[c][r][v] = _mm512_setzero_ps();
  // Panel row i into chain c; `last_odd`: the row of a last odd k (bf16), paired with zero
  // (its weight row's second half is zero padding).
  auto step = [&](unsigned c, unsigned i, bool last_odd) TRIAD_AVX512_BF16_STEP {
    const char* row = w + std::size_t{i} * panel * 4;
    __m512 wv[vectors];
#pragma GCC unroll 4
    for (unsigned v = 0; v < vectors; ++v)
      wv[v] = _mm512_load_ps(reinterpret_cast<const float*>(row) + v * 16);
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r) {
      if constexpr (BF16) {
        // The pair x[2i], x[2i+1] as one 32-bit lane, in every lane.
        const auto* x = static_cast<const std::uint16_t*>(xp) + r * ldx + 2 * i;
        std::uint32_t pair = x[0];
        if (!last_odd)
          std::memcpy(&pair, x, sizeof(pair));
        __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 4
        for (unsigned v = 0; v < vectors; ++v)
          acc[c][r][v] = _mm512_dpbf16_ps(acc[c][r][v], xb, (__m512bh)wv[v]);
      } else {
        __m512 xv = _mm512_set1_ps(static_cast<const float*>(xp)[r * ldx + i]);
#pragma GCC unroll 4
        for (unsigned v = 0; v < vectors; ++v)
          acc[c][r][v] = _mm512_fmadd_ps(xv, wv[v], acc[c][r][v]);
      }
    }
  };
  const unsigned steps = BF16 ? k / 2 : k;
  unsigned i = 0;
  for (; i + CH <= steps; i += CH) {
    const char* ahead = w + std::size_t{i} * panel * 4 + prefetch_distance;
#pragma GCC unroll 8
    for (unsigned line = 0; line < CH * 4; ++line)
      __builtin_prefetch(ahead + line * 64);
#pragma GCC unroll 16
    for (unsigned c = 0; c < CH; ++c)
      step(c, i + c, false);
  }
  for (; i < steps; ++i)
    step(0, i, false);
  if (BF16 && k % 2 == 1)
    step(0, i, true);
#pragma GCC unroll 16
  for (unsigned c = 1; c < CH; ++c)
#pragma GCC unroll 16
    for (unsigned r = 0; r < MB; ++r)
#pragma GCC unroll 4
      for (unsigned v = 0; v < vectors; ++v)
        acc[0][r][v] = _mm512_add_ps(acc[0][r][v], acc[c][r][v]);
#pragma GCC unroll 16
  for (unsigned r = 0; r < MB; ++r)
#pragma GCC unroll 4
    for (unsigned v = 0; v < vectors; ++v) {
      const unsigned first = v * 16;
      if (first >= cols)
        break;
      const unsigned left = std::min(16u, cols - first);
      const auto mask = static_cast<__mmask16>(left == 16 ? 0xffff : (1u << left) - 1);
      _mm512_mask_storeu_ps(out + r * ldo + first, mask, acc[0][r][v]);
    }
}

// Kernels by rows; entry 0 is unused.
template<bool BF16, unsigned... R>
constexpr std::array<block_fn, sizeof...(R) + 1> table(std::integer_sequence<unsigned, R...>) {
  return {nullptr, &block<R + 1, BF16>...};
}
constexpr auto bf16_kernels = table<true>(std::make_integer_sequence<unsigned, max_rows>{});
constexpr auto f32_kernels = table<false>(std::make_integer_sequence<unsigned, max_rows>{});

// Rows of K per block of oneDNN's layout.
constexpr unsigned k_block(bool bf16) {
  return bf16 ? 32 : 16;
}

bool cpu_has_avx512_bf16() noexcept {
  return __builtin_cpu_supports("avx512bf16");
}

} // namespace

packed_small_m::packed_small_m(unsigned k, unsigned n, bool bf16)
    : k_(k)
    , n_(n)
    , bf16_(bf16)
    // K is padded to the K block: 32 (16 pairs) for bf16, 16 for f32.
    , panel_elements_(std::size_t{panel} *
                      ((k + k_block(bf16) - 1) / k_block(bf16) * k_block(bf16))) {}

std::optional<packed_small_m> packed_small_m::for_weights(const dnnl::memory::desc& packed,
                                                          unsigned k, unsigned n, dtype type,
                                                          vector_isa isa) {
  if (isa != vector_isa::avx512)
    return std::nullopt;
  const bool bf16 = type == dtype::bf16;
  if (bf16 && !cpu_has_avx512_bf16())
    return std::nullopt;
  const dnnl::memory::desc expected({k, n}, bf16 ? dt::bf16 : dt::f32,
                                    bf16 ? tag::BA16a64b2a : tag::BA16a64b);
  if (packed != expected)
    return std::nullopt;
  return packed_small_m(k, n, bf16);
}

std::string packed_small_m::name() const {
  return bf16_ ? "triad:bf16_avx512bf16" : "triad:f32_avx512";
}

void packed_small_m::forward(const void* packed, const void* src, float* dst, unsigned m) const {
  const auto& kernels = bf16_ ? bf16_kernels : f32_kernels;
  const std::size_t element = bf16_ ? 2 : 4;
  const unsigned panels = (n_ + panel - 1) / panel;
  const unsigned blocks = (m + max_rows - 1) / max_rows;
  const bool parallel = panel_elements_ * panels * m >= parallel_threshold;
  const auto* base = static_cast<const char*>(packed);
  // Panels in parallel, each thread one contiguous run of them; every block of rows runs
  // while its panel is in cache.
#pragma omp parallel for schedule(static) if (parallel)
  for (unsigned p = 0; p < panels; ++p) {
    const char* w = base + p * panel_elements_ * element;
    const unsigned cols = std::min(panel, n_ - p * panel);
    unsigned first = 0;
    for (unsigned b = 0; b < blocks; ++b) {
      const unsigned rows = (m - first) / (blocks - b);
      const char* x = static_cast<const char*>(src) + std::size_t{first} * k_ * element;
      kernels[rows](w, x, k_, k_, dst + std::size_t{first} * n_ + p * panel, n_, cols);
      first += rows;
    }
  }
}

} // namespace triad::detail
