#include "devices/cpu/detail/quant_linear.hpp"

#include "devices/cpu/detail/kernels.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <immintrin.h>
#include <omp.h>

#include "gguf/detail/blocks.hpp"

// The own kernels are compiled per ISA with target attributes, as in bf16_linear.cpp: the
// caller picks the ISA at run time (DNNL_MAX_CPU_ISA caps it). The block decoders and the dot
// products are always inlined into each target's function, so each is vectorised for it and
// no vector crosses a call between different ABIs.
#define TRIAD_AVX2 __attribute__((target("avx2,fma")))
#define TRIAD_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TRIAD_INLINE inline __attribute__((always_inline))

namespace triad::detail {

namespace {

// Work below this many multiply-adds stays on the calling thread: a parallel region costs more.
constexpr std::size_t parallel_threshold = 1 << 15;

// Weight rows one kernel call multiplies: four independent accumulator chains at M = 1, and
// each activation vector loaded once for four rows.
constexpr unsigned group_rows = 4;
// Activation rows multiplied per pass over a decoded chunk, by vector width: R x m_block
// accumulators, m_block activation vectors and a weight vector stay in registers (4 x 4 + 5 of
// AVX-512's 32; 4 x 2 + 3 of AVX2's and SSE's 16).
constexpr unsigned m_block(int w) {
  return w == 16 ? 4 : 2;
}

// A block type's layout and decoder; a chunk is the values decoded at once (256).
template<ggml_type T>
struct block_type;
template<>
struct block_type<ggml_type::q8_0> {
  static constexpr std::size_t values = small_block_values, bytes = 34, per_chunk = 8;
  TRIAD_INLINE static void decode(const std::byte* b, float* y) { decode_q8_0(b, y); }
};
template<>
struct block_type<ggml_type::q4_0> {
  static constexpr std::size_t values = small_block_values, bytes = 18, per_chunk = 8;
  TRIAD_INLINE static void decode(const std::byte* b, float* y) { decode_q4_0(b, y); }
};
template<>
struct block_type<ggml_type::q4_k> {
  static constexpr std::size_t values = super_block_values, bytes = 144, per_chunk = 1;
  TRIAD_INLINE static void decode(const std::byte* b, float* y) { decode_q4_k(b, y); }
};
template<>
struct block_type<ggml_type::q6_k> {
  static constexpr std::size_t values = super_block_values, bytes = 210, per_chunk = 1;
  TRIAD_INLINE static void decode(const std::byte* b, float* y) { decode_q6_k(b, y); }
};

constexpr std::size_t chunk = 256;

// W floats as one GCC vector (a zmm, ymm or xmm register in the targets that use it); spelled
// per width, since GCC drops vector_size on a dependent alias.
template<int W>
struct vec_of;
template<>
struct vec_of<16> {
  typedef float type __attribute__((vector_size(64)));
};
template<>
struct vec_of<8> {
  typedef float type __attribute__((vector_size(32)));
};
template<>
struct vec_of<4> {
  typedef float type __attribute__((vector_size(16)));
};
template<int W>
using vec = typename vec_of<W>::type;

template<int W>
TRIAD_INLINE vec<W> load(const float* p) {
  vec<W> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template<int W>
TRIAD_INLINE float sum(vec<W> v) {
  float s = 0;
  for (int i = 0; i < W; ++i)
    s += v[i];
  return s;
}

// Accumulators of one kernel call: [row][activation row].
template<int W>
using accumulators = vec<W> (*)[quant_linear::small_m_limit];

// acc[r][m0 + mm] += buf[r][0..len) . x[mm][0..len) for R weight rows (buf rows `chunk` apart)
// and MB activation rows (x rows `ldx` apart), all in registers over the chunk.
template<int W, unsigned R, unsigned MB>
TRIAD_INLINE void dot_chunk(const float* buf, const float* x, std::size_t ldx, std::size_t len,
                            accumulators<W> acc, unsigned m0) {
  vec<W> a[R][MB];
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < MB; ++mm)
      a[r][mm] = acc[r][m0 + mm];
  for (std::size_t i = 0; i < len; i += W) {
    vec<W> xv[MB];
    for (unsigned mm = 0; mm < MB; ++mm)
      xv[mm] = load<W>(x + mm * ldx + i);
    for (unsigned r = 0; r < R; ++r) {
      const vec<W> w = load<W>(buf + r * chunk + i);
      for (unsigned mm = 0; mm < MB; ++mm)
        a[r][mm] += w * xv[mm];
    }
  }
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < MB; ++mm)
      acc[r][m0 + mm] = a[r][mm];
}

// dst[mm][r] = row r of `rows` (R rows, `row_bytes` apart, type T) . x[mm], for mm < m
// (x rows k apart, dst rows ldd apart).
template<ggml_type T, int W, unsigned R>
TRIAD_INLINE void group_kernel(const std::byte* rows, std::size_t row_bytes, unsigned k,
                               const float* x, unsigned m, float* dst, std::size_t ldd) {
  using B = block_type<T>;
  alignas(64) float buf[R * chunk];
  vec<W> acc[R][quant_linear::small_m_limit];
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < m; ++mm)
      acc[r][mm] = vec<W>{};
  for (std::size_t v0 = 0; v0 < k; v0 += chunk) {
    const std::size_t len = std::min<std::size_t>(chunk, k - v0); // whole blocks
    const std::size_t first_block = v0 / B::values;
    for (unsigned r = 0; r < R; ++r)
      for (std::size_t b = 0; b < len / B::values; ++b)
        B::decode(rows + r * row_bytes + (first_block + b) * B::bytes,
                  buf + r * chunk + b * B::values);
    const float* xc = x + v0;
    constexpr unsigned mb = m_block(W);
    unsigned m0 = 0;
    for (; m0 + mb <= m; m0 += mb)
      dot_chunk<W, R, mb>(buf, xc + std::size_t{m0} * k, k, len, acc, m0);
    switch (m - m0) { // the rest, fewer than mb
    case 3:
      if constexpr (mb > 3)
        dot_chunk<W, R, 3>(buf, xc + std::size_t{m0} * k, k, len, acc, m0);
      break;
    case 2:
      if constexpr (mb > 2)
        dot_chunk<W, R, 2>(buf, xc + std::size_t{m0} * k, k, len, acc, m0);
      break;
    case 1:
      dot_chunk<W, R, 1>(buf, xc + std::size_t{m0} * k, k, len, acc, m0);
      break;
    default:
      break;
    }
  }
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < m; ++mm)
      dst[mm * ldd + r] = sum<W>(acc[r][mm]);
}

