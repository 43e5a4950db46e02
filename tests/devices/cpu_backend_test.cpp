#include <random>
#include <thread>

#include <omp.h>
#include <sched.h>

#include <boost/test/unit_test.hpp>

#include "devices/cpu/cpu_backend.hpp"
#include "runtime/config.hpp"
#include "tests/devices/reference_model.hpp"
#include "tests/printers.hpp"

using triad::test::relative_error;

namespace {

triad::model_shape tiny() {
  auto s = triad::model_preset("tiny");
  BOOST_REQUIRE(s.has_value());
  return *s;
}

std::unique_ptr<triad::cpu_backend> make(triad::dtype type, std::size_t page_tokens = 16,
                                         std::uint64_t budget = 64ull << 20) {
  triad::cpu_backend_options o;
  o.shape = tiny();
  o.type = type;
  o.page_tokens = page_tokens;
  o.kv_budget_bytes = budget;
  auto b = triad::cpu_backend::create(o);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  return std::move(b).value();
}

// Fresh random tokens each run; the seed is logged so a failure can be replayed.
std::vector<triad::token> random_tokens(std::size_t n) {
  static std::uint64_t seed = std::random_device{}();
  BOOST_TEST_MESSAGE("random token seed " << seed);
  std::mt19937_64 rng{seed++};
  std::uniform_int_distribution<triad::token> dist{0, 262};
  std::vector<triad::token> out(n);
  for (auto& t : out)
    t = dist(rng);
  return out;
}

std::vector<float> prefill(triad::backend& b, triad::seq_id seq,
                           const std::vector<triad::token>& tokens) {
  triad::step_item item{seq, tokens};
  auto out = b.step({&item, 1});
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  return out->logits.front();
}

void check_reference(triad::cpu_backend& backend, triad::dtype type, double tolerance) {
  auto weights = triad::generate_weights(tiny(), type);
  auto tokens = random_tokens(19);
  auto got = prefill(backend, 1, tokens);
  auto want = triad::test::reference_logits(tiny(), weights, tokens);
  auto err = relative_error(got, want);
  BOOST_TEST_MESSAGE(to_string(type)
                     << " (" << to_string(backend.kernel_path()) << ", " << backend.kernel()
                     << ") relative error vs double reference: " << err);
  BOOST_TEST(err <= tolerance);
  // Then one decode step on the cache matches the reference over the longer sequence.
  tokens.push_back(42);
  triad::step_item next{1, {42}};
  auto out = backend.step({&next, 1});
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  auto decode_err =
      relative_error(out->logits.front(), triad::test::reference_logits(tiny(), weights, tokens));
  BOOST_TEST(decode_err <= tolerance);
}

void check_reference(triad::dtype type, double tolerance) {
  auto backend = make(type);
  check_reference(*backend, type, tolerance);
}

// How far two ways of cutting the same tokens into steps may differ. Where one implementation
// runs every M (oneDNN alone, or f32 weights) results agree to f32 rounding. Where triad's own
// kernels run the few-row steps and oneDNN the long ones (own_bf16 up to 128 rows; onednn_bf16
// and onednn_f32 up to packed_small_m's 16 on AVX-512), the sums differ in their last bits, and
// where that moves a value across a bf16 rounding boundary it differs by one bf16 step (2^-8
// relative): a K or V value in a page (own_bf16), or also an activation rounded to bf16 before
// each matmul (onednn_bf16), which the later layers carry on. A wrong page or position would
// differ by O(1).
double chunking_tolerance(const triad::cpu_backend& b) {
  const bool mixed = b.kernel().find("triad:") != std::string::npos;
  if (!mixed || b.type() == triad::dtype::f32)
    return 1e-5;
  return b.kernel_path() == triad::cpu_kernel::own_bf16 ? 3e-3 : 1e-2;
}

// The PUs the calling thread may run on.
std::vector<unsigned> affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  BOOST_REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  std::vector<unsigned> out;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set))
      out.push_back(cpu);
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(cpu_backend)

BOOST_AUTO_TEST_CASE(f32_logits_match_a_double_precision_reference) {
  check_reference(triad::dtype::f32, 1e-4);
}

BOOST_AUTO_TEST_CASE(bf16_logits_match_a_double_precision_reference) {
  check_reference(triad::dtype::bf16, 1e-2);
}

