#include <chrono>
#include <random>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "devices/kv_stream.hpp"
#include "tests/printers.hpp"

namespace {

using namespace std::chrono_literals;

constexpr std::size_t page_bytes = 4 * 4096; // four layer groups of 4 KiB
constexpr std::size_t pages = 3;

std::vector<triad::page_range> groups() {
  return {{0, 4096}, {4096, 4096}, {8192, 4096}, {12288, 4096}};
}

// Pages of random bytes (the sender's), empty pages (the receiver's) and the blocks between.
struct pages_and_blocks {
  std::vector<std::vector<std::byte>> from, to, blocks;
  std::vector<std::span<std::byte>> from_spans, to_spans, block_spans;
  pages_and_blocks() {
    std::mt19937 rng{7};
    for (std::size_t p = 0; p < pages; ++p) {
      from.emplace_back(page_bytes);
      for (auto& b : from.back())
        b = static_cast<std::byte>(rng());
      to.emplace_back(page_bytes);
      blocks.emplace_back(page_bytes);
    }
    for (std::size_t p = 0; p < pages; ++p) {
      from_spans.emplace_back(from[p]);
      to_spans.emplace_back(to[p]);
      block_spans.emplace_back(blocks[p]);
    }
  }
};

// What the stream told the store when it was let go.
struct ending {
  std::vector<std::uint64_t> checksums;
  std::vector<triad::token> tokens;
  bool called = false;
};

triad::kv_stream::end_fn record(ending& e) {
  return [&e](std::vector<std::uint64_t> sums, std::vector<triad::token> toks) {
    e.checksums = std::move(sums);
    e.tokens = std::move(toks);
    e.called = true;
  };
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_stream)

BOOST_AUTO_TEST_CASE(the_receiver_copies_each_group_as_the_sender_publishes_it) {
  pages_and_blocks m;
  ending end;
  {
    auto s = std::make_shared<triad::kv_stream>(m.block_spans, record(end));
    std::vector<triad::token> toks(40, 5);
    BOOST_REQUIRE(s->begin(toks, pages, groups()));
    // The sender publishes one group every 20 ms; the receiver waits for each in turn.
    std::thread sender{[&] {
      for (std::size_t g = 0; g < 4; ++g) {
        std::this_thread::sleep_for(20ms);
        s->send_group(g, m.from_spans);
      }
    }};
    for (std::size_t g = 0; g < 4; ++g) {
      BOOST_REQUIRE(s->wait_for(g, std::chrono::steady_clock::now() + 10s));
      BOOST_REQUIRE(s->receive_group(g, m.to_spans));
    }
    sender.join();
    BOOST_TEST(s->complete());
  }
  BOOST_TEST((m.to == m.from));
  // Sealed with every page's whole checksum, from the groups' sums.
  BOOST_REQUIRE(end.called);
  BOOST_REQUIRE(end.checksums.size() == pages);
  for (std::size_t p = 0; p < pages; ++p)
    BOOST_TEST(end.checksums[p] == triad::block_checksum(m.from_spans[p]));
  BOOST_TEST(end.tokens.size() == 40u);
}

BOOST_AUTO_TEST_CASE(a_bit_damaged_in_the_blocks_is_found_and_nothing_is_sealed) {
  pages_and_blocks m;
  ending end;
  {
    triad::kv_stream s{m.block_spans, record(end), 12345};
    BOOST_REQUIRE(s.begin(std::vector<triad::token>(40, 5), pages, groups()));
    s.send_group(0, m.from_spans);
    auto got = s.receive_group(0, m.to_spans);
    BOOST_REQUIRE(!got);
    BOOST_TEST((got.error().code == triad::errc::corrupted));
    for (std::size_t g = 1; g < 4; ++g) // the sender completes: the receiver's word stands
      s.send_group(g, m.from_spans);
    BOOST_TEST(s.complete());
  }
  BOOST_REQUIRE(end.called);
  BOOST_TEST(end.checksums.empty()); // the store gives the blocks back
}

BOOST_AUTO_TEST_CASE(an_aborted_stream_stops_the_waiting_receiver) {
  pages_and_blocks m;
  ending end;
  triad::kv_stream s{m.block_spans, record(end)};
  BOOST_REQUIRE(s.begin(std::vector<triad::token>(40, 5), pages, groups()));
  s.send_group(0, m.from_spans);
  std::thread sender{[&] {
    std::this_thread::sleep_for(20ms);
    s.abort();
  }};
  BOOST_TEST(s.wait_for(0, std::chrono::steady_clock::now() + 10s));
  BOOST_TEST(!s.wait_for(1, std::chrono::steady_clock::now() + 10s));
  sender.join();
  BOOST_TEST(!s.complete());
}

BOOST_AUTO_TEST_CASE(groups_that_do_not_cover_a_page_or_more_pages_than_blocks_are_refused) {
  pages_and_blocks m;
  triad::kv_stream s{m.block_spans, {}};
  auto gap = s.begin({}, pages, {{0, 4096}, {8192, 8192}});
  BOOST_REQUIRE(!gap);
  BOOST_TEST(gap.error().message.find("8192") != std::string::npos);
  auto short_cover = s.begin({}, pages, {{0, 4096}});
  BOOST_REQUIRE(!short_cover);
  BOOST_TEST(short_cover.error().message.find("cover 4096 bytes") != std::string::npos);
  auto too_many = s.begin({}, pages + 1, groups());
  BOOST_REQUIRE(!too_many);
  BOOST_TEST((too_many.error().code == triad::errc::exhausted));
}

BOOST_AUTO_TEST_SUITE_END()
