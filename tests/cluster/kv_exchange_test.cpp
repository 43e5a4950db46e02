#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cluster/defaults.hpp"
#include "cluster/detail/kv_exchange.hpp"
#include "cluster/kv_wire.hpp"
#include "devices/kv_stream.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/checksum.hpp"
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

// An exchange on 127.0.0.1 over `transport`, holding for `hold_for` up to `budget` bytes, KV
// of `min_bytes` or more.
std::unique_ptr<kv_exchange> start(std::chrono::milliseconds hold_for = 30s,
                                   std::uint64_t budget = std::uint64_t{1} << 30,
                                   cluster::wire_transport transport = cluster::wire_transport::tcp,
                                   std::uint64_t min_bytes = 0) {
  auto ex = kv_exchange::start(transport, "127.0.0.1", "", hold_for, budget, min_bytes, nullptr);
  if (!ex)
    BOOST_FAIL("kv_exchange::start: " << ex.error().message);
  return std::move(*ex);
}

// Two exchanges on 127.0.0.1 over TCP, the holder holding `n` pseudo-random bytes from `seed`.
struct held_pair {
  std::unique_ptr<kv_exchange> holder = start();
  std::unique_ptr<kv_exchange> importer = start();
  std::vector<std::byte> original;
  kv_held held;
  std::size_t left_after_hold = 0; // bytes hold() left in the caller's vector
  held_pair(std::uint64_t seed, std::size_t n)
      : original(pattern(seed, n)) {
    auto bytes = original;
    held = holder->hold(bytes);
    left_after_hold = bytes.size();
    BOOST_REQUIRE(!held.empty());
  }
};

// A prefill device's move-out through blocks of a store: `pages` pages of 64 KiB (two layer
// groups of 32 KiB), holding `tokens` tokens of `page_tokens` each (the last page may be
// partial), their bytes pseudo-random from `seed`, every group sent. `ended` counts the stream's
// end (its blocks sealed into the store, with their checksums when it completed).
struct store_stream {
  static constexpr std::size_t page_bytes = 64 << 10;
  std::vector<std::vector<std::byte>> blocks; // the store's memory
  std::vector<std::byte> original;            // the device's pages, one after another
  std::vector<token> tokens;
  std::shared_ptr<kv_stream> stream;
  std::shared_ptr<std::atomic<int>> ended = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<std::size_t>> sealed = std::make_shared<std::atomic<std::size_t>>(0);
  store_stream(std::size_t pages, std::size_t n_tokens, std::size_t page_tokens, std::uint64_t seed,
               bool send = true)
      : blocks(pages, std::vector<std::byte>(page_bytes))
      , original(pattern(seed, pages * page_bytes)) {
    for (std::size_t i = 0; i < n_tokens; ++i)
      tokens.push_back(static_cast<token>(100 + i));
    std::vector<std::span<std::byte>> spans;
    for (auto& b : blocks)
      spans.emplace_back(b);
    stream = std::make_shared<kv_stream>(
        std::move(spans),
        [ended = ended, sealed = sealed](std::vector<std::uint64_t> sums, std::vector<token>) {
          sealed->store(sums.size());
          ++*ended;
        });
    const std::vector<page_range> groups{{0, page_bytes / 2}, {page_bytes / 2, page_bytes / 2}};
    BOOST_REQUIRE(stream->begin(tokens, pages, groups, page_tokens));
    std::vector<std::span<std::byte>> device;
    for (std::size_t p = 0; p < pages; ++p)
      device.push_back(std::span{original}.subspan(p * page_bytes, page_bytes));
    for (std::size_t g = 0; send && g < groups.size(); ++g)
      stream->send_group(g, device);
  }
  // Page `p` as the device had it.
  std::span<const std::byte> page(std::size_t p) const {
    return std::span{original}.subspan(p * page_bytes, page_bytes);
  }
};

// Waits up to two seconds for `n` to read `want`.
bool eventually(const std::atomic<int>& n, int want) {
  for (int i = 0; i < 200 && n.load() != want; ++i)
    std::this_thread::sleep_for(10ms);
  return n.load() == want;
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_exchange_suite)