// One row of type T (k values) decoded into `out`.
template<ggml_type T>
TRIAD_INLINE void decode_kernel(const std::byte* row, unsigned k, float* out) {
  using B = block_type<T>;
  for (std::size_t b = 0; b < k / B::values; ++b)
    B::decode(row + b * B::bytes, out + b * B::values);
}

using group_fn = void (*)(const std::byte*, std::size_t, unsigned, const float*, unsigned, float*,
                          std::size_t);
using decode_fn = void (*)(const std::byte*, unsigned, float*);

template<ggml_type T, unsigned R>
TRIAD_AVX512 void group_avx512(const std::byte* rows, std::size_t row_bytes, unsigned k,
                               const float* x, unsigned m, float* dst, std::size_t ldd) {
  group_kernel<T, 16, R>(rows, row_bytes, k, x, m, dst, ldd);
}
template<ggml_type T, unsigned R>
TRIAD_AVX2 void group_avx2(const std::byte* rows, std::size_t row_bytes, unsigned k, const float* x,
                           unsigned m, float* dst, std::size_t ldd) {
  group_kernel<T, 8, R>(rows, row_bytes, k, x, m, dst, ldd);
}
template<ggml_type T, unsigned R>
void group_portable(const std::byte* rows, std::size_t row_bytes, unsigned k, const float* x,
                    unsigned m, float* dst, std::size_t ldd) {
  group_kernel<T, 4, R>(rows, row_bytes, k, x, m, dst, ldd);
}
template<ggml_type T>
TRIAD_AVX512 void decode_avx512(const std::byte* row, unsigned k, float* out) {
  decode_kernel<T>(row, k, out);
}
template<ggml_type T>
TRIAD_AVX2 void decode_avx2(const std::byte* row, unsigned k, float* out) {
  decode_kernel<T>(row, k, out);
}
template<ggml_type T>
void decode_portable(const std::byte* row, unsigned k, float* out) {
  decode_kernel<T>(row, k, out);
}

// The kernels of type T on `isa`: four rows at once, one row, and the row decoder.
struct kernels {
  group_fn four;
  group_fn one;
  decode_fn decode;
};

template<ggml_type T>
kernels kernels_of(vector_isa isa) {
  switch (isa) {
  case vector_isa::avx512:
    return {&group_avx512<T, group_rows>, &group_avx512<T, 1>, &decode_avx512<T>};
  case vector_isa::avx2:
    return {&group_avx2<T, group_rows>, &group_avx2<T, 1>, &decode_avx2<T>};
  default:
    return {&group_portable<T, group_rows>, &group_portable<T, 1>, &decode_portable<T>};
  }
}

// The kernels for `type` (a readable block type) on `isa`.
kernels kernels_of(ggml_type type, vector_isa isa) {
  switch (type) {
  case ggml_type::q8_0:
    return kernels_of<ggml_type::q8_0>(isa);
  case ggml_type::q4_0:
    return kernels_of<ggml_type::q4_0>(isa);
  case ggml_type::q4_k:
    return kernels_of<ggml_type::q4_k>(isa);
  default:
    return kernels_of<ggml_type::q6_k>(isa);
  }
}

std::size_t row_bytes(ggml_type type, unsigned k) {
  const auto t = traits_of(type);
  return k / t.block_elements * t.block_bytes;
}

// -- integer dot products (decode batches) --

// Activations quantized to int8 in blocks of 32 (scale amax / 127), with the sum of each half
// block's values: a weight block's offset or minimum multiplies those sums, never the values.
// Scales per block of 32 for q8_0 and q4_0 weights (llama.cpp's q8_0 activations), per 256
// for q4_K and q6_K (its q8_K: one float per super-block, the rest in integers).
struct act_q8 {
  std::vector<std::int8_t> q;       // [m][k]
  std::vector<float> d;             // [m][k / block]
  std::vector<std::int32_t> sums;   // [m][k / 16]
  std::vector<std::int16_t> sums16; // the same as int16
  std::vector<std::int16_t> sums32; // [m][k / 32] (|sum| <= 32 x 127), and 8 more (q4_K's
                                    // 256-bit reads of 8)
};

// The integer kernels run on AVX2 and up only: so does this (lrintf's rounding, to nearest even,
// is the vector conversion's under the default MXCSR).
__attribute__((target("avx2,fma"))) void
quantize_activations(const float* x, unsigned m, unsigned k, unsigned block, act_q8& a) {
  a.q.resize(std::size_t{m} * k);
  a.d.resize(std::size_t{m} * k / block);
  a.sums.resize(std::size_t{m} * k / 16);
  a.sums16.resize(std::size_t{m} * k / 16);
  a.sums32.resize(std::size_t{m} * k / 32 + 8);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (std::size_t b = 0; b < std::size_t{m} * k / block; ++b) {
    const float* in = x + b * block;
    __m256 vmax = _mm256_setzero_ps();
    for (unsigned i = 0; i < block; i += 8)
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(in + i), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    a.d[b] = d;
    const __m256 vid = _mm256_set1_ps(id);
    for (unsigned h = 0; h < block / 16; ++h) {
      const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(in + 16 * h), vid));
      const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(in + 16 * h + 8), vid));
      // |v| <= 127: the saturating packs keep every value; 16-bit lanes come out in 128-bit
      // halves, put back in order.
      const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
      const __m128i v8 =
          _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + b * block + 16 * h), v8);
      __m256i t = _mm256_add_epi32(lo, hi);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      const std::int32_t sum = _mm_cvtsi128_si32(s4);
      a.sums[b * (block / 16) + h] = sum;
      a.sums16[b * (block / 16) + h] = static_cast<std::int16_t>(sum);
    }
    for (unsigned h = 0; h < block / 32; ++h)
      a.sums32[b * (block / 32) + h] = static_cast<std::int16_t>(
          a.sums[b * (block / 16) + 2 * h] + a.sums[b * (block / 16) + 2 * h + 1]);
  }
}

// One block of 32 weights as unsigned bytes `v` with w = s * v + c; q8_0 gives |w| and `sign`
// (its x takes w's sign, c = 0), as unsigned-by-signed products need.
struct group32 {
  __m256i v;
  __m256i sign;
  float s, c;
};

#define TRIAD_INT8_TARGET "avx2,fma"
#define TRIAD_VNNI_TARGET "avx2,fma,avx512f,avx512vl,avx512vnni"

// One block of q8_0 or q4_0 (its layout: block_type<T>) for the integer kernels.
template<ggml_type T>
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline group32
int8_block(const std::byte* b) {
  const float d = half_to_float(block_u16(b));
  if constexpr (T == ggml_type::q8_0) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    return {_mm256_sign_epi8(w, w), w, d, 0.0f};
  } else {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i v =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    return {v, _mm256_setzero_si256(), d, -8.0f * d};
  }
}

