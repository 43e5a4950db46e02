#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace triad {

/// Element types of GGUF tensors (ggml's numbering, which the file stores). Types ggml has
/// retired or that triad cannot read are absent; `ggml_type_traits` names what a file holds.
enum class ggml_type : std::uint32_t {
  f32 = 0,   ///< float32
  f16 = 1,   ///< IEEE half
  q4_0 = 2,  ///< blocks of 32: one f16 scale, 4-bit values offset by 8
  q4_1 = 3,  ///< blocks of 32: f16 scale and minimum, 4-bit values
  q5_0 = 6,  ///< blocks of 32: f16 scale, 5-bit values
  q5_1 = 7,  ///< blocks of 32: f16 scale and minimum, 5-bit values
  q8_0 = 8,  ///< blocks of 32: one f16 scale, int8 values
  q8_1 = 9,  ///< blocks of 32: f32 scale and sum, int8 values
  q2_k = 10, ///< super-blocks of 256, 2-bit
  q3_k = 11, ///< super-blocks of 256, 3-bit
  q4_k = 12, ///< super-blocks of 256: 8 sub-blocks with 6-bit scales and minimums, 4-bit values
  q5_k = 13, ///< super-blocks of 256, 5-bit
  q6_k = 14, ///< super-blocks of 256: 16 int8 sub-block scales, 6-bit values
  q8_k = 15, ///< super-blocks of 256, int8 (ggml's intermediate type)
  bf16 = 30, ///< bfloat16
};

/// Layout of one ggml type: `block_bytes` bytes encode `block_elements` consecutive values of a
/// row; a row's length is a multiple of `block_elements`.
struct ggml_type_traits {
  std::string_view name;          ///< ggml's name, e.g. "q4_K"
  std::size_t block_elements = 0; ///< values per block (1 for f32, f16, bf16)
  std::size_t block_bytes = 0;    ///< bytes per block
};

/// The layout of the type numbered `raw` in a file; empty for numbers ggml never assigned or
/// has retired.
std::optional<ggml_type_traits> traits_of(std::uint32_t raw) noexcept;

/// The layout of `type` (every enumerator has one).
ggml_type_traits traits_of(ggml_type type) noexcept;

/// ggml's name of `type`, e.g. "f16" or "q6_K".
std::string_view to_string(ggml_type type) noexcept;

/// Value types of GGUF metadata (the file's numbering).
enum class gguf_type : std::uint32_t {
  u8 = 0,      ///< uint8
  i8 = 1,      ///< int8
  u16 = 2,     ///< uint16
  i16 = 3,     ///< int16
  u32 = 4,     ///< uint32
  i32 = 5,     ///< int32
  f32 = 6,     ///< float32
  boolean = 7, ///< one byte, 0 or 1
  string = 8,  ///< uint64 length, then UTF-8 bytes
  array = 9,   ///< element type, uint64 count, then the elements
  u64 = 10,    ///< uint64
  i64 = 11,    ///< int64
  f64 = 12,    ///< float64
};

/// Name of a metadata value type, e.g. "u32" or "array".
std::string_view to_string(gguf_type type) noexcept;

/// IEEE half to float, exact (subnormals, infinities and NaN kept). Inline: quantized kernels
/// convert a scale per block.
inline float half_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) { // zero or subnormal: mantissa x 2^-24, exact in float
    const float value = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -value : value;
  }
  if (exponent == 0x1f)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
/// Float to IEEE half, rounded to nearest even; overflow gives infinity.
std::uint16_t float_to_half(float value) noexcept;
/// bfloat16 to float, exact.
float bf16_to_float(std::uint16_t bits) noexcept;
/// Float to bfloat16, rounded to nearest even (NaN stays NaN).
std::uint16_t float_to_bf16(float value) noexcept;

} // namespace triad
