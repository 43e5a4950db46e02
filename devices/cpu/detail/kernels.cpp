#include "devices/cpu/detail/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

// Row kernels are compiled for x86-64-v4 (AVX-512 F/BW/DQ/VL), AVX2 and baseline x86-64 and
// picked at load time, so one binary uses the widest vectors the CPU has. Parallel loops (OpenMP,
// the same runtime oneDNN uses) live in the plain wrappers that call them.
#define TRIAD_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))

namespace triad::detail {

namespace {

// Positions and query heads whose scores attend() accumulates in registers at once.
constexpr std::size_t score_block = 16;
constexpr std::size_t max_group_block = 4;

// Work below this many elements stays on the calling thread: a parallel region costs more.
constexpr std::size_t parallel_threshold = 1 << 15;

// e^x for x in float range, vectorisable (Cephes expf: Cody-Waite reduction and a degree-6
// polynomial; relative error about 2e-7).
// e^r for r in [-ln2/2, ln2/2]: the Cephes polynomial, for a float or a vector of floats.
// Always inlined: a vector argument passed to an out-of-line copy would cross the target
// clones' different calling conventions (see -Wno-psabi in CMakeLists.txt).
template<class V>
__attribute__((always_inline)) inline V exp_poly(V r) noexcept {
  V p = r * 0.0f + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float fast_exp(float x) noexcept {
  x = std::min(std::max(x, -87.0f), 88.0f);
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float p = exp_poly(x - n * 0.693359375f + n * 2.12194440e-4f);
  std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

TRIAD_CLONES void to_bf16_run(const float* src, std::uint16_t* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    bits += 0x7fffu + ((bits >> 16) & 1u);
    dst[i] = static_cast<std::uint16_t>(bits >> 16);
  }
}

TRIAD_CLONES void rmsnorm_row(const float* x, const float* w, float* out, std::size_t width,
                              float eps) noexcept {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < width; ++i)
    sum += x[i] * x[i];
  float scale = 1.0f / std::sqrt(sum / static_cast<float>(width) + eps);
  for (std::size_t i = 0; i < width; ++i)
    out[i] = x[i] * scale * w[i];
}

TRIAD_CLONES void add_run(float* x, const float* y, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    x[i] += y[i];
}

// Splits [0, n) into per-thread chunks and runs fn(begin, end) on each.
template<class F>
void parallel_chunks(std::size_t n, F&& fn) {
  if (n < parallel_threshold) {
    fn(std::size_t{0}, n);
    return;
  }
  constexpr std::size_t chunk = 1 << 13;
  std::size_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (std::size_t c = 0; c < chunks; ++c)
    fn(c * chunk, std::min(n, (c + 1) * chunk));
}

} // namespace

void to_bf16(const float* src, std::uint16_t* dst, std::size_t n) noexcept {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { to_bf16_run(src + b, dst + b, e - b); });
}

void add_inplace(float* x, const float* y, std::size_t n) noexcept {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { add_run(x + b, y + b, e - b); });
}

void rmsnorm(const float* x, const float* w, float* out, std::size_t rows, std::size_t width,
             float eps) noexcept {
#pragma omp parallel for schedule(static) if (rows * width >= parallel_threshold)
  for (std::size_t r = 0; r < rows; ++r)
    rmsnorm_row(x + r * width, w, out + r * width, width, eps);
}

void rmsnorm_serial(const float* x, const float* w, float* out, std::size_t rows, std::size_t width,
                    float eps) noexcept {
  for (std::size_t r = 0; r < rows; ++r)
    rmsnorm_row(x + r * width, w, out + r * width, width, eps);
}

