#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvstore/defaults.hpp"
#include "kvstore/detail/move_batcher.hpp"

namespace {

using batcher = triad::detail::move_batcher<int, int>;

// Adds copies 0..n-1 for `key` and returns the sizes of the batches that went out at once.
std::vector<std::size_t> add_many(batcher& b, int key, int n) {
  std::vector<std::size_t> sizes;
  for (int i = 0; i < n; ++i)
    if (auto added = b.add(key, i); !added.batch.empty())
      sizes.push_back(added.batch.size());
  return sizes;
}

} // namespace

BOOST_AUTO_TEST_SUITE(move_batcher)

BOOST_AUTO_TEST_CASE(the_next_batch_doubles_up_to_the_maximum) {
  BOOST_TEST(triad::detail::next_move_batch(4, 32) == 8u);
  BOOST_TEST(triad::detail::next_move_batch(16, 32) == 32u);
  BOOST_TEST(triad::detail::next_move_batch(32, 32) == 32u);
  BOOST_TEST(triad::detail::next_move_batch(24, 32) == 32u);
}

BOOST_AUTO_TEST_CASE(a_turns_first_batch_is_small_and_later_ones_double_up_to_the_maximum) {
  batcher b{4, 32};
  auto sizes = add_many(b, 0, 4 + 8 + 16 + 32 + 32 + 5);
  BOOST_TEST(sizes == (std::vector<std::size_t>{4, 8, 16, 32, 32}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_store_defaults_start_at_four_and_stop_at_thirty_two) {
  batcher b;
  auto sizes = add_many(b, 0, 4 + 8 + 16 + 32 + 32);
  BOOST_TEST(sizes.front() == triad::defaults::kvstore::first_move_batch_blocks);
  BOOST_TEST(sizes.back() == triad::defaults::kvstore::move_batch_blocks);
}

BOOST_AUTO_TEST_CASE(a_batch_holds_its_copies_in_the_order_they_were_added) {
  batcher b{3, 3};
  b.add(0, 10);
  b.add(0, 11);
  auto added = b.add(0, 12);
  BOOST_TEST(added.batch == (std::vector<int>{10, 11, 12}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(only_the_first_copy_after_a_turns_end_opens_a_turn) {
  batcher b{4, 32};
  BOOST_TEST(b.add(0, 1).opened_turn);
  BOOST_TEST(!b.add(0, 2).opened_turn);
  BOOST_TEST(!b.add(1, 3).opened_turn); // another destination, the same turn
  b.end_turn();
  BOOST_TEST(b.add(0, 4).opened_turn);
}

BOOST_AUTO_TEST_CASE(the_turns_end_hands_out_what_is_left_by_destination_and_skips_empty_ones) {
  batcher b{2, 32};
  b.add(1, 10);
  b.add(1, 11); // a full batch: went out at once, nothing left for 1
  b.add(2, 20);
  b.add(0, 0);
  auto left = b.end_turn();
  BOOST_REQUIRE(left.size() == 2u);
  BOOST_TEST(left[0].first == 0); // in key order
  BOOST_TEST(left[0].second == (std::vector<int>{0}), boost::test_tools::per_element());
  BOOST_TEST(left[1].first == 2);
  BOOST_TEST(left[1].second == (std::vector<int>{20}), boost::test_tools::per_element());
  BOOST_TEST(b.end_turn().empty());
}

BOOST_AUTO_TEST_CASE(the_turns_end_starts_the_batch_sizes_again) {
  batcher b{2, 32};
  BOOST_TEST(add_many(b, 0, 2 + 4) == (std::vector<std::size_t>{2, 4}),
             boost::test_tools::per_element());
  b.end_turn();
  BOOST_TEST(add_many(b, 0, 2) == (std::vector<std::size_t>{2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(each_destination_sizes_its_batches_on_its_own) {
  batcher b{2, 32};
  BOOST_TEST(add_many(b, 0, 6) == (std::vector<std::size_t>{2, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(add_many(b, 1, 2) == (std::vector<std::size_t>{2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_first_size_of_zero_batches_every_copy_alone_at_first) {
  batcher b{0, 32};
  BOOST_TEST(add_many(b, 0, 3) == (std::vector<std::size_t>{1, 2}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(clearing_drops_every_queued_copy) {
  batcher b{4, 32};
  b.add(0, 1);
  b.clear();
  BOOST_TEST(b.end_turn().empty());
  BOOST_TEST(b.add(0, 2).opened_turn);
}

BOOST_AUTO_TEST_CASE(a_batch_for_the_mover_keeps_items_and_continuations_in_step) {
  std::vector<int> finished;
  std::vector<triad::detail::pending_copy> copies;
  for (int i = 0; i < 3; ++i) {
    triad::detail::pending_copy c;
    c.id = static_cast<triad::block_id>(100 + i);
    c.finish = [&finished, i](triad::detail::pull_result) { finished.push_back(i); };
    copies.push_back(std::move(c));
  }
  auto batch = triad::detail::make_move_batch(std::move(copies));
  BOOST_REQUIRE(batch.items.size() == 3u);
  BOOST_REQUIRE(batch.finishes.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(batch.items[i].id == 100u + i);
    batch.finishes[i]({true, ""});
  }
  BOOST_TEST(finished == (std::vector<int>{0, 1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