// Sums of 4 consecutive products of unsigned `v` and signed `x`, as 8 int32 lanes.
__attribute__((target(TRIAD_VNNI_TARGET), always_inline)) inline __m256i dot4_vnni(__m256i v,
                                                                                   __m256i x) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), v, x);
}
// The same without VNNI. Pair sums of up to 255 x 127 x 2 would saturate int16: the weights'
// v are at most 128 (q8_0's |w|) or 63.
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline __m256i dot4_avx2(__m256i v,
                                                                                   __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(v, x), _mm256_set1_epi16(1));
}

// dst[mm * ldd] = the sum of acc[mm]'s lanes + consts[mm], for mm < M.
template<unsigned M>
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline void
store_sums(const __m256* acc, const float* consts, float* dst, std::size_t ldd) {
  for (unsigned mm = 0; mm < M; ++mm) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[mm]), _mm256_extractf128_ps(acc[mm], 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    dst[mm * ldd] = _mm_cvtss_f32(s) + consts[mm];
  }
}

// Runs K::run<M> over activation rows m0..m0+m in chunks of four, the rest by the kernel of
// its size (M a constant keeps the accumulators in registers).
template<class K>
void rows_by_four(const std::byte* row, unsigned k, const act_q8& a, unsigned m0, unsigned m,
                  float* dst, std::size_t ldd) {
  for (unsigned first = m0; first < m0 + m; first += 4) {
    float* out = dst + std::size_t{first - m0} * ldd;
    switch (std::min(4u, m0 + m - first)) {
    case 4:
      K::template run<4>(row, k, a, first, out, ldd);
      break;
    case 3:
      K::template run<3>(row, k, a, first, out, ldd);
      break;
    case 2:
      K::template run<2>(row, k, a, first, out, ldd);
      break;
    default:
      K::template run<1>(row, k, a, first, out, ldd);
      break;
    }
  }
}

using int8_fn = void (*)(const std::byte*, unsigned, const act_q8&, unsigned, unsigned, float*,
                         std::size_t);

// dst[mm * ldd] = row . x[m0 + mm] for mm < M, from int8 activations `a`, with DOT4 as dot4_*:
// one body for both targets (a target attribute cannot depend on a template argument); M a
// constant, so the accumulators stay in registers.
#define TRIAD_INT8_ROW(DOT4)                                                                       \
  using B = block_type<T>;                                                                         \
  __m256 acc[M] = {};                                                                              \
  float consts[M] = {};                                                                            \
  const std::size_t blocks = k / 32;                                                               \
  for (std::size_t blk = 0; blk < blocks; ++blk) {                                                 \
    const group32 w = int8_block<T>(row + blk * B::bytes);                                         \
    for (unsigned mm = 0; mm < M; ++mm) {                                                          \
      const std::size_t ai = (m0 + mm) * blocks + blk;                                             \
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + ai * 32));      \
      if constexpr (T == ggml_type::q8_0)                                                          \
        x = _mm256_sign_epi8(x, w.sign);                                                           \
      const __m256i p = DOT4(w.v, x);                                                              \
      const float dx = a.d[ai];                                                                    \
      acc[mm] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(w.s * dx), acc[mm]);         \
      if constexpr (T != ggml_type::q8_0)                                                          \
        consts[mm] += dx * w.c * static_cast<float>(a.sums[2 * ai] + a.sums[2 * ai + 1]);          \
    }                                                                                              \
  }                                                                                                \
  store_sums<M>(acc, consts, dst, ldd);

template<ggml_type T, unsigned M>
__attribute__((target(TRIAD_VNNI_TARGET))) void int8_vnni_m(const std::byte* row, unsigned k,
                                                            const act_q8& a, unsigned m0,
                                                            float* dst, std::size_t ldd) {
  TRIAD_INT8_ROW(dot4_vnni)
}
template<ggml_type T, unsigned M>
__attribute__((target(TRIAD_INT8_TARGET))) void int8_avx2_m(const std::byte* row, unsigned k,
                                                            const act_q8& a, unsigned m0,
                                                            float* dst, std::size_t ldd) {
  TRIAD_INT8_ROW(dot4_avx2)
}

#undef TRIAD_INT8_ROW

// q4_K and q6_K against activations scaled per super-block: each group's integer products
// times its integer scales summed in int32 over the super-block, one float multiply per
// super-block (llama.cpp's q8_K scheme).
template<ggml_type T>
struct super_blocks;

template<>
struct super_blocks<ggml_type::q4_k> {
  static constexpr unsigned bytes = 144;
  struct scales {
    float d, dmin;
    std::int32_t sc[8], mn[8];
  };
  __attribute__((target(TRIAD_INT8_TARGET), always_inline)) static inline scales
  prepare(const std::byte* b) {
    scales s;
    s.d = half_to_float(block_u16(b));
    s.dmin = half_to_float(block_u16(b + 2));
    for (unsigned j = 0; j < 8; ++j) {
      std::uint8_t sc, mn;
      scale_min_k4(j, reinterpret_cast<const std::uint8_t*>(b + 4), sc, mn);
      s.sc[j] = sc;
      s.mn[j] = mn;
    }
    return s;
  }
  __attribute__((target(TRIAD_INT8_TARGET), always_inline)) static inline __m256i
  values(const std::byte* b, unsigned g) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * (g / 2)));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    return (g & 1) ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
  }
  __attribute__((target(TRIAD_INT8_TARGET), always_inline)) static inline __m256i
  lanes(const scales& s, unsigned g) {
    return _mm256_set1_epi32(s.sc[g]);
  }
  // The minimums' part, to multiply by the activations' scale: -dmin x sum m_j x (sum of x_j).
  static float offset(const scales& s, const std::int32_t* sums16) {
    std::int32_t t = 0;
    for (unsigned j = 0; j < 8; ++j)
      t += s.mn[j] * (sums16[2 * j] + sums16[2 * j + 1]);
    return -s.dmin * static_cast<float>(t);
  }
};

