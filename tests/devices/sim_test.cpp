#include <cstring>
#include <map>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "devices/device.hpp"
#include "devices/sim/sim_backend.hpp"
#include "tests/printers.hpp"

namespace {

triad::model_shape small() {
  return *triad::model_preset("small");
}

std::unique_ptr<triad::sim_backend> make(const std::string& profile, std::uint64_t kv = 0) {
  triad::sim_backend_options o;
  o.shape = small();
  o.profile = *triad::builtin_profile(profile);
  o.time_scale = 0; // never wait in tests
  o.kv_budget_bytes = kv;
  auto b = triad::sim_backend::create(o);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  return std::move(b).value();
}

// Weight bytes of the small preset in bf16, computed here from its shape.
double small_weight_bytes() {
  auto s = small();
  double qkv = (s.heads + 2.0 * s.kv_heads) * s.head_dim, attn = double(s.heads) * s.head_dim;
  double per_layer = s.hidden * qkv + attn * s.hidden + 3.0 * s.hidden * s.ffn;
  return (per_layer * s.layers + double(s.hidden) * s.vocab) * 2;
}

} // namespace

BOOST_AUTO_TEST_SUITE(sim)

BOOST_AUTO_TEST_CASE(every_builtin_profile_cites_its_source) {
  for (const auto& name : triad::builtin_profile_names()) {
    auto p = triad::builtin_profile(name);
    BOOST_REQUIRE(p.has_value());
    BOOST_TEST(!p->source.empty(), name);
    BOOST_TEST(p->peak_flops > 0);
    BOOST_TEST(p->memory_bandwidth() > 0);
  }
  BOOST_TEST(triad::builtin_profile("h100")->peak_flops == 989e12);
  BOOST_TEST(triad::builtin_profile("sn50")->vendor_claim);
  auto missing = triad::builtin_profile("tpu9");
  BOOST_REQUIRE(!missing);
  BOOST_TEST(missing.error().message.find("h100, h200, b200") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_batch_1_decode_is_memory_bound_at_weights_over_bandwidth) {
  auto h100 = *triad::builtin_profile("h100");
  auto c = triad::estimate_step(small(), triad::dtype::bf16, h100, {{100, 1}});
  BOOST_TEST(!c.compute_bound);
  double expected = small_weight_bytes() / h100.memory_bandwidth() + h100.step_overhead;
  // KV and activations of one token add well under 1% here.
  BOOST_TEST(c.seconds >= expected);
  BOOST_TEST(c.seconds <= expected * 1.01);
  BOOST_TEST(c.operational_intensity < h100.peak_flops / h100.memory_bandwidth());
}

BOOST_AUTO_TEST_CASE(a_long_prefill_is_compute_bound) {
  auto h100 = *triad::builtin_profile("h100");
  auto c = triad::estimate_step(small(), triad::dtype::bf16, h100, {{0, 4096}});
  BOOST_TEST(c.compute_bound);
  BOOST_TEST(c.seconds == c.flops / h100.peak_flops + h100.step_overhead,
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(c.operational_intensity > h100.peak_flops / h100.memory_bandwidth());
}

BOOST_AUTO_TEST_CASE(the_capacity_footprint_counts_weights_and_every_sequences_kv) {
  auto s = small();
  auto h200 = *triad::builtin_profile("h200");
  auto one = triad::estimate_step(s, triad::dtype::bf16, h200, {{1000, 1}});
  auto longer = triad::estimate_step(s, triad::dtype::bf16, h200, {{3000, 1}});
  auto two = triad::estimate_step(s, triad::dtype::bf16, h200, {{1000, 1}, {1000, 1}});
  double kv = static_cast<double>(s.kv_bytes_per_token(triad::dtype::bf16));
  BOOST_TEST(longer.capacity_footprint - one.capacity_footprint == 2000.0 * kv,
             boost::test_tools::tolerance(1e-9));
  // A second sequence adds its KV (1001 tokens) and one more token of activations.
  BOOST_TEST(two.capacity_footprint - one.capacity_footprint >= 1001.0 * kv);
  BOOST_TEST(one.capacity_footprint > small_weight_bytes());
}

BOOST_AUTO_TEST_CASE(a_batch_whose_kv_does_not_fit_is_refused) {
  auto s = small();
  auto page = 16 * s.kv_bytes_per_token(triad::dtype::bf16);
  auto b = make("h100", 4 * page);
  triad::step_item fits{1, std::vector<triad::token>(64, 1)};
  BOOST_REQUIRE(b->step({&fits, 1}).has_value());
  triad::step_item too_much{2, std::vector<triad::token>(1, 1)};
  auto r = b->step({&too_much, 1});
  BOOST_REQUIRE(!r);
  BOOST_TEST(r.error().code == triad::errc::exhausted);
  BOOST_TEST(b->kv().pages_used == 4u);
  b->free(1);
  BOOST_TEST(b->step({&too_much, 1}).has_value());
}

BOOST_AUTO_TEST_CASE(weights_larger_than_the_device_are_an_error) {
  triad::sim_backend_options o;
  o.shape = small();
  o.profile = *triad::builtin_profile("h100");
  o.profile.tiers = {{"hbm", 60'000'000, 1e12, 1e12},
                     {"host", 40'000'000, 1e10, 1e10}}; // 100 MB: less than the 270 MB of weights
  auto b = triad::sim_backend::create(o);
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().message.find("weights") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(every_builtin_profile_lists_its_tiers_fastest_first) {
  for (const auto& name : triad::builtin_profile_names()) {
    auto p = *triad::builtin_profile(name);
    BOOST_TEST(triad::check_tiers(p).has_value(), name);
    for (std::size_t t = 1; t < p.tiers.size(); ++t)
      BOOST_TEST(p.tiers[t].read_bandwidth < p.tiers[t - 1].read_bandwidth, name);
  }
  // The RDU's capacity tier (Hot Chips 2024: 64 GB HBM + 1.5 TB DDR), and the GPU's host
  // memory over PCIe 5.
  auto sn40l = *triad::builtin_profile("sn40l");
  BOOST_REQUIRE(sn40l.tiers.size() == 2u);
  BOOST_TEST(sn40l.tiers[0].bytes == 64'000'000'000ull);
  BOOST_TEST(sn40l.tiers[1].bytes == 1'536'000'000'000ull);
  BOOST_TEST(sn40l.memory_bytes() == 1'600'000'000'000ull);
  auto h200 = *triad::builtin_profile("h200");
  BOOST_REQUIRE(h200.tiers.size() == 2u);
  BOOST_TEST(h200.tiers[0].bytes == 141'000'000'000ull);
  BOOST_TEST(h200.tiers[1].name == "host over pcie5");
  BOOST_TEST(h200.tiers[1].assumed);
}

// A two-tier device whose fast tier holds the small preset's weights and `fast_kv` bytes more.
triad::device_profile two_tiers(double fast_kv) {
  triad::device_profile p;
  p.name = "two_tiers";
  p.peak_flops = 1e15;
  p.tiers = {{"fast", static_cast<std::uint64_t>(small_weight_bytes() + fast_kv), 1e12, 1e12},
             {"slow", 1'000'000'000'000ull, 1e10, 5e9}};
  return p;
}

BOOST_AUTO_TEST_CASE(kv_past_the_fast_tier_is_read_at_the_slow_tiers_bandwidth) {
  auto s = small();
  const double kv = static_cast<double>(s.kv_bytes_per_token(triad::dtype::bf16));
  // Room in the fast tier for the activations and 1000 tokens of KV, not for 5000.
  const auto p = two_tiers(1000.0 * kv + 1e6);
  auto fits = triad::estimate_step(s, triad::dtype::bf16, p, {{999, 1}});
  auto spills = triad::estimate_step(s, triad::dtype::bf16, p, {{4999, 1}});
  BOOST_REQUIRE(fits.tier_resident.size() == 2u);
  BOOST_TEST(fits.tier_resident[1] == 0.0);
  BOOST_TEST(fits.tier_traffic[1] == 0.0);
  // Every byte of the fast tier's traffic at its rate: weights, activations, KV read and written.
  BOOST_TEST(fits.seconds == fits.bytes / 1e12, boost::test_tools::tolerance(1e-9));
  // The spilled KV is read (and the new token's share written) at the slow tier's rates, which
  // now bound the step.
  const double spilled = spills.tier_resident[1];
  BOOST_TEST(spilled > 3000.0 * kv);
  BOOST_TEST(spills.tier_resident[0] + spilled == spills.capacity_footprint,
             boost::test_tools::tolerance(1e-9));
  const double written = kv * spilled / (5000.0 * kv); // the new token's share in the slow tier
  BOOST_TEST(spills.tier_traffic[1] == spilled + written, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(spills.seconds == spilled / 1e10 + written / 5e9, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(spills.seconds > 10 * fits.seconds);
  BOOST_TEST(spills.fits);
}

BOOST_AUTO_TEST_CASE(kv_held_outside_the_step_waits_in_the_slow_tier_and_costs_no_time) {
  auto s = small();
  const double kv = static_cast<double>(s.kv_bytes_per_token(triad::dtype::bf16));
  const auto p = two_tiers(1000.0 * kv + 1e6);
  auto alone = triad::estimate_step(s, triad::dtype::bf16, p, {{999, 1}});
  // 100 GB of paused sessions' KV: placed after the step's, so in the slow tier, never read.
  auto beside = triad::estimate_step(s, triad::dtype::bf16, p, {{999, 1}}, 100e9);
  BOOST_TEST(beside.seconds == alone.seconds);
  BOOST_TEST(beside.tier_resident[0] <= static_cast<double>(p.tiers[0].bytes));
  BOOST_TEST(beside.tier_resident[1] > 99e9);
  BOOST_TEST(beside.tier_resident[0] + beside.tier_resident[1] == alone.capacity_footprint + 100e9,
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(beside.tier_traffic[1] == 0.0);
  BOOST_TEST(beside.fits);
  // More than both tiers hold does not fit.
  auto over = triad::estimate_step(s, triad::dtype::bf16, p, {{999, 1}}, 1001e9);
  BOOST_TEST(!over.fits);
}

BOOST_AUTO_TEST_CASE(llama3_70b_on_one_h200_meets_the_capacity_wall) {
  auto s = *triad::model_preset("llama3-70b");
  BOOST_TEST(static_cast<double>(s.parameters()) / 1e9 == 68.5, boost::test_tools::tolerance(0.01));
  BOOST_TEST(s.kv_bytes_per_token(triad::dtype::bf16) == 327680u);
  auto h200 = *triad::builtin_profile("h200");
  // 16 sequences of 4096 tokens: 21.5 GB of KV beside 137 GB of weights in 141 GB of HBM, so
  // about 17.5 GB of it is read over PCIe at every step.
  const std::vector<triad::step_work> work(16, {4095, 1});
  auto c = triad::estimate_step(s, triad::dtype::bf16, h200, work);
  BOOST_TEST(c.fits);
  BOOST_TEST(c.tier_resident[1] > 17e9);
  BOOST_TEST(c.tier_resident[1] < 18e9);
  BOOST_TEST(c.seconds > 0.27);
  // The same step with all its KV in HBM: the weights and KV at 4.8 TB/s, 8 times faster.
  auto roomy = h200;
  roomy.tiers[0].bytes = 200'000'000'000ull;
  auto fast = triad::estimate_step(s, triad::dtype::bf16, roomy, work);
  BOOST_TEST(fast.tier_resident[1] == 0.0);
  BOOST_TEST(fast.seconds < 0.04);
}

BOOST_AUTO_TEST_CASE(a_tensor_parallel_group_sums_its_devices_and_pays_its_allreduces) {
  auto h200 = *triad::builtin_profile("h200");
  auto pair = triad::tensor_parallel_group(h200, 2);
  BOOST_REQUIRE_MESSAGE(pair.has_value(), (pair ? "" : pair.error().message));
  BOOST_TEST(pair->name == "2x h200");
  BOOST_TEST(pair->tiers[0].bytes == 282'000'000'000ull);
  BOOST_TEST(pair->tiers[0].read_bandwidth == 9.6e12);
  BOOST_TEST(pair->peak_flops == 2 * h200.peak_flops);
  BOOST_TEST(pair->allreduce_bandwidth() == h200.link_bandwidth / 2);
  BOOST_TEST(h200.allreduce_bandwidth() == 0.0);
  // llama3-70b, 16 sequences of 4096 tokens: on one H200 17.5 GB of their KV spills over
  // PCIe (the capacity wall); on two, weights and KV sit in HBM at twice the bandwidth.
  auto s = *triad::model_preset("llama3-70b");
  const std::vector<triad::step_work> work(16, {4095, 1});
  auto one = triad::estimate_step(s, triad::dtype::bf16, h200, work);
  auto two = triad::estimate_step(s, triad::dtype::bf16, *pair, work);
  BOOST_TEST(one.allreduce_seconds == 0.0);
  BOOST_TEST(two.tier_resident[1] == 0.0);
  BOOST_TEST(two.seconds < one.seconds / 8);
  // Two all-reduces a layer of 16 tokens' hidden states (8192 x 2 bytes): a ring of two sends
  // half of each, at 450 GB/s, plus 5 us latency each.
  const double expected = 2.0 * 80 * (16 * 8192 * 2.0 / 450e9 + 5e-6);
  BOOST_TEST(two.allreduce_seconds == expected, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(two.seconds > two.allreduce_seconds);
  // One device is itself; a group size out of range, a group of groups, or a profile
  // without a link is an error naming it.
  BOOST_TEST(triad::tensor_parallel_group(h200, 1)->name == "h200");
  auto zero = triad::tensor_parallel_group(h200, 0);
  BOOST_REQUIRE(!zero);
  BOOST_TEST(zero.error().message.find("tensor_parallel = 0; allowed: 1..64") != std::string::npos,
             zero.error().message);
  BOOST_TEST(!triad::tensor_parallel_group(*pair, 2));
  auto unlinked = h200;
  unlinked.link_bandwidth = 0;
  auto none = triad::tensor_parallel_group(unlinked, 4);
  BOOST_REQUIRE(!none);
  BOOST_TEST(none.error().message.find("link bandwidth") != std::string::npos,
             none.error().message);
}

BOOST_AUTO_TEST_CASE(a_moe_decode_reads_the_experts_its_batch_touches) {
  auto s = *triad::model_preset("mixtral-8x7b");
  auto h200 = *triad::builtin_profile("h200");
  const double active = static_cast<double>(s.active_parameters()) * 2;
  const double total = static_cast<double>(s.parameters()) * 2;
  // One token runs 2 of 8 experts: the step reads about the active weights (the KV of 101
  // tokens, 13 MB, and one token's activations, 7 MB, add little).
  auto one = triad::estimate_step(s, triad::dtype::bf16, h200, {{100, 1}});
  BOOST_TEST(one.bytes > active);
  BOOST_TEST(one.bytes < active + 25e6);
  // Its FLOPs follow the active weights (2 a weight), not the total.
  BOOST_TEST(one.flops > active);
  BOOST_TEST(one.flops < 1.1 * active);
  // 64 tokens touch all 8 in every layer (1 - 0.75^64 of them): the whole 93 GB.
  const std::vector<triad::step_work> batch(64, {100, 1});
  auto many = triad::estimate_step(s, triad::dtype::bf16, h200, batch);
  BOOST_TEST(many.bytes > total);
  BOOST_TEST(many.bytes < total + 64 * 25e6);
  // The FLOPs follow the active weights: 64 times one token's.
  BOOST_TEST(many.flops == 64 * one.flops, boost::test_tools::tolerance(1e-9));
  // Resident: all the weights, whichever the step reads.
  BOOST_TEST(one.capacity_footprint > total);
}

BOOST_AUTO_TEST_CASE(fp8_and_int4_weights_shorten_a_memory_bound_decode) {
  auto s = *triad::model_preset("mixtral-8x7b");
  auto h200 = *triad::builtin_profile("h200");
  auto bf16 = triad::estimate_step(s, triad::dtype::bf16, h200, {{100, 1}});
  s.weights = triad::weight_format::fp8;
  auto fp8 = triad::estimate_step(s, triad::dtype::bf16, h200, {{100, 1}});
  s.weights = triad::weight_format::int4;
  auto int4 = triad::estimate_step(s, triad::dtype::bf16, h200, {{100, 1}});
  BOOST_TEST(!bf16.compute_bound);
  const double overhead = h200.step_overhead;
  BOOST_TEST((fp8.seconds - overhead) / (bf16.seconds - overhead) == 0.5,
             boost::test_tools::tolerance(0.01));
  BOOST_TEST((int4.seconds - overhead) / (bf16.seconds - overhead) == 0.28125,
             boost::test_tools::tolerance(0.01));
  BOOST_TEST(fp8.flops == bf16.flops);
}

BOOST_AUTO_TEST_CASE(latent_attention_takes_the_cheaper_form_per_chunk) {
  auto d = *triad::model_preset("deepseek-v3");
  auto sn40l = *triad::builtin_profile("sn40l");
  using boost::test_tools::tolerance;
  // A prefill from nothing expands no cached latent: over decompressed heads.
  auto prefill = triad::estimate_step(d, triad::dtype::bf16, sn40l, {{0, 4096}});
  BOOST_TEST(prefill.attention_flops ==
                 d.attention_flops_per_position(false) * (4096.0 * 4097.0 / 2),
             tolerance(1e-9));
  // Two tokens over 100K cached ones: expanding 100K latents would cost far more than
  // attending over them, so the latent; two tokens cost about twice one.
  auto one = triad::estimate_step(d, triad::dtype::bf16, sn40l, {{100000, 1}});
  auto two = triad::estimate_step(d, triad::dtype::bf16, sn40l, {{100000, 2}});
  BOOST_TEST(one.attention_flops == d.attention_flops_per_position(true) * 100001.0,
             tolerance(1e-9));
  BOOST_TEST(two.flops > 1.9 * one.flops);
  BOOST_TEST(two.flops < 2.1 * one.flops);
}

BOOST_AUTO_TEST_CASE(deepseek_v3_fits_one_sn40l_in_fp8_and_no_h200) {
  triad::sim_backend_options o;
  o.shape = *triad::model_preset("deepseek-v3");
  o.shape.weights = triad::weight_format::fp8;
  o.time_scale = 0;
  o.profile = *triad::builtin_profile("sn40l");
  auto sn40l = triad::sim_backend::create(o);
  BOOST_REQUIRE_MESSAGE(sn40l.has_value(), (sn40l ? "" : sn40l.error().message));
  // 669 GB of weights in 1.6 TB; the rest, about 0.9 TB, holds 13 million tokens of latent KV.
  const auto kv = (*sn40l)->kv();
  BOOST_TEST(static_cast<double>(kv.pages_total) * static_cast<double>(kv.page_bytes) > 0.9e12);
  o.profile = *triad::builtin_profile("h200");
  auto h200 = triad::sim_backend::create(o);
  BOOST_REQUIRE(!h200);
  BOOST_TEST(h200.error().code == triad::errc::exhausted);
  BOOST_TEST(h200.error().message.find("'deepseek-v3' needs") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_sim_device_holds_kv_in_every_tier) {
  auto sn40l = make("sn40l");
  const auto kv = sn40l->kv();
  // The DDR tier's 1.5 TB hold KV too, beyond the 64 GB of HBM.
  BOOST_TEST(static_cast<double>(kv.pages_total) * static_cast<double>(kv.page_bytes) > 1.5e12);
}

BOOST_AUTO_TEST_CASE(a_tier_without_bandwidth_is_an_error_naming_it) {
  triad::sim_backend_options o;
  o.shape = small();
  o.profile = *triad::builtin_profile("h100");
  o.profile.tiers[1].read_bandwidth = 0;
  auto b = triad::sim_backend::create(o);
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().code == triad::errc::invalid_argument);
  BOOST_TEST(b.error().message.find("'host over pcie5'") != std::string::npos, b.error().message);
  o.profile.tiers.clear();
  auto none = triad::sim_backend::create(o);
  BOOST_REQUIRE(!none);
  BOOST_TEST(none.error().message.find("no memory tier") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(simulated_logits_are_a_pure_function_of_the_tokens) {
  auto a = make("b200"), b = make("b200");
  triad::step_item x{1, {5, 6, 7}}, y{99, {5, 6, 7}};
  auto ra = a->step({&x, 1});
  auto rb = b->step({&y, 1});
  BOOST_REQUIRE(ra && rb);
  BOOST_TEST(ra->logits[0] == rb->logits[0]);
  BOOST_TEST(ra->seconds > 0);
  BOOST_TEST(a->kernel() == "sim:b200");
}

BOOST_AUTO_TEST_CASE(kv_is_fetched_only_when_the_link_beats_computing_it) {
  triad::sim_backend_options o;
  o.shape = *triad::model_preset("llama3-8b");
  o.profile = *triad::builtin_profile("h200");
  o.time_scale = 0;
  auto fast = triad::sim_backend::create(o);
  BOOST_REQUIRE(fast.has_value());
  // 2048 tokens of llama3-8b's KV (256 MiB) over the H200's link against the prefill that
  // made them (tens of TFLOP).
  BOOST_TEST((*fast)->import_cheaper(0, 2048));
  BOOST_TEST((*fast)->import_cheaper(30000, 16));
  o.profile.link_bandwidth = 1e6; // a link of 1 MB/s: computing wins
  auto slow = triad::sim_backend::create(o);
  BOOST_REQUIRE(slow.has_value());
  BOOST_TEST(!(*slow)->import_cheaper(0, 2048));
  o.profile.link_bandwidth = 0; // no modelled link: fetched, as on a real backend
  auto none = triad::sim_backend::create(o);
  BOOST_REQUIRE(none.has_value());
  BOOST_TEST((*none)->import_cheaper(0, 2048));
}

BOOST_AUTO_TEST_CASE(a_prefix_cache_that_fills_the_device_gives_way_to_a_step) {
  // A device whose memory holds the weights and 10 pages of KV: finished sequences leave their
  // pages in the prefix cache until it fills the device. A new sequence's step still runs (the
  // cache's pages are evicted for it); counting them as held made every step fail, and a device
  // that retried it spun without end.
  auto s = small();
  const auto page = 16 * s.kv_bytes_per_token(triad::dtype::bf16);
  triad::sim_backend_options o;
  o.shape = s;
  o.profile = *triad::builtin_profile("h100");
  o.profile.tiers.resize(1);
  // Room for the weights, 10 pages, and the activations of a 48-token step.
  const auto step48 =
      triad::estimate_step(s, triad::dtype::bf16, o.profile, {{0, 48}}).capacity_footprint;
  o.profile.tiers[0].bytes = static_cast<std::uint64_t>(step48) + 7 * page;
  o.kv_budget_bytes = 10 * page;
  o.time_scale = 0;
  auto b = triad::sim_backend::create(o);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  auto& dev = **b;
  const auto total = dev.kv().pages_total;
  BOOST_REQUIRE(total >= 8u);
  for (triad::seq_id seq = 1; seq <= 4; ++seq) { // distinct prompts, cached when freed
    triad::step_item it{seq, std::vector<triad::token>(48, static_cast<triad::token>(seq))};
    BOOST_REQUIRE(dev.step({&it, 1}).has_value());
    dev.publish(seq, it.tokens);
    dev.free(seq);
  }
  BOOST_REQUIRE(dev.kv().pages_cached + 2 >= total); // the cache fills the device
  triad::step_item fresh{9, std::vector<triad::token>(32, 7)};
  auto r = dev.step({&fresh, 1});
  BOOST_TEST(r.has_value(), (r ? "" : r.error().message));
  BOOST_TEST(dev.kv().pages_used == 2u);
}

BOOST_AUTO_TEST_CASE(a_sim_pages_memory_holds_its_tokens_through_steps_exports_and_imports) {
  // SIMULATED KV: a page's bytes are its tokens. They are written as the step computes them,
  // travel with a blob, and are there on the importing device, so a page it publishes and later
  // streams out carries its own tokens.
  auto a = make("h200");
  auto b = make("h200");
  std::vector<triad::token> toks(40);
  for (std::size_t i = 0; i < toks.size(); ++i)
    toks[i] = static_cast<triad::token>(100 + i);
  std::vector<triad::step_item> item{{1, toks}};
  BOOST_REQUIRE(a->step(item));
  auto bytes = a->export_kv(1);
  BOOST_REQUIRE(bytes);
  BOOST_REQUIRE(b->import_kv(7, *bytes));
  auto pages = b->page_memory(7);
  BOOST_REQUIRE(pages.size() == 3u); // 40 tokens in pages of 16
  for (std::size_t i = 0; i < toks.size(); ++i) {
    std::int32_t t;
    std::memcpy(&t, pages[i / 16].data() + (i % 16) * 4, 4);
    BOOST_TEST(t == toks[i]);
  }
  // A blob cut short is refused, naming the sizes.
  auto cut = *bytes;
  cut.resize(cut.size() - 4);
  auto bad = b->import_kv(8, cut);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(bad.error().message.find("40 tokens") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_device_actor_runs_a_simulated_device) {
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  triad::metrics_registry metrics;
  triad::device_options o;
  o.name = "sim0";
  o.metrics = &metrics;
  auto dev = triad::spawn_device(dom, make("h200"), o);
  BOOST_REQUIRE(dev.has_value());
  {
    caf::scoped_actor self{dom.system()};
    triad::generate_request r;
    r.seq = 1;
    r.prompt = std::vector<triad::token>(100, 65);
    r.max_new_tokens = 20;
    r.sink = self;
    self->request(*dev, caf::infinite, triad::generate_atom::value, r)
        .receive([](triad::admission& a) { BOOST_TEST(a.accepted); },
                 [](caf::error&) { BOOST_FAIL("no admission"); });
    int tokens = 0;
    bool done = false;
    while (!done)
      self->receive([&](triad::device_event& e) {
        tokens += static_cast<int>(e.tokens.size());
        done = e.kind == triad::device_event::done;
      });
    BOOST_TEST(tokens == 20);
    self->request(*dev, caf::infinite, triad::stats_atom::value)
        .receive([](triad::device_stats&) {}, // the actor has recorded every step by now
                 [](caf::error&) { BOOST_FAIL("no stats"); });
  }
  // Every modelled step lies in the OI/CF plane: as many points as steps, each needing at least
  // the weights resident.
  const auto text = metrics.render();
  auto value = [&](const std::string& series) {
    auto at = text.find("\n" + series + " ");
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, series << " in\n" << text);
    return std::stod(text.substr(at + series.size() + 2));
  };
  const double steps = value("triad_device_steps_total{device=\"sim0\"}");
  BOOST_TEST(steps >= 20.0);
  BOOST_TEST(value("triad_device_step_operational_intensity_count{device=\"sim0\"}") == steps);
  BOOST_TEST(value("triad_device_step_capacity_footprint_bytes_count{device=\"sim0\"}") == steps);
  BOOST_TEST(value("triad_device_step_capacity_footprint_bytes_sum{device=\"sim0\"}") >
             steps * small_weight_bytes());
  // A batch-1 decode of the small model reads its weights for a few FLOPs each: about 1.
  BOOST_TEST(value("triad_device_step_operational_intensity_bucket{device=\"sim0\",le=\"2\"}") >=
             steps - 1);
  caf::anon_send_exit(*dev, caf::exit_reason::user_shutdown);
  dom.stop(std::chrono::seconds{10});
}

// Runs four sequences on a zero-time sim device (sampled with a seed; one scripted to end at a
// stop token) and returns each one's tokens and end, and the device's stats.
struct burst_run {
  std::map<triad::seq_id, std::vector<triad::token>> tokens;
  std::map<triad::seq_id, std::string> ends;
  triad::device_stats stats;
};

burst_run run_four(std::size_t burst_steps) {
  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  triad::device_options o;
  o.name = "sim0";
  o.burst_steps = burst_steps;
  o.burst_window = std::chrono::seconds{10}; // steps alone bound the bursts
  auto dev = triad::spawn_device(dom, make("h200"), o);
  BOOST_REQUIRE(dev.has_value());
  burst_run out;
  {
    caf::scoped_actor self{dom.system()};
    for (triad::seq_id seq = 1; seq <= 4; ++seq) {
      triad::generate_request r;
      r.seq = seq;
      r.prompt = std::vector<triad::token>(20 + seq * 7, static_cast<triad::token>(60 + seq));
      r.max_new_tokens = static_cast<std::uint32_t>(25 + seq * 3);
      r.sampling.temperature = 4.0f; // flat enough that the noise decides some tokens
      r.sampling.seed = seq;
      if (seq == 3) { // scripted: the 11th token is a stop token
        r.forced = std::vector<triad::token>(10, 'x');
        r.forced.push_back('!');
        r.stop = {'!'};
      }
      r.sink = self;
      self->request(*dev, caf::infinite, triad::generate_atom::value, r)
          .receive([](triad::admission& a) { BOOST_TEST(a.accepted); },
                   [](caf::error&) { BOOST_FAIL("no admission"); });
    }
    std::size_t done = 0;
    while (done < 4)
      self->receive([&](triad::device_event& e) {
        auto& seq = out.tokens[e.seq];
        seq.insert(seq.end(), e.tokens.begin(), e.tokens.end());
        if (e.kind == triad::device_event::done) {
          out.ends[e.seq] = e.message;
          ++done;
        }
      });
    self->request(*dev, caf::infinite, triad::stats_atom::value)
        .receive([&](triad::device_stats& s) { out.stats = s; },
                 [](caf::error&) { BOOST_FAIL("no stats"); });
  }
  caf::anon_send_exit(*dev, caf::exit_reason::user_shutdown);
  dom.stop(std::chrono::seconds{10});
  return out;
}

BOOST_AUTO_TEST_CASE(decode_bursts_choose_the_same_tokens_as_single_steps) {
  auto single = run_four(1);
  auto burst = run_four(8);
  BOOST_TEST(single.stats.step_jobs == single.stats.steps);
  BOOST_TEST(burst.stats.step_jobs < burst.stats.steps); // several steps per driver job
  for (triad::seq_id seq = 1; seq <= 4; ++seq) {
    BOOST_TEST(burst.tokens[seq] == single.tokens[seq]);
    BOOST_TEST(burst.ends[seq] == single.ends[seq]);
  }
  BOOST_TEST(burst.tokens[3].size() == 11u);
  BOOST_TEST(burst.ends[3] == "stop");
  BOOST_TEST(burst.tokens[4].size() == 37u);
  BOOST_TEST(burst.ends[4] == "length");
  BOOST_TEST(burst.stats.generated == single.stats.generated);
}

BOOST_AUTO_TEST_SUITE_END()