rope_table::rope_table(std::size_t max_positions, std::size_t head_dim, double theta,
                       std::span<const float> factors, bool adjacent)
    : half(head_dim / 2)
    , adjacent(adjacent)
    , cos(max_positions * half)
    , sin(max_positions * half) {
  for (std::size_t p = 0; p < max_positions; ++p)
    for (std::size_t i = 0; i < half; ++i) {
      double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      if (!factors.empty())
        freq /= static_cast<double>(factors[i]);
      double angle = static_cast<double>(p) * freq;
      cos[p * half + i] = static_cast<float>(std::cos(angle));
      sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
}

void rope_table::apply(float* vec, std::size_t pos) const noexcept {
  const float* c = cos.data() + pos * half;
  const float* s = sin.data() + pos * half;
  if (adjacent) {
    for (std::size_t i = 0; i < half; ++i) {
      float x1 = vec[2 * i];
      float x2 = vec[2 * i + 1];
      vec[2 * i] = x1 * c[i] - x2 * s[i];
      vec[2 * i + 1] = x2 * c[i] + x1 * s[i];
    }
    return;
  }
  for (std::size_t i = 0; i < half; ++i) {
    float x1 = vec[i];
    float x2 = vec[i + half];
    vec[i] = x1 * c[i] - x2 * s[i];
    vec[i + half] = x2 * c[i] + x1 * s[i];
  }
}

// GCC vector types: 16 lanes, one zmm register in the AVX-512 clone, split in the others.
typedef float v16f __attribute__((vector_size(64)));
typedef std::int32_t v16i __attribute__((vector_size(64)));
typedef std::uint16_t v16h __attribute__((vector_size(32)));

// 16 values from 16 contiguous f32 or bf16 elements.
__attribute__((always_inline)) inline v16f load16(const std::byte* p, bool bf16) noexcept {
  if (bf16) {
    v16h h;
    std::memcpy(&h, p, sizeof(h));
    return (v16f)(__builtin_convertvector(h, v16i) << 16);
  }
  v16f f;
  std::memcpy(&f, p, sizeof(f));
  return f;
}

// fast_exp on 16 lanes (rounding by the 1.5 * 2^23 trick instead of floor).
__attribute__((always_inline)) inline v16f exp16(v16f x) noexcept {
  x = x < -87.0f ? v16f{} - 87.0f : x;
  x = x > 88.0f ? v16f{} + 88.0f : x;
  v16f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  v16f p = exp_poly(x - n * 0.693359375f + n * 2.12194440e-4f);
  v16i bits = (__builtin_convertvector(n, v16i) + 127) << 23;
  return p * (v16f)bits;
}

namespace {
// silu(g) * u on 16 lanes at a time (the scalar fast_exp does not vectorise).
TRIAD_CLONES void silu_mul_row(const float* g, const float* u, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    v16f gv, uv;
    std::memcpy(&gv, g + i, sizeof(gv));
    std::memcpy(&uv, u + i, sizeof(uv));
    v16f r = gv / (1.0f + exp16(-gv)) * uv;
    std::memcpy(out + i, &r, sizeof(r));
  }
  for (; i < n; ++i)
    out[i] = g[i] / (1.0f + fast_exp(-g[i])) * u[i];
}
} // namespace

void silu_mul(const float* gate_up, float* out, std::size_t rows, std::size_t ffn) noexcept {
#pragma omp parallel for schedule(static) if (rows * ffn >= parallel_threshold)
  for (std::size_t r = 0; r < rows; ++r)
    silu_mul_row(gate_up + r * 2 * ffn, gate_up + r * 2 * ffn + ffn, out + r * ffn, ffn);
}

