#include "devices/detail/step_job.hpp"
#include "devices/detail/step_plan.hpp"

#include <boost/test/unit_test.hpp>

#include <vector>

using namespace triad;
using namespace triad::detail;

namespace {

/// A device of `pages` pages of 4 tokens, a budget of 16 tokens, chunks of 8, bursts of 32.
step_state device(std::size_t pages = 64) {
  step_state st;
  st.pages_total = pages;
  st.page_tokens = 4;
  st.token_budget = 16;
  st.max_prefill_chunk = 8;
  st.burst_steps = 32;
  return st;
}

planned_sequence waiting(seq_id id, std::uint64_t order, std::size_t tokens) {
  return {id, order, seq_phase::waiting, false, tokens, 0, 0, std::nullopt};
}

planned_sequence running(seq_id id, std::uint64_t order, std::size_t computed) {
  return {id, order, seq_phase::running, false, computed + 1, computed, 0, std::nullopt};
}

std::vector<seq_id> seqs_of(const step_plan& p) {
  std::vector<seq_id> out;
  for (const auto& i : p.items)
    out.push_back(i.seq);
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(step_planner)

BOOST_AUTO_TEST_CASE(decodes_go_first_then_prefills_each_in_admission_order) {
  auto st = device();
  st.seqs = {waiting(1, 3, 4), running(2, 2, 10), waiting(3, 0, 4), running(4, 1, 6)};
  const auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{4, 2, 3, 1}), boost::test_tools::per_element());
  BOOST_TEST(p.items[0].first == 6u);
  BOOST_TEST(p.items[0].count == 1u);
  BOOST_TEST(p.items[2].first == 0u);
  BOOST_TEST(p.items[2].count == 4u);
}

BOOST_AUTO_TEST_CASE(a_long_prompt_is_cut_to_the_chunk_and_the_budget) {
  auto st = device();
  st.seqs = {waiting(1, 0, 20), waiting(2, 1, 20), waiting(3, 2, 20)};
  const auto p = plan_step(st);
  BOOST_TEST_REQUIRE(p.items.size() == 2u); // 8 + 8 tokens fill the budget of 16
  BOOST_TEST(p.items[0].count == 8u);
  BOOST_TEST(p.items[1].count == 8u);
  BOOST_TEST(!p.items[0].completes);
  BOOST_TEST(p.max_steps == 1u);
}

BOOST_AUTO_TEST_CASE(a_sequence_larger_than_the_device_is_refused_not_planned) {
  auto st = device(2); // 8 tokens of KV
  st.seqs = {waiting(1, 0, 9), waiting(2, 1, 3)};
  const auto p = plan_step(st);
  BOOST_TEST(p.too_large == (std::vector<seq_id>{1}), boost::test_tools::per_element());
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_decode_without_a_free_page_starves_and_is_left_out) {
  auto st = device(2);
  st.seqs = {running(1, 0, 8)}; // 8 tokens fill both pages; the 9th needs a third
  const auto p = plan_step(st);
  BOOST_TEST(p.items.empty());
  BOOST_TEST(p.starved);
}

BOOST_AUTO_TEST_CASE(pages_from_the_prefix_cache_count_as_free) {
  auto st = device(2);
  auto s = running(1, 0, 4);
  s.cached = 4; // its one page is shared with the cache
  st.seqs = {s, waiting(2, 1, 8)};
  const auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_import_starts_at_the_tokens_its_kv_covers) {
  auto st = device();
  planned_sequence s{7, 0, seq_phase::importing, false, 13, 0, 0, std::size_t{12}};
  st.seqs = {s};
  const auto p = plan_step(st);
  BOOST_TEST_REQUIRE(p.items.size() == 1u);
  BOOST_TEST(p.items[0].import);
  BOOST_TEST(p.items[0].first == 12u);
  BOOST_TEST(p.items[0].count == 1u);
  BOOST_TEST(p.items[0].completes);
}