// A prefill node's hand-off through its store (a stream of 40 tokens in pages of 16) is held as
// its pages: another exchange fetches them as kept blocks of store 0, bit-exact, each with its
// tokens, the chain hash of its parent and its own, and its checksum; then the holder lets the
// stream go (sealed into the store, checksums and all) and holds nothing more.
BOOST_AUTO_TEST_CASE(a_held_streams_pages_are_fetched_by_another_exchange_bit_exact) {
  auto holder = start();
  auto importer = start();
  store_stream st{3, 40, 16, 21};
  const auto held = holder->hold_stream(st.stream);
  BOOST_TEST(held.wire == holder->address());
  BOOST_TEST(held.page_tokens == 16u);
  BOOST_TEST(held.blocks.size() == 3u);
  BOOST_TEST(held.bytes() == 3 * store_stream::page_bytes);
  BOOST_TEST(holder->held_bytes() == 3 * store_stream::page_bytes);
  st.stream.reset(); // the gateway hands it over
  auto got = importer->fetch_kept(held.wire, 0, held.blocks, st.tokens);
  if (!got)
    BOOST_FAIL("fetch_kept: " << got.error().message);
  BOOST_REQUIRE_EQUAL(got->size(), 3u);
  block_hash parent = root_hash;
  for (std::size_t p = 0; p < 3; ++p) {
    const auto& page = (*got)[p];
    const auto first = st.tokens.begin() + static_cast<std::ptrdiff_t>(16 * p);
    const std::vector<token> own{first, p < 2 ? first + 16 : st.tokens.end()};
    BOOST_TEST((page.tokens == own));
    BOOST_TEST(page.parent == parent);
    BOOST_TEST(page.hash == chain_hash(parent, own));
    const auto bytes = std::as_bytes(std::span{page.bytes});
    BOOST_TEST(std::equal(bytes.begin(), bytes.end(), st.page(p).begin(), st.page(p).end()));
    BOOST_TEST(page.checksum == block_checksum(st.page(p)));
    parent = page.hash;
  }
  BOOST_TEST(eventually(*st.ended, 1));
  BOOST_TEST(st.sealed->load() == 3u); // it completed: sealed with each block's checksum
  BOOST_TEST(holder->held_bytes() == 0u);
  auto again = importer->fetch_kept(held.wire, 0, held.blocks, st.tokens);
  BOOST_REQUIRE(!again);
  BOOST_TEST(again.error().code == errc::not_found, again.error().message);
}

// A device of the holder's own node takes the stream's pages from its exchange, not over the
// wire.
BOOST_AUTO_TEST_CASE(a_held_streams_pages_are_taken_on_its_own_node) {
  auto holder = start();
  store_stream st{2, 32, 16, 22};
  const auto held = holder->hold_stream(st.stream);
  st.stream.reset();
  auto got = holder->fetch_kept(held.wire, 0, held.blocks, st.tokens);
  if (!got)
    BOOST_FAIL("fetch_kept: " << got.error().message);
  BOOST_REQUIRE_EQUAL(got->size(), 2u);
  const auto bytes = std::as_bytes(std::span{got->back().bytes});
  BOOST_TEST(std::equal(bytes.begin(), bytes.end(), st.page(1).begin(), st.page(1).end()));
  BOOST_TEST(*st.ended == 1);
  BOOST_TEST(holder->held_bytes() == 0u);
}

// Pages asked for with other tokens than the stream holds (another sequence's), or of a stream
// its sender broke off, are not given: the importer computes the tokens.
BOOST_AUTO_TEST_CASE(a_held_streams_pages_are_not_given_for_other_tokens_or_unfinished) {
  auto holder = start();
  auto importer = start();
  store_stream st{2, 20, 16, 23};
  const auto held = holder->hold_stream(st.stream);
  auto other = st.tokens;
  other.back() += 1;
  auto got = importer->fetch_kept(held.wire, 0, held.blocks, other);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().code == errc::not_found, got.error().message);
  store_stream broken{2, 20, 16, 24, false};
  broken.stream->abort();
  const auto held_broken = holder->hold_stream(broken.stream);
  auto none = importer->fetch_kept(held_broken.wire, 0, held_broken.blocks, broken.tokens);
  BOOST_REQUIRE(!none);
  BOOST_TEST(none.error().code == errc::not_found, none.error().message);
}

