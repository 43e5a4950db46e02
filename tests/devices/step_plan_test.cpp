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
  return {id, order, seq_phase::waiting, false, tokens, 0, {}, std::nullopt};
}

planned_sequence running(seq_id id, std::uint64_t order, std::size_t computed) {
  return {id, order, seq_phase::running, false, computed + 1, computed, {}, std::nullopt};
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

// Three decoding sequences of 10 pages each (39 tokens computed, the 40th decoded) on a device
// whose fastest tier holds 25 pages of KV: two step, the third waits (no preemption), and no
// burst starts without it.
BOOST_AUTO_TEST_CASE(a_step_keeps_its_kv_within_the_fast_tier_and_the_rest_wait) {
  auto st = device();
  st.step_pages = 25;
  st.seqs = {running(1, 0, 39), running(2, 1, 39), running(3, 2, 39)};
  const auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(p.held_back);
  BOOST_TEST(!p.starved);
  BOOST_TEST(p.max_steps == 1u);
  st.step_pages = 0; // unbounded: all three, in a burst
  const auto all = plan_step(st);
  BOOST_TEST(all.items.size() == 3u);
  BOOST_TEST(!all.held_back);
  BOOST_TEST(all.max_steps == 32u);
}

// A sequence held back is not overtaken: neither a smaller decode admitted after it nor a
// prompt waiting to be prefilled takes the room it waits for.
BOOST_AUTO_TEST_CASE(nothing_admitted_after_a_held_back_sequence_overtakes_it) {
  auto st = device();
  st.step_pages = 25;
  st.seqs = {running(1, 0, 39), running(2, 1, 39), running(3, 2, 39), running(4, 3, 3),
             waiting(5, 4, 4)};
  const auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(p.held_back);
}

// A prefill counts the pages it will hold after its chunk; the first item goes even past the
// bound, so a sequence larger than the fast tier still runs.
BOOST_AUTO_TEST_CASE(the_first_sequence_of_a_step_goes_even_past_the_fast_tier) {
  auto st = device();
  st.step_pages = 1;
  st.seqs = {running(1, 0, 39), waiting(2, 1, 8)};
  const auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1}), boost::test_tools::per_element());
  BOOST_TEST(p.held_back);
  st.seqs = {waiting(2, 1, 8)};
  const auto alone = plan_step(st);
  BOOST_TEST(seqs_of(alone) == (std::vector<seq_id>{2}), boost::test_tools::per_element());
  BOOST_TEST(alone.items[0].count == 8u);
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

BOOST_AUTO_TEST_CASE(a_page_of_the_prefix_cache_counts_once_however_many_hold_it) {
  auto st = device(3);
  const std::vector<block_hash> chain{11};
  auto a = running(1, 0, 5); // one page from the cache, one of its own
  a.shared = chain;
  auto b = running(2, 1, 5); // the same cached page, one of its own
  b.shared = chain;
  st.seqs = {a, b};
  // 3 pages held: the decodes fit in the pages they have, a third sequence's prompt in none.
  st.seqs.push_back(waiting(3, 2, 4));
  auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(p.starved);
  st.pages_total = 4; // one page more: the prompt fits
  p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(branching_chains_count_each_shared_page_once) {
  // Four sequences whose cached pages branch from one system prompt page (1): a and d hold
  // the same four, b shares two of them and adds one, c shares one and adds one: 6 distinct.
  const std::vector<block_hash> abcd{1, 2, 3, 4}, b_run{1, 2, 5}, c_run{1, 6};
  auto a = running(1, 0, 16);
  a.shared = abcd;
  auto b = running(2, 1, 12);
  b.shared = b_run;
  auto c = running(3, 2, 8);
  c.shared = c_run;
  auto d = running(4, 3, 16);
  d.shared = abcd;
  // Each decode starts a page: 6 held + 4 new fit 10 pages, not 9.
  auto st = device(10);
  st.seqs = {d, b, a, c}; // any order
  auto p = plan_step(st);
  BOOST_TEST(p.items.size() == 4u);
  BOOST_TEST(!p.starved);
  st.pages_total = 9;
  p = plan_step(st);
  BOOST_TEST(p.items.size() == 3u);
  BOOST_TEST(p.starved);
}

BOOST_AUTO_TEST_CASE(a_page_attached_from_the_prefix_cache_is_held_not_free) {
  // A sequence back from a tool call attached its own cached pages: nobody else holds them,
  // and they are not free for another prompt.
  auto st = device(2);
  const std::vector<block_hash> chain{21};
  auto back = running(1, 0, 4);
  back.shared = chain;
  st.seqs = {back, waiting(2, 1, 8)};
  const auto p = plan_step(st);
  // The decode takes the second page; nothing is left for the prompt.
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1}), boost::test_tools::per_element());
  BOOST_TEST(p.starved);
  BOOST_TEST(*p.starving == 1u);
}

