#include <boost/test/unit_test.hpp>

#include "actors/node_config.hpp"
#include "devices/factory.hpp"
#include "devices/sim/sim_backend.hpp"
#include "tests/devices/gguf_reference.hpp"
#include "tests/printers.hpp"

namespace {

triad::node_config parse(const std::string& text) {
  auto c = triad::parse_config(text, "factory.toml");
  BOOST_REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().message));
  return *c;
}

} // namespace

BOOST_AUTO_TEST_SUITE(factory)

BOOST_AUTO_TEST_CASE(a_models_fingerprint_tells_other_weights_apart) {
  auto open = [](const triad::model_config& m) {
    auto s = triad::open_model(m);
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    return s->fingerprint();
  };
  triad::model_config tiny;
  tiny.preset = "tiny";
  triad::model_config small;
  small.preset = "small";
  BOOST_TEST(open(tiny) == open(tiny));
  BOOST_TEST(open(tiny) != open(small));
  // Two files of one shape whose weights differ (another seed), and the same file again.
  triad::test::gguf_spec spec;
  triad::test::temp_model a{spec, "fp-a"};
  spec.seed += 1;
  triad::test::temp_model b{spec, "fp-b"};
  triad::model_config fa, fb;
  fa.path = a.path.string();
  fb.path = b.path.string();
  BOOST_TEST(open(fa) == open(fa));
  BOOST_TEST(open(fa) != open(fb));
  BOOST_TEST(open(fa) != open(tiny));
}

