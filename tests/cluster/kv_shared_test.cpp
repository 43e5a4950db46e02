#include <cstring>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cluster/kv_shared.hpp"
#include "runtime/checksum.hpp"
#include "tests/printers.hpp"

using namespace triad;
using namespace triad::cluster;

namespace {

// Shared memory of `bytes` and a reader, both opened or the case fails naming why.
struct shared_pair {
  std::unique_ptr<kv_shared_memory> memory;
  std::unique_ptr<kv_shared_reader> reader;
  explicit shared_pair(std::size_t bytes = 1 << 20) {
    auto m = kv_shared_memory::open(bytes);
    BOOST_REQUIRE_MESSAGE(m.has_value(), why(m));
    memory = std::move(*m);
    auto r = kv_shared_reader::open();
    BOOST_REQUIRE_MESSAGE(r.has_value(), why(r));
    reader = std::move(*r);
  }
};

// `n` pseudo-random bytes.
std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<std::byte> v(n);
  for (auto& b : v)
    b = static_cast<std::byte>(rng());
  return v;
}

} // namespace

// Ranges come first fit, 64-byte aligned, inside the memory; none when no free range is large
// enough.
BOOST_AUTO_TEST_CASE(ranges_come_first_fit_and_aligned_until_none_is_large_enough) {
  shared_pair p{1 << 20};
  const auto all = p.memory->bytes();
  BOOST_TEST(all.size() >= std::size_t{1 << 20});
  auto a = p.memory->allocate(100);
  auto b = p.memory->allocate(1000);
  BOOST_REQUIRE(a.has_value());
  BOOST_REQUIRE(b.has_value());
  BOOST_TEST(*p.memory->offset_of(*a) == 0u);
  BOOST_TEST(*p.memory->offset_of(*b) == 128u); // 100 rounded up to 64s
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(b->data()) % 64 == 0u);
  BOOST_TEST(!p.memory->allocate(all.size()).has_value());
}

// Ranges given back merge with their free neighbours: the whole memory can be had again.
BOOST_AUTO_TEST_CASE(released_ranges_merge_so_the_whole_can_be_had_again) {
  shared_pair p{1 << 20};
  const auto size = p.memory->bytes().size();
  auto a = p.memory->allocate(4096);
  auto b = p.memory->allocate(4096);
  auto c = p.memory->allocate(4096);
  BOOST_REQUIRE(a && b && c);
  p.memory->release(*a);
  p.memory->release(*c);
  BOOST_TEST(!p.memory->allocate(size).has_value()); // b still splits it
  auto again = p.memory->allocate(4096);             // first fit: a's place
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->data() == a->data());
  p.memory->release(*again);
  p.memory->release(*b);
  auto whole = p.memory->allocate(size);
  BOOST_REQUIRE(whole.has_value());
  BOOST_TEST(whole->data() == p.memory->bytes().data());
}

// A range outside the memory has no offset in it.
BOOST_AUTO_TEST_CASE(bytes_outside_the_memory_have_no_offset) {
  shared_pair p;
  std::vector<std::byte> heap(64);
  BOOST_TEST(!p.memory->offset_of(heap).has_value());
  const auto all = p.memory->bytes();
  BOOST_TEST(!p.memory->offset_of({all.data() + all.size() - 8, 16}).has_value());
  BOOST_TEST(*p.memory->offset_of(all.subspan(4096, 8)) == 4096u);
}

// A reader copies bytes out of the memory its key names, bit-exact, checked against their
// checksum.
BOOST_AUTO_TEST_CASE(a_reader_copies_bytes_out_bit_exact) {
  shared_pair p;
  BOOST_REQUIRE(p.memory->allocate(5000).has_value()); // so the bytes lie past offset 0
  auto range = p.memory->allocate(300000);
  BOOST_REQUIRE(range.has_value());
  BOOST_TEST(*p.memory->offset_of(*range) > 0u);
  const auto want = pattern(300000, 7);
  std::memcpy(range->data(), want.data(), want.size());
  std::vector<std::byte> into(want.size());
  auto got =
      p.reader->read(p.memory->key(), *p.memory->offset_of(*range), into, block_checksum(want));
  BOOST_REQUIRE_MESSAGE(got.has_value(), why(got));
  BOOST_TEST((into == want));
}

// Bytes that do not match the checksum they were sent with are refused: errc::corrupted.
BOOST_AUTO_TEST_CASE(bytes_that_fail_their_checksum_are_refused) {
  shared_pair p;
  auto range = p.memory->allocate(4096);
  BOOST_REQUIRE(range.has_value());
  const auto want = pattern(4096, 9);
  std::memcpy(range->data(), want.data(), want.size());
  range->data()[100] ^= std::byte{1}; // damaged after its checksum was taken
  std::vector<std::byte> into(4096);
  auto got =
      p.reader->read(p.memory->key(), *p.memory->offset_of(*range), into, block_checksum(want));
  BOOST_REQUIRE(!got.has_value());
  BOOST_TEST(got.error().code == errc::corrupted);
}

// A range given back that overlaps a free one (given back twice, or never handed out as such)
// is not taken in: the same bytes are never handed out twice.
BOOST_AUTO_TEST_CASE(a_range_given_back_twice_or_overlapping_a_free_one_is_ignored) {
  shared_pair p{1 << 20};
  auto a = p.memory->allocate(4096);
  auto b = p.memory->allocate(4096);
  BOOST_REQUIRE(a && b);
  p.memory->release(*a);
  p.memory->release(*a);                       // twice
  p.memory->release(a->subspan(64, 128));      // inside a free range
  p.memory->release({a->data() + 2048, 4096}); // half in a free range, half in b
  auto first = p.memory->allocate(4096);
  auto second = p.memory->allocate(4096);
  BOOST_REQUIRE(first && second);
  BOOST_TEST(first->data() == a->data());
  BOOST_TEST(second->data() != a->data());
  BOOST_TEST(second->data() != b->data()); // b is still handed out
}

// A read past the memory's end is refused naming the offset; nothing is copied.
BOOST_AUTO_TEST_CASE(a_read_past_the_end_is_refused) {
  shared_pair p;
  std::vector<std::byte> into(4096, std::byte{5});
  const auto size = p.memory->bytes().size();
  auto got = p.reader->read(p.memory->key(), size - 100, into, 0);
  BOOST_REQUIRE(!got.has_value());
  BOOST_TEST(got.error().code == errc::invalid_argument);
  BOOST_TEST(got.error().message.find(std::to_string(size - 100)) != std::string::npos);
  BOOST_TEST((into == std::vector<std::byte>(4096, std::byte{5})));
}

// Bytes that are not a key are refused: errc::parse_error.
BOOST_AUTO_TEST_CASE(a_key_that_is_not_one_is_refused) {
  shared_pair p;
  std::vector<std::byte> into(64);
  auto key = std::vector<std::byte>(p.memory->key().begin(), p.memory->key().end());
  key[0] ^= std::byte{1}; // its magic
  auto bad = p.reader->read(key, 0, into, 0);
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().code == errc::parse_error);
  auto short_key = p.reader->read(std::span{key}.first(10), 0, into, 0);
  BOOST_REQUIRE(!short_key.has_value());
  BOOST_TEST(short_key.error().code == errc::parse_error);
}