BOOST_AUTO_TEST_CASE(a_lookup_takes_the_pages_it_attaches_unless_another_holds_them) {
  auto st = device(4);
  const std::vector<block_hash> chain{31, 32};
  auto holder = running(1, 0, 9); // holds pages 31 and 32 from the cache, and a third
  holder.shared = chain;
  auto same = waiting(2, 1, 9); // attaches 31 and 32: held already, one page of its own
  same.shared = chain;
  same.incoming = 8;
  st.seqs = {holder, same};
  auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(!p.starved);
  // Another prompt attaching two cached pages nobody holds needs them from the free ones.
  auto other = waiting(3, 2, 9);
  const std::vector<block_hash> its{41, 42};
  other.shared = its;
  other.incoming = 8;
  st.seqs = {holder, other};
  p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1}), boost::test_tools::per_element());
  BOOST_TEST(p.starved);
  BOOST_TEST(*p.starving == 2u);
}

BOOST_AUTO_TEST_CASE(prompts_looking_up_one_chain_in_a_step_take_its_pages_once) {
  auto st = device(3);
  st.token_budget = 64;
  // Nobody holds 61 and 62: the first prompt takes both, the second neither, and a third whose
  // chain branches after 61 takes only 63. Three pages, not six.
  const std::vector<block_hash> chain{61, 62}, branch{61, 63};
  auto a = waiting(1, 0, 8);
  a.shared = chain;
  a.incoming = 8;
  auto b = waiting(2, 1, 8);
  b.shared = chain;
  b.incoming = 8;
  auto c = waiting(3, 2, 8);
  c.shared = branch;
  c.incoming = 8;
  st.seqs = {a, b, c};
  auto p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(!p.starved);
  // One page fewer, and the branch waits.
  st.pages_total = 2;
  p = plan_step(st);
  BOOST_TEST(seqs_of(p) == (std::vector<seq_id>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(p.starved);
}

BOOST_AUTO_TEST_CASE(an_import_starts_at_the_tokens_its_kv_covers) {
  auto st = device();
  planned_sequence s{7, 0, seq_phase::importing, false, 13, 0, {}, std::size_t{12}};
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
  st.seqs = {{7, 0, seq_phase::importing, false, 13, 0, {}, std::nullopt}};
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

BOOST_AUTO_TEST_CASE(a_victim_is_never_admitted_before_the_sequence_that_starved) {
  // Preempting an older sequence for a newer one that starved would only swap them: the older
  // one, planned first, takes the pages back when it is computed again.
  auto older = running(1, 1, 4);
  auto starving = running(2, 5, 4);
  auto newer = running(3, 7, 4);
  std::vector<planned_sequence> seqs{older, starving, newer};
  BOOST_TEST(*pick_victim(seqs, 5) == 3u);
  seqs.pop_back();
  BOOST_TEST(!pick_victim(seqs, 5).has_value());
  auto parked = running(4, 0, 4); // a parked one computes nothing: it goes whatever its age
  parked.phase = seq_phase::parked;
  seqs.push_back(parked);
  BOOST_TEST(*pick_victim(seqs, 5) == 4u);
}

BOOST_AUTO_TEST_CASE(a_newcomer_needs_the_held_pages_once_and_its_own) {
  std::vector<block_hash> chain{51, 52};
  auto a = running(1, 0, 8); // 9 tokens: 3 pages of 4, two from the cache
  a.shared = chain;
  auto b = running(2, 1, 8);
  b.shared = chain;
  auto done = running(3, 2, 40);
  done.phase = seq_phase::done; // goes first: not counted
  std::vector<planned_sequence> seqs{a, b, done};
  std::vector<std::span<const block_hash>> scratch;
  // 1 + 1 own pages, 2 shared; a prompt of 9 tokens attaching the two shared: 1 page more.
  BOOST_TEST(pages_needed(seqs, 4, 9, chain, scratch) == 5u);
  // Attaching nothing held: all its 3 pages.
  BOOST_TEST(pages_needed(seqs, 4, 9, {}, scratch) == 7u);
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
