#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <boost/test/unit_test.hpp>
#include <xxhash.h>

#include "kvstore/eviction.hpp"
#include "kvstore/pool.hpp"
#include "tests/printers.hpp"

namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng{seed};
  std::vector<std::byte> v(n);
  for (auto& b : v)
    b = static_cast<std::byte>(rng());
  return v;
}

struct temp_dir {
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("triad-kv-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
  static inline int counter = 0;
};

} // namespace

BOOST_AUTO_TEST_SUITE(block)

BOOST_AUTO_TEST_CASE(chained_hashes_tell_equal_prefixes_from_equal_blocks) {
  std::vector<triad::token> a{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<triad::token> b{9, 9, 9, 9, 5, 6, 7, 8};
  auto ha = triad::chain_hashes(a, 4);
  auto hb = triad::chain_hashes(b, 4);
  BOOST_TEST(ha.size() == 2u); // the trailing partial block is not hashed
  BOOST_TEST(hb.size() == 2u);
  BOOST_TEST(ha[1] != hb[1]); // same second block, different prefix
  std::vector<triad::token> c{1, 2, 3, 4, 0, 0, 0, 0};
  BOOST_TEST(triad::chain_hashes(c, 4)[0] == ha[0]);
}

BOOST_AUTO_TEST_CASE(a_checked_copy_catches_one_flipped_bit_anywhere) {
  auto src = random_bytes(100'000, 1);
  auto sum = triad::block_checksum(src);
  std::vector<std::byte> dst(src.size());
  BOOST_TEST(triad::copy_checked(dst, src, sum).has_value());
  BOOST_TEST(dst == src);
  for (std::int64_t bit : {0L, 8L * 40'000 + 3, 8L * 99'999 + 7}) {
    auto r = triad::copy_checked(dst, src, sum, bit);
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code == triad::errc::corrupted);
  }
}

// The checksum's definition (kvstore/block.cpp), written out plainly: whichever kernel this
// CPU runs (AVX-512, AVX2 or portable) must give the same value, since checksums are kept in
// disk files and travel between machines.
std::uint64_t reference_checksum(std::span<const std::byte> bytes) {
  static constexpr std::uint64_t key0[8] = {
      0xbe4ba423396cfeb8ull, 0x1cad21f72c81017cull, 0xdb979083e96dd4deull, 0x1f67b3b7a4a44072ull,
      0x78e5c0cc4ee679cbull, 0x2172ffcc7dd05a82ull, 0x8e2443f7744608b8ull, 0x4c263a81e69035e0ull};
  std::uint64_t acc[8] = {};
  for (std::size_t s = 0; s * 64 < bytes.size(); ++s) {
    std::uint64_t d[8] = {};
    std::memcpy(d, bytes.data() + s * 64, std::min<std::size_t>(64, bytes.size() - s * 64));
    for (int i = 0; i < 8; ++i) {
      std::uint64_t x = d[i] ^ (key0[i] + s * 0x9e3779b97f4a7c15ull);
      acc[i] += (x & 0xffffffffu) * (x >> 32) + d[i ^ 1];
    }
  }
  return XXH3_64bits_withSeed(acc, sizeof(acc), bytes.size());
}

BOOST_AUTO_TEST_CASE(the_checksum_is_its_definition_on_this_cpu_at_every_size) {
  auto bytes = random_bytes(300'000, 5);
  for (std::size_t n : {0UL, 1UL, 63UL, 64UL, 65UL, 1000UL, 65'536UL, 196'608UL, 299'999UL}) {
    std::span<const std::byte> part{bytes.data(), n};
    BOOST_TEST(triad::block_checksum(part) == reference_checksum(part), "size " << n);
  }
}

BOOST_AUTO_TEST_CASE(a_streamed_copy_into_aligned_memory_is_checked_and_exact) {
  // 64-byte aligned and over 64 KiB: the copy takes the non-temporal path.
  auto src = random_bytes(196'608, 6);
  auto sum = triad::block_checksum(src);
  auto* raw = static_cast<std::byte*>(std::aligned_alloc(64, src.size()));
  BOOST_REQUIRE(raw != nullptr);
  std::span<std::byte> dst{raw, src.size()};
  BOOST_TEST(triad::copy_checked(dst, src, sum).has_value());
  BOOST_TEST(std::memcmp(raw, src.data(), src.size()) == 0);
  auto r = triad::copy_checked(dst, src, sum, 8L * 100'000 + 1);
  BOOST_TEST(!r.has_value());
  BOOST_TEST(std::to_integer<int>(raw[100'000] ^ src[100'000]) == 2); // the flipped bit landed
  std::free(raw);
}

BOOST_AUTO_TEST_CASE(sums_of_a_blocks_pieces_add_up_to_its_checksum) {
  // Pieces at 64-byte boundaries, copied and summed apart (a page streamed in layer groups),
  // give the block's own checksum; the last piece may end inside a stripe.
  for (std::size_t size : {std::size_t{4096}, std::size_t{196608}, std::size_t{6000}}) {
    auto src = random_bytes(size, static_cast<unsigned>(size));
    std::vector<std::byte> dst(size);
    triad::checksum_sums whole;
    std::vector<std::size_t> cuts{0, 64, 1024, 3008, size};
    for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
      triad::checksum_sums piece;
      std::span<const std::byte> run{src.data() + cuts[k], cuts[k + 1] - cuts[k]};
      triad::checksum_range(dst.data() + cuts[k], run, cuts[k], piece);
      whole.add(piece);
    }
    BOOST_TEST(triad::checksum_finish(whole, size) == triad::block_checksum(src));
    BOOST_TEST((dst == src));
    // One bit off in one piece changes that piece's sums.
    triad::checksum_sums a, b;
    triad::checksum_range(nullptr, std::span<const std::byte>{src.data() + 1024, 1984}, 1024, a);
    src[2000] ^= std::byte{4};
    triad::checksum_range(nullptr, std::span<const std::byte>{src.data() + 1024, 1984}, 1024, b);
    BOOST_TEST(!(a == b));
  }
}

BOOST_AUTO_TEST_CASE(the_checksum_sees_two_stripes_swapped) {
  auto a = random_bytes(4096, 7);
  auto b = a;
  std::swap_ranges(b.begin(), b.begin() + 64, b.begin() + 64);
  BOOST_TEST(triad::block_checksum(a) != triad::block_checksum(b));
}

BOOST_AUTO_TEST_CASE(a_memory_pool_hands_out_whole_slots_and_then_says_full) {
  auto p = triad::memory_pool::create("host0", triad::tier::host, 0, 4096, 3 * 4096 + 100, nullptr);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST((*p)->capacity() == 3u);
  auto a = (*p)->allocate(), b = (*p)->allocate(), c = (*p)->allocate();
  BOOST_TEST((a && b && c));
  BOOST_TEST(!(*p)->allocate().has_value());
  (*p)->free(*b);
  BOOST_TEST(*(*p)->allocate() == *b);
  auto none = triad::memory_pool::create("x", triad::tier::host, 0, 4096, 100, nullptr);
  BOOST_REQUIRE(!none.has_value());
  BOOST_TEST(none.error().message.find("holds no block") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(lru_names_the_least_recently_used_eligible_block) {
  triad::lru_policy lru;
  for (triad::block_id id : {1, 2, 3})
    lru.touched(id);
  lru.touched(1);
  BOOST_TEST(*lru.victim([](triad::block_id) { return true; }) == 2u);
  BOOST_TEST(*lru.victim([](triad::block_id id) { return id != 2; }) == 3u);
  lru.erased(3);
  BOOST_TEST(*lru.victim([](triad::block_id id) { return id != 2; }) == 1u);
}

BOOST_AUTO_TEST_CASE(disk_blocks_survive_reopening_and_damaged_files_are_rejected) {
  temp_dir dir;
  std::vector<triad::token> toks{1, 2, 3, 4};
  auto payload = random_bytes(4096, 2);
  triad::disk_entry e{triad::chain_hash(triad::root_hash, toks),
                      triad::root_hash,
                      toks,
                      triad::block_checksum(payload),
                      {}};
  std::vector<triad::token> toks2{5, 6, 7, 8};
  triad::disk_entry e2{
      triad::chain_hash(e.hash, toks2), e.hash, toks2, triad::block_checksum(payload), {}};
  {
    auto d = triad::disk_pool::open(dir.path, 4, 4096, 1 << 20);
    BOOST_REQUIRE(d.has_value());
    BOOST_REQUIRE((*d)->write(e, payload).has_value());
    BOOST_REQUIRE((*d)->write(e2, payload).has_value());
  }
  // Damage the second file's header (its tokens).
  {
    for (auto& f : std::filesystem::directory_iterator(dir.path))
      if (f.path().stem() != "") {
        std::fstream s{f.path(), std::ios::in | std::ios::out | std::ios::binary};
        std::vector<char> head(60);
        s.read(head.data(), 60);
        std::uint64_t hash = 0;
        std::memcpy(&hash, head.data() + 24, 8);
        if (hash == e2.hash) {
          s.seekp(50);
          s.put('\x7f');
        }
      }
  }
  auto d = triad::disk_pool::open(dir.path, 4, 4096, 1 << 20);
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST((*d)->recovered().size() == 1u);
  BOOST_TEST((*d)->damaged_on_open() == 1u);
  BOOST_TEST((*d)->recovered()[0].hash == e.hash);
  std::vector<std::byte> back(4096);
  BOOST_REQUIRE((*d)->read(e.hash, back).has_value());
  BOOST_TEST(back == payload);
  // A flipped payload bit is a miss, never data.
  auto r = (*d)->read(e.hash, back, 12345);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code == triad::errc::corrupted);
}

BOOST_AUTO_TEST_CASE(a_full_disk_tier_refuses_more_files) {
  temp_dir dir;
  auto d = triad::disk_pool::open(dir.path, 4, 4096, 4096 + 200);
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST((*d)->capacity() == 1u);
  auto payload = random_bytes(4096, 3);
  std::vector<triad::token> t1{1, 1, 1, 1}, t2{2, 2, 2, 2};
  triad::disk_entry a{triad::chain_hash(triad::root_hash, t1),
                      triad::root_hash,
                      t1,
                      triad::block_checksum(payload),
                      {}};
  triad::disk_entry b{triad::chain_hash(triad::root_hash, t2),
                      triad::root_hash,
                      t2,
                      triad::block_checksum(payload),
                      {}};
  BOOST_TEST((*d)->write(a, payload).has_value());
  auto r = (*d)->write(b, payload);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code == triad::errc::exhausted);
}

BOOST_AUTO_TEST_SUITE_END()
