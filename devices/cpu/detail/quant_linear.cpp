#include "devices/cpu/detail/quant_linear.hpp"

#include <algorithm>
#include <array>
#include <cstring>

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

} // namespace

expected<void> quant_linear::check(unsigned k, const quantized_matrix& runs) {
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
  return {};
}

quant_linear::quant_linear(dnnl::engine& eng, unsigned k, quantized_matrix runs, vector_isa isa)
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
          tile_columns, widened_matmul::tile_layout::column_major) {
  for (const auto& run : runs_) {
    run_first_row_.push_back(n_);
    for (unsigned first = 0; first < run.rows; first += group_rows)
      groups_.push_back({&run, first, n_ + first, std::min(group_rows, run.rows - first)});
    n_ += run.rows;
  }
  prefill_kernel_ = large_.kernel(small_m_limit + 1);
}

std::size_t quant_linear::weight_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& run : runs_)
    bytes += run.bytes.size();
  return bytes;
}

std::string quant_linear::kernel() const {
  std::string types;
  for (const auto& run : runs_) {
    std::string name{to_string(run.type)};
    if (types.find(name) == std::string::npos)
      types += (types.empty() ? "" : "+") + name;
  }
  const std::string own = isa_ == vector_isa::none ? "portable" : std::string{to_string(isa_)};
  return "triad:" + types + "_" + own + " (M<=" + std::to_string(small_m_limit) +
         ") + onednn f32 " + prefill_kernel_ + " (prefill)";
}

void quant_linear::forward(dnnl::stream& strm, const float* src, float* dst, unsigned m) {
  if (m == 0)
    return;
  if (m <= small_m_limit)
    forward_small(src, dst, m);
  else
    large_.forward(strm, src, dst, m,
                   [&](float* tile, unsigned first, unsigned width) { widen(tile, first, width); });
}

void quant_linear::forward_small(const float* src, float* dst, unsigned m) const {
  const bool parallel = std::size_t{n_} * k_ * m >= parallel_threshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    const auto* run = group.run;
    const auto kern = kernels_of(run->type, isa_);
    const std::size_t stride = row_bytes(run->type, k_);
    const std::byte* rows = run->bytes.data() + std::size_t{group.first} * stride;
    if (group.count == group_rows) {
      kern.four(rows, stride, k_, src, m, dst + group.row, n_);
    } else {
      for (unsigned r = 0; r < group.count; ++r)
        kern.one(rows + r * stride, stride, k_, src, m, dst + group.row + r, n_);
    }
  }
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

} // namespace triad::detail