template<>
struct super_blocks<ggml_type::q6_k> {
  static constexpr unsigned bytes = 210;
  struct scales {
    float d;
    std::int32_t sc[16]; // per 16 values, in value order
  };
  __attribute__((target(TRIAD_INT8_TARGET), always_inline)) static inline scales
  prepare(const std::byte* b) {
    scales s;
    s.d = half_to_float(block_u16(b + 208));
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
    // Values 32g..32g+31 (g = 4h + j) use scales 8h + 2j (first 16) and 8h + 2j + 1.
    for (unsigned g = 0; g < 8; ++g) {
      s.sc[2 * g] = sc[8 * (g / 4) + 2 * (g % 4)];
      s.sc[2 * g + 1] = sc[8 * (g / 4) + 2 * (g % 4) + 1];
    }
    return s;
  }
  __attribute__((target(TRIAD_INT8_TARGET), always_inline)) static inline __m256i
  values(const std::byte* b, unsigned g) {
    // Group g of 32 values: half h = g / 4 of 128, quarter j = g % 4: low bits from ql (bytes
    // 0..31 or 32..63 of the half, low or high nibbles), two high bits from qh (bits 2j).
    const unsigned h = g / 4, j = g % 4;
    const auto* ql = reinterpret_cast<const std::uint8_t*>(b) + 64 * h + 32 * (j & 1);
    const auto* qh = reinterpret_cast<const std::uint8_t*>(b) + 128 + 32 * h;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    lo = (j & 2) ? _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4) : _mm256_and_si256(lo, m4);
    __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    hi = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(static_cast<int>(2 * j))), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  __attribute__((target(TRIAD_INT8_TARGET), always_inline)) static inline __m256i
  lanes(const scales& s, unsigned g) {
    return _mm256_set_m128i(_mm_set1_epi32(s.sc[2 * g + 1]), _mm_set1_epi32(s.sc[2 * g]));
  }
  // The offset of 32: -32 x d x sum sc_s x (sum of x_s), per 16 values.
  static float offset(const scales& s, const std::int32_t* sums16) {
    std::int32_t t = 0;
    for (unsigned h = 0; h < 16; ++h)
      t += s.sc[h] * sums16[h];
    return -32.0f * s.d * static_cast<float>(t);
  }
};

#define TRIAD_SUPER_ROW(DOT4)                                                                      \
  using B = super_blocks<T>;                                                                       \
  __m256 acc[M] = {};                                                                              \
  float consts[M] = {};                                                                            \
  const std::size_t blocks = k / 256;                                                              \
  for (std::size_t blk = 0; blk < blocks; ++blk) {                                                 \
    const std::byte* b = row + blk * B::bytes;                                                     \
    const auto sc = B::prepare(b);                                                                 \
    __m256i sumi[M];                                                                               \
    for (unsigned mm = 0; mm < M; ++mm)                                                            \
      sumi[mm] = _mm256_setzero_si256();                                                           \
    for (unsigned g = 0; g < 8; ++g) {                                                             \
      const __m256i v = B::values(b, g);                                                           \
      const __m256i l = B::lanes(sc, g);                                                           \
      for (unsigned mm = 0; mm < M; ++mm) {                                                        \
        const auto* x = a.q.data() + ((m0 + mm) * blocks + blk) * 256 + 32 * g;                    \
        const __m256i p = DOT4(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));        \
        sumi[mm] = _mm256_add_epi32(sumi[mm], _mm256_mullo_epi32(p, l));                           \
      }                                                                                            \
    }                                                                                              \
    for (unsigned mm = 0; mm < M; ++mm) {                                                          \
      const std::size_t ai = (m0 + mm) * blocks + blk;                                             \
      const float dx = a.d[ai];                                                                    \
      acc[mm] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[mm]), _mm256_set1_ps(sc.d * dx), acc[mm]); \
      consts[mm] += dx * B::offset(sc, a.sums.data() + ai * 16);                                   \
    }                                                                                              \
  }                                                                                                \
  store_sums<M>(acc, consts, dst, ldd);

template<ggml_type T, unsigned M>
__attribute__((target(TRIAD_INT8_TARGET))) void super_avx2_m(const std::byte* row, unsigned k,
                                                             const act_q8& a, unsigned m0,
                                                             float* dst, std::size_t ldd) {
  TRIAD_SUPER_ROW(dot4_avx2)
}
#undef TRIAD_SUPER_ROW

// Whether `type`'s integer kernels take activations scaled per 256 (else per 32).
constexpr bool per_super_block(ggml_type type) {
  return type == ggml_type::q4_k || type == ggml_type::q6_k;
}

// The integer kernels of T, by rows of activations.
template<ggml_type T, bool VNNI>
struct int8_kernels {
  template<unsigned M>
  static void run(const std::byte* row, unsigned k, const act_q8& a, unsigned m0, float* dst,
                  std::size_t ldd) {
    if constexpr (per_super_block(T))
      super_avx2_m<T, M>(row, k, a, m0, dst, ldd);
    else if constexpr (VNNI)
      int8_vnni_m<T, M>(row, k, a, m0, dst, ldd);
    else
      int8_avx2_m<T, M>(row, k, a, m0, dst, ldd);
  }
};

template<ggml_type T>
int8_fn int8_of(bool vnni) {
  return vnni ? &rows_by_four<int8_kernels<T, true>> : &rows_by_four<int8_kernels<T, false>>;
}

int8_fn int8_of(ggml_type type, bool vnni) {
  switch (type) {
  case ggml_type::q8_0:
    return int8_of<ggml_type::q8_0>(vnni);
  case ggml_type::q4_0:
    return int8_of<ggml_type::q4_0>(vnni);
  case ggml_type::q4_k:
    return int8_of<ggml_type::q4_k>(vnni);
  default:
    return int8_of<ggml_type::q6_k>(vnni);
  }
}

// -- int16 kernels (batches of q4_K and q6_K) --

// Activations for the batch kernels: the int8 values of act_q8 (scaled per 256) widened to
// int16, and for q4_K's minimums each 32 values' sum times their scale.
struct act_q16 {
  std::vector<std::int16_t> q; // [m][k]
  std::vector<float> d;        // [m][k / 256]
  std::vector<float> sums;     // [m][k / 32], dx x the sum of the 32 int8 values
};

void widen_activations(const act_q8& a, unsigned m, unsigned k, act_q16& out) {
  out.q.assign(a.q.begin(), a.q.begin() + static_cast<std::ptrdiff_t>(std::size_t{m} * k));
  out.d.assign(a.d.begin(), a.d.begin() + static_cast<std::ptrdiff_t>(std::size_t{m} * k / 256));
  out.sums.resize(std::size_t{m} * k / 32);
  for (std::size_t i = 0; i < out.sums.size(); ++i)
    out.sums[i] = a.d[i / 8] * static_cast<float>(a.sums[2 * i] + a.sums[2 * i + 1]);
}

