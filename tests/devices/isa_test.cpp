#include <new>

#include <boost/test/unit_test.hpp>

#include "devices/cpu/detail/boundary.hpp"
#include "devices/cpu/isa.hpp"
#include "tests/printers.hpp"

namespace {

triad::cpu_capabilities caps(std::string isa, bool native, triad::vector_isa own) {
  triad::cpu_capabilities c;
  c.onednn_isa = std::move(isa);
  c.native_bf16 = native;
  c.own = own;
  return c;
}

} // namespace

BOOST_AUTO_TEST_SUITE(isa)

BOOST_AUTO_TEST_CASE(auto_takes_native_bf16_where_onednn_has_it) {
  auto c = triad::choose_cpu_compute(triad::model_dtype::automatic,
                                     caps("avx512_core_amx", true, triad::vector_isa::avx512));
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST((c->type() == triad::dtype::bf16));
  BOOST_TEST((c->kernel == triad::cpu_kernel::onednn_bf16));
}

BOOST_AUTO_TEST_CASE(auto_takes_bf16_weights_in_own_kernels_without_native_bf16) {
  for (auto own : {triad::vector_isa::avx2, triad::vector_isa::avx512}) {
    auto c = triad::choose_cpu_compute(triad::model_dtype::automatic, caps("avx2", false, own));
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST((c->type() == triad::dtype::bf16));
    BOOST_TEST((c->kernel == triad::cpu_kernel::own_bf16));
    BOOST_TEST((c->isa == own));
    BOOST_TEST(c->reason.find("no native bf16") != std::string::npos, c->reason);
  }
}

BOOST_AUTO_TEST_CASE(auto_falls_back_to_f32_without_avx2) {
  auto c = triad::choose_cpu_compute(triad::model_dtype::automatic,
                                     caps("sse41", false, triad::vector_isa::none));
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST((c->type() == triad::dtype::f32));
  BOOST_TEST((c->kernel == triad::cpu_kernel::onednn_f32));
}

BOOST_AUTO_TEST_CASE(f32_runs_everywhere) {
  for (const auto& cpu : {caps("sse41", false, triad::vector_isa::none),
                          caps("avx512_core_bf16", true, triad::vector_isa::avx512)}) {
    auto c = triad::choose_cpu_compute(triad::model_dtype::f32, cpu);
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST((c->kernel == triad::cpu_kernel::onednn_f32));
  }
}

BOOST_AUTO_TEST_CASE(bf16_on_a_cpu_that_cannot_run_it_names_the_isa_and_the_choices) {
  auto c = triad::choose_cpu_compute(triad::model_dtype::bf16,
                                     caps("sse41", false, triad::vector_isa::none));
  BOOST_REQUIRE(!c.has_value());
  BOOST_TEST((c.error().code == triad::errc::unsupported));
  const auto& m = c.error().message;
  BOOST_TEST(m.find("[model].dtype = \"bf16\"") != std::string::npos, m);
  BOOST_TEST(m.find("sse41") != std::string::npos, m);
  BOOST_TEST(m.find("\"f32\"") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(this_cpu_is_probed_and_what_it_runs_is_consistent) {
  const auto& cpu = triad::detect_cpu();
  BOOST_TEST_MESSAGE("this CPU: " << cpu.describe());
  BOOST_TEST(!cpu.onednn_isa.empty());
  BOOST_TEST(triad::can_run({triad::cpu_kernel::onednn_f32, triad::vector_isa::none, {}}, cpu));
  auto c = triad::choose_cpu_compute(triad::model_dtype::automatic, cpu);
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(triad::can_run(*c, cpu));
  BOOST_TEST_MESSAGE("dtype auto here: " << c->reason << "; kernel " << triad::probe_kernel(*c));
  BOOST_TEST(triad::probe_kernel(*c).find("refused") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(onednn_errors_and_exhaustion_become_errors_naming_the_step) {
  auto dnnl_failure =
      triad::detail::onednn_boundary("cpu backend: step", []() -> triad::expected<int> {
        throw dnnl::error(dnnl_unimplemented, "could not create a primitive descriptor iterator");
      });
  BOOST_REQUIRE(!dnnl_failure.has_value());
  BOOST_TEST((dnnl_failure.error().code == triad::errc::system_error));
  BOOST_TEST(dnnl_failure.error().message.find("cpu backend: step: oneDNN failed: could not "
                                               "create a primitive descriptor iterator") !=
                 std::string::npos,
             dnnl_failure.error().message);
  auto oom = triad::detail::onednn_boundary(
      "cpu backend: building the model", []() -> triad::expected<int> { throw std::bad_alloc{}; });
  BOOST_REQUIRE(!oom.has_value());
  BOOST_TEST((oom.error().code == triad::errc::exhausted));
  BOOST_TEST(oom.error().message == "cpu backend: building the model: out of memory");
  auto fine = triad::detail::onednn_boundary("x", []() -> triad::expected<int> { return 7; });
  BOOST_TEST(*fine == 7);
}

BOOST_AUTO_TEST_SUITE_END()