// attend() for a compile-time group size and head width, in vector registers: G x 16 scores
// while scoring a block of positions, G x HD outputs while summing values.
template<std::size_t G, std::size_t HD, bool BF16>
__attribute__((always_inline)) inline void attend_fixed(const float* q, std::size_t n,
                                                        const kv_runs& kv, float scale, float* out,
                                                        float* scratch) noexcept {
  static_assert(HD % 16 == 0);
  const std::size_t pt = kv.page_tokens;
  constexpr std::size_t elem = BF16 ? 2 : 4;
  // Scores. A K run is [dim][slot]; full blocks of 16 slots load as vectors.
  // Pages sit anywhere in the cache, so the hardware prefetcher cannot follow them: while a
  // page is scored, the next page's K run and this page's V run (read by the second pass) are
  // requested ahead.
  const std::size_t run_bytes = HD * pt * elem;
  for (std::size_t page = 0; page * pt < n; ++page) {
    const std::byte* run = kv.base + kv.pages[page] * kv.page_bytes + kv.k_offset;
    const std::byte* vrun = kv.base + kv.pages[page] * kv.page_bytes + kv.v_offset;
    const std::byte* next =
        (page + 1) * pt < n ? kv.base + kv.pages[page + 1] * kv.page_bytes + kv.k_offset : nullptr;
    for (std::size_t line = 0; line < run_bytes; line += 64) {
      if (next != nullptr)
        __builtin_prefetch(next + line);
      __builtin_prefetch(vrun + line);
    }
    std::size_t first = page * pt;
    std::size_t count = std::min(pt, n - first);
    for (std::size_t j0 = 0; j0 < count; j0 += 16) {
      std::size_t m = std::min<std::size_t>(16, count - j0);
      v16f acc[G] = {};
      // A run holds pt columns, so a whole block of 16 can be loaded even when only m hold
      // positions of this sequence; the other lanes are computed and dropped.
      if (j0 + 16 <= pt) {
        for (std::size_t i = 0; i < HD; ++i) {
          v16f col = load16(run + (i * pt + j0) * elem, BF16);
#pragma GCC unroll 8
          for (std::size_t g = 0; g < G; ++g)
            acc[g] += q[g * HD + i] * col;
        }
      } else {
        for (std::size_t i = 0; i < HD; ++i) {
          const std::byte* src = run + (i * pt + j0) * elem;
          v16f col{};
          for (std::size_t j = 0; j < m; ++j)
            col[j] = BF16 ? from_bf16(reinterpret_cast<const std::uint16_t*>(src)[j])
                          : reinterpret_cast<const float*>(src)[j];
#pragma GCC unroll 8
          for (std::size_t g = 0; g < G; ++g)
            acc[g] += q[g * HD + i] * col;
        }
      }
      for (std::size_t g = 0; g < G; ++g)
        for (std::size_t j = 0; j < m; ++j)
          scratch[g * n + first + j0 + j] = acc[g][j] * scale;
    }
  }
  // Softmax per head; the 1 / sum factor is applied to the outputs at the end.
  float inv[G];
  for (std::size_t g = 0; g < G; ++g) {
    float* sc = scratch + g * n;
    v16f vmax = v16f{} + sc[0];
    std::size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      v16f v;
      std::memcpy(&v, sc + j, sizeof(v));
      vmax = v > vmax ? v : vmax;
    }
    float mx = vmax[0];
    for (std::size_t k = 1; k < 16; ++k)
      mx = std::max(mx, vmax[k]);
    for (; j < n; ++j)
      mx = std::max(mx, sc[j]);
    v16f vsum{};
    float total = 0;
    for (j = 0; j + 16 <= n; j += 16) {
      v16f v;
      std::memcpy(&v, sc + j, sizeof(v));
      v = exp16(v - mx);
      vsum += v;
      std::memcpy(sc + j, &v, sizeof(v));
    }
    for (; j < n; ++j)
      total += (sc[j] = fast_exp(sc[j] - mx));
    for (std::size_t k = 0; k < 16; ++k)
      total += vsum[k];
    inv[g] = 1.0f / total;
  }
  // Weighted values. A V run is [slot][dim].
  constexpr std::size_t lanes = HD / 16;
  v16f o[G][lanes] = {};
  for (std::size_t page = 0; page * pt < n; ++page) {
    const std::byte* run = kv.base + kv.pages[page] * kv.page_bytes + kv.v_offset;
    std::size_t first = page * pt;
    std::size_t count = std::min(pt, n - first);
    for (std::size_t j = 0; j < count; ++j) {
      v16f row[lanes];
#pragma GCC unroll 8
      for (std::size_t c = 0; c < lanes; ++c)
        row[c] = load16(run + (j * HD + c * 16) * elem, BF16);
#pragma GCC unroll 8
      for (std::size_t g = 0; g < G; ++g) {
        float w = scratch[g * n + first + j];
#pragma GCC unroll 8
        for (std::size_t c = 0; c < lanes; ++c)
          o[g][c] += w * row[c];
      }
    }
  }
  for (std::size_t g = 0; g < G; ++g) {
    for (std::size_t c = 0; c < lanes; ++c)
      o[g][c] *= inv[g];
    std::memcpy(out + g * HD, o[g], HD * sizeof(float));
  }
}