// One super-block of one weight row for the int16 kernels: w[i] = the value's integer times its
// group's integer scale (|w| <= 945 for q4_K, <= 4096 for q6_K), one float scale `d` for all,
// and q4_K's minimums as dmin x m_j per 32 values (zero for q6_K, whose offset of 32 is in w).
struct wide_block {
  alignas(64) std::int16_t w[256];
  alignas(32) float mins[8];
  float d;
};

// The 32 unsigned bytes `v` times `lo` (first 16) and `hi` (last 16) minus `offset` first.
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline void
widen_scaled(__m256i v, std::int16_t offset, std::int16_t lo, std::int16_t hi, std::int16_t* w) {
  const __m256i o = _mm256_set1_epi16(offset);
  const __m256i a = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), o);
  const __m256i b = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)), o);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), _mm256_mullo_epi16(a, _mm256_set1_epi16(lo)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(w + 16),
                     _mm256_mullo_epi16(b, _mm256_set1_epi16(hi)));
}

template<ggml_type T>
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline void
widen_block(const std::byte* b, wide_block& out) {
  using B = super_blocks<T>;
  const auto sc = B::prepare(b);
  out.d = sc.d;
  for (unsigned g = 0; g < 8; ++g) {
    const __m256i v = B::values(b, g);
    if constexpr (T == ggml_type::q4_k) {
      const auto s = static_cast<std::int16_t>(sc.sc[g]);
      widen_scaled(v, 0, s, s, out.w + 32 * g);
      out.mins[g] = sc.dmin * static_cast<float>(sc.mn[g]);
    } else {
      widen_scaled(v, 32, static_cast<std::int16_t>(sc.sc[2 * g]),
                   static_cast<std::int16_t>(sc.sc[2 * g + 1]), out.w + 32 * g);
      out.mins[g] = 0.0f;
    }
  }
}

// Float accumulators of one row group: [row][activation row], the products and the minimums.
struct wide_acc {
  __m256 dot[group_rows][quant_linear::small_m_limit];
  __m256 mins[group_rows][quant_linear::small_m_limit];
};

// acc[r][m0 + mm] += the super-block `s` of R prepared rows `w` times activation rows m0..m0+MB,
// in int32 over the super-block (vpmaddwd and vpaddd on 16 lanes), one float multiply per
// super-block; the minimums by one 8-float multiply.
template<unsigned R, unsigned MB, bool MINS>
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline void
wide_avx2_mb(const wide_block* w, const act_q16& a, unsigned k, std::size_t s, unsigned m0,
             wide_acc& acc) {
  const std::size_t blocks = k / 256;
  __m256i sum[R][MB];
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < MB; ++mm)
      sum[r][mm] = _mm256_setzero_si256();
  const std::int16_t* x0 = a.q.data() + std::size_t{m0} * k + s * 256;
  for (unsigned i = 0; i < 256; i += 16) {
    __m256i x[MB];
    for (unsigned mm = 0; mm < MB; ++mm)
      x[mm] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0 + std::size_t{mm} * k + i));
    for (unsigned r = 0; r < R; ++r) {
      const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[r].w + i));
      for (unsigned mm = 0; mm < MB; ++mm)
        sum[r][mm] = _mm256_add_epi32(sum[r][mm], _mm256_madd_epi16(wv, x[mm]));
    }
  }
  for (unsigned mm = 0; mm < MB; ++mm) {
    const std::size_t ai = (m0 + mm) * blocks + s;
    const float dx = a.d[ai];
    for (unsigned r = 0; r < R; ++r) {
      auto& d = acc.dot[r][m0 + mm];
      d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][mm]), _mm256_set1_ps(w[r].d * dx), d);
      if constexpr (MINS)
        acc.mins[r][m0 + mm] =
            _mm256_fmadd_ps(_mm256_load_ps(w[r].mins), _mm256_loadu_ps(a.sums.data() + ai * 8),
                            acc.mins[r][m0 + mm]);
    }
  }
}

// The sum of the lanes of `dot` minus those of `mins`.
__attribute__((target(TRIAD_INT8_TARGET), always_inline)) inline float hsum_minus(__m256 dot,
                                                                                  __m256 mins) {
  const __m256 t = _mm256_sub_ps(dot, mins);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

// dst[mm][r] = row r of `rows` (R rows of type T, `row_bytes` apart) . x[mm] for mm < m: each
// super-block of the R rows prepared once (in L1), then multiplied by every activation row,
// two rows at a time (R x 2 int32 accumulators in registers, 8 of AVX2's 16).
template<ggml_type T, unsigned R>
__attribute__((target(TRIAD_INT8_TARGET))) void
wide_avx2(const std::byte* rows, std::size_t row_bytes, unsigned k, const act_q16& a, unsigned m,
          float* dst, std::size_t ldd) {
  constexpr bool mins = T == ggml_type::q4_k;
  wide_block w[R];
  static thread_local wide_acc acc;
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < m; ++mm) {
      acc.dot[r][mm] = _mm256_setzero_ps();
      acc.mins[r][mm] = _mm256_setzero_ps();
    }
  for (std::size_t s = 0; s < k / 256; ++s) {
    for (unsigned r = 0; r < R; ++r)
      widen_block<T>(rows + r * row_bytes + s * super_blocks<T>::bytes, w[r]);
    unsigned m0 = 0;
    for (; m0 + 2 <= m; m0 += 2)
      wide_avx2_mb<R, 2, mins>(w, a, k, s, m0, acc);
    if (m0 < m)
      wide_avx2_mb<R, 1, mins>(w, a, k, s, m0, acc);
  }
  for (unsigned r = 0; r < R; ++r)
    for (unsigned mm = 0; mm < m; ++mm)
      dst[mm * ldd + r] = hsum_minus(acc.dot[r][mm], acc.mins[r][mm]);
}

using wide_fn = void (*)(const std::byte*, std::size_t, unsigned, const act_q16&, unsigned, float*,
                         std::size_t);

// The int16 kernels of `type` (q4_K or q6_K): four rows at once and one.
std::pair<wide_fn, wide_fn> wide_of(ggml_type type) {
  if (type == ggml_type::q4_k)
    return {&wide_avx2<ggml_type::q4_k, group_rows>, &wide_avx2<ggml_type::q4_k, 1>};
  return {&wide_avx2<ggml_type::q6_k, group_rows>, &wide_avx2<ggml_type::q6_k, 1>};
}

// -- AVX512_VNNI kernels of q4_K and q6_K (any M up to small_m_limit) --

// One super-block prepared for `vpdpbusd`: four registers of 64 unsigned values in value order,
// each with its scales for `vpdpwssd` (one per 32-bit lane of 4 products, in the low 16 bits),
// the products' float scale `d`, and the offset: int16 multipliers of the activations' sums
// (q4_K: its minimums per 32, 8 lanes; q6_K: its scales per 16) times `offset_scale`
// (q4_K: dmin; q6_K: 32 d), subtracted.
struct vnni_block {
  __m512i w[4];
  __m512i sc[4];
  __m256i offset;
  float d, offset_scale;
};

