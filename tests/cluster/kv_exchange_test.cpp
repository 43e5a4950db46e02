#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cluster/detail/kv_exchange.hpp"
#include "tests/printers.hpp"

using namespace triad;
using namespace triad::detail;
using namespace std::chrono_literals;

namespace {

// `n` pseudo-random bytes from `seed`.
std::vector<std::byte> pattern(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng{seed};
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const auto r = rng();
    std::memcpy(v.data() + i, &r, std::min<std::size_t>(8, n - i));
  }
  return v;
}

// An exchange on 127.0.0.1 over `transport`, holding for `hold_for` up to `budget` bytes.
std::unique_ptr<kv_exchange>
start(std::chrono::milliseconds hold_for = 30s, std::uint64_t budget = std::uint64_t{1} << 30,
      cluster::wire_transport transport = cluster::wire_transport::tcp) {
  auto ex = kv_exchange::start(transport, "127.0.0.1", "", hold_for, budget, nullptr);
  if (!ex)
    BOOST_FAIL("kv_exchange::start: " << ex.error().message);
  return std::move(*ex);
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_exchange_suite)

// A prefill node's moved-out KV (10 MiB and a bit: three blocks) is held as checksummed
// blocks; another node's exchange fetches it over the TCP wire bit-exact, once.
BOOST_AUTO_TEST_CASE(held_kv_is_fetched_by_another_exchange_once_and_bit_exact) {
  auto holder = start();
  auto importer = start();
  const auto original = pattern(1, (10u << 20) + 123);
  auto bytes = original;
  const auto held = holder->hold(bytes);
  BOOST_TEST(bytes.empty()); // taken in, not copied
  BOOST_TEST(held.wire == holder->address());
  BOOST_TEST(held.blocks.size() == 3u);
  BOOST_TEST(held.bytes() == original.size());
  auto got = importer->fetch(held);
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == original));
  auto again = importer->fetch(held);
  BOOST_REQUIRE(!again);
  BOOST_TEST(again.error().code == errc::not_found);
}

// The same over UCX's shared-memory transports (nodes of one machine).
BOOST_AUTO_TEST_CASE(held_kv_is_fetched_over_shared_memory) {
  auto holder = start(30s, std::uint64_t{1} << 30, cluster::wire_transport::shared_memory);
  auto importer = start(30s, std::uint64_t{1} << 30, cluster::wire_transport::shared_memory);
  const auto original = pattern(2, 5u << 20);
  auto bytes = original;
  auto got = importer->fetch(holder->hold(bytes));
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == original));
}

// KV the node's own device imports is taken from the exchange, not sent over a wire.
BOOST_AUTO_TEST_CASE(held_kv_imported_on_its_own_node_is_taken_in_place) {
  auto ex = start();
  const auto original = pattern(3, 70000);
  auto bytes = original;
  const auto held = ex->hold(bytes);
  auto got = ex->fetch(held);
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == original));
  BOOST_TEST(!ex->fetch(held));
}

// Held KV nobody fetches goes after its time: the importer then hears not_found (and computes).
BOOST_AUTO_TEST_CASE(held_kv_expires_unfetched) {
  auto holder = start(100ms);
  auto importer = start();
  auto bytes = pattern(4, 4096);
  const auto held = holder->hold(bytes);
  std::this_thread::sleep_for(600ms); // the server drops it at its next round
  auto got = importer->fetch(held);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().code == errc::not_found);
}

// Past the budget the oldest held KV gives way; KV larger than the budget is not held at all
// (its bytes stay with the caller, to travel in the control message).
BOOST_AUTO_TEST_CASE(the_budget_bounds_what_is_held) {
  auto holder = start(30s, 1u << 20);
  auto importer = start();
  auto big = pattern(5, 2u << 20);
  const auto none = holder->hold(big);
  BOOST_TEST(none.empty());
  BOOST_TEST(big.size() == 2u << 20);
  auto first = pattern(6, 600000);
  auto second = pattern(7, 600000);
  const auto second_copy = second;
  const auto h1 = holder->hold(first);
  const auto h2 = holder->hold(second);
  BOOST_TEST(!importer->fetch(h1)); // gave way to h2
  auto got = importer->fetch(h2);
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == second_copy));
}

// A reference whose checksum does not match what arrives is refused as corrupted: those bytes
// are never imported.
BOOST_AUTO_TEST_CASE(a_block_that_does_not_match_its_reference_is_refused) {
  auto holder = start();
  auto importer = start();
  auto bytes = pattern(8, 100000);
  auto held = holder->hold(bytes);
  held.checksums[0] ^= 1;
  auto got = importer->fetch(held);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().code == errc::corrupted);
}

// A holder that is not there (stopped, or never was) is an error naming its address.
BOOST_AUTO_TEST_CASE(a_holder_that_is_gone_is_an_error_naming_it) {
  auto importer = start();
  kv_held held;
  {
    auto holder = start();
    auto bytes = pattern(9, 1000);
    held = holder->hold(bytes);
  } // stopped
  auto got = importer->fetch(held);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().message.find(held.wire) != std::string::npos, got.error().message);
}

BOOST_AUTO_TEST_SUITE_END()