// An exchange that stops serving (its node stops, before its store goes) lets every held stream
// go and takes no more: nothing reads the store's memory after it.
BOOST_AUTO_TEST_CASE(a_stopping_exchange_lets_its_held_streams_go) {
  auto holder = start();
  store_stream st{2, 32, 16, 25};
  const auto held = holder->hold_stream(st.stream);
  BOOST_TEST(!held.empty());
  st.stream.reset();
  holder->stop_serving_kept();
  BOOST_TEST(*st.ended == 1);
  BOOST_TEST(holder->held_bytes() == 0u);
  store_stream late{1, 8, 16, 26};
  BOOST_TEST(holder->hold_stream(late.stream).empty());
}

// Held streams are the store's pages, bounded by its budget, not the exchange's: held bytes
// past the budget still come in, and make no room by dropping a stream.
BOOST_AUTO_TEST_CASE(held_streams_are_not_bound_by_the_exchanges_budget) {
  auto holder = start(30s, 100 << 10); // 100 KiB
  store_stream st{2, 32, 16, 27};      // 128 KiB
  const auto held = holder->hold_stream(st.stream);
  BOOST_TEST(!held.empty());
  auto bytes = pattern(28, 90 << 10);
  const auto blob = holder->hold(bytes); // fits beside it
  BOOST_TEST(!blob.empty());
  BOOST_TEST(holder->held_bytes() == 128u * 1024 + 90 * 1024);
}

// A prefill node's moved-out KV (10 MiB and a bit: three blocks) is held as checksummed
// blocks; another node's exchange fetches it over the TCP wire bit-exact, once.
BOOST_AUTO_TEST_CASE(held_kv_is_fetched_by_another_exchange_once_and_bit_exact) {
  held_pair p{1, (10u << 20) + 123};
  auto& [holder, importer, original, held, left] = p;
  BOOST_TEST(left == 0u); // taken in, not copied
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

// The same over UCX's shared-memory transports (nodes of one machine): the holder keeps the KV
// in shared memory and the importer copies every block out of it in place (its metric counts
// them all), bit-exact.
BOOST_AUTO_TEST_CASE(held_kv_is_fetched_over_shared_memory_in_place) {
  auto holder = start(30s, std::uint64_t{1} << 30, cluster::wire_transport::shared_memory);
  metrics_registry metrics;
  auto ex = kv_exchange::start(cluster::wire_transport::shared_memory, "127.0.0.1", "", 30s,
                               std::uint64_t{1} << 30, 0, &metrics);
  BOOST_REQUIRE_MESSAGE(ex.has_value(), (ex ? "" : ex.error().message));
  auto& importer = *ex;
  BOOST_TEST(holder->sharing().find("held KV in shared memory") == 0u, holder->sharing());
  const auto original = pattern(2, 5u << 20);
  auto bytes = original;
  auto got = importer->fetch(holder->hold(bytes));
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == original));
  const auto text = metrics.render();
  BOOST_TEST(text.find("triad_cluster_kv_wire_in_place_bytes_total " +
                       std::to_string(original.size())) != std::string::npos,
             text);
}

// Over TCP nothing is in shared memory and the exchange says nothing of it.
BOOST_AUTO_TEST_CASE(an_exchange_over_tcp_shares_no_memory) {
  BOOST_TEST(start()->sharing().empty());
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

// KV smaller than the exchange's least is not held: its bytes stay, for the control message.
BOOST_AUTO_TEST_CASE(kv_below_the_least_is_not_held) {
  auto ex = start(30s, std::uint64_t{1} << 30, cluster::wire_transport::tcp, 65536);
  auto small = pattern(12, 65535);
  BOOST_TEST(ex->hold(small).empty());
  BOOST_TEST(small.size() == 65535u); // left in place
  auto enough = pattern(13, 65536);
  BOOST_TEST(!ex->hold(enough).empty());
  BOOST_TEST(ex->held_bytes() == 65536u);
}

// A reference whose checksum does not match what arrives is refused as corrupted: those bytes
// are never imported.
BOOST_AUTO_TEST_CASE(a_block_that_does_not_match_its_reference_is_refused) {
  held_pair p{8, 100000};
  auto& [holder, importer, original, held, left] = p;
  held.checksums[0] ^= 1;
  auto got = importer->fetch(held);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().code == errc::corrupted);
}

