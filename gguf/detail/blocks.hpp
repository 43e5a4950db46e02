#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/types.hpp"

// ggml's block layouts, decoded one block at a time into floats: the one definition that
// dequantize() (gguf/convert.cpp) and the cpu backend's quantized matmul kernels both inline.
// Plain loops over fixed widths, always inlined, so each caller's target ISA vectorises them.

namespace triad::detail {

/// Values in one block of q4_0 and q8_0.
inline constexpr std::size_t small_block_values = 32;
/// Values in one super-block of q4_K and q6_K.
inline constexpr std::size_t super_block_values = 256;

/// Two bytes of a block, little-endian.
[[gnu::always_inline]] inline std::uint16_t block_u16(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

/// The 6-bit scale and minimum of sub-block j of a q4_K block's 12 scale bytes (ggml's
/// get_scale_min_k4).
[[gnu::always_inline]] inline void scale_min_k4(std::size_t j, const std::uint8_t* q,
                                                std::uint8_t& d, std::uint8_t& m) noexcept {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// One q8_0 block (34 bytes: f16 scale, 32 int8) into 32 floats.
[[gnu::always_inline]] inline void decode_q8_0(const std::byte* b, float* y) noexcept {
  const float d = half_to_float(block_u16(b));
  const auto* q = reinterpret_cast<const std::int8_t*>(b + 2);
  for (std::size_t i = 0; i < 32; ++i)
    y[i] = d * static_cast<float>(q[i]);
}

/// One q4_0 block (18 bytes: f16 scale, 16 bytes of 4-bit values offset by 8; low nibbles are
/// values 0..15, high nibbles 16..31) into 32 floats.
[[gnu::always_inline]] inline void decode_q4_0(const std::byte* b, float* y) noexcept {
  const float d = half_to_float(block_u16(b));
  const auto* q = reinterpret_cast<const std::uint8_t*>(b + 2);
  for (std::size_t i = 0; i < 16; ++i) // two loops, not one: each vectorises as one
    y[i] = d * static_cast<float>(static_cast<int>(q[i] & 0xF) - 8);
  for (std::size_t i = 0; i < 16; ++i)
    y[i + 16] = d * static_cast<float>(static_cast<int>(q[i] >> 4) - 8);
}

/// One q4_K super-block (144 bytes: f16 d and dmin, 12 bytes of 6-bit scales and minimums, 128
/// bytes of 4-bit values, 64 values per 32 bytes, low nibbles first) into 256 floats.
[[gnu::always_inline]] inline void decode_q4_k(const std::byte* b, float* y) noexcept {
  const float d = half_to_float(block_u16(b));
  const float dmin = half_to_float(block_u16(b + 2));
  const auto* scales = reinterpret_cast<const std::uint8_t*>(b + 4);
  const auto* q = reinterpret_cast<const std::uint8_t*>(b + 16);
  for (std::size_t j = 0; j < 8; j += 2, q += 32, y += 64) {
    std::uint8_t sc, m;
    scale_min_k4(j, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(j + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (std::size_t l = 0; l < 32; ++l)
      y[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (std::size_t l = 0; l < 32; ++l)
      y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

/// One q6_K super-block (210 bytes: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8
/// scales, f16 d) into 256 floats.
[[gnu::always_inline]] inline void decode_q6_k(const std::byte* b, float* y) noexcept {
  const auto* ql = reinterpret_cast<const std::uint8_t*>(b);
  const auto* qh = reinterpret_cast<const std::uint8_t*>(b + 128);
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half_to_float(block_u16(b + 208));
  for (std::size_t half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128)
    for (std::size_t is = 0; is < 2; ++is) {
      const float s1 = d * sc[is], s2 = d * sc[is + 2], s3 = d * sc[is + 4], s4 = d * sc[is + 6];
      for (std::size_t l = is * 16; l < is * 16 + 16; ++l) {
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = s1 * static_cast<float>(q1);
        y[l + 32] = s2 * static_cast<float>(q2);
        y[l + 64] = s3 * static_cast<float>(q3);
        y[l + 96] = s4 * static_cast<float>(q4);
      }
    }
}

} // namespace triad::detail