BOOST_AUTO_TEST_CASE(decoding_with_the_cache_matches_a_full_recompute_at_every_position) {
  auto backend = make(triad::dtype::f32, 4);
  auto tokens = random_tokens(24);
  std::vector<triad::token> prefix(tokens.begin(), tokens.begin() + 3);
  prefill(*backend, 1, prefix);
  for (std::size_t n = 3; n < tokens.size(); ++n) {
    triad::step_item next{1, {tokens[n]}};
    auto decoded = backend->step({&next, 1});
    BOOST_REQUIRE(decoded.has_value());
    prefix.push_back(tokens[n]);
    auto recomputed = prefill(*backend, 100 + n, prefix);
    backend->free(100 + n);
    BOOST_TEST(relative_error(decoded->logits.front(), recomputed) <= 1e-5, "position " << n);
  }
  BOOST_TEST(backend->length(1) == tokens.size());
}

BOOST_AUTO_TEST_CASE(a_mixed_batch_gives_each_sequence_the_logits_it_gets_alone) {
  auto backend = make(triad::dtype::f32, 8);
  auto a = random_tokens(11), b = random_tokens(5), c = random_tokens(20);
  // Alone: a and b prefilled, then one decode token each; c prefilled.
  auto alone = make(triad::dtype::f32, 8);
  prefill(*alone, 1, a);
  prefill(*alone, 2, b);
  auto a_next = prefill(*alone, 1, {7});
  auto b_next = prefill(*alone, 2, {9});
  auto c_alone = prefill(*alone, 3, c);
  // Mixed: the same work as one step of two decodes and a prefill.
  prefill(*backend, 1, a);
  prefill(*backend, 2, b);
  std::vector<triad::step_item> batch{{1, {7}}, {3, c}, {2, {9}}};
  auto out = backend->step(batch);
  BOOST_REQUIRE(out.has_value());
  BOOST_TEST(out->tokens == 22u);
  BOOST_TEST(relative_error(out->logits[0], a_next) <= 1e-5);
  BOOST_TEST(relative_error(out->logits[1], c_alone) <= 1e-5);
  BOOST_TEST(relative_error(out->logits[2], b_next) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(whether_an_import_beats_computing_comes_from_measured_costs) {
  auto b = make(triad::dtype::bf16);
  auto costs = b->measured_import_costs();
  BOOST_TEST(costs.copy_bytes_per_second > 0);
  BOOST_TEST(costs.compute_seconds_per_token == 0); // no prefill measured yet: imports
  BOOST_TEST(b->import_cheaper(0, 64));
  prefill(*b, 1, random_tokens(3)); // a decode-sized step measures nothing
  BOOST_TEST(b->measured_import_costs().compute_seconds_per_token == 0);
  prefill(*b, 2, random_tokens(48));
  costs = b->measured_import_costs();
  BOOST_TEST_REQUIRE(costs.compute_seconds_per_token > 0);
  BOOST_TEST_MESSAGE("checked copy " << costs.copy_bytes_per_second / 1e9 << " GB/s, compute "
                                     << costs.compute_seconds_per_token * 1e6 << " us/token");
  // The decision follows the two costs: a token's KV copied against a token computed.
  const double kv = static_cast<double>(tiny().kv_bytes_per_token(triad::dtype::bf16));
  const bool cheaper = kv / costs.copy_bytes_per_second < costs.compute_seconds_per_token;
  BOOST_TEST(b->import_cheaper(0, 64) == cheaper);
  // On a cpu a token's KV (a few KiB here) copies in far less time than its layers take.
  BOOST_TEST(cheaper);
}

BOOST_AUTO_TEST_CASE(chunked_prefill_across_page_boundaries_gives_identical_results) {
  auto whole = make(triad::dtype::bf16, 8);
  auto chunked = make(triad::dtype::bf16, 8);
  auto tokens = random_tokens(37);
  auto want = prefill(*whole, 1, tokens);
  std::vector<float> got;
  std::size_t at = 0;
  for (std::size_t chunk : {5u, 16u, 1u, 15u}) {
    got = prefill(*chunked, 1,
                  {tokens.begin() + static_cast<std::ptrdiff_t>(at),
                   tokens.begin() + static_cast<std::ptrdiff_t>(at + chunk)});
    at += chunk;
  }
  BOOST_REQUIRE(at == tokens.size());
  BOOST_TEST(relative_error(got, want) <= chunking_tolerance(*whole));
  auto next_whole = prefill(*whole, 1, {42});
  auto next_chunked = prefill(*chunked, 1, {42});
  BOOST_TEST(relative_error(next_chunked, next_whole) <= chunking_tolerance(*whole));
  BOOST_TEST(chunked->kv().pages_used == 5u); // 38 tokens in pages of 8
}

BOOST_AUTO_TEST_CASE(a_step_that_does_not_fit_the_cache_is_refused_and_changes_nothing) {
  auto probe = make(triad::dtype::bf16, 16);
  auto page_bytes = probe->kv().page_bytes;
  auto backend = make(triad::dtype::bf16, 16, 3 * page_bytes);
  BOOST_TEST(backend->kv().pages_total == 3u);
  prefill(*backend, 1, random_tokens(30));    // 2 pages
  triad::step_item big{2, random_tokens(17)}; // needs 2 more
  auto out = backend->step({&big, 1});
  BOOST_REQUIRE(!out);
  BOOST_TEST(out.error().code == triad::errc::exhausted);
  BOOST_TEST(backend->kv().pages_used == 2u);
  BOOST_TEST(backend->length(2) == 0u);
  backend->free(1);
  BOOST_TEST(backend->kv().pages_used == 0u);
  BOOST_TEST(backend->step({&big, 1}).has_value());
}

BOOST_AUTO_TEST_CASE(a_prompt_on_a_cached_prefix_gets_the_logits_of_a_full_recompute) {
  auto cached = make(triad::dtype::bf16, 8);
  auto fresh = make(triad::dtype::bf16, 8);
  auto shared = random_tokens(27);
  prefill(*cached, 1, shared);
  cached->publish(1, shared);
  cached->free(1);
  BOOST_TEST(cached->kv().pages_cached == 3u); // 3 full pages of 8; the partial one is freed
  BOOST_TEST(cached->kv().pages_used == 0u);
  auto prompt = shared;
  for (auto t : random_tokens(6))
    prompt.push_back(t);
  BOOST_TEST(cached->attach_prefix(2, prompt) == 24u);
  BOOST_TEST(cached->kv().pages_used == 3u);
  auto got = prefill(*cached, 2, {prompt.begin() + 24, prompt.end()});
  auto want = prefill(*fresh, 2, prompt);
  BOOST_TEST(relative_error(got, want) <= chunking_tolerance(*fresh));
  // Decoding on top of shared pages leaves them intact for the next sequence.
  prefill(*cached, 2, {7});
  BOOST_TEST(cached->attach_prefix(3, prompt) == 24u);
  auto again = prefill(*cached, 3, {prompt.begin() + 24, prompt.end()});
  BOOST_TEST(relative_error(again, want) <= chunking_tolerance(*fresh));
}

BOOST_AUTO_TEST_CASE(exported_kv_imports_on_another_device_and_decodes_identically) {
  auto a = make(triad::dtype::bf16, 8);
  auto b = make(triad::dtype::bf16, 8);
  auto tokens = random_tokens(21);
  prefill(*a, 5, tokens);
  auto bytes = a->export_kv(5);
  BOOST_REQUIRE(bytes.has_value());
  BOOST_REQUIRE(b->import_kv(9, *bytes).has_value());
  BOOST_TEST(b->length(9) == 21u);
  auto from_a = prefill(*a, 5, {3});
  auto from_b = prefill(*b, 9, {3});
  BOOST_TEST(relative_error(from_b, from_a) <= 1e-6);
  auto damaged = *bytes;
  damaged[damaged.size() / 2] ^= std::byte{0x10};
  auto refused = b->import_kv(10, damaged);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().message.find("checksum") != std::string::npos);
  auto other = make(triad::dtype::f32, 8);
  auto mismatch = other->import_kv(1, *bytes);
  BOOST_REQUIRE(!mismatch);
  BOOST_TEST(mismatch.error().message.find("shape mismatch") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_steps_are_errors_naming_the_problem) {
  auto backend = make(triad::dtype::bf16);
  triad::step_item empty{1, {}};
  BOOST_TEST(backend->step({&empty, 1}).error().message.find("no tokens") != std::string::npos);
  triad::step_item out_of_range{1, {320}};
  BOOST_TEST(backend->step({&out_of_range, 1}).error().message.find("token 320") !=
             std::string::npos);
  std::vector<triad::step_item> twice{{1, {1}}, {1, {2}}};
  BOOST_TEST(backend->step(twice).error().message.find("appears twice") != std::string::npos);
  BOOST_TEST(backend->length(1) == 0u);
}

BOOST_AUTO_TEST_CASE(every_matmul_path_this_cpu_runs_matches_the_reference) {
  // The contract on every path: each one this CPU runs (under DNNL_MAX_CPU_ISA too) computes the
  // reference model; the ones it cannot run are named as not run.
  struct path {
    triad::cpu_compute_choice compute;
    double tolerance;
  };
  const auto& cpu = triad::detect_cpu();
  BOOST_TEST_MESSAGE("this CPU: " << cpu.describe());
  for (const auto& p : {path{{triad::cpu_kernel::onednn_f32, triad::vector_isa::none, {}}, 1e-4},
                        path{{triad::cpu_kernel::onednn_bf16, triad::vector_isa::none, {}}, 1e-2},
                        path{{triad::cpu_kernel::own_bf16, triad::vector_isa::avx2, {}}, 1e-2},
                        path{{triad::cpu_kernel::own_bf16, triad::vector_isa::avx512, {}}, 1e-2}}) {
    triad::cpu_backend_options o;
    o.shape = tiny();
    o.compute = p.compute;
    o.kv_budget_bytes = 64ull << 20;
    auto b = triad::cpu_backend::create(o);
    if (!triad::can_run(p.compute, cpu)) {
      BOOST_TEST_MESSAGE("not run: " << to_string(p.compute.kernel) << " ("
                                     << to_string(p.compute.isa) << "): this CPU cannot run it");
      BOOST_REQUIRE(!b.has_value()); // refused with a reason, never an abort
      BOOST_TEST((b.error().code == triad::errc::unsupported));
      BOOST_TEST(b.error().message.find(cpu.onednn_isa) != std::string::npos, b.error().message);
      continue;
    }
    BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
    BOOST_TEST((((*b)->kernel_path() == p.compute.kernel)));
    check_reference(**b, p.compute.type(), p.tolerance);
  }
}

BOOST_AUTO_TEST_CASE(the_compute_team_is_sized_to_its_cores_and_each_thread_bound_to_one) {
  auto topo = triad::topology::load(triad::topology_config{});
  BOOST_REQUIRE(topo.has_value());
  // One team thread per core of this machine, as the plan gives a device its compute set.
  std::vector<std::vector<unsigned>> team;
  for (const auto& core : topo->info().cores)
    team.push_back(core.pus);
  triad::cpu_backend_options o;
  o.shape = tiny();
  o.type = triad::dtype::f32;
  o.kv_budget_bytes = 16ull << 20;
  o.team = team;
  o.topo = &*topo;
  auto b = triad::cpu_backend::create(o);
  BOOST_REQUIRE(b.has_value());
  std::vector<std::vector<unsigned>> seen(team.size());
  int team_threads = 0;
  // A driver thread of its own: the team is that thread's, bound where the plan says.
  std::thread driver{[&] {
    auto tokens = random_tokens(40);
    triad::step_item item{1, tokens};
    auto out = (*b)->step({&item, 1});
    BOOST_REQUIRE(out.has_value());
    team_threads = omp_get_max_threads();
#pragma omp parallel
    {
      auto mask = affinity();
#pragma omp critical
      seen[static_cast<std::size_t>(omp_get_thread_num()) % seen.size()] = mask;
    }
  }};
  driver.join();
  BOOST_TEST((*b)->team_size() == team.size());
  BOOST_TEST(team_threads == static_cast<int>(team.size()));
  for (std::size_t i = 0; i < team.size(); ++i)
    BOOST_TEST((seen[i] == team[i]), "team thread " << i);
}

BOOST_AUTO_TEST_CASE(an_unbound_team_is_sized_without_binding) {
  triad::cpu_backend_options o;
  o.shape = tiny();
  o.type = triad::dtype::f32;
  o.kv_budget_bytes = 16ull << 20;
  o.team = {{0}};
  auto b = triad::cpu_backend::create(o);
  BOOST_REQUIRE(b.has_value());
  std::thread driver{[&] {
    auto before = affinity();
    triad::step_item item{1, random_tokens(8)};
    BOOST_REQUIRE((*b)->step({&item, 1}).has_value());
    BOOST_TEST(omp_get_max_threads() == 1);
    BOOST_TEST((affinity() == before)); // nothing bound
  }};
  driver.join();
}

BOOST_AUTO_TEST_CASE(the_kernel_in_use_is_reported) {
  auto backend = make(triad::dtype::bf16);
  BOOST_TEST_MESSAGE("matmul kernel: " << backend->kernel());
  BOOST_TEST(!backend->kernel().empty());
  // Never one of oneDNN's reference implementations ("ref:any" and the like).
  BOOST_TEST(backend->kernel().find("ref:") == std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