// The exchange's fetch by hand over a wire of its own: the request (the count and ids as block
// 0), the answer (how many blocks follow), the blocks; then `ack` as the last word, or none
// (the fetcher goes without a word). The bytes that arrived. `server`: which of the holder's
// servers it asks.
std::vector<std::byte> fetch_by_hand(const kv_held& held, std::optional<std::uint64_t> ack,
                                     std::size_t server = 0) {
  auto wire = cluster::kv_wire::open(cluster::wire_transport::tcp);
  BOOST_REQUIRE(wire);
  // "host:port,port" -> the host and that server's port.
  const auto colon = held.wire.rfind(':');
  auto ports = held.wire.substr(colon + 1);
  for (std::size_t i = 0; i < server; ++i)
    ports = ports.substr(ports.find(',') + 1);
  auto c =
      (*wire)->connect(held.wire.substr(0, colon),
                       static_cast<std::uint16_t>(std::stoi(ports.substr(0, ports.find(',')))));
  if (!c)
    BOOST_FAIL("connect: " << c.error().message);
  std::vector<std::uint64_t> request{held.blocks.size()};
  request.insert(request.end(), held.blocks.begin(), held.blocks.end());
  const std::span<const std::byte> req{reinterpret_cast<const std::byte*>(request.data()),
                                       request.size() * sizeof(std::uint64_t)};
  const cluster::wire_block ask{0, req, block_checksum(req)};
  BOOST_REQUIRE((*wire)->send({&ask, 1}));
  std::uint64_t found = 0;
  const std::span<std::byte> answer{reinterpret_cast<std::byte*>(&found), sizeof found};
  BOOST_REQUIRE((*wire)->receive({&answer, 1}));
  BOOST_TEST(found == held.blocks.size());
  std::vector<std::byte> got(held.bytes());
  std::vector<std::span<std::byte>> slots;
  std::size_t at = 0;
  for (auto n : held.sizes) {
    slots.push_back(std::span<std::byte>{got}.subspan(at, n));
    at += n;
  }
  BOOST_REQUIRE((*wire)->receive(slots));
  if (ack) {
    const std::span<const std::byte> a{reinterpret_cast<const std::byte*>(&*ack), sizeof *ack};
    const cluster::wire_block word{0, a, block_checksum(a)};
    BOOST_REQUIRE((*wire)->send({&word, 1}));
  }
  return got;
}

// A fetcher that breaks off after the blocks arrived, before it acknowledged them (its node
// died, its wire broke), leaves the KV held: the next fetch gets it, bit-exact, though it asks
// another of the holder's servers (which waits until the first has put the KV back).
BOOST_AUTO_TEST_CASE(unacknowledged_kv_stays_held_for_the_next_fetch) {
  held_pair p{10, (4u << 20) + 7};
  auto& [holder, importer, original, held, left] = p;
  BOOST_TEST((fetch_by_hand(held, std::nullopt, 1) == original)); // all of it, and no word
  auto got = importer->fetch(held);                               // asks server 0 first
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == original));
  // Off the books once the holder has the acknowledgement.
  const auto gone = std::chrono::steady_clock::now() + 20s;
  while (holder->held_bytes() != 0 && std::chrono::steady_clock::now() < gone)
    std::this_thread::sleep_for(20ms);
  BOOST_TEST(holder->held_bytes() == 0u);
}

// A fetcher whose blocks failed its checks says so (its last word is not the acknowledgement):
// the holder keeps the KV for the next attempt.
BOOST_AUTO_TEST_CASE(kv_refused_by_its_fetcher_stays_held_for_the_next_fetch) {
  held_pair p{14, 300000};
  auto& [holder, importer, original, held, left] = p;
  fetch_by_hand(held, std::uint64_t{0});
  auto got = importer->fetch(held);
  if (!got)
    BOOST_FAIL("fetch: " << got.error().message);
  BOOST_TEST((*got == original));
}

