#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "devices/cpu/detail/bf16_linear.hpp"
#include "devices/cpu/weights.hpp"
#include "tests/devices/kernel_support.hpp"

// The class, under a name that leaves `bf16_linear` to the test suite.
using linear = triad::detail::bf16_linear;
using triad::detail::vector_isa;

namespace {

using triad::test::cpu_has;
using triad::test::random_floats;

struct fixture {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// Largest |got - want| over every output, relative to sum_k |x||w| of that output, where want
// is computed in double from the bf16-rounded weights. Also checks that nothing past the M x N
// outputs was written.
double worst_error(fixture& f, vector_isa isa, unsigned k, unsigned n, unsigned m) {
  auto w = random_floats(std::size_t{k} * n);
  auto x = random_floats(std::size_t{m} * k);
  linear lin(f.engine, k, n, w.data(), isa);
  constexpr float guard = 12345.0f;
  std::vector<float> dst(std::size_t{m} * n + 64, guard);
  lin.forward(f.stream, x.data(), dst.data(), m);
  std::vector<float> rounded(w.size());
  std::transform(w.begin(), w.end(), rounded.begin(), triad::round_to_bf16);
  return triad::test::worst_matmul_error(dst, x, rounded, m, k, n, guard);
}

void check_isa(vector_isa isa) {
  if (!cpu_has(isa)) {
    BOOST_TEST_MESSAGE("not run: this CPU lacks " << to_string(isa));
    return;
  }
  fixture f;
  const unsigned limit = linear::small_m_limit;
  double worst = 0;
  for (unsigned k : {72u, 576u})
    for (unsigned n : {100u, 320u})
      for (unsigned m : {1u, 2u, 3u, 5u, 16u, 17u, 64u, 300u, limit, limit + 1}) {
        double err = worst_error(f, isa, k, n, m);
        BOOST_TEST_INFO(to_string(isa) << " K=" << k << " N=" << n << " M=" << m);
        BOOST_TEST(err <= 2e-6);
        worst = std::max(worst, err);
      }
  BOOST_TEST_MESSAGE(to_string(isa) << " worst error relative to sum |x||w|: " << worst);
}

} // namespace

BOOST_AUTO_TEST_SUITE(bf16_linear)

BOOST_AUTO_TEST_CASE(weights_are_stored_once_as_bf16_in_zero_padded_panels_of_16) {
  fixture f;
  auto w = random_floats(576 * 320);
  linear a(f.engine, 72, 100, w.data(), vector_isa::none);
  linear b(f.engine, 576, 320, w.data(), vector_isa::none);
  BOOST_TEST(a.weight_bytes() == 72u * 112 * 2);
  BOOST_TEST(b.weight_bytes() == 576u * 320 * 2);
  BOOST_TEST(a.k() == 72u);
  BOOST_TEST(a.n() == 100u);
}

BOOST_AUTO_TEST_CASE(avx512_results_match_a_double_reference_of_the_rounded_weights) {
  check_isa(vector_isa::avx512);
}

BOOST_AUTO_TEST_CASE(avx2_results_match_a_double_reference_of_the_rounded_weights) {
  check_isa(vector_isa::avx2);
}

BOOST_AUTO_TEST_CASE(scalar_results_match_a_double_reference_of_the_rounded_weights) {
  check_isa(vector_isa::none);
}

BOOST_AUTO_TEST_CASE(kernel_names_the_own_isa_and_the_onednn_prefill_implementation) {
  fixture f;
  auto w = random_floats(72 * 100);
  linear lin(f.engine, 72, 100, w.data(), vector_isa::none);
  auto name = lin.kernel();
  BOOST_TEST_MESSAGE("kernel: " << name);
  auto own = "triad:bf16_scalar (M<=" + std::to_string(linear::small_m_limit) + ") + onednn f32 ";
  BOOST_TEST(name.starts_with(own));
  BOOST_TEST(name.ends_with(" (prefill)"));
}

BOOST_AUTO_TEST_SUITE_END()