// Lane l of 16 gets scale `first + l / per`.
#define TRIAD_VNNI_TARGET512 TRIAD_VNNI_TARGET ",avx512bw"
__attribute__((target(TRIAD_VNNI_TARGET512), always_inline)) inline __m512i
spread(__m512i scales, int first, int per) {
  alignas(64) std::int32_t idx[16];
  for (int l = 0; l < 16; ++l)
    idx[l] = first + l / per;
  // The maskz_ forms throughout: GCC 12's plain ones warn (-Wmaybe-uninitialized on
  // _mm512_undefined_*).
  return _mm512_maskz_permutexvar_epi32(0xFFFF, _mm512_load_si512(idx), scales);
}

template<ggml_type T>
struct vnni_blocks;

template<>
struct vnni_blocks<ggml_type::q4_k> {
  static constexpr unsigned bytes = 144;
  __attribute__((target(TRIAD_VNNI_TARGET512), always_inline)) static inline void
  prepare(const std::byte* b, vnni_block& out) {
    // Scales 0..7 into u[0..1], minimums into u[2..3] (scale_min_k4's layout, four at once).
    std::uint32_t u[4];
    std::memcpy(u, b + 4, 12);
    constexpr std::uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    u[3] = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);
    const std::uint32_t mins_low = u[1] & low6;
    u[1] = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);
    u[2] = mins_low;
    u[0] &= low6;
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
    const __m512i scales = _mm512_maskz_cvtepu8_epi32(0xFFFF, packed); // 0..7; 8..15: minimums
    out.offset = _mm256_cvtepu8_epi16(_mm_srli_si128(packed, 8));      // minimums, then zeros
    out.d = half_to_float(block_u16(b));
    out.offset_scale = half_to_float(block_u16(b + 2));
    // 32 bytes hold groups 2j (low nibbles) and 2j + 1 (high): both halves of a register get
    // the bytes, the second's 16-bit lanes shift by 4.
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004,
                                           0x0004000400040004, 0x0004000400040004, 0, 0, 0, 0);
    for (unsigned j = 0; j < 4; ++j) {
      const __m512i q = _mm512_maskz_broadcast_i64x4(
          0xFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * j)));
      out.w[j] = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);
      out.sc[j] = spread(scales, static_cast<int>(2 * j), 8);
    }
  }
};

template<>
struct vnni_blocks<ggml_type::q6_k> {
  static constexpr unsigned bytes = 210;
  __attribute__((target(TRIAD_VNNI_TARGET512), always_inline)) static inline void
  prepare(const std::byte* b, vnni_block& out) {
    // 16 signed scales, one per 16 values in value order; their low 16 bits for vpdpwssd.
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    const __m512i scales =
        _mm512_and_si512(_mm512_maskz_cvtepi8_epi32(0xFFFF, sc8), _mm512_set1_epi32(0xFFFF));
    out.offset = _mm256_cvtepi8_epi16(sc8);
    out.d = half_to_float(block_u16(b + 208));
    out.offset_scale = 32.0f * out.d;
    // Values 64t..64t+63: half h = t / 2 of 128; low 4 bits from the half's 64 bytes of ql (low
    // nibbles for even t, high for odd), 2 high bits from its 32 bytes of qh at bits 4(t % 2)
    // (first 32 values) and 4(t % 2) + 2 (the rest).
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    for (unsigned t = 0; t < 4; ++t) {
      const unsigned h = t / 2;
      __m512i lo = _mm512_loadu_si512(b + 64 * h);
      lo = _mm512_and_si512((t & 1) ? _mm512_srli_epi16(lo, 4) : lo, m4);
      const __m512i qh = _mm512_maskz_broadcast_i64x4(
          0xFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
      const long long s0 = 4 * (t & 1), s1 = s0 + 2;
      const long long lanes0 = s0 * 0x0001000100010001LL, lanes1 = s1 * 0x0001000100010001LL;
      const __m512i shift =
          _mm512_set_epi64(lanes1, lanes1, lanes1, lanes1, lanes0, lanes0, lanes0, lanes0);
      const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), m2);
      out.w[t] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
      out.sc[t] = spread(scales, static_cast<int>(4 * t), 4);
    }
  }
};

// Float sums of one row against up to small_m_limit activation rows: the products' and the
// offsets'.
struct vnni_acc {
  vec<16> dot[quant_linear::small_m_limit];
  __m256 offset[quant_linear::small_m_limit];
};

// acc[m0 + mm] += super-block `blk` of the prepared row `w` times activation rows m0..m0+MB:
// `vpdpbusd` for the products in fours, `vpdpwssd` multiplying them by their scales into int32
// over the super-block (4 x 63 x 128 fits 16 bits), one float multiply per super-block; the
// offset by `vpmaddwd` of its multipliers and the activations' sums.
template<ggml_type T, unsigned MB, bool FIRST>
__attribute__((target(TRIAD_VNNI_TARGET512), always_inline)) inline void
vnni_rows(const vnni_block& w, const act_q8& a, std::size_t blocks, std::size_t blk, unsigned m0,
          vnni_acc& acc) {
  typedef std::int32_t ints __attribute__((vector_size(64)));
  __m512i sum[MB];
  for (unsigned mm = 0; mm < MB; ++mm)
    sum[mm] = _mm512_setzero_si512();
  for (unsigned j = 0; j < 4; ++j)
    for (unsigned mm = 0; mm < MB; ++mm) {
      const auto* x = a.q.data() + ((m0 + mm) * blocks + blk) * 256 + 64 * j;
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.w[j], _mm512_loadu_si512(x));
      sum[mm] = _mm512_dpwssd_epi32(sum[mm], p, w.sc[j]);
    }
  for (unsigned mm = 0; mm < MB; ++mm) {
    const std::size_t ai = (m0 + mm) * blocks + blk;
    const float dx = a.d[ai];
    // GCC's vector conversion: _mm512_cvtepi32_ps warns as above.
    const vec<16> dot =
        __builtin_convertvector(reinterpret_cast<ints>(sum[mm]), vec<16>) * (w.d * dx);
    const std::int16_t* sums =
        T == ggml_type::q4_k ? a.sums32.data() + ai * 8 : a.sums16.data() + ai * 16;
    const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums));
    const __m256 off = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(w.offset, s)),
                                     _mm256_set1_ps(w.offset_scale * dx));
    // The first super-block sets the sums (no zeroing pass: per row it was a memset call).
    if constexpr (FIRST) {
      acc.dot[m0 + mm] = dot;
      acc.offset[m0 + mm] = off;
    } else {
      acc.dot[m0 + mm] += dot;
      acc.offset[m0 + mm] = _mm256_add_ps(acc.offset[m0 + mm], off);
    }
  }
}

