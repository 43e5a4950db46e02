#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "devices/cpu/detail/kernels.hpp"
#include "devices/cpu/detail/onednn_linear.hpp"
#include "devices/cpu/detail/packed_small_m.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/weights.hpp"
#include "tests/devices/kernel_support.hpp"

// The class, under a name that leaves `packed_small_m` to the test suite.
using kernels = triad::detail::packed_small_m;
using triad::dtype;
using triad::vector_isa;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

namespace {

// Whether this CPU runs the kernels for `type` (AVX-512, and AVX512_BF16 for bf16).
bool cpu_runs(dtype type) {
  return triad::test::cpu_has_avx512() &&
         (type == dtype::f32 || __builtin_cpu_supports("avx512bf16"));
}

const char* name(dtype type) {
  return type == dtype::bf16 ? "bf16" : "f32";
}

using triad::test::random_floats;

// `values` as the kernels' inputs: bf16 bits (rounded to nearest even) or f32, and `values`
// rounded the same way so a reference multiplies exactly what the kernels do.
struct operand {
  std::vector<std::uint16_t> bf16;
  std::vector<float> f32;
  std::vector<float> rounded;
  operand(std::vector<float> values, dtype type)
      : f32(std::move(values))
      , rounded(f32) {
    if (type == dtype::bf16) {
      bf16.resize(f32.size());
      triad::detail::to_bf16(f32.data(), bf16.data(), f32.size());
      for (auto& v : rounded)
        v = triad::round_to_bf16(v);
    }
  }
  const void* data(dtype type) const {
    return type == dtype::bf16 ? static_cast<const void*>(bf16.data()) : f32.data();
  }
};

struct fixture {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// The worst error of `got` against a double reference of the rounded inputs.
double worst_error(const std::vector<float>& got, const operand& x, const operand& w, unsigned m,
                   unsigned k, unsigned n, float guard) {
  return triad::test::worst_matmul_error(got, x.rounded, w.rounded, m, k, n, guard);
}

// The kernels on weights packed by a oneDNN reorder into the layout they read.
void check_packed(dtype type) {
  if (!cpu_runs(type)) {
    BOOST_TEST_MESSAGE("not run: this CPU lacks AVX-512" << (type == dtype::bf16 ? " BF16" : ""));
    return;
  }
  fixture f;
  const dt data_type = type == dtype::bf16 ? dt::bf16 : dt::f32;
  double worst = 0;
  for (unsigned k : {72u, 577u})
    for (unsigned n : {64u, 100u, 320u}) {
      operand w(random_floats(std::size_t{k} * n), type);
      dnnl::memory::desc packed_desc({k, n}, data_type,
                                     type == dtype::bf16 ? tag::BA16a64b2a : tag::BA16a64b);
      dnnl::memory plain({{k, n}, data_type, tag::ab}, f.engine, const_cast<void*>(w.data(type)));
      dnnl::memory packed(packed_desc, f.engine);
      dnnl::reorder(plain, packed).execute(f.stream, plain, packed);
      f.stream.wait();
      auto run = kernels::for_weights(packed_desc, k, n, type, vector_isa::avx512);
      BOOST_REQUIRE(run.has_value());
      for (unsigned m : {1u, 2u, 3u, 6u, 7u, 13u, kernels::m_limit}) {
        operand x(random_floats(std::size_t{m} * k), type);
        constexpr float guard = 12345.0f;
        std::vector<float> dst(std::size_t{m} * n + 64, guard);
        run->forward(packed.get_data_handle(), x.data(type), dst.data(), m);
        double err = worst_error(dst, x, w, m, k, n, guard);
        BOOST_TEST_INFO(name(type) << " K=" << k << " N=" << n << " M=" << m);
        BOOST_TEST(err <= 2e-6);
        worst = std::max(worst, err);
      }
    }
  BOOST_TEST_MESSAGE(name(type) << " worst error relative to sum |x||w|: " << worst);
}

} // namespace

BOOST_AUTO_TEST_SUITE(packed_small_m)

BOOST_AUTO_TEST_CASE(bf16_results_match_a_double_reference) {
  check_packed(dtype::bf16);
}

BOOST_AUTO_TEST_CASE(f32_results_match_a_double_reference) {
  check_packed(dtype::f32);
}

BOOST_AUTO_TEST_CASE(only_onednn_brgemm_layouts_on_avx512_are_taken) {
  const dnnl::memory::desc bf16_blocked({64, 64}, dt::bf16, tag::BA16a64b2a);
  const dnnl::memory::desc f32_blocked({64, 64}, dt::f32, tag::BA16a64b);
  // A plain layout, another block width, or a narrower ISA: oneDNN keeps every M.
  BOOST_TEST(
      !kernels::for_weights({{64, 64}, dt::f32, tag::ab}, 64, 64, dtype::f32, vector_isa::avx512));
  BOOST_TEST(!kernels::for_weights({{64, 64}, dt::f32, tag::BA16a32b}, 64, 64, dtype::f32,
                                   vector_isa::avx512));
  BOOST_TEST(!kernels::for_weights(f32_blocked, 64, 64, dtype::f32, vector_isa::avx2));
  BOOST_TEST(!kernels::for_weights(bf16_blocked, 64, 64, dtype::bf16, vector_isa::none));
  // The dtype must match the layout's.
  BOOST_TEST(!kernels::for_weights(f32_blocked, 64, 64, dtype::bf16, vector_isa::avx512));
  BOOST_TEST(
      kernels::for_weights(f32_blocked, 64, 64, dtype::f32, vector_isa::avx512).has_value() ==
      cpu_runs(dtype::f32));
  BOOST_TEST(
      kernels::for_weights(bf16_blocked, 64, 64, dtype::bf16, vector_isa::avx512).has_value() ==
      cpu_runs(dtype::bf16));
}

BOOST_AUTO_TEST_CASE(onednn_linear_runs_them_up_to_the_limit_and_onednn_above) {
  fixture f;
  for (dtype type : {dtype::bf16, dtype::f32}) {
    if (type == dtype::bf16 && !triad::detect_cpu().native_bf16) {
      BOOST_TEST_MESSAGE("not run for bf16: oneDNN has no native bf16 matmul here ("
                         << triad::detect_cpu().describe() << ")");
      continue;
    }
    const unsigned k = 200, n = 192;
    operand w(random_floats(std::size_t{k} * n), type);
    triad::detail::onednn_linear alone(f.engine, k, n, type, w.f32.data());
    triad::detail::onednn_linear with_own(f.engine, k, n, type, w.f32.data(), vector_isa::avx512);
    BOOST_TEST(alone.kernel().find("triad:") == std::string::npos);
    BOOST_TEST_MESSAGE(name(type) << " kernel: " << with_own.kernel());
    const bool own = with_own.kernel().find("triad:") != std::string::npos;
    if (!own)
      BOOST_TEST_MESSAGE("not run for " << name(type) << ": oneDNN chose another layout ("
                                        << with_own.kernel() << ") or the CPU lacks the ISA");
    for (unsigned m : {1u, 5u, kernels::m_limit, kernels::m_limit + 1}) {
      operand x(random_floats(std::size_t{m} * k), type);
      std::vector<float> a(std::size_t{m} * n), b(std::size_t{m} * n);
      alone.forward(f.stream, x.data(type), a.data(), m);
      with_own.forward(f.stream, x.data(type), b.data(), m);
      BOOST_TEST_INFO(name(type) << " M=" << m);
      BOOST_TEST(worst_error(a, x, w, m, k, n, 0.0f) <= 2e-6);
      BOOST_TEST_INFO(name(type) << " M=" << m);
      BOOST_TEST(worst_error(b, x, w, m, k, n, 0.0f) <= 2e-6);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
