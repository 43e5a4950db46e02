#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "gguf/convert.hpp"
#include "tests/printers.hpp"

namespace {

// Deterministic values in [-scale, scale).
std::vector<float> values(std::size_t n, float scale, std::uint32_t seed) {
  std::vector<float> out(n);
  std::uint32_t s = seed;
  for (auto& x : out) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 8388608.0f - 1.0f);
  }
  return out;
}

// Largest |a - b| over the range.
float max_error(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<float> round_trip(triad::ggml_type type, const std::vector<float>& x) {
  auto q = triad::quantize(type, x);
  BOOST_REQUIRE(q);
  BOOST_REQUIRE(q->size() == x.size() / triad::traits_of(type).block_elements *
                                 triad::traits_of(type).block_bytes);
  std::vector<float> back(x.size());
  BOOST_REQUIRE(triad::dequantize(type, *q, back));
  return back;
}

} // namespace

BOOST_AUTO_TEST_CASE(half_conversion_is_exact_on_known_values) {
  BOOST_TEST(triad::half_to_float(0x3c00) == 1.0f);
  BOOST_TEST(triad::half_to_float(0xc000) == -2.0f);
  BOOST_TEST(triad::half_to_float(0x7bff) == 65504.0f);
  BOOST_TEST(triad::half_to_float(0x0001) == std::ldexp(1.0f, -24)); // smallest subnormal
  BOOST_TEST(std::isinf(triad::half_to_float(0x7c00)));
  BOOST_TEST(std::isnan(triad::half_to_float(0x7e00)));
  BOOST_TEST(triad::float_to_half(1.0f) == 0x3c00);
  BOOST_TEST(triad::float_to_half(65504.0f) == 0x7bff);
  BOOST_TEST(triad::float_to_half(1e6f) == 0x7c00);
  BOOST_TEST(triad::float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
  // 1 + 2^-11 is halfway between 1 and the next half: ties to even (1.0).
  BOOST_TEST(triad::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  BOOST_TEST(triad::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // Every half survives the round trip.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0)
      continue; // NaN
    BOOST_REQUIRE(triad::float_to_half(triad::half_to_float(static_cast<std::uint16_t>(h))) == h);
  }
}

BOOST_AUTO_TEST_CASE(bf16_conversion_rounds_to_nearest_even) {
  BOOST_TEST(triad::bf16_to_float(0x3f80) == 1.0f);
  BOOST_TEST(triad::float_to_bf16(1.0f) == 0x3f80);
  BOOST_TEST(triad::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);     // tie: even
  BOOST_TEST(triad::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82); // tie: even
  BOOST_TEST(std::isnan(triad::bf16_to_float(
      triad::float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

BOOST_AUTO_TEST_CASE(a_hand_built_q4_0_block_decodes_as_ggml_does) {
  // d = 0.5 (f16 0x3800); byte i holds value i (low) and 15 - i (high).
  std::vector<std::byte> block(18);
  block[0] = std::byte{0x00};
  block[1] = std::byte{0x38};
  for (int i = 0; i < 16; ++i)
    block[2 + i] = static_cast<std::byte>(i | ((15 - i) << 4));
  std::vector<float> y(32);
  BOOST_REQUIRE(triad::dequantize(triad::ggml_type::q4_0, block, y));
  BOOST_TEST(y[0] == -4.0f);   // (0 - 8) * 0.5
  BOOST_TEST(y[15] == 3.5f);   // (15 - 8) * 0.5
  BOOST_TEST(y[16] == 3.5f);   // high nibble of byte 0
  BOOST_TEST(y[31] == -4.0f);
}

BOOST_AUTO_TEST_CASE(a_hand_built_q4_k_block_decodes_its_scales_and_minimums) {
  std::vector<std::byte> block(144);
  const std::uint16_t one = 0x3c00; // d = dmin = 1
  std::memcpy(block.data(), &one, 2);
  std::memcpy(block.data() + 2, &one, 2);
  // Sub-block 0: scale 1, min 2; sub-block 5 (packed in the high part): scale 33, min 17.
  auto* s = block.data() + 4;
  s[0] = std::byte{1};
  s[4] = std::byte{2};
  s[1] = std::byte{static_cast<unsigned char>((33 >> 4) << 6)}; // sc[5] high bits in s[1]
  s[5] = std::byte{static_cast<unsigned char>((17 >> 4) << 6)}; // mn[5] high bits in s[5]
  s[9] = std::byte{static_cast<unsigned char>((33 & 0xF) | ((17 & 0xF) << 4))};
  auto* q = block.data() + 16;
  q[0] = std::byte{0x07};      // sub-block 0, value 0: 7
  q[64 + 3] = std::byte{0x90}; // third 64-run, high nibble: sub-block 5, value 3: 9
  std::vector<float> y(256);
  BOOST_REQUIRE(triad::dequantize(triad::ggml_type::q4_k, block, y));
  BOOST_TEST(y[0] == 1.0f * 7 - 2.0f);
  BOOST_TEST(y[1] == -2.0f);
  BOOST_TEST(y[5 * 32 + 3] == 33.0f * 9 - 17.0f);
}

BOOST_AUTO_TEST_CASE(quantized_round_trips_stay_within_each_types_step) {
  auto x = values(1024, 2.0f, 7);
  BOOST_TEST(max_error(round_trip(triad::ggml_type::f32, x), x) == 0.0f);
  BOOST_TEST(max_error(round_trip(triad::ggml_type::f16, x), x) <= 2.0f / 2048);
  BOOST_TEST(max_error(round_trip(triad::ggml_type::bf16, x), x) <= 2.0f / 256);
  // Half a step of the block's scale, plus the scale's own f16 rounding (ggml quantizes with
  // the unrounded scale).
  BOOST_TEST(max_error(round_trip(triad::ggml_type::q8_0, x), x) <= 2.0f / 127 * 0.6f);
  // q4_0 maps the value of largest magnitude to -8, so the other sign reaches only 7 steps:
  // up to one step (amax / 8) away.
  BOOST_TEST(max_error(round_trip(triad::ggml_type::q4_0, x), x) <= 2.0f / 8 + 1e-3f);
  BOOST_TEST(max_error(round_trip(triad::ggml_type::q6_k, x), x) <= 2.0f / 31 * 0.6f);
  BOOST_TEST(max_error(round_trip(triad::ggml_type::q4_k, x), x) <= 4.0f / 15 * 0.7f);
}

BOOST_AUTO_TEST_CASE(zero_blocks_round_trip_to_zero) {
  std::vector<float> x(256, 0.0f);
  for (auto type : {triad::ggml_type::q8_0, triad::ggml_type::q4_0, triad::ggml_type::q4_k,
                    triad::ggml_type::q6_k})
    BOOST_TEST(max_error(round_trip(type, x), x) == 0.0f);
}

BOOST_AUTO_TEST_CASE(unimplemented_types_and_wrong_sizes_are_errors) {
  std::vector<float> y(32);
  std::vector<std::byte> block(20);
  auto r = triad::dequantize(triad::ggml_type::q4_1, block, y);
  BOOST_REQUIRE(!r);
  BOOST_TEST(r.error().code == triad::errc::unsupported);
  BOOST_TEST(r.error().message.find("q4_1") != std::string::npos);
  std::vector<std::byte> short_block(17);
  auto s = triad::dequantize(triad::ggml_type::q4_0, short_block, y);
  BOOST_REQUIRE(!s);
  BOOST_TEST(s.error().code == triad::errc::invalid_argument);
  std::vector<float> ragged(33);
  BOOST_TEST(!triad::quantize(triad::ggml_type::q8_0, ragged));
}