// KV held for an import that was refused (or whose importer computed it instead) is let go at
// once: it does not wait for its time to pass.
BOOST_AUTO_TEST_CASE(released_kv_is_no_longer_held) {
  held_pair p{11, 300000};
  auto& [holder, importer, original, held, left] = p;
  BOOST_TEST(holder->held_bytes() == 300000u);
  importer->release(held); // another exchange's: not its to let go
  BOOST_TEST(holder->held_bytes() == 300000u);
  holder->release(held);
  BOOST_TEST(holder->held_bytes() == 0u);
  auto got = importer->fetch(held);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().code == errc::not_found);
  holder->release(held); // again: nothing
}

// Pages as a node's store would read them for kept blocks: `n` pages of 16 tokens and `bytes`
// bytes each, the last with `last_tokens` (a demotion keeps a partial last page).
std::vector<kv_page> kept_pages(std::size_t n, std::size_t bytes, std::size_t last_tokens = 16) {
  std::vector<kv_page> pages(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto& p = pages[i];
    p.hash = 1000 + i;
    p.parent = i == 0 ? 7 : 1000 + i - 1;
    for (std::size_t t = 0; t < (i + 1 == n ? last_tokens : 16); ++t)
      p.tokens.push_back(static_cast<token>(i * 16 + t));
    auto b = pattern(50 + i, bytes);
    p.bytes.assign(reinterpret_cast<const std::uint8_t*>(b.data()),
                   reinterpret_cast<const std::uint8_t*>(b.data()) + b.size());
    p.checksum = i == 0 ? 0 : block_checksum(b); // the first without one: the holder takes it
  }
  return pages;
}

// Kept blocks of a node's store (a demotion's) cross to another node's exchange: the source
// reads them for the ids and tokens asked, and every page arrives as it was, checked.
BOOST_AUTO_TEST_CASE(kept_blocks_of_a_nodes_store_are_fetched_by_another_bit_exact) {
  auto holder = start();
  auto importer = start();
  const auto pages = kept_pages(3, 300000, 5);
  std::mutex mtx; // the source runs on a server thread of the holder's
  std::uint64_t asked_store = 0;
  std::vector<std::uint64_t> asked_ids;
  std::vector<token> asked_tokens;
  BOOST_TEST(!holder->serves_kept());
  holder->serve_kept([&](std::uint64_t store, const std::vector<std::uint64_t>& ids,
                         const std::vector<token>& tokens) -> expected<std::vector<kv_page>> {
    std::lock_guard lock{mtx};
    asked_store = store;
    asked_ids = ids;
    asked_tokens = tokens;
    return pages;
  });
  BOOST_TEST(holder->serves_kept());
  std::vector<token> tokens(37);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<token>(i);
  auto got = importer->fetch_kept(holder->address(), 77, {11, 12, 13}, tokens);
  if (!got)
    BOOST_FAIL("fetch_kept: " << got.error().message);
  std::lock_guard lock{mtx};
  BOOST_TEST(asked_store == 77u);
  BOOST_TEST((asked_ids == std::vector<std::uint64_t>{11, 12, 13}));
  BOOST_TEST((asked_tokens == tokens));
  BOOST_REQUIRE_EQUAL(got->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& p = (*got)[i];
    BOOST_TEST(p.hash == pages[i].hash);
    BOOST_TEST(p.parent == pages[i].parent);
    BOOST_TEST((p.tokens == pages[i].tokens));
    BOOST_TEST((p.bytes == pages[i].bytes));
    BOOST_TEST(p.checksum == block_checksum(std::as_bytes(std::span{p.bytes})));
  }
}

