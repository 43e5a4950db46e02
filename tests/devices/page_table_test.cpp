#include <numeric>

#include <boost/test/unit_test.hpp>

#include "devices/page_table.hpp"
#include "tests/printers.hpp"

namespace {

std::vector<triad::token> count_from(triad::token first, std::size_t n) {
  std::vector<triad::token> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

// Fills `seq` with `tokens` as a step would: reserve, then set the length.
void fill(triad::page_table& t, triad::seq_id seq, std::size_t length) {
  std::pair<triad::seq_id, std::size_t> want{seq, length};
  BOOST_REQUIRE(t.reserve({&want, 1}).has_value());
  t.set_length(seq, length);
}

} // namespace

BOOST_AUTO_TEST_CASE(published_full_pages_outlive_their_sequence_and_are_shared) {
  triad::page_table t{16, 4};
  auto tokens = count_from(1, 10);
  fill(t, 1, tokens.size());
  t.publish(1, tokens);
  t.free(1);
  BOOST_TEST(t.cached_pages() == 2u); // two full pages; the partial third is free
  BOOST_TEST(t.used_pages() == 0u);
  auto covered = t.attach_prefix(2, count_from(1, 12));
  BOOST_TEST(covered == 8u);
  BOOST_TEST(t.length(2) == 8u);
  BOOST_TEST(t.cached_pages() == 0u);
  BOOST_TEST(t.used_pages() == 2u);
  BOOST_TEST(t.attach_prefix(3, count_from(1, 9)) == 8u);
  BOOST_TEST(t.used_pages() == 2u); // shared, not copied
  BOOST_TEST(*t.pages(2) == *t.pages(3));
}

BOOST_AUTO_TEST_CASE(an_attached_prefix_leaves_at_least_one_token_to_compute) {
  triad::page_table t{16, 4};
  auto tokens = count_from(1, 8);
  fill(t, 1, 8);
  t.publish(1, tokens);
  t.free(1);
  BOOST_TEST(t.attach_prefix(2, tokens) == 4u); // the whole prompt cached: its last page redone
  BOOST_TEST(t.attach_prefix(3, count_from(1, 4)) == 0u);
  BOOST_TEST(t.pages(3) == nullptr); // a miss creates nothing
}

BOOST_AUTO_TEST_CASE(a_different_start_misses_even_with_equal_later_pages) {
  triad::page_table t{16, 4};
  auto tokens = count_from(1, 8);
  fill(t, 1, 8);
  t.publish(1, tokens);
  auto other = tokens;
  other[0] = 99;
  other.push_back(5);
  BOOST_TEST(t.attach_prefix(2, other) == 0u);
}

BOOST_AUTO_TEST_CASE(a_page_stays_while_any_sequence_reads_it) {
  triad::page_table t{16, 4};
  auto tokens = count_from(1, 8);
  fill(t, 1, 8);
  t.publish(1, tokens);
  BOOST_TEST(t.attach_prefix(2, count_from(1, 9)) == 8u);
  t.free(1);
  BOOST_TEST(t.used_pages() == 2u); // still read by 2
  BOOST_TEST(t.cached_pages() == 0u);
  t.free(2);
  BOOST_TEST(t.cached_pages() == 2u);
}

BOOST_AUTO_TEST_CASE(a_prefix_loses_its_deepest_page_first_when_space_is_needed) {
  triad::page_table t{4, 4};
  fill(t, 1, 8);
  t.publish(1, count_from(1, 8));
  t.free(1);
  BOOST_TEST(t.cached_pages() == 2u);
  fill(t, 2, 12); // three pages: the two free ones, then one eviction
  BOOST_TEST(t.cached_pages() == 1u);
  BOOST_TEST(t.attach_prefix(3, count_from(1, 9)) == 4u); // its head is still there
}

BOOST_AUTO_TEST_CASE(the_least_recently_released_prefix_is_evicted_first) {
  triad::page_table t{4, 4};
  for (triad::seq_id seq : {1, 2}) { // 1 released before 2
    fill(t, seq, 4);
    t.publish(seq, count_from(static_cast<triad::token>(seq * 10), 4));
    t.free(seq);
  }
  fill(t, 3, 12);
  BOOST_TEST(t.cached_pages() == 1u);
  BOOST_TEST(t.attach_prefix(4, count_from(10, 5)) == 0u);
  BOOST_TEST(t.attach_prefix(5, count_from(20, 5)) == 4u);
}

BOOST_AUTO_TEST_CASE(a_reservation_beyond_free_and_cached_pages_is_refused_whole) {
  triad::page_table t{4, 4};
  fill(t, 1, 8);
  std::pair<triad::seq_id, std::size_t> want[] = {{2, 4}, {3, 8}};
  auto r = t.reserve(want);
  BOOST_REQUIRE(!r);
  BOOST_TEST(r.error().code == triad::errc::exhausted);
  BOOST_TEST(t.pages(2) == nullptr);
  BOOST_TEST(t.used_pages() == 2u);
}

BOOST_AUTO_TEST_CASE(a_created_sequence_holds_its_length_and_a_second_create_is_refused) {
  triad::page_table t{4, 4};
  BOOST_REQUIRE(t.create(1, 6).has_value());
  BOOST_TEST(t.length(1) == 6u);
  BOOST_TEST(t.used_pages() == 2u);
  auto again = t.create(1, 2);
  BOOST_REQUIRE(!again);
  BOOST_TEST(again.error().code == triad::errc::invalid_argument);
  auto big = t.create(2, 12);
  BOOST_REQUIRE(!big);
  BOOST_TEST(big.error().code == triad::errc::exhausted);
  BOOST_TEST(t.pages(2) == nullptr);
}
