#include "gguf/convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "gguf/detail/blocks.hpp"

namespace triad {

namespace {

void store_u16(std::byte* p, std::uint16_t v) noexcept {
  std::memcpy(p, &v, 2);
}

error unsupported(ggml_type type, const char* what) {
  return make_error(errc::unsupported,
                    std::string{what} + " of ggml type " + std::string{to_string(type)} +
                        " is not implemented (f32, f16, bf16, q4_0, q8_0, q4_K and q6_K are)");
}

} // namespace

expected<void> dequantize(ggml_type type, std::span<const std::byte> encoded,
                          std::span<float> values) {
  const auto t = traits_of(type);
  const std::size_t n = values.size();
  if (n % t.block_elements != 0 || encoded.size() != n / t.block_elements * t.block_bytes)
    return make_error(errc::invalid_argument, "dequantize: " + std::to_string(encoded.size()) +
                                                  " bytes of " + std::string{t.name} +
                                                  " do not hold " + std::to_string(n) + " values");
  const std::byte* src = encoded.data();
  float* y = values.data();
  const std::size_t blocks = n / t.block_elements;
  switch (type) {
  case ggml_type::f32:
    std::memcpy(y, src, n * 4);
    return {};
  case ggml_type::f16:
    for (std::size_t i = 0; i < n; ++i)
      y[i] = half_to_float(detail::block_u16(src + 2 * i));
    return {};
  case ggml_type::bf16:
    for (std::size_t i = 0; i < n; ++i)
      y[i] = bf16_to_float(detail::block_u16(src + 2 * i));
    return {};
  case ggml_type::q8_0:
    for (std::size_t b = 0; b < blocks; ++b, src += t.block_bytes, y += t.block_elements)
      detail::decode_q8_0(src, y);
    return {};
  case ggml_type::q4_0:
    for (std::size_t b = 0; b < blocks; ++b, src += t.block_bytes, y += t.block_elements)
      detail::decode_q4_0(src, y);
    return {};
  case ggml_type::q4_k:
    for (std::size_t b = 0; b < blocks; ++b, src += t.block_bytes, y += t.block_elements)
      detail::decode_q4_k(src, y);
    return {};
  case ggml_type::q6_k:
    for (std::size_t b = 0; b < blocks; ++b, src += t.block_bytes, y += t.block_elements)
      detail::decode_q6_k(src, y);
    return {};
  default:
    return unsupported(type, "dequantization");
  }
}

expected<std::vector<std::byte>> quantize(ggml_type type, std::span<const float> values) {
  const auto t = traits_of(type);
  const std::size_t n = values.size();
  if (n % t.block_elements != 0)
    return make_error(errc::invalid_argument, "quantize: " + std::to_string(n) +
                                                  " values are not whole " + std::string{t.name} +
                                                  " blocks");
  const std::size_t blocks = n / t.block_elements;
  std::vector<std::byte> out(blocks * t.block_bytes);
  std::byte* dst = out.data();
  const float* x = values.data();
  switch (type) {
  case ggml_type::f32:
    std::memcpy(dst, x, n * 4);
    return out;
  case ggml_type::f16:
    for (std::size_t i = 0; i < n; ++i)
      store_u16(dst + 2 * i, float_to_half(x[i]));
    return out;
  case ggml_type::bf16:
    for (std::size_t i = 0; i < n; ++i)
      store_u16(dst + 2 * i, float_to_bf16(x[i]));
    return out;
  case ggml_type::q8_0:
    for (std::size_t b = 0; b < blocks; ++b, dst += 34, x += 32) {
      float amax = 0;
      for (std::size_t i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      store_u16(dst, float_to_half(d));
      for (std::size_t i = 0; i < 32; ++i)
        dst[2 + i] = static_cast<std::byte>(static_cast<std::int8_t>(std::lround(x[i] * id)));
    }
    return out;
  case ggml_type::q4_0:
    for (std::size_t b = 0; b < blocks; ++b, dst += 18, x += 32) {
      // The value of largest magnitude, with its sign, maps to -8.
      float amax = 0, max = 0;
      for (std::size_t i = 0; i < 32; ++i)
        if (std::fabs(x[i]) > amax) {
          amax = std::fabs(x[i]);
          max = x[i];
        }
      const float d = max / -8.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      store_u16(dst, float_to_half(d));
      for (std::size_t i = 0; i < 16; ++i) {
        auto q0 = std::min(15, static_cast<int>(x[i] * id + 8.5f));
        auto q1 = std::min(15, static_cast<int>(x[i + 16] * id + 8.5f));
        dst[2 + i] = static_cast<std::byte>(q0 | (q1 << 4));
      }
    }
    return out;
  case ggml_type::q4_k:
    for (std::size_t b = 0; b < blocks; ++b, dst += 144, x += 256) {
      // Per sub-block of 32: value = scale * q - min, q in 0..15, min >= 0.
      float scale[8], min[8];
      for (std::size_t j = 0; j < 8; ++j) {
        float lo = 0, hi = 0;
        for (std::size_t i = 0; i < 32; ++i) {
          lo = std::min(lo, x[j * 32 + i]);
          hi = std::max(hi, x[j * 32 + i]);
        }
        min[j] = -lo;
        scale[j] = (hi - lo) / 15.0f;
      }
      const float max_scale = *std::max_element(scale, scale + 8);
      const float max_min = *std::max_element(min, min + 8);
      const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
      store_u16(dst, float_to_half(d));
      store_u16(dst + 2, float_to_half(dmin));
      const float dh = half_to_float(float_to_half(d)), dminh = half_to_float(float_to_half(dmin));
      std::uint8_t sc[8], mn[8];
      for (std::size_t j = 0; j < 8; ++j) {
        sc[j] = static_cast<std::uint8_t>(
            std::clamp(dh > 0 ? std::lround(scale[j] / dh) : 0L, 0L, 63L));
        mn[j] = static_cast<std::uint8_t>(
            std::clamp(dminh > 0 ? std::lround(min[j] / dminh) : 0L, 0L, 63L));
      }
      // Packing, the inverse of scale_min_k4.
      std::byte* s = dst + 4;
      for (std::size_t j = 0; j < 4; ++j) {
        s[j] = static_cast<std::byte>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<std::byte>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<std::byte>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
      }
      std::byte* q = dst + 16;
      for (std::size_t j = 0; j < 8; j += 2, q += 32)
        for (std::size_t l = 0; l < 32; ++l) {
          auto level = [&](std::size_t sub, float v) {
            const float step = dh * sc[sub];
            if (step <= 0)
              return 0;
            return static_cast<int>(std::clamp(std::lround((v + dminh * mn[sub]) / step), 0L, 15L));
          };
          const int lo = level(j, x[j * 32 + l]);
          const int hi = level(j + 1, x[(j + 1) * 32 + l]);
          q[l] = static_cast<std::byte>(lo | (hi << 4));
        }
    }
    return out;
  case ggml_type::q6_k:
    for (std::size_t b = 0; b < blocks; ++b, dst += 210, x += 256) {
      // 16 sub-blocks of 16 values: value = d * scale * (q - 32), q in 0..63.
      float sub_scale[16];
      for (std::size_t j = 0; j < 16; ++j) {
        float amax = 0;
        for (std::size_t i = 0; i < 16; ++i)
          amax = std::max(amax, std::fabs(x[j * 16 + i]));
        sub_scale[j] = amax / 31.0f;
      }
      const float max_scale = *std::max_element(sub_scale, sub_scale + 16);
      const float d = max_scale / 127.0f;
      store_u16(dst + 208, float_to_half(d));
      const float dh = half_to_float(float_to_half(d));
      std::int8_t sc[16];
      for (std::size_t j = 0; j < 16; ++j) {
        sc[j] = static_cast<std::int8_t>(
            std::clamp(dh > 0 ? std::lround(sub_scale[j] / dh) : 0L, -128L, 127L));
        dst[192 + j] = static_cast<std::byte>(sc[j]);
      }
      int level[256];
      for (std::size_t i = 0; i < 256; ++i) {
        const float step = dh * sc[i / 16];
        level[i] =
            step != 0 ? static_cast<int>(std::clamp(std::lround(x[i] / step), -32L, 31L)) + 32 : 32;
      }
      // Packing, the inverse of the dequantization's 128-value halves.
      std::byte* ql = dst;
      std::byte* qh = dst + 128;
      for (std::size_t half = 0; half < 2; ++half, ql += 64, qh += 32) {
        const int* L = level + half * 128;
        for (std::size_t l = 0; l < 32; ++l) {
          ql[l] = static_cast<std::byte>((L[l] & 0xF) | ((L[l + 64] & 0xF) << 4));
          ql[l + 32] = static_cast<std::byte>((L[l + 32] & 0xF) | ((L[l + 96] & 0xF) << 4));
          qh[l] = static_cast<std::byte>((L[l] >> 4) | ((L[l + 32] >> 4) << 2) |
                                         ((L[l + 64] >> 4) << 4) | ((L[l + 96] >> 4) << 6));
        }
      }
    }
    return out;
  default:
    return unsupported(type, "quantization");
  }
}

} // namespace triad
