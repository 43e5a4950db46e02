#include <boost/test/unit_test.hpp>

#include "kvstore/directory.hpp"
#include "tests/printers.hpp"

namespace {

// A chain of `n` made-up page hashes.
std::vector<triad::block_hash> chain_of(std::size_t n) {
  std::vector<triad::block_hash> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(0x9e3779b97f4a7c15ull * (i + 1));
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_longest_run_on_one_other_device_is_found_from_the_first_page) {
  triad::kv_directory d;
  auto c = chain_of(6);
  d.note_resident(0, std::span{c}.first(2), {});
  d.note_resident(1, std::span{c}.first(5), {});
  d.note_resident(2, std::span{c}.subspan(1), {}); // not from the first page: no run
  auto run = d.longest_resident(c, 3);
  BOOST_TEST(run.device == 1u);
  BOOST_TEST(run.pages == 5u);
  // A device's own pages do not count.
  run = d.longest_resident(c, 1);
  BOOST_TEST(run.device == 0u);
  BOOST_TEST(run.pages == 2u);
  BOOST_TEST(d.resident_pages() == 6u);
}

BOOST_AUTO_TEST_CASE(a_run_ends_where_its_device_lost_a_page) {
  triad::kv_directory d;
  auto c = chain_of(4);
  d.note_resident(0, c, {});
  d.note_resident(0, {}, std::span{c}.subspan(2, 1)); // evicted
  auto run = d.longest_resident(c, triad::kv_directory::max_devices);
  BOOST_TEST(run.device == 0u);
  BOOST_TEST(run.pages == 2u);
}

BOOST_AUTO_TEST_CASE(a_stopped_device_holds_nothing) {
  triad::kv_directory d;
  auto c = chain_of(3);
  d.note_resident(0, c, {});
  d.note_resident(5, std::span{c}.first(1), {});
  d.forget_device(0);
  auto run = d.longest_resident(c, triad::kv_directory::max_devices);
  BOOST_TEST(run.device == 5u);
  BOOST_TEST(run.pages == 1u);
  BOOST_TEST(d.resident_pages() == 1u);
  d.forget_device(5);
  BOOST_TEST(d.longest_resident(c, triad::kv_directory::max_devices).pages == 0u);
  BOOST_TEST(d.resident_pages() == 0u);
}

BOOST_AUTO_TEST_CASE(devices_past_the_directorys_count_are_not_noted) {
  triad::kv_directory d;
  auto c = chain_of(2);
  d.note_resident(triad::kv_directory::max_devices, c, {});
  BOOST_TEST(d.resident_pages() == 0u);
  BOOST_TEST(d.longest_resident(c, 0).pages == 0u);
}

BOOST_AUTO_TEST_CASE(a_prompt_routed_to_a_device_counts_as_its_own_until_computed) {
  triad::kv_directory d;
  auto c = chain_of(4);
  d.note_routed(1, std::span{c}.first(3));
  BOOST_TEST(d.run_on(1, c) == 3u);
  BOOST_TEST(d.run_on(0, c) == 0u);
  // Only the device's own routing counts: another device is never sent to fetch them.
  BOOST_TEST(d.longest_resident(c, 0).pages == 0u);
  BOOST_TEST(d.routed_pages() == 3u);
  // Computed: the pages are the device's, no longer routed ones.
  d.note_resident(1, std::span{c}.first(2), {});
  BOOST_TEST(d.routed_pages() == 1u);
  BOOST_TEST(d.run_on(1, c) == 3u);
  BOOST_TEST(d.longest_resident(c, 0).pages == 2u);
  d.forget_device(1);
  BOOST_TEST(d.run_on(1, c) == 0u);
  BOOST_TEST(d.routed_pages() == 0u);
}

BOOST_AUTO_TEST_CASE(the_pages_routed_to_a_device_are_bounded) {
  triad::kv_directory d;
  const auto bound = triad::defaults::kvstore::routed_pages_per_device;
  std::vector<triad::block_hash> first;
  for (std::size_t i = 0; i < bound; ++i)
    first.push_back(i + 1);
  d.note_routed(0, first);
  BOOST_TEST(d.routed_pages() == bound);
  // One more prompt passes the bound: the least recently routed go, the newest stays.
  std::vector<triad::block_hash> next{bound + 1, bound + 2};
  d.note_routed(0, next);
  BOOST_TEST(d.routed_pages() <= bound);
  BOOST_TEST(d.run_on(0, next) == 2u);
  BOOST_TEST(d.run_on(0, std::span{first}.first(1)) == 0u);
}

BOOST_AUTO_TEST_CASE(a_routed_page_the_device_held_goes_with_its_eviction) {
  triad::kv_directory d;
  auto c = chain_of(3);
  d.note_resident(0, std::span{c}.first(2), {});
  d.note_routed(0, c); // the next turn: it holds the first two pages already
  BOOST_TEST(d.routed_pages() == 1u);
  BOOST_TEST(d.run_on(0, c) == 3u);
  // Evicted, the held pages are no longer the device's: not counted as routed ones either.
  d.note_resident(0, {}, std::span{c}.first(2));
  BOOST_TEST(d.run_on(0, c) == 0u);
  // A routed page reported gone is forgotten too.
  d.note_resident(0, {}, std::span{c}.subspan(2));
  BOOST_TEST(d.routed_pages() == 0u);
}