BOOST_AUTO_TEST_CASE(pages_fetched_from_the_tier_are_planned_before_they_are_attached) {
  auto st = device(7);
  auto fetched = waiting(2, 1, 21);
  fetched.incoming = 16; // 4 pages to append before its step
  st.seqs = {running(1, 0, 4), fetched, waiting(3, 2, 8)};
  auto p = plan_step(st);
  // 6 pages free: the decode's second page, the 4 fetched ones (the chunk of 8 tokens lies
  // within them: the job attaches them, then computes what they lack), and one for the
  // next prompt, cut to it.
  BOOST_TEST_REQUIRE(seqs_of(p) == (std::vector<seq_id>{1, 2, 3}),
                     boost::test_tools::per_element());
  BOOST_TEST(p.items[1].count == 8u);
  BOOST_TEST(p.items[2].count == 4u);
  st.seqs[0] = running(1, 0, 12); // the decode holds 3 pages and needs a fourth
  p = plan_step(st);
  // 3 pages left: the fetched ones do not fit, so that sequence waits (rather than taking
  // the others' pages in the job), and the younger prompt waits behind it.
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1}), boost::test_tools::per_element());
  BOOST_TEST(p.starved);
}

BOOST_AUTO_TEST_CASE(an_importing_sequence_whose_bytes_are_away_is_not_planned) {
  auto st = device();
  st.seqs = {{7, 0, seq_phase::importing, false, 13, 0, 0, std::nullopt}};
  BOOST_TEST(plan_step(st).items.empty());
}

BOOST_AUTO_TEST_CASE(a_burst_runs_when_every_sequence_is_in_and_completes) {
  auto st = device();
  st.seqs = {running(1, 0, 10), waiting(2, 1, 5)};
  BOOST_TEST(plan_step(st).max_steps == 32u);
}

BOOST_AUTO_TEST_CASE(no_burst_while_a_sequence_waits_outside_the_step) {
  auto st = device();
  st.token_budget = 2;
  st.seqs = {running(1, 0, 10), running(2, 1, 10), waiting(3, 2, 5)};
  const auto p = plan_step(st);
  BOOST_TEST(p.items.size() == 2u);
  BOOST_TEST(p.max_steps == 1u);
}

BOOST_AUTO_TEST_CASE(parked_and_finished_sequences_compute_nothing) {
  auto st = device();
  auto parked = running(1, 0, 10);
  parked.phase = seq_phase::parked;
  auto finished = running(2, 1, 10);
  finished.finished = true;
  st.seqs = {parked, finished};
  const auto p = plan_step(st);
  BOOST_TEST(p.items.empty());
  BOOST_TEST(!p.starved);
}

BOOST_AUTO_TEST_CASE(the_victim_is_a_done_one_then_a_parked_one_then_the_newest) {
  auto newest = running(1, 9, 4);
  auto older = running(2, 1, 4);
  auto parked = running(3, 0, 4);
  parked.phase = seq_phase::parked;
  auto done = running(4, 0, 4);
  done.phase = seq_phase::done;
  std::vector<planned_sequence> seqs{older, newest, parked, done};
  BOOST_TEST(*pick_victim(seqs) == 4u);
  seqs.pop_back();
  BOOST_TEST(*pick_victim(seqs) == 3u);
  seqs.pop_back();
  BOOST_TEST(*pick_victim(seqs) == 1u);
}

BOOST_AUTO_TEST_CASE(no_victim_when_no_sequence_holds_kv) {
  std::vector<planned_sequence> seqs{waiting(1, 0, 8)};
  BOOST_TEST(!pick_victim(seqs).has_value());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(end_or_park)

sample_plan plan_with_stop(token stop, std::uint32_t max_new) {
  return sample_plan{sampler{sampling_params{}}, {}, {stop}, max_new};
}

BOOST_AUTO_TEST_CASE(a_stop_token_parks_a_sequence_that_parks_on_stop) {
  const auto p = plan_with_stop(42, 100);
  const auto e = p.end_of(42, 3, true);
  BOOST_TEST(e.reason == std::string{"stop"});
  BOOST_TEST(e.parks);
  BOOST_TEST(!p.end_of(42, 3, false).parks);
}

BOOST_AUTO_TEST_CASE(eos_and_the_length_limit_end_without_parking) {
  const auto p = plan_with_stop(42, 5);
  const auto eos = p.end_of(tokenizer::eos, 1, true);
  BOOST_TEST(eos.reason == std::string{"stop"});
  BOOST_TEST(!eos.parks);
  const auto length = p.end_of(7, 5, true);
  BOOST_TEST(length.reason == std::string{"length"});
  BOOST_TEST(!length.parks);
}

BOOST_AUTO_TEST_CASE(an_ordinary_token_goes_on) {
  const auto p = plan_with_stop(42, 5);
  const auto e = p.end_of(7, 2, true);
  BOOST_TEST(e.reason == nullptr);
  BOOST_TEST(!e.parks);
}

BOOST_AUTO_TEST_SUITE_END()