// attend_fixed<G, 64> for query groups of G, compiled per ISA (target_clones takes no template).
#define TRIAD_ATTEND_D64(G)                                                                        \
  TRIAD_CLONES void attend_g##G##_d64(const float* q, std::size_t n, const kv_runs& kv,            \
                                      float scale, float* out, float* scratch) noexcept {          \
    if (kv.bf16)                                                                                   \
      attend_fixed<G, 64, true>(q, n, kv, scale, out, scratch);                                    \
    else                                                                                           \
      attend_fixed<G, 64, false>(q, n, kv, scale, out, scratch);                                   \
  }
TRIAD_ATTEND_D64(4)
TRIAD_ATTEND_D64(3)
TRIAD_ATTEND_D64(2)
TRIAD_ATTEND_D64(1)
#undef TRIAD_ATTEND_D64

namespace {
TRIAD_CLONES void attend_generic(const float* q, std::size_t group, std::size_t head_dim,
                                 std::size_t n, const kv_runs& kv, float scale, float* out,
                                 float* scratch) noexcept {
  constexpr std::size_t max_head_dim = 512;
  float row[max_head_dim];
  const std::size_t hd = std::min(head_dim, max_head_dim);
  const std::size_t elem = kv.bf16 ? 2 : 4;
  // Loads row j of a run as floats; f32 rows are read in place.
  auto load = [&](const std::byte* run, std::size_t j) -> const float* {
    const std::byte* p = run + j * hd * elem;
    if (!kv.bf16)
      return reinterpret_cast<const float*>(p);
    const auto* b = reinterpret_cast<const std::uint16_t*>(p);
    for (std::size_t i = 0; i < hd; ++i)
      row[i] = from_bf16(b[i]);
    return row;
  };
  // Scores q . k_j: K runs are [dim][slot], so each dimension adds one vector of scores; a
  // block of 16 positions of every head of the group stays in registers across dimensions.
  for (std::size_t page = 0; page * kv.page_tokens < n; ++page) {
    const std::byte* run = kv.base + kv.pages[page] * kv.page_bytes + kv.k_offset;
    std::size_t first = page * kv.page_tokens;
    std::size_t count = std::min(kv.page_tokens, n - first);
    for (std::size_t j0 = 0; j0 < count; j0 += score_block) {
      std::size_t m = std::min(score_block, count - j0);
      for (std::size_t g0 = 0; g0 < group; g0 += max_group_block) {
        std::size_t gs = std::min(max_group_block, group - g0);
        float acc[max_group_block][score_block] = {};
        float col[score_block] = {};
        for (std::size_t i = 0; i < hd; ++i) {
          if (kv.bf16) {
            const auto* src = reinterpret_cast<const std::uint16_t*>(run) + i * kv.page_tokens + j0;
            for (std::size_t j = 0; j < m; ++j)
              col[j] = from_bf16(src[j]);
          } else {
            const auto* src = reinterpret_cast<const float*>(run) + i * kv.page_tokens + j0;
            for (std::size_t j = 0; j < m; ++j)
              col[j] = src[j];
          }
          for (std::size_t g = 0; g < gs; ++g) {
            float qi = q[(g0 + g) * hd + i];
#pragma omp simd
            for (std::size_t j = 0; j < score_block; ++j)
              acc[g][j] += qi * col[j];
          }
        }
        for (std::size_t g = 0; g < gs; ++g)
          for (std::size_t j = 0; j < m; ++j)
            scratch[(g0 + g) * n + first + j0 + j] = acc[g][j] * scale;
      }
    }
  }
  // Softmax per head, weights normalised in place.
  for (std::size_t g = 0; g < group; ++g) {
    float* s = scratch + g * n;
    float mx = s[0];
    for (std::size_t j = 1; j < n; ++j)
      mx = std::max(mx, s[j]);
    float total = 0;
#pragma omp simd reduction(+ : total)
    for (std::size_t j = 0; j < n; ++j) {
      s[j] = fast_exp(s[j] - mx);
      total += s[j];
    }
    float inv = 1.0f / total;
    for (std::size_t j = 0; j < n; ++j)
      s[j] *= inv;
  }
  std::fill(out, out + group * hd, 0.0f);
  for (std::size_t page = 0; page * kv.page_tokens < n; ++page) {
    const std::byte* run = kv.base + kv.pages[page] * kv.page_bytes + kv.v_offset;
    std::size_t count = std::min(kv.page_tokens, n - page * kv.page_tokens);
    for (std::size_t j = 0; j < count; ++j) {
      const float* v = load(run, j);
      for (std::size_t g = 0; g < group; ++g) {
        float w = scratch[g * n + page * kv.page_tokens + j];
        float* o = out + g * hd;
#pragma omp simd
        for (std::size_t i = 0; i < hd; ++i)
          o[i] += w * v[i];
      }
    }
  }
}

} // namespace

