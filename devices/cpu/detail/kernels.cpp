#include "devices/cpu/detail/kernels.hpp"

#include <cmath>
#include <cstring>

// The hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time,
// so one binary runs everywhere and uses the widest vectors the CPU has.
#define TRIAD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace triad::detail {

TRIAD_CLONES void to_bf16(const float* src, std::uint16_t* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    bits += 0x7fffu + ((bits >> 16) & 1u);
    dst[i] = static_cast<std::uint16_t>(bits >> 16);
  }
}

TRIAD_CLONES void rmsnorm(const float* x, const float* w, float* out, std::size_t rows,
                          std::size_t width, float eps) noexcept {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float* o = out + r * width;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::size_t i = 0; i < width; ++i)
      sum += xr[i] * xr[i];
    float scale = 1.0f / std::sqrt(sum / static_cast<float>(width) + eps);
    for (std::size_t i = 0; i < width; ++i)
      o[i] = xr[i] * scale * w[i];
  }
}

TRIAD_CLONES void silu_mul(const float* gate_up, float* out, std::size_t rows,
                           std::size_t ffn) noexcept {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * ffn;
    const float* u = g + ffn;
    float* o = out + r * ffn;
    for (std::size_t i = 0; i < ffn; ++i)
      o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

rope_table::rope_table(std::size_t max_positions, std::size_t head_dim, double theta)
  : half(head_dim / 2), cos(max_positions * half), sin(max_positions * half) {
  for (std::size_t p = 0; p < max_positions; ++p)
    for (std::size_t i = 0; i < half; ++i) {
      double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      double angle = static_cast<double>(p) * freq;
      cos[p * half + i] = static_cast<float>(std::cos(angle));
      sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
}

void rope_table::apply(float* vec, std::size_t pos) const noexcept {
  const float* c = cos.data() + pos * half;
  const float* s = sin.data() + pos * half;
  for (std::size_t i = 0; i < half; ++i) {
    float x1 = vec[i];
    float x2 = vec[i + half];
    vec[i] = x1 * c[i] - x2 * s[i];
    vec[i + half] = x2 * c[i] + x1 * s[i];
  }
}

TRIAD_CLONES float dot(const float* a, const void* b, std::size_t n, bool b_bf16) noexcept {
  float sum = 0;
  if (b_bf16) {
    const auto* bb = static_cast<const std::uint16_t*>(b);
#pragma omp simd reduction(+ : sum)
    for (std::size_t i = 0; i < n; ++i)
      sum += a[i] * from_bf16(bb[i]);
  } else {
    const auto* bf = static_cast<const float*>(b);
#pragma omp simd reduction(+ : sum)
    for (std::size_t i = 0; i < n; ++i)
      sum += a[i] * bf[i];
  }
  return sum;
}

TRIAD_CLONES void axpy(float w, const void* v, float* out, std::size_t n, bool v_bf16) noexcept {
  if (v_bf16) {
    const auto* vb = static_cast<const std::uint16_t*>(v);
    for (std::size_t i = 0; i < n; ++i)
      out[i] += w * from_bf16(vb[i]);
  } else {
    const auto* vf = static_cast<const float*>(v);
    for (std::size_t i = 0; i < n; ++i)
      out[i] += w * vf[i];
  }
}

void store(const float* src, void* dst, std::size_t n, bool dst_bf16) noexcept {
  if (dst_bf16)
    to_bf16(src, static_cast<std::uint16_t*>(dst), n);
  else
    std::memcpy(dst, src, n * sizeof(float));
}

} // namespace triad::detail