// A prompt's pages another node's store holds (the router's hint) are asked for as kept blocks
// of kv_exchange::prefix_store whose ids are the page numbers, with the prompt's tokens: the
// holder's source looks them up by the tokens' chain; they come bit-exact.
BOOST_AUTO_TEST_CASE(a_prompts_pages_are_looked_up_in_another_nodes_store_by_page_number) {
  auto holder = start();
  auto importer = start();
  const auto pages = kept_pages(2, 70000, 8);
  std::mutex mtx;
  std::uint64_t asked_store = 0;
  std::vector<std::uint64_t> asked_ids;
  holder->serve_kept([&](std::uint64_t store, const std::vector<std::uint64_t>& ids,
                         const std::vector<token>&) -> expected<std::vector<kv_page>> {
    std::lock_guard lock{mtx};
    asked_store = store;
    asked_ids = ids;
    return pages;
  });
  std::vector<token> tokens(80, 5);
  auto got = importer->fetch_prefix(holder->address(), tokens, 3, 2);
  if (!got)
    BOOST_FAIL("fetch_prefix: " << got.error().message);
  std::lock_guard lock{mtx};
  BOOST_TEST(asked_store == kv_exchange::prefix_store);
  BOOST_TEST((asked_ids == std::vector<std::uint64_t>{3, 4}));
  BOOST_REQUIRE_EQUAL(got->size(), 2u);
  BOOST_TEST((got->at(1).bytes == pages.at(1).bytes));
  BOOST_TEST(got->at(1).parent == pages.at(1).parent);
  holder->stop_serving_kept(); // its source refers to this case's locals
}

// A holder runs several servers: a read of kept blocks that holds one (a slow store) does not
// hold up a fetch of held KV, which another serves meanwhile.
BOOST_AUTO_TEST_CASE(a_slow_kept_read_on_one_server_does_not_hold_up_a_fetch_on_another) {
  held_pair p{9, (1u << 20) + 5};
  auto& [holder, importer, original, held, left] = p;
  const auto& address = holder->address();
  BOOST_TEST(static_cast<std::size_t>(std::count(address.begin(), address.end(), ',')) ==
                 defaults::cluster::kv_servers - 1,
             address);
  std::promise<void> reading;
  std::promise<void> fetched;
  auto done = fetched.get_future();
  std::atomic<bool> waited_out{false};
  std::atomic<bool> called{false};
  holder->serve_kept([&](std::uint64_t, const std::vector<std::uint64_t>&,
                         const std::vector<token>&) -> expected<std::vector<kv_page>> {
    if (!called.exchange(true))
      reading.set_value();
    // Holds its server until the held KV was fetched (at most 20 s).
    if (done.wait_for(20s) != std::future_status::ready)
      waited_out = true;
    return kept_pages(1, 4096);
  });
  const std::vector<token> tokens(16, 5);
  auto kept = std::async(std::launch::async,
                         [&] { return importer->fetch_kept(holder->address(), 77, {1}, tokens); });
  BOOST_REQUIRE(reading.get_future().wait_for(20s) == std::future_status::ready);
  auto got = importer->fetch(held);
  fetched.set_value();
  if (!got)
    BOOST_FAIL("fetch while a kept read holds a server: " << got.error().message);
  BOOST_TEST((*got == original));
  auto pages = kept.get();
  BOOST_TEST(!waited_out.load());
  holder->stop_serving_kept(); // its source refers to this case's locals
  BOOST_REQUIRE_MESSAGE(pages.has_value(), why(pages));
  BOOST_TEST(pages->size() == 1u);
}

// A store that has only the first of them: those come; a node that serves none, or asked for
// another store's blocks: not_found.
BOOST_AUTO_TEST_CASE(kept_blocks_come_as_far_as_the_store_has_them) {
  auto holder = start();
  auto importer = start();
  const std::vector<token> tokens(48, 3);
  auto none = importer->fetch_kept(holder->address(), 77, {1, 2, 3}, tokens);
  BOOST_REQUIRE(!none);
  BOOST_TEST(none.error().code == errc::not_found, none.error().message);
  const auto pages = kept_pages(1, 4096);
  holder->serve_kept([&](std::uint64_t store, const std::vector<std::uint64_t>&,
                         const std::vector<token>&) -> expected<std::vector<kv_page>> {
    if (store != 77) // as a node's store answers for another's ids: none
      return std::vector<kv_page>{};
    return pages;
  });
  auto other = importer->fetch_kept(holder->address(), 78, {1, 2, 3}, tokens);
  BOOST_REQUIRE(!other);
  BOOST_TEST(other.error().code == errc::not_found, other.error().message);
  auto some = importer->fetch_kept(holder->address(), 77, {1, 2, 3}, tokens);
  if (!some)
    BOOST_FAIL("fetch_kept: " << some.error().message);
  BOOST_REQUIRE_EQUAL(some->size(), 1u);
  BOOST_TEST((some->front().bytes == pages.front().bytes));
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
