#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "devices/cpu/detail/quant_linear.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/weights.hpp"
#include "gguf/convert.hpp"
#include "tests/devices/kernel_support.hpp"
#include "tests/printers.hpp"

using triad::ggml_type;
using triad::quantized_matrix;
using triad::quantized_rows;
using triad::vector_isa;
using triad::detail::quant_linear;
using triad::test::cpu_has;
using triad::test::random_floats;

namespace {

struct fixture {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// `rows` random rows of `k` values encoded as `type`, and the values the encoding holds (what
// dequantize gives back), as [k][rows] (the reference's layout) appended to `plain` at column
// `col` of a matrix `n` wide.
// With `negative_scales` (q6_K) every other 16-value scale is negated and each block's first
// set to -128, as llama.cpp's quantizer writes them (triad's own keeps them positive).
quantized_rows encode(ggml_type type, unsigned rows, unsigned k, std::vector<float>& plain,
                      unsigned n, unsigned col, bool negative_scales = false) {
  auto values = random_floats(std::size_t{rows} * k);
  auto bytes = triad::quantize(type, values);
  BOOST_REQUIRE(bytes);
  if (negative_scales) {
    BOOST_REQUIRE(type == ggml_type::q6_k);
    for (std::size_t b = 0; b < bytes->size(); b += 210) {
      auto* scales = reinterpret_cast<std::int8_t*>(bytes->data() + b + 192);
      for (unsigned i = 1; i < 16; i += 2)
        scales[i] = static_cast<std::int8_t>(-scales[i]);
      scales[0] = -128;
    }
  }
  std::vector<float> decoded(values.size());
  BOOST_REQUIRE(triad::dequantize(type, *bytes, decoded));
  for (unsigned r = 0; r < rows; ++r)
    for (unsigned i = 0; i < k; ++i)
      plain[std::size_t{i} * n + col + r] = decoded[std::size_t{r} * k + i];
  return triad::owned_rows(type, rows, std::move(*bytes));
}

// `x` as the integer kernels see it: blocks quantized to int8 with scale amax / 127 (round to
// nearest even), then scaled back; blocks of 256 for q4_K and q6_K weights, 32 for q8_0, q4_0.
std::vector<float> as_int8(const std::vector<float>& x, std::size_t block) {
  std::vector<float> out(x.size());
  for (std::size_t b = 0; b < x.size(); b += block) {
    float amax = 0;
    for (std::size_t i = b; i < b + block; ++i)
      amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    for (std::size_t i = b; i < b + block; ++i)
      out[i] = d * static_cast<float>(std::lrintf(x[i] * id));
  }
  return out;
}

// Runs of (type, rows) into a matrix of input width k: the worst error over M's around the own
// kernels' limit, relative to sum_k |x||w| of each output, against a double reference of the
// decoded weights; nothing past the outputs written.
double worst_error(fixture& f, vector_isa isa, unsigned k,
                   const std::vector<std::pair<ggml_type, unsigned>>& layout,
                   bool negative_scales = false) {
  unsigned n = 0;
  for (const auto& [type, rows] : layout)
    n += rows;
  std::vector<float> plain(std::size_t{k} * n);
  quantized_matrix runs;
  unsigned col = 0;
  for (const auto& [type, rows] : layout) {
    runs.push_back(encode(type, rows, k, plain, n, col, negative_scales));
    col += rows;
  }
  BOOST_REQUIRE(quant_linear::check(k, n, runs));
  quant_linear lin(f.engine, k, std::move(runs), isa);
  BOOST_TEST(lin.n() == n);
  double worst = 0;
  const unsigned limit = quant_linear::small_m_limit;
  // 1..8: the int8 kernels on AVX2 and up (q4_K, q6_K: the VNNI kernels for every M up to
  // the limit, in fours of rows); 9..11 and 17 the int16 (q4_K, q6_K: pairs of rows) and f32
  // kernels' remainders (and the switch between them); 129 the widened tiles.
  for (unsigned m : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 10u, 11u, 17u, limit, limit + 1}) {
    auto x = random_floats(std::size_t{m} * k);
    constexpr float guard = 12345.0f;
    std::vector<float> dst(std::size_t{m} * n + 64, guard);
    lin.forward(f.stream, x.data(), dst.data(), m);
    // Decode batches on AVX2 and up multiply int8 activations (q4_K and q6_K rows up to the
    // own kernels' limit, the int16 kernels): the reference takes x as they see it, so the
    // bound stays float accumulation's.
    // (Every layout here is of one family: all super-block types or none.)
    const bool super =
        layout.front().first == ggml_type::q4_k || layout.front().first == ggml_type::q6_k;
    const bool int8 =
        isa != vector_isa::none && (m <= quant_linear::int8_m_limit || (super && m <= limit));
    double err = triad::test::worst_matmul_error(dst, int8 ? as_int8(x, super ? 256 : 32) : x,
                                                 plain, m, k, n, guard);
    BOOST_TEST_INFO(to_string(isa) << " K=" << k << " N=" << n << " M=" << m);
    BOOST_TEST(err <= 2e-6);
    worst = std::max(worst, err);
  }
  return worst;
}

void check_isa(vector_isa isa) {
  if (!cpu_has(isa)) {
    BOOST_TEST_MESSAGE("not run: this CPU lacks " << to_string(isa));
    return;
  }
  fixture f;
  double worst = 0;
  for (auto type : {ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
    // 7 rows: a group of four and three single rows; K of several chunks.
    worst = std::max(worst, worst_error(f, isa, 512, {{type, 7}}));
  }
  // A fused matrix of mixed types (q, k in q4_K, v in q6_K), and 32-blocks with a K that ends
  // inside a chunk of 256.
  worst = std::max(
      worst, worst_error(f, isa, 256,
                         {{ggml_type::q4_k, 12}, {ggml_type::q4_k, 5}, {ggml_type::q6_k, 5}}));
  worst = std::max(worst, worst_error(f, isa, 288, {{ggml_type::q8_0, 9}, {ggml_type::q4_0, 6}}));
  // q6_K with negative scales (and -128) as llama.cpp's files have them.
  worst = std::max(worst, worst_error(f, isa, 512, {{ggml_type::q6_k, 6}}, true));
  const bool vnni = isa == vector_isa::avx512 && __builtin_cpu_supports("avx512vnni");
  BOOST_TEST_MESSAGE(to_string(isa) << (vnni ? " (q4_K, q6_K by the VNNI kernels)" : "")
                                    << " worst error relative to sum |x||w|: " << worst);
  if (isa == vector_isa::avx512 && !vnni)
    BOOST_TEST_MESSAGE("not run: the VNNI kernels (this CPU lacks AVX512_VNNI; the AVX2 integer "
                       "kernels ran)");
}

} // namespace

BOOST_AUTO_TEST_SUITE(quant_linear_suite)

BOOST_AUTO_TEST_CASE(avx512_results_match_a_double_reference_of_the_decoded_weights) {
  check_isa(vector_isa::avx512);
}

BOOST_AUTO_TEST_CASE(avx2_results_match_a_double_reference_of_the_decoded_weights) {
  check_isa(vector_isa::avx2);
}

BOOST_AUTO_TEST_CASE(portable_results_match_a_double_reference_of_the_decoded_weights) {
  check_isa(vector_isa::none);
}

BOOST_AUTO_TEST_CASE(a_bf16_prefill_multiplies_the_decoded_rows_rounded_to_bf16) {
  if (!triad::detect_cpu().native_bf16) {
    BOOST_TEST_MESSAGE("not run: this CPU has no native bf16 (" << triad::detect_cpu().describe()
                                                                << ")");
    return;
  }
  fixture f;
  const unsigned k = 512, n = 300; // two tiles of 256 columns, the second partial
  std::vector<float> plain(std::size_t{k} * n);
  quantized_matrix runs;
  runs.push_back(encode(ggml_type::q4_k, 280, k, plain, n, 0));
  runs.push_back(encode(ggml_type::q6_k, 20, k, plain, n, 280));
  quant_linear lin(f.engine, k, std::move(runs), triad::detect_cpu().own, true);
  BOOST_TEST(lin.kernel().find("onednn bf16") != std::string::npos, lin.kernel());
  // The reference multiplies what oneDNN's bf16 matmul does: both sides rounded to bf16.
  auto rounded = plain;
  for (auto& w : rounded)
    w = triad::round_to_bf16(w);
  for (unsigned m : {quant_linear::small_m_limit + 1, 200u}) {
    auto x = random_floats(std::size_t{m} * k);
    constexpr float guard = 12345.0f;
    std::vector<float> dst(std::size_t{m} * n + 64, guard);
    lin.forward(f.stream, x.data(), dst.data(), m);
    for (auto& v : x)
      v = triad::round_to_bf16(v);
    BOOST_TEST_INFO("M=" << m);
    BOOST_TEST(triad::test::worst_matmul_error(dst, x, rounded, m, k, n, guard) <= 2e-6);
  }
}

BOOST_AUTO_TEST_CASE(the_blocks_are_kept_as_given_and_rows_decode_as_dequantize_does) {
  fixture f;
  std::vector<float> plain(256 * 6);
  quantized_matrix runs{encode(ggml_type::q4_k, 4, 256, plain, 6, 0),
                        encode(ggml_type::q8_0, 2, 256, plain, 6, 4)};
  const std::size_t bytes = runs[0].bytes.size() + runs[1].bytes.size();
  quant_linear lin(f.engine, 256, std::move(runs), vector_isa::none);
  BOOST_TEST(lin.weight_bytes() == bytes);
  BOOST_TEST(lin.weight_bytes() == 4u * 144 + 2u * 8 * 34);
  for (unsigned row = 0; row < 6; ++row) {
    std::vector<float> got(256);
    lin.decode_row(row, got.data());
    for (unsigned i = 0; i < 256; ++i)
      BOOST_REQUIRE_EQUAL(got[i], plain[std::size_t{i} * 6 + row]);
  }
  BOOST_TEST(lin.kernel().starts_with("triad:q4_K+q8_0_portable (M<=128) + onednn f32 "),
             lin.kernel());
  if (cpu_has(vector_isa::avx512) && __builtin_cpu_supports("avx512vnni")) {
    std::vector<float> again(256 * 2);
    quant_linear vnni(f.engine, 256, {encode(ggml_type::q4_k, 2, 256, again, 2, 0)},
                      vector_isa::avx512);
    BOOST_TEST(vnni.kernel().starts_with("triad:q4_K_int8_vnni (M<=128) + onednn "), vnni.kernel());
  } else {
    BOOST_TEST_MESSAGE("not run: the VNNI kernel name (this CPU lacks AVX512_VNNI)");
  }
  if (cpu_has(vector_isa::avx2)) {
    std::vector<float> again(256 * 2);
    quant_linear avx2(f.engine, 256, {encode(ggml_type::q6_k, 2, 256, again, 2, 0)},
                      vector_isa::avx2);
    BOOST_TEST(avx2.kernel().starts_with(
                   "triad:q6_K_int8_avx2 (M<=8) + triad:q6_K_int16_avx2 (M<=128) + onednn "),
               avx2.kernel());
    // Batches of q8_0 rows run the float kernels beside the int16 ones.
    std::vector<float> mixed(256 * 3);
    quant_linear both(f.engine, 256,
                      {encode(ggml_type::q4_k, 2, 256, mixed, 3, 0),
                       encode(ggml_type::q8_0, 1, 256, mixed, 3, 2)},
                      vector_isa::avx2);
    BOOST_TEST(both.kernel().starts_with("triad:q4_K+q8_0_int8_avx2 (M<=8) + triad:q4_K_int16_avx2 "
                                         "(M<=128) + triad:q8_0_avx2 (M<=128) + onednn "),
               both.kernel());
  }
}

BOOST_AUTO_TEST_CASE(runs_that_do_not_fit_the_width_or_type_are_named) {
  std::vector<float> plain(256 * 2);
  quantized_matrix runs{encode(ggml_type::q4_k, 2, 256, plain, 2, 0)};
  auto wrong_rows = quant_linear::check(256, 3, runs);
  BOOST_REQUIRE(!wrong_rows);
  BOOST_TEST(wrong_rows.error().message.find("2 rows, expected 3") != std::string::npos,
             wrong_rows.error().message);
  auto wrong_width = quant_linear::check(288, 2, runs);
  BOOST_REQUIRE(!wrong_width);
  BOOST_TEST(wrong_width.error().message.find("input width 288 is not a multiple of the block "
                                              "(256)") != std::string::npos,
             wrong_width.error().message);
  runs[0].bytes = runs[0].bytes.first(runs[0].bytes.size() - 1);
  auto short_bytes = quant_linear::check(256, 2, runs);
  BOOST_REQUIRE(!short_bytes);
  BOOST_TEST(short_bytes.error().message.find("287 bytes do not hold 2 rows of 256 values") !=
                 std::string::npos,
             short_bytes.error().message);
  runs[0] = triad::owned_rows(ggml_type::f16, 2, std::vector<std::byte>(1024));
  auto f16 = quant_linear::check(256, 2, runs);
  BOOST_REQUIRE(!f16);
  BOOST_TEST(f16.error().code == triad::errc::unsupported);
  BOOST_TEST(!quant_linear::check(256, 0, {}));
}

BOOST_AUTO_TEST_SUITE_END()
