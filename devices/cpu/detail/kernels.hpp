#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace triad::detail {

/// Converts floats to bfloat16 bits (round to nearest even).
void to_bf16(const float* src, std::uint16_t* dst, std::size_t n) noexcept;

/// One bfloat16 value as float.
inline float from_bf16(std::uint16_t x) noexcept {
  std::uint32_t bits = static_cast<std::uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

/// out[r] = x[r] / rms(x[r]) * w, for `rows` rows of `width`.
void rmsnorm(const float* x, const float* w, float* out, std::size_t rows, std::size_t width,
             float eps) noexcept;

/// out[r][i] = silu(gate_up[r][i]) * gate_up[r][ffn + i].
void silu_mul(const float* gate_up, float* out, std::size_t rows, std::size_t ffn) noexcept;

/// Rotary embedding tables: cos and sin of pos * theta^(-2i/d), [pos][head_dim/2].
struct rope_table {
  /// Tables for positions 0..max_positions-1.
  rope_table(std::size_t max_positions, std::size_t head_dim, double theta);
  /// Rotates one head vector in place ("rotate half" pairing: i with i + head_dim/2).
  void apply(float* vec, std::size_t pos) const noexcept;

  std::size_t half;       ///< head_dim / 2
  std::vector<float> cos; ///< [pos][half]
  std::vector<float> sin; ///< [pos][half]
};

/// Dot product of a float vector with `n` elements of K stored as f32 or bf16.
float dot(const float* a, const void* b, std::size_t n, bool b_bf16) noexcept;
/// out += w * v, with v stored as f32 or bf16.
void axpy(float w, const void* v, float* out, std::size_t n, bool v_bf16) noexcept;
/// Stores `n` floats as f32 or bf16 at `dst`.
void store(const float* src, void* dst, std::size_t n, bool dst_bf16) noexcept;

} // namespace triad::detail