void attend(const float* q, std::size_t group, std::size_t head_dim, std::size_t n,
            const kv_runs& kv, float scale, float* out, float* scratch) noexcept {
  if (head_dim == 64) {
    // Query heads four at a time, then the rest together: each pass reads the K and V runs
    // once (groups of 3 and 7 are common: SmolLM2, Qwen2.5-0.5B).
    std::size_t g = 0;
    for (; g + 4 <= group; g += 4)
      attend_g4_d64(q + g * 64, n, kv, scale, out + g * 64, scratch + g * n);
    switch (group - g) {
    case 3:
      attend_g3_d64(q + g * 64, n, kv, scale, out + g * 64, scratch + g * n);
      break;
    case 2:
      attend_g2_d64(q + g * 64, n, kv, scale, out + g * 64, scratch + g * n);
      break;
    case 1:
      attend_g1_d64(q + g * 64, n, kv, scale, out + g * 64, scratch + g * n);
      break;
    default:
      break;
    }
  } else {
    attend_generic(q, group, head_dim, n, kv, scale, out, scratch);
  }
}

void store_column(const float* src, void* run, std::size_t slot, std::size_t page_tokens,
                  std::size_t n, bool dst_bf16) noexcept {
  if (dst_bf16) {
    std::uint16_t converted[512];
    std::size_t m = std::min<std::size_t>(n, 512);
    to_bf16_run(src, converted, m);
    auto* dst = static_cast<std::uint16_t*>(run);
    for (std::size_t i = 0; i < m; ++i)
      dst[i * page_tokens + slot] = converted[i];
  } else {
    auto* dst = static_cast<float*>(run);
    for (std::size_t i = 0; i < n; ++i)
      dst[i * page_tokens + slot] = src[i];
  }
}

void store(const float* src, void* dst, std::size_t n, bool dst_bf16) noexcept {
  if (dst_bf16)
    to_bf16_run(src, static_cast<std::uint16_t*>(dst), n);
  else
    std::memcpy(dst, src, n * sizeof(float));
}

} // namespace triad::detail
