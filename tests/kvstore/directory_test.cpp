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