BOOST_AUTO_TEST_CASE(the_default_config_builds_real_cpu_devices) {
  auto node = triad::default_config();
  for (const auto& dev : node.devices) {
    auto b = triad::make_backend(node, dev, nullptr);
    BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
    BOOST_TEST((*b)->shape().name == "tiny");
    BOOST_TEST((*b)->kernel().find("sim:") == std::string::npos);
    BOOST_TEST((*b)->kv().pages_total > 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_sim_device_uses_a_user_profile_from_the_config) {
  auto node = parse(R"([model]
preset = "small"
[[devices]]
name = "rdu0"
backend = "sim"
role = "decode"
profile = "chip"
time_scale = 0.0
[[sim_profiles]]
name = "chip"
peak_tflops = 100
memory_bandwidth_gb_s = 1000
memory_gib = 8
)");
  auto b = triad::make_backend(node, node.devices[0], nullptr);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  BOOST_TEST((*b)->kernel() == "sim:chip");
  BOOST_TEST((*b)->shape().name == "small");
  triad::step_item item{1, {1, 2, 3}};
  auto out = (*b)->step({&item, 1});
  BOOST_REQUIRE(out.has_value());
  // Memory bound at 1 TB/s: about 272 MB of weights in about 0.27 ms.
  BOOST_TEST(out->seconds > 2e-4);
  BOOST_TEST(out->seconds < 4e-4);
}

BOOST_AUTO_TEST_CASE(a_sim_device_without_a_profile_models_the_default_one) {
  auto node = parse("[[devices]]\nname = \"s\"\nbackend = \"sim\"\ntime_scale = 0.0\n");
  auto b = triad::make_backend(node, node.devices[0], nullptr);
  BOOST_REQUIRE(b.has_value());
  BOOST_TEST((*b)->kernel() == "sim:h100");
}

BOOST_AUTO_TEST_CASE(cuda_is_refused_with_a_clear_message) {
  auto node = parse("[[devices]]\nname = \"g\"\nbackend = \"cuda\"\n");
  auto b = triad::make_backend(node, node.devices[0], nullptr);
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().code == triad::errc::unsupported);
  BOOST_TEST(b.error().message.find("'g'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_cpu_device_refuses_a_sim_only_preset) {
  auto config = triad::default_config();
  config.model.preset = "llama3-8b";
  auto b = triad::make_backend(config, config.devices.front(), nullptr);
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().message.find("'prefill0'") != std::string::npos);
  BOOST_TEST(b.error().message.find("llama3-8b") != std::string::npos);
  BOOST_TEST(b.error().message.find("sim devices only") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_cpu_device_refuses_fp8_weights) {
  auto config = triad::default_config();
  config.model.weights = triad::weight_format::fp8;
  auto b = triad::make_backend(config, config.devices.front(), nullptr);
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().message.find("'prefill0'") != std::string::npos);
  BOOST_TEST(b.error().message.find("[model].weights = \"fp8\" is for sim devices only") !=
             std::string::npos);
}

// A node config of the llama3-8b shape and its first device made an SN40L sim device.
std::pair<triad::node_config, triad::device_config> sn40l_llama() {
  auto config = triad::default_config();
  config.model.preset = "llama3-8b";
  auto dev = config.devices.front();
  dev.backend = triad::device_backend::sim;
  dev.profile = "sn40l";
  return {config, dev};
}

BOOST_AUTO_TEST_CASE(a_sim_device_runs_the_llama3_8b_shape) {
  auto [config, dev] = sn40l_llama();
  auto b = triad::make_backend(config, dev, nullptr);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  // 32 layers x 8 kv heads x 128 dims x 2 (K, V) x 2 bytes per token.
  BOOST_TEST((*b)->shape().kv_bytes_per_token(triad::dtype::bf16) == 131072u);
  BOOST_TEST(((*b)->shape().weights == triad::weight_format::dtype));
}

BOOST_AUTO_TEST_CASE(a_sim_device_stores_the_configured_weight_format) {
  auto [config, dev] = sn40l_llama();
  auto whole = triad::make_backend(config, dev, nullptr);
  config.model.weights = triad::weight_format::int4;
  auto int4 = triad::make_backend(config, dev, nullptr);
  BOOST_REQUIRE(whole && int4);
  BOOST_TEST(((*int4)->shape().weights == triad::weight_format::int4));
  // The bytes the weights free hold KV pages.
  BOOST_TEST((*int4)->kv().pages_total > (*whole)->kv().pages_total);
}

BOOST_AUTO_TEST_CASE(a_sim_devices_kv_mib_bounds_its_kv_pages) {
  auto [config, dev] = sn40l_llama();
  auto whole = triad::make_backend(config, dev, nullptr);
  BOOST_REQUIRE_MESSAGE(whole.has_value(), (whole ? "" : whole.error().message));
  dev.kv_mib = 64; // 128 KiB per token, 16 tokens a page: 32 pages
  auto small = triad::make_backend(config, dev, nullptr);
  BOOST_REQUIRE_MESSAGE(small.has_value(), (small ? "" : small.error().message));
  BOOST_TEST((*small)->kv().pages_total == 32u);
  BOOST_TEST((*whole)->kv().pages_total > 1000u); // the profile's memory less the weights
}

BOOST_AUTO_TEST_CASE(a_tensor_parallel_sim_device_holds_its_groups_kv) {
  auto [config, dev] = sn40l_llama();
  auto one = triad::make_backend(config, dev, nullptr);
  dev.tensor_parallel = 4;
  auto four = triad::make_backend(config, dev, nullptr);
  BOOST_REQUIRE_MESSAGE(one.has_value(), (one ? "" : one.error().message));
  BOOST_REQUIRE_MESSAGE(four.has_value(), (four ? "" : four.error().message));
  // Four devices' memory less one copy of the weights (each holds a quarter of them).
  const auto weights = (*one)->shape().weight_bytes(triad::dtype::bf16);
  const auto page = static_cast<double>((*one)->kv().page_bytes);
  const auto pages_one = static_cast<double>((*one)->kv().pages_total);
  const auto pages_four = static_cast<double>((*four)->kv().pages_total);
  BOOST_TEST(pages_four * page > 4 * pages_one * page + 2.9 * weights);
}

BOOST_AUTO_TEST_SUITE_END()
