#include "gguf/types.hpp"

#include <array>
#include <bit>
#include <cmath>

namespace triad {

namespace {

struct named_type {
  ggml_type type;
  ggml_type_traits traits;
};

// Sizes from ggml's block structs: q4_0 = f16 + 16 bytes; q4_1 = 2 f16 + 16; q5_0 = f16 + 4 + 16;
// q5_1 = 2 f16 + 4 + 16; q8_0 = f16 + 32; q8_1 = 2 f16 + 32; the k-quants per 256 values:
// q2_K 84, q3_K 110, q4_K 144, q5_K 176, q6_K 210, q8_K 292.
constexpr std::array<named_type, 15> known{{
    {ggml_type::f32, {"f32", 1, 4}},
    {ggml_type::f16, {"f16", 1, 2}},
    {ggml_type::q4_0, {"q4_0", 32, 18}},
    {ggml_type::q4_1, {"q4_1", 32, 20}},
    {ggml_type::q5_0, {"q5_0", 32, 22}},
    {ggml_type::q5_1, {"q5_1", 32, 24}},
    {ggml_type::q8_0, {"q8_0", 32, 34}},
    {ggml_type::q8_1, {"q8_1", 32, 36}},
    {ggml_type::q2_k, {"q2_K", 256, 84}},
    {ggml_type::q3_k, {"q3_K", 256, 110}},
    {ggml_type::q4_k, {"q4_K", 256, 144}},
    {ggml_type::q5_k, {"q5_K", 256, 176}},
    {ggml_type::q6_k, {"q6_K", 256, 210}},
    {ggml_type::q8_k, {"q8_K", 256, 292}},
    {ggml_type::bf16, {"bf16", 1, 2}},
}};

} // namespace

std::optional<ggml_type_traits> traits_of(std::uint32_t raw) noexcept {
  for (const auto& k : known)
    if (static_cast<std::uint32_t>(k.type) == raw)
      return k.traits;
  return std::nullopt;
}

ggml_type_traits traits_of(ggml_type type) noexcept {
  return *traits_of(static_cast<std::uint32_t>(type));
}

std::string_view to_string(ggml_type type) noexcept {
  return traits_of(type).name;
}

std::string_view to_string(gguf_type type) noexcept {
  static constexpr std::array<std::string_view, 13> names{
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<std::size_t>(type);
  return i < names.size() ? names[i] : std::string_view{"unknown"};
}

std::uint16_t float_to_half(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) // infinity or NaN (a quiet NaN keeps a mantissa bit)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) // rounds to 65536 or more: infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, round to nearest even of x * 2^24.
    float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    auto m = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | m);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t rebased = abs - (112u << 23);
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rebased >> 13));
}

float bf16_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bf16(float value) noexcept {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a NaN
    return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

} // namespace triad
