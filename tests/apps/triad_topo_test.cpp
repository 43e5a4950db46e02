#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/process.hpp"
#include "tests/runtime/test_support.hpp"

namespace json = boost::json;
using triad::test::binary;
using triad::test::run_command;

namespace {

json::object topo_json(const std::string& args, const std::string& env = "") {
  auto r = run_command(env + binary("triad-topo") + " " + args + " --json");
  BOOST_REQUIRE_EQUAL(r.status, 0);
  auto value = json::parse(r.out);
  BOOST_REQUIRE(value.is_object());
  return value.as_object();
}

} // namespace

BOOST_AUTO_TEST_SUITE(triad_topo)

BOOST_AUTO_TEST_CASE(dgx2_json_has_two_domains_sixteen_devices_and_a_plan) {
  auto out = topo_json("--xml " + triad::test::topology_file("nvidia-dgx2.xml"));
  const auto& domains = out.at("domains").as_array();
  const auto& devices = out.at("devices").as_array();
  BOOST_TEST(domains.size() == 2u);
  BOOST_TEST(devices.size() == 16u);
  for (const auto& d : domains) {
    BOOST_TEST(d.as_object().contains("id"));
    BOOST_TEST(d.at("cpus").as_array().size() > 0u);
  }
  for (const auto& d : devices) {
    BOOST_TEST(d.at("name").as_string().starts_with("nvml"));
    BOOST_TEST(d.at("kind").as_string() == "gpu");
    BOOST_TEST(d.at("domain").as_int64() < 2);
  }
  const auto& plan = out.at("plan").as_object();
  BOOST_TEST(plan.at("devices").as_array().size() == 16u);
  // 16 drivers on the 4 cores the file allows: the plan must say they share.
  BOOST_TEST(plan.at("devices").as_array()[0].at("shared_core").as_bool());
  BOOST_TEST(plan.at("notes").as_array().size() > 0u);
  // cuda devices have no compute core set.
  for (const auto& d : plan.at("devices").as_array()) {
    BOOST_TEST(d.at("compute_cores").as_array().empty());
    BOOST_TEST(d.at("compute_cpus").as_array().empty());
  }
}

BOOST_AUTO_TEST_CASE(synthetic_snc3_host_gives_six_domains) {
  auto out = topo_json("--synthetic 'pack:2 numa:3 core:43 pu:2'");
  BOOST_TEST(out.at("domains").as_array().size() == 6u);
  BOOST_TEST(out.at("devices").as_array().empty());
  BOOST_TEST(out.at("plan").as_object().at("devices").as_array().size() == 2u);
  // The default cpu devices land in domains 0 and 1 and compute on 42 of their 43 cores each
  // (domain 0 keeps one for actor workers, domain 1 one for tools), two PUs per core.
  for (const auto& d : out.at("plan").as_object().at("devices").as_array()) {
    BOOST_TEST(d.at("compute_cores").as_array().size() == 42u);
    BOOST_TEST(d.at("compute_cpus").as_array().size() == 84u);
    BOOST_TEST(d.at("compute_cores").as_array().front() == d.at("driver_core"));
  }
}

BOOST_AUTO_TEST_CASE(this_machine_prints_text_and_json) {
  auto text = run_command(binary("triad-topo"));
  BOOST_TEST(text.status == 0);
  BOOST_TEST(text.out.find("placement plan:") != std::string::npos);
  auto out = topo_json("");
  BOOST_TEST(out.at("is_this_machine").as_bool());
  BOOST_TEST(out.at("allocator").at("name").as_string() == "mimalloc");
}

BOOST_AUTO_TEST_CASE(the_cpu_dtype_choice_follows_the_isa_onednn_allows) {
  // As on an AVX2-only machine (AMD Zen 2/3): no native bf16, bf16 weights in AVX2 kernels.
  auto avx2 = topo_json("--synthetic 'numa:1 core:2 pu:1'", "DNNL_MAX_CPU_ISA=AVX2 ");
  const auto& cpu = avx2.at("cpu").as_object();
  BOOST_TEST(cpu.at("onednn_isa").as_string() == "avx2");
  BOOST_TEST(!cpu.at("native_bf16").as_bool());
  BOOST_TEST(cpu.at("config_dtype").as_string() == "auto");
  BOOST_TEST(cpu.at("dtype").as_string() == "bf16");
  BOOST_TEST(cpu.at("path").as_string() == "own_bf16");
  BOOST_TEST(cpu.at("kernel").as_string().starts_with("triad:bf16_avx2"));
  // Without AVX2 (an SSE4.1 cap): f32, and the text output says so.
  auto sse = topo_json("", "DNNL_MAX_CPU_ISA=SSE41 ");
  BOOST_TEST(sse.at("cpu").at("dtype").as_string() == "f32");
  BOOST_TEST(sse.at("cpu").at("path").as_string() == "onednn_f32");
  auto text = run_command("DNNL_MAX_CPU_ISA=AVX2 " + binary("triad-topo"));
  BOOST_TEST(text.out.find("cpu devices: dtype bf16, path own_bf16") != std::string::npos,
             text.out);
}

BOOST_AUTO_TEST_CASE(a_bad_synthetic_string_exits_nonzero_with_a_message) {
  auto r = run_command(binary("triad-topo") + " --synthetic 'numa:x' 2>&1");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.out.find("numa:x") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
