#include <cmath>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "devices/model.hpp"
#include "devices/sampling.hpp"
#include "devices/tokenizer.hpp"
#include "tests/printers.hpp"

BOOST_AUTO_TEST_SUITE(model)

BOOST_AUTO_TEST_CASE(presets_have_the_documented_sizes) {
  auto tiny = triad::model_preset("tiny");
  auto small = triad::model_preset("small");
  BOOST_REQUIRE(tiny && small);
  BOOST_TEST(tiny->parameters() >= 20'000'000u);
  BOOST_TEST(tiny->parameters() <= 40'000'000u);
  BOOST_TEST(small->parameters() >= 120'000'000u);
  BOOST_TEST(small->parameters() <= 200'000'000u);
  BOOST_TEST(tiny->validate().has_value());
  BOOST_TEST(small->validate().has_value());
  // 2 (K, V) x 8 layers x 2 kv heads x 64 dims x 2 bytes.
  BOOST_TEST(tiny->kv_bytes_per_token(triad::dtype::bf16) == 4096u);
}

BOOST_AUTO_TEST_CASE(mixture_of_experts_presets_count_total_and_active_weights) {
  // Published: Mixtral 8x7B 46.7e9 total, 12.9e9 active; 8x22B 141e9 and 39e9 (with a
  // 32000- and 32768-token vocabulary; the presets have 320 tokens: 0.26e9 and 0.40e9 less).
  auto m7 = *triad::model_preset("mixtral-8x7b");
  auto m22 = *triad::model_preset("mixtral-8x22b");
  BOOST_TEST(m7.validate().has_value());
  BOOST_TEST(m22.validate().has_value());
  using boost::test_tools::tolerance;
  BOOST_TEST(static_cast<double>(m7.parameters()) / 1e9 == 46.7 - 0.26, tolerance(0.005));
  BOOST_TEST(static_cast<double>(m7.active_parameters()) / 1e9 == 12.9 - 0.26, tolerance(0.02));
  BOOST_TEST(static_cast<double>(m22.parameters()) / 1e9 == 141.0 - 0.40, tolerance(0.005));
  BOOST_TEST(static_cast<double>(m22.active_parameters()) / 1e9 == 39.0 - 0.40, tolerance(0.01));
  // Grouped-query attention's KV: 2 x 32 layers x 8 heads x 128 dims x 2 bytes.
  BOOST_TEST(m7.kv_bytes_per_token(triad::dtype::bf16) == 131072u);
}

BOOST_AUTO_TEST_CASE(deepseek_v3_caches_one_latent_per_token_and_layer) {
  auto d = *triad::model_preset("deepseek-v3");
  BOOST_TEST(d.validate().has_value());
  BOOST_TEST(d.moe());
  BOOST_TEST(d.mla());
  // Published: 671e9 total, 37e9 active, with a 129280-token vocabulary (1.85e9 of embedding
  // and output, 0.93e9 of it active).
  using boost::test_tools::tolerance;
  BOOST_TEST(static_cast<double>(d.parameters()) / 1e9 == 671.0 - 1.85, tolerance(0.005));
  BOOST_TEST(static_cast<double>(d.active_parameters()) / 1e9 == 37.0 - 0.93, tolerance(0.02));
  // 61 layers x (512 latent + 64 rotary key) x 2 bytes: a fifth of llama3-70b's 320 KiB.
  BOOST_TEST(d.kv_bytes_per_token(triad::dtype::bf16) == 70272u);
  // Decoding over the latent costs more FLOPs a position than over decompressed heads.
  BOOST_TEST(d.attention_flops_per_position(true) > d.attention_flops_per_position(false));
}

BOOST_AUTO_TEST_CASE(weight_formats_scale_the_weights_bytes) {
  auto s = *triad::model_preset("llama3-70b");
  const double params = static_cast<double>(s.parameters());
  BOOST_TEST(s.weight_bytes(triad::dtype::bf16) == 2 * params);
  BOOST_TEST(s.weight_bytes(triad::dtype::f32) == 4 * params);
  s.weights = triad::weight_format::bf16;
  BOOST_TEST(s.weight_bytes(triad::dtype::f32) == 2 * params);
  s.weights = triad::weight_format::fp8;
  BOOST_TEST(s.weight_bytes(triad::dtype::bf16) == params);
  s.weights = triad::weight_format::int4;
  BOOST_TEST(s.weight_bytes(triad::dtype::bf16) == 0.5625 * params);
}