// Super-block `blk` of the prepared row `w` times activation rows 0..m, four at a time.
template<ggml_type T, bool FIRST>
__attribute__((target(TRIAD_VNNI_TARGET512), always_inline)) inline void
vnni_pass(const vnni_block& w, const act_q8& a, std::size_t blocks, std::size_t blk, unsigned m,
          vnni_acc& acc) {
  unsigned m0 = 0;
  for (; m0 + 4 <= m; m0 += 4)
    vnni_rows<T, 4, FIRST>(w, a, blocks, blk, m0, acc);
  switch (m - m0) {
  case 3:
    vnni_rows<T, 3, FIRST>(w, a, blocks, blk, m0, acc);
    break;
  case 2:
    vnni_rows<T, 2, FIRST>(w, a, blocks, blk, m0, acc);
    break;
  case 1:
    vnni_rows<T, 1, FIRST>(w, a, blocks, blk, m0, acc);
    break;
  default:
    break;
  }
}

// Bytes ahead of the super-block in use that the VNNI kernels prefetch (4-7 super-blocks).
// Measured on Zen 4 (768 x 32000 q6_K, M = 16): 3.5 ms against 4.6-4.9 without; a q6_K
// super-block's first read (its scale, at its end) had missed every time.
constexpr std::size_t prefetch_distance = 1024;

// dst[mm * ldd] = row . x[mm] for mm < m: each super-block prepared once, then multiplied by
// the activation rows four at a time.
template<ggml_type T>
__attribute__((target(TRIAD_VNNI_TARGET512))) void vnni_row(const std::byte* row, unsigned k,
                                                            const act_q8& a, unsigned m, float* dst,
                                                            std::size_t ldd) {
  vnni_acc acc; // set by the first super-block
  const std::size_t blocks = k / 256;
  vnni_block w;
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    // The weights stream from memory once per call: fetch ahead (past this row's end too:
    // the next row follows, and a prefetch past the run's end does not fault).
    const std::byte* ahead = row + blk * vnni_blocks<T>::bytes + prefetch_distance;
    for (unsigned line = 0; line < vnni_blocks<T>::bytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
    vnni_blocks<T>::prepare(row + blk * vnni_blocks<T>::bytes, w);
    if (blk == 0)
      vnni_pass<T, true>(w, a, blocks, blk, m, acc);
    else
      vnni_pass<T, false>(w, a, blocks, blk, m, acc);
  }
  for (unsigned mm = 0; mm < m; ++mm) {
    const auto* p = reinterpret_cast<const float*>(&acc.dot[mm]);
    const __m256 dot = _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));
    dst[mm * ldd] = hsum_minus(dot, acc.offset[mm]);
  }
}

using vnni_fn = void (*)(const std::byte*, unsigned, const act_q8&, unsigned, float*, std::size_t);

vnni_fn vnni_of(ggml_type type) {
  return type == ggml_type::q4_k ? &vnni_row<ggml_type::q4_k> : &vnni_row<ggml_type::q6_k>;
}
#undef TRIAD_VNNI_TARGET512

} // namespace

expected<void> quant_linear::check(unsigned k, unsigned n, const quantized_matrix& runs) {
  if (runs.empty())
    return make_error(errc::invalid_argument, "quantized weight: no rows");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    const std::string which = "quantized weight, run " + std::to_string(i) + " (" +
                              std::string{to_string(run.type)} + "): ";
    if (!kept_quantized(run.type))
      return make_error(errc::unsupported,
                        which + "the quantized kernels read q4_0, q8_0, q4_K and q6_K");
    const auto t = traits_of(run.type);
    if (k == 0 || k % t.block_elements != 0)
      return make_error(errc::invalid_argument, which + "input width " + std::to_string(k) +
                                                    " is not a multiple of the block (" +
                                                    std::to_string(t.block_elements) + ")");
    if (run.rows == 0 || run.bytes.size() != std::size_t{run.rows} * row_bytes(run.type, k))
      return make_error(errc::invalid_argument,
                        which + std::to_string(run.bytes.size()) + " bytes do not hold " +
                            std::to_string(run.rows) + " rows of " + std::to_string(k) + " values");
  }
  unsigned rows = 0;
  for (const auto& run : runs)
    rows += run.rows;
  if (rows != n)
    return make_error(errc::invalid_argument, "quantized weight: " + std::to_string(rows) +
                                                  " rows, expected " + std::to_string(n));
  return {};
}

quant_linear::quant_linear(dnnl::engine& eng, unsigned k, quantized_matrix runs, vector_isa isa,
                           bool bf16_prefill)
    : k_(k)
    , runs_(std::move(runs))
    , isa_(isa)
    , large_(
          eng, k,
          [&] {
            unsigned n = 0;
            for (const auto& r : runs_)
              n += r.rows;
            return n;
          }(),
          tile_columns, widened_matmul::tile_layout::column_major, bf16_prefill) {
  for (const auto& run : runs_) {
    run_first_row_.push_back(n_);
    const std::size_t stride = row_bytes(run.type, k_);
    for (unsigned first = 0; first < run.rows; first += group_rows)
      groups_.push_back({run.bytes.data() + first * stride, stride, run.type, n_ + first,
                         std::min(group_rows, run.rows - first)});
    n_ += run.rows;
  }
  bytes_before_.reserve(groups_.size() + 1);
  bytes_before_.push_back(0);
  for (const auto& group : groups_)
    bytes_before_.push_back(bytes_before_.back() + group.stride * group.count);
  prefill_kernel_ = large_.kernel(small_m_limit + 1);
  int8_ = isa_ != vector_isa::none;
  vnni_ = isa_ == vector_isa::avx512 && __builtin_cpu_supports("avx512vnni");
}

std::size_t quant_linear::weight_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& run : runs_)
    bytes += run.bytes.size();
  return bytes;
}