BOOST_AUTO_TEST_CASE(a_mixture_of_experts_needs_a_valid_routing) {
  auto m = *triad::model_preset("mixtral-8x7b");
  m.experts_per_token = 9;
  auto ok = m.validate();
  BOOST_REQUIRE(!ok);
  BOOST_TEST(ok.error().message.find("experts_per_token (9) must be 1..8") != std::string::npos);
  m = *triad::model_preset("deepseek-v3");
  m.dense_layers = 61;
  ok = m.validate();
  BOOST_REQUIRE(!ok);
  BOOST_TEST(ok.error().message.find("dense_layers (61) must be below layers (61)") !=
             std::string::npos);
  // Mixtral has no dense MLP, so no ffn; a dense layer needs one.
  m = *triad::model_preset("mixtral-8x7b");
  m.dense_layers = 1;
  ok = m.validate();
  BOOST_REQUIRE(!ok);
  BOOST_TEST(ok.error().message.find("ffn must be at least 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_unknown_preset_names_the_allowed_ones) {
  auto m = triad::model_preset("huge");
  BOOST_REQUIRE(!m);
  BOOST_TEST(m.error().message.find("'huge'") != std::string::npos);
  BOOST_TEST(m.error().message.find("tiny, small") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_shape_with_heads_not_divisible_by_kv_heads_is_invalid) {
  auto m = *triad::model_preset("tiny");
  m.kv_heads = 3;
  auto ok = m.validate();
  BOOST_REQUIRE(!ok);
  BOOST_TEST(ok.error().message.find("multiple of kv_heads") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tokenizer_round_trips_bytes_and_special_tokens) {
  triad::tokenizer tok;
  std::string text = "call <tool_call>{\"name\": \"ls\"}</tool_call>\xff\x00 done";
  text.push_back('\0');
  auto ids = tok.encode(text);
  BOOST_TEST(tok.decode(ids) == text);
  BOOST_TEST(std::count(ids.begin(), ids.end(), triad::tokenizer::tool_call_start) == 1);
  BOOST_TEST(std::count(ids.begin(), ids.end(), triad::tokenizer::tool_call_end) == 1);
  auto raw = tok.encode("<tool_call>", false);
  BOOST_TEST(raw.size() == 11u);
}

BOOST_AUTO_TEST_CASE(encoding_piece_by_piece_appends_what_encoding_the_whole_gives) {
  triad::tokenizer tok;
  std::vector<triad::token> ids{triad::tokenizer::bos};
  std::string whole;
  // Many short pieces (the vector grows many times) and one long one.
  for (int i = 0; i < 200; ++i) {
    auto piece = "piece " + std::to_string(i) + " <tool_call>";
    tok.encode_to(ids, piece);
    whole += piece;
  }
  std::string long_piece(5000, 'x');
  tok.encode_to(ids, long_piece, false);
  whole += long_piece;
  auto expected = tok.encode(whole);
  BOOST_REQUIRE_EQUAL(ids.size(), expected.size() + 1);
  BOOST_TEST(ids.front() == triad::tokenizer::bos); // what was there stays
  BOOST_TEST((std::vector<triad::token>{ids.begin() + 1, ids.end()} == expected));
}

BOOST_AUTO_TEST_CASE(greedy_sampling_takes_the_argmax) {
  triad::sampler s{{}};
  std::vector<float> logits{0.1f, 3.0f, -1.0f, 2.9f};
  BOOST_TEST(s.sample(logits) == 1);
}

BOOST_AUTO_TEST_CASE(sampling_with_the_same_seed_repeats_and_another_seed_differs) {
  std::vector<float> logits(64);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(i % 7) * 0.3f;
  auto run = [&](std::uint64_t seed) {
    triad::sampler s{{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = seed}};
    std::vector<triad::token> out;
    for (int i = 0; i < 50; ++i)
      out.push_back(s.sample(logits));
    return out;
  };
  BOOST_TEST(run(7) == run(7));
  BOOST_TEST(run(7) != run(8));
}

BOOST_AUTO_TEST_CASE(top_k_and_top_p_restrict_the_candidates) {
  std::vector<float> logits{5.0f, 4.9f, 1.0f, 0.5f, 0.0f};
  triad::sampler k2{{.temperature = 2.0f, .top_k = 2, .top_p = 1.0f, .seed = 1}};
  triad::sampler p{{.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .seed = 1}};
  for (int i = 0; i < 200; ++i) {
    BOOST_TEST(k2.sample(logits) <= 1);
    BOOST_TEST(p.sample(logits) == 0); // token 0 alone holds over half the mass
  }
}

BOOST_AUTO_TEST_CASE(out_of_range_sampling_params_are_errors) {
  triad::sampling_params cold;
  cold.temperature = -1.0f;
  auto bad_temperature = cold.validate();
  BOOST_REQUIRE(!bad_temperature);
  BOOST_TEST(bad_temperature.error().message.find("temperature") != std::string::npos);
  triad::sampling_params narrow;
  narrow.top_p = 0.0f;
  auto bad_top_p = narrow.validate();
  BOOST_REQUIRE(!bad_top_p);
  BOOST_TEST(bad_top_p.error().message.find("top_p") != std::string::npos);
  triad::sampling_params fine;
  fine.temperature = 0.7f;
  fine.top_k = 40;
  fine.top_p = 0.9f;
  BOOST_TEST(fine.validate().has_value());
}

BOOST_AUTO_TEST_CASE(log_probabilities_are_the_log_softmax_and_its_best_in_order) {
  const std::vector<float> logits{1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double total = 0;
  for (float l : logits)
    total += std::exp(static_cast<double>(l));
  const auto lp = triad::log_probabilities(logits, 4, 3);
  BOOST_TEST(lp.logprob == std::log(std::exp(0.5) / total), boost::test_tools::tolerance(1e-5));
  // Ties by the lower id: 1 before 3.
  BOOST_TEST(lp.top == (std::vector<triad::token>{1, 3, 0}), boost::test_tools::per_element());
  BOOST_REQUIRE(lp.top_logprobs.size() == 3u);
  BOOST_TEST(lp.top_logprobs[0] == std::log(std::exp(3.0) / total),
             boost::test_tools::tolerance(1e-5));
  BOOST_TEST(lp.top_logprobs[2] == std::log(std::exp(1.0) / total),
             boost::test_tools::tolerance(1e-5));
  // Never more than the vocabulary or 20 alternatives, and none when none are asked.
  BOOST_TEST(triad::log_probabilities(logits, 0, 50).top.size() == logits.size());
  BOOST_TEST(triad::log_probabilities(std::vector<float>(64, 0.0f), 0, 50).top.size() ==
             triad::max_top_logprobs);
  BOOST_TEST(triad::log_probabilities(logits, 0, 0).top.empty());
}

BOOST_AUTO_TEST_SUITE_END()