std::string quant_linear::kernel() const {
  // The types of the runs: all, q4_K and q6_K, the rest.
  std::string types, super, other;
  auto add = [](std::string& to, std::string_view name) {
    if (to.find(name) != std::string::npos)
      return;
    if (!to.empty())
      to += '+';
    to += name;
  };
  for (const auto& run : runs_) {
    add(types, to_string(run.type));
    add(per_super_block(run.type) ? super : other, to_string(run.type));
  }
  const std::string small_m = " (M<=" + std::to_string(small_m_limit) + ") + ";
  const std::string int8_m = " (M<=" + std::to_string(int8_m_limit) + ") + ";
  const std::string own = isa_ == vector_isa::none ? "portable" : std::string{to_string(isa_)};
  std::string out;
  if (vnni_) {
    if (!super.empty())
      out += "triad:" + super + "_int8_vnni" + small_m;
    if (!other.empty())
      out += "triad:" + other + "_int8_vnni" + int8_m + "triad:" + other + "_" + own + small_m;
  } else if (int8_) {
    out = "triad:" + types + "_int8_avx2" + int8_m;
    if (!super.empty())
      out += "triad:" + super + "_int16_avx2" + small_m;
    if (!other.empty())
      out += "triad:" + other + "_" + own + small_m;
  } else {
    out = "triad:" + types + "_" + own + small_m;
  }
  return out + "onednn " + (large_.bf16() ? "bf16 " : "f32 ") + prefill_kernel_ + " (prefill)";
}

void quant_linear::forward(dnnl::stream& strm, const float* src, float* dst, unsigned m) {
  if (m == 0)
    return;
  if (m <= small_m_limit)
    forward_small(src, dst, m);
  else
    large_.forward(strm, src, dst, m,
                   [&](auto* tile, unsigned first, unsigned width) { widen(tile, first, width); });
}

void quant_linear::forward_small(const float* src, float* dst, unsigned m) const {
  // What runs, per group of rows: q4_K and q6_K by the VNNI kernels (any M), else up to
  // int8_m_limit every type by the int8 kernels; above it q4_K and q6_K by the int16 ones and
  // the rest by the float kernels. The activations the integer kernels take are quantized once
  // per call, on the calling thread (one buffer per driver thread, reused).
  thread_local act_q8 per_32, per_256;
  thread_local act_q16 wide;
  bool small = false, super = false;
  for (const auto& run : runs_)
    (per_super_block(run.type) ? super : small) = true;
  const bool int8 = int8_ && m <= int8_m_limit;
  const bool int16 = int8_ && !int8 && !vnni_ && super;
  if (int8_ && super)
    quantize_activations(src, m, k_, 256, per_256);
  if (int8 && small)
    quantize_activations(src, m, k_, 32, per_32);
  if (int16)
    widen_activations(per_256, m, k_, wide);
  // The caller's: a thread_local named in the parallel region is each thread's own.
  const act_q8& a32 = per_32;
  const act_q8& a256 = per_256;
  const act_q16& a16 = wide;
  auto run_group = [&](const row_group& group) {
    const bool per_256 = per_super_block(group.type);
    if (vnni_ && per_256) {
      const vnni_fn fn = vnni_of(group.type);
      for (unsigned r = 0; r < group.count; ++r)
        fn(group.rows + r * group.stride, k_, a256, m, dst + group.row + r, n_);
    } else if (int16 && per_256) {
      const auto [four, one] = wide_of(group.type);
      if (group.count == group_rows)
        four(group.rows, group.stride, k_, a16, m, dst + group.row, n_);
      else
        for (unsigned r = 0; r < group.count; ++r)
          one(group.rows + r * group.stride, group.stride, k_, a16, m, dst + group.row + r, n_);
    } else if (int8) {
      const int8_fn fn = int8_of(group.type, vnni_);
      for (unsigned r = 0; r < group.count; ++r)
        fn(group.rows + r * group.stride, k_, per_256 ? a256 : a32, 0, m, dst + group.row + r, n_);
    } else {
      const auto kern = kernels_of(group.type, isa_);
      if (group.count == group_rows)
        kern.four(group.rows, group.stride, k_, src, m, dst + group.row, n_);
      else
        for (unsigned r = 0; r < group.count; ++r)
          kern.one(group.rows + r * group.stride, group.stride, k_, src, m, dst + group.row + r,
                   n_);
    }
  };
  const bool parallel = std::size_t{n_} * k_ * m >= parallel_threshold;
  if (m <= int8_m_limit) {
    // Decode steps read the weights once: each thread one contiguous share of their bytes
    // (measured on Zen 4: a dynamic schedule lost a fifth of batch-1 decode; equal counts of
    // groups left the thread with a fused matrix's q6_K rows behind).
#pragma omp parallel if (parallel)
    {
      const auto [first, last] = byte_share(static_cast<unsigned>(omp_get_thread_num()),
                                            static_cast<unsigned>(omp_get_num_threads()));
      for (std::size_t g = first; g < last; ++g)
        run_group(groups_[g]);
    }
  } else {
    // Batches compute: equal counts of rows are equal work whatever their type (a dynamic
    // schedule measured no better on Zen 4).
#pragma omp parallel for schedule(static) if (parallel)
    for (std::size_t g = 0; g < groups_.size(); ++g)
      run_group(groups_[g]);
  }
}

std::pair<std::size_t, std::size_t> quant_linear::byte_share(unsigned thread,
                                                             unsigned threads) const {
  // The groups from the first that starts at or past thread / threads of the bytes.
  auto start = [&](unsigned t) -> std::size_t {
    const std::size_t at = bytes_before_.back() * t / threads;
    return static_cast<std::size_t>(
        std::lower_bound(bytes_before_.begin(), bytes_before_.end() - 1, at) -
        bytes_before_.begin());
  };
  return {start(thread), thread + 1 == threads ? groups_.size() : start(thread + 1)};
}

void quant_linear::decode_row(unsigned row, float* out) const {
  std::size_t r = 0;
  while (r + 1 < runs_.size() && run_first_row_[r + 1] <= row)
    ++r;
  const auto& run = runs_[r];
  const std::size_t stride = row_bytes(run.type, k_);
  kernels_of(run.type, isa_).decode(run.bytes.data() + (row - run_first_row_[r]) * stride, k_, out);
}

void quant_linear::widen(float* tile, unsigned first, unsigned width) const {
#pragma omp parallel for schedule(static) if (std::size_t{k_} * width >= parallel_threshold)
  for (unsigned i = 0; i < width; ++i)
    decode_row(first + i, tile + std::size_t{i} * k_);
}

void quant_linear::widen(std::uint16_t* tile, unsigned first, unsigned width) const {
#pragma omp parallel for schedule(static) if (std::size_t{k_} * width >= parallel_threshold)
  for (unsigned i = 0; i < width; ++i) {
    thread_local std::vector<float> row; // each worker's own
    row.resize(k_);
    decode_row(first + i, row.data());
    to_bf16(row.data(), tile + std::size_t{i} * k_, k_);
  }
}

} // namespace triad::detail
