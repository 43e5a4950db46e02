#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/node_config.hpp"
#include "devices/kv_tier.hpp"
#include "kvstore/store.hpp"
#include "tests/printers.hpp"

using namespace std::chrono_literals;

namespace {

constexpr std::size_t block_tokens = 4;
constexpr std::size_t block_bytes = 8192;

std::vector<std::uint8_t> payload(unsigned seed) {
  std::mt19937 rng{seed};
  std::vector<std::uint8_t> v(block_bytes);
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng());
  return v;
}

std::vector<triad::token> tokens(std::size_t n, triad::token first) {
  std::vector<triad::token> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = first + static_cast<triad::token>(i);
  return t;
}

// Two NUMA domains (synthetic), a store homed in the first, and a scoped actor to talk to it.
struct fixture {
  fixture() {
    auto t = triad::topology::load_synthetic("pack:1 numa:2 core:2 pu:1");
    BOOST_REQUIRE(t.has_value());
    topo = std::make_unique<triad::topology>(std::move(t).value());
    triad::node_config nc;
    nc.tools.cores = 1;
    auto p = triad::make_plan(topo->info(), nc);
    BOOST_REQUIRE(p.has_value());
    // Both domains active: the store's pools live in both.
    for (auto& d : p->domains)
      d.orchestration = true;
    auto s = triad::domain_set::start(*topo, *p, nc.scheduler, false);
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    domains = std::move(s).value();
    dir = std::filesystem::temp_directory_path() / ("triad-kvstore-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
  }
  ~fixture() {
    self.reset();
    domains->stop(10s);
    std::filesystem::remove_all(dir);
  }

  // A config with pools of `n` blocks each: {name, tier, domain, blocks}.
  triad::kv_store_config
  config(std::vector<std::tuple<std::string, triad::tier, unsigned, std::size_t>> pools) {
    triad::kv_store_config c;
    c.block_tokens = block_tokens;
    c.block_bytes = block_bytes;
    for (auto& [name, kind, dom, n] : pools)
      c.pools.push_back({name, kind, dom, n * block_bytes, false});
    c.expiry_period = 10ms;
    c.metrics = &metrics;
    return c;
  }

  void start(triad::kv_store_config c) {
    auto s = triad::spawn_kv_store(*domains, domains->orchestration(), std::move(c));
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    kv = *s;
    self = std::make_unique<caf::scoped_actor>(domains->orchestration().system());
  }

  void stop_store() {
    caf::anon_send_exit(kv.store, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(kv.index, caf::exit_reason::user_shutdown);
    (*self)->wait_for(kv.store);
  }

  template<class R, class Handle, class... Ts>
  R ask(const Handle& to, Ts&&... xs) {
    R out{};
    (*self)
        ->request(to, 20s, std::forward<Ts>(xs)...)
        .receive([&](R& r) { out = std::move(r); },
                 [&](caf::error& e) { BOOST_FAIL("no answer: " << caf::to_string(e)); });
    return out;
  }

  triad::kv_reply put(const std::string& pool, std::vector<triad::token> toks,
                      std::vector<std::vector<std::uint8_t>> payloads) {
    return ask<triad::kv_reply>(kv.store, triad::kv_put_atom::value,
                                triad::kv_put{pool, std::move(toks), std::move(payloads)});
  }
  triad::kv_reply op(auto atom, std::vector<triad::block_id> ids, auto... more) {
    return ask<triad::kv_reply>(kv.store, atom, std::move(ids), more...);
  }
  triad::kv_prefix lookup(std::vector<triad::token> toks) {
    return ask<triad::kv_prefix>(kv.index, triad::kv_lookup_atom::value, std::move(toks));
  }
  triad::kv_bytes read(triad::block_id id) {
    return ask<triad::kv_bytes>(kv.store, triad::kv_read_atom::value, id);
  }
  triad::kv_store_stats stats() {
    return ask<triad::kv_store_stats>(kv.store, triad::kv_stats_atom::value);
  }

  std::unique_ptr<triad::topology> topo;
  std::unique_ptr<triad::domain_set> domains;
  triad::metrics_registry metrics;
  triad::kv_store kv;
  std::unique_ptr<caf::scoped_actor> self;
  std::filesystem::path dir;
};

// A device's memory as the store sees it: answers kv_share_atom with page `first` of the
// asked chain (payload(first + 1), summed), and records what it was asked. `changed` makes it
// lend other bytes (with their own sum), as memory written since its first lending would.
struct lender_state {
  std::mutex m;
  std::vector<std::pair<std::size_t, std::uint64_t>> asked; // (chain tokens, first page)
  bool changed = false;
  bool forgot = false; // lends nothing, as a device that let its pages go
};

caf::behavior lender(caf::event_based_actor*, std::shared_ptr<lender_state> st) {
  return {[st](triad::kv_share_atom, std::vector<triad::token>& chain, std::uint64_t first,
               std::uint64_t count) {
    std::lock_guard lock{st->m};
    st->asked.emplace_back(chain.size(), first);
    std::vector<triad::kv_page> out;
    // As a device: the pages asked for are attached only with a token past them.
    if (count != 1 || chain.size() <= (first + 1) * block_tokens || st->forgot)
      return out;
    triad::kv_page p;
    p.bytes = payload(static_cast<unsigned>(first + 1 + (st->changed ? 100 : 0)));
    p.checksum = triad::block_checksum(std::as_bytes(std::span{p.bytes}));
    out.push_back(std::move(p));
    return out;
  }};
}

// The identities of the pages of `toks` (whole pages), as a device reports them.
std::vector<triad::kv_page> page_ids(const std::vector<triad::token>& toks) {
  std::vector<triad::kv_page> out;
  triad::block_hash parent = triad::root_hash;
  for (std::size_t at = 0; at + block_tokens <= toks.size(); at += block_tokens) {
    std::vector<triad::token> own{toks.begin() + static_cast<std::ptrdiff_t>(at),
                                  toks.begin() + static_cast<std::ptrdiff_t>(at + block_tokens)};
    auto h = triad::chain_hash(parent, own);
    out.push_back({h, parent, std::move(own), {}, 0});
    parent = h;
  }
  return out;
}

// A store with a host pool and one device ("dev0", lent by `lender`) whose prefix cache holds
// the three pages of tokens(12, 1).
struct device_fixture : fixture {
  device_fixture() {
    start(config({{"host0", triad::tier::host, 0, 8}}));
    device = domains->orchestration().system().spawn(lender, st);
    caf::anon_send(kv.store, triad::kv_device_join_atom::value, std::string{"dev0"}, device);
    caf::anon_send(kv.store, triad::kv_resident_atom::value, std::string{"dev0"}, page_ids(chain),
                   std::vector<triad::block_hash>{});
  }
  ~device_fixture() { caf::anon_send_exit(device, caf::exit_reason::user_shutdown); }

  triad::kv_prefix on_device(std::vector<triad::token> toks) {
    return ask<triad::kv_prefix>(kv.store, triad::kv_on_device_atom::value, std::string{"dev0"},
                                 std::move(toks));
  }
  std::uint64_t device_pages() {
    auto s = stats();
    return s.device_pages.empty() ? 0 : s.device_pages.front().second;
  }

  std::shared_ptr<lender_state> st = std::make_shared<lender_state>();
  caf::actor device;
  std::vector<triad::token> chain = tokens(3 * block_tokens, 1);
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(store, fixture)

BOOST_FIXTURE_TEST_CASE(each_page_a_device_holds_is_a_block_of_the_device_tier, device_fixture) {
  auto held = on_device(chain);
  BOOST_TEST(held.ids.size() == 3u);
  BOOST_TEST(held.tokens == 3 * block_tokens);
  BOOST_TEST(held.tiers == std::vector<std::string>(3, "device"), boost::test_tools::per_element());
  auto s = stats();
  BOOST_REQUIRE(s.device_pages.size() == 1u);
  BOOST_TEST(s.device_pages.front().first == "dev0");
  BOOST_TEST(s.device_pages.front().second == 3u);
  BOOST_TEST(metrics.render().find("triad_kv_device_pages{device=\"dev0\"} 3") !=
             std::string::npos);
  // Another chain shares none of them.
  BOOST_TEST(on_device(tokens(3 * block_tokens, 50)).ids.empty());
}

BOOST_FIXTURE_TEST_CASE(a_device_page_is_read_through_its_device_checked, device_fixture) {
  auto held = on_device(chain);
  BOOST_REQUIRE(held.ids.size() == 3u);
  auto r = read(held.ids[1]);
  BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
  BOOST_TEST((r.bytes == payload(2))); // page 1 of the chain
  {
    std::lock_guard lock{st->m};
    BOOST_REQUIRE(st->asked.size() == 1u);
    // Its chain up to and with its own page, and a token past it.
    BOOST_TEST(st->asked[0].first == 2 * block_tokens + 1);
    BOOST_TEST(st->asked[0].second == 1u);
  }
  BOOST_TEST(stats().lent == 1u);
  // Its sum at the first lending holds it: a device page is never written again, so other
  // bytes now are damage, never used.
  st->changed = true;
  auto again = read(held.ids[1]);
  BOOST_TEST(!again.ok);
  BOOST_TEST(again.reason.find("failed its check") != std::string::npos, again.reason);
}

BOOST_FIXTURE_TEST_CASE(a_device_page_its_device_no_longer_lends_ends_its_block, device_fixture) {
  auto held = on_device(chain);
  BOOST_REQUIRE(held.ids.size() == 3u);
  st->forgot = true;
  auto r = read(held.ids[2]);
  BOOST_TEST(!r.ok);
  BOOST_TEST(r.gone);
  BOOST_TEST(device_pages() == 2u); // not kept for a page that is not there
  BOOST_TEST(on_device(chain).ids.size() == 2u);
}

BOOST_FIXTURE_TEST_CASE(a_page_a_device_evicts_with_a_copy_moves_to_host_under_its_id,
                        device_fixture) {
  auto held = on_device(chain);
  BOOST_REQUIRE(held.ids.size() == 3u);
  auto pages = page_ids(chain);
  triad::kv_put put{"host0", pages[2].tokens, {payload(3)}};
  put.parent = pages[2].parent;
  put.hold = false;
  put.from_device = "dev0";
  auto r = ask<triad::kv_reply>(kv.store, triad::kv_put_atom::value, std::move(put));
  BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
  BOOST_REQUIRE(r.ids.size() == 1u);
  BOOST_TEST(r.ids[0] == held.ids[2]); // the same block, a tier down
  BOOST_TEST(device_pages() == 2u);
  BOOST_TEST(stats().demotions == 1u);
  auto bytes = read(held.ids[2]);
  BOOST_REQUIRE_MESSAGE(bytes.ok, bytes.reason);
  BOOST_TEST((bytes.bytes == payload(3)));
  std::lock_guard lock{st->m};
  BOOST_TEST(st->asked.empty()); // from host, not lent
}

BOOST_FIXTURE_TEST_CASE(pages_a_device_frees_or_holds_when_it_stops_end_their_blocks,
                        device_fixture) {
  auto held = on_device(chain);
  BOOST_REQUIRE(held.ids.size() == 3u);
  caf::anon_send(kv.store, triad::kv_resident_atom::value, std::string{"dev0"},
                 std::vector<triad::kv_page>{},
                 std::vector<triad::block_hash>{page_ids(chain)[2].hash});
  BOOST_TEST(device_pages() == 2u);
  auto gone = read(held.ids[2]);
  BOOST_TEST(!gone.ok);
  // Only reads serve a device page; other operations name where it is.
  auto acquired = op(triad::kv_acquire_atom::value, {held.ids[0]});
  BOOST_TEST(!acquired.ok);
  BOOST_TEST(acquired.reason.find("device dev0's memory") != std::string::npos, acquired.reason);
  // A leave from another actor of that name (an older device) ends nothing; its own does.
  caf::anon_send(kv.store, triad::kv_device_leave_atom::value, std::string{"dev0"},
                 caf::actor_addr{});
  BOOST_TEST(device_pages() == 2u);
  caf::anon_send(kv.store, triad::kv_device_leave_atom::value, std::string{"dev0"},
                 device.address());
  BOOST_TEST(stats().device_pages.empty());
  BOOST_TEST(!read(held.ids[0]).ok);
  BOOST_TEST(metrics.render().find("triad_kv_device_pages{device=\"dev0\"} 0") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(sequences_with_a_common_prefix_share_its_blocks) {
  start(config({{"gpu0", triad::tier::device, 0, 16}}));
  auto a = tokens(12, 100);
  auto r1 = put("gpu0", a, {payload(1), payload(2), payload(3)});
  BOOST_REQUIRE_MESSAGE(r1.ok, r1.reason);
  auto b = tokens(8, 100); // the first two blocks of a
  auto more = tokens(4, 500);
  b.insert(b.end(), more.begin(), more.end());
  auto r2 = put("gpu0", b, {payload(1), payload(2), payload(9)});
  BOOST_REQUIRE_MESSAGE(r2.ok, r2.reason);
  BOOST_TEST(r2.ids[0] == r1.ids[0]);
  BOOST_TEST(r2.ids[1] == r1.ids[1]);
  BOOST_TEST(r2.ids[2] != r1.ids[2]);
  auto s = stats();
  BOOST_TEST(s.blocks == 4u);
  BOOST_TEST(s.puts_shared == 2u);
  // The longest cached prefix of a continuation of b: b's three blocks.
  auto query = b;
  query.push_back(7);
  auto p = lookup(query);
  BOOST_TEST(p.tokens == 12u);
  BOOST_TEST(p.ids == r2.ids);
  BOOST_TEST(p.tiers == std::vector<std::string>(3, "device"));
  BOOST_TEST(lookup(tokens(8, 900)).tokens == 0u);
}

BOOST_AUTO_TEST_CASE(a_shared_partial_block_is_copied_before_it_is_written) {
  start(config({{"gpu0", triad::tier::device, 0, 8}}));
  auto r = put("gpu0", tokens(6, 1), {payload(1), payload(2)}); // one full, one partial
  BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
  auto partial = r.ids[1];
  // A second sequence forks from the same partial block.
  BOOST_REQUIRE(op(triad::kv_acquire_atom::value, {partial}).ok);
  auto refused = ask<triad::kv_reply>(kv.store, triad::kv_write_atom::value, partial,
                                      std::uint64_t{0}, std::vector<std::uint8_t>(16, 0xab));
  BOOST_TEST(!refused.ok);
  BOOST_TEST(refused.reason.find("copy it first") != std::string::npos);
  auto cow = ask<triad::kv_reply>(kv.store, triad::kv_cow_atom::value, partial);
  BOOST_REQUIRE_MESSAGE(cow.ok, cow.reason);
  BOOST_REQUIRE(cow.ids.size() == 1u);
  auto copy = cow.ids[0];
  BOOST_TEST(copy != partial);
  auto written = ask<triad::kv_reply>(kv.store, triad::kv_write_atom::value, copy, std::uint64_t{0},
                                      std::vector<std::uint8_t>(16, 0xab));
  BOOST_REQUIRE_MESSAGE(written.ok, written.reason);
  auto original = read(partial);
  auto changed = read(copy);
  BOOST_REQUIRE((original.ok && changed.ok));
  BOOST_TEST(original.bytes == payload(2));
  BOOST_TEST(changed.bytes[0] == 0xab);
  BOOST_TEST(std::equal(changed.bytes.begin() + 16, changed.bytes.end(), payload(2).begin() + 16));
  // Now the original has one reference left: writing it in place is allowed.
  auto in_place = ask<triad::kv_reply>(kv.store, triad::kv_cow_atom::value, partial);
  BOOST_TEST(in_place.ids == std::vector<triad::block_id>{partial});
}

BOOST_AUTO_TEST_CASE(the_least_recently_used_unreferenced_block_is_evicted_first) {
  start(config({{"gpu0", triad::tier::device, 0, 3}}));
  std::vector<triad::block_id> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = put("gpu0", tokens(4, 100 * (i + 1)), {payload(static_cast<unsigned>(i))});
    BOOST_REQUIRE(r.ok);
    ids.push_back(r.ids[0]);
  }
  BOOST_REQUIRE(op(triad::kv_release_atom::value, ids).ok); // all cached, none referenced
  // A read waits until its block is filled (a block still filling cannot be evicted, so under
  // load it would be skipped): read the other two first, then use the first again.
  BOOST_REQUIRE(read(ids[1]).ok);
  BOOST_REQUIRE(read(ids[2]).ok);
  BOOST_REQUIRE(read(ids[0]).ok);
  auto r = put("gpu0", tokens(4, 900), {payload(9)});
  BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
  BOOST_TEST(!op(triad::kv_acquire_atom::value, {ids[1]}).ok); // the LRU one left
  BOOST_TEST(op(triad::kv_acquire_atom::value, {ids[0]}).ok);
  BOOST_TEST(op(triad::kv_acquire_atom::value, {ids[2]}).ok);
  BOOST_TEST(stats().evictions == 1u);
  BOOST_TEST(lookup(tokens(4, 200)).tokens == 0u);
}

BOOST_AUTO_TEST_CASE(under_pressure_blocks_are_demoted_before_any_is_evicted) {
  start(config({{"gpu0", triad::tier::device, 0, 2}, {"host0", triad::tier::host, 0, 4}}));
  std::vector<triad::block_id> ids;
  for (int i = 0; i < 4; ++i) {
    auto r = put("gpu0", tokens(4, 100 * (i + 1)), {payload(static_cast<unsigned>(i))});
    BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
    ids.push_back(r.ids[0]);
  }
  auto s = stats();
  BOOST_TEST(s.evictions == 0u);
  BOOST_TEST(s.demotions == 2u);
  BOOST_TEST(lookup(tokens(4, 100)).tiers == std::vector<std::string>{"host"});
  BOOST_TEST(read(ids[0]).bytes == payload(0));
}

BOOST_AUTO_TEST_CASE(a_pinned_block_stays_until_its_deadline_then_goes_to_host) {
  start(config({{"gpu0", triad::tier::device, 0, 1}, {"host0", triad::tier::host, 0, 4}}));
  auto a = put("gpu0", tokens(4, 1), {payload(1)});
  BOOST_REQUIRE(a.ok);
  BOOST_REQUIRE(
      ask<triad::kv_reply>(kv.store, triad::kv_pin_atom::value, a.ids, std::uint32_t{1000}).ok);
  // The pool's one slot is pinned: another block cannot push it out.
  auto b = put("gpu0", tokens(4, 50), {payload(2)});
  BOOST_TEST(b.busy);
  BOOST_TEST(lookup(tokens(4, 1)).tiers == std::vector<std::string>{"device"});
  // The deadline passes, then the demotion runs; wait for it (bounded), whatever the load.
  auto give_up = std::chrono::steady_clock::now() + 20s;
  while (lookup(tokens(4, 1)).tiers != std::vector<std::string>{"host"} &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(20ms);
  BOOST_TEST(stats().pin_expiries == 1u);
  BOOST_TEST(lookup(tokens(4, 1)).tiers == std::vector<std::string>{"host"});
  BOOST_TEST(read(a.ids[0]).bytes == payload(1));
}

BOOST_AUTO_TEST_CASE(demote_to_disk_and_promote_back_preserves_every_byte) {
  auto c = config({{"gpu0", triad::tier::device, 0, 2}, {"host1", triad::tier::host, 1, 2}});
  c.disk_dir = dir;
  c.disk_capacity_bytes = 1 << 20;
  start(c);
  auto r = put("gpu0", tokens(8, 1), {payload(1), payload(2)});
  BOOST_REQUIRE(r.ok);
  BOOST_REQUIRE_MESSAGE(op(triad::kv_demote_atom::value, r.ids).ok, "to host");
  BOOST_TEST(lookup(tokens(8, 1)).tiers == std::vector<std::string>(2, "host"));
  auto d = op(triad::kv_demote_atom::value, r.ids);
  BOOST_REQUIRE_MESSAGE(d.ok, d.reason);
  BOOST_TEST(lookup(tokens(8, 1)).tiers == std::vector<std::string>(2, "disk"));
  auto p =
      ask<triad::kv_reply>(kv.store, triad::kv_promote_atom::value, r.ids, std::string{"gpu0"});
  BOOST_REQUIRE_MESSAGE(p.ok, p.reason);
  BOOST_TEST(lookup(tokens(8, 1)).tiers == std::vector<std::string>(2, "device"));
  BOOST_TEST(read(r.ids[0]).bytes == payload(1));
  BOOST_TEST(read(r.ids[1]).bytes == payload(2));
  auto s = stats();
  BOOST_TEST(s.transfers == 6u);
  BOOST_TEST(s.bytes_moved == 6 * block_bytes);
  auto text = metrics.render();
  BOOST_TEST(text.find(R"(triad_kv_bytes_moved_total{path="host->disk"})") != std::string::npos);
  BOOST_TEST(text.find(R"(triad_kv_transfer_seconds_count{path="disk->device"} 2)") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_bit_flipped_in_transfer_is_caught_and_the_block_fetched_again) {
  start(config({{"gpu0", triad::tier::device, 0, 2}, {"host0", triad::tier::host, 0, 2}}));
  auto r = put("gpu0", tokens(4, 1), {payload(7)});
  BOOST_REQUIRE(r.ok);
  (*self)->send(kv.store, triad::kv_fault_atom::value, std::uint32_t{1});
  auto d = op(triad::kv_demote_atom::value, r.ids);
  BOOST_REQUIRE_MESSAGE(d.ok, d.reason);
  auto s = stats();
  BOOST_TEST(s.checksum_failures == 1u);
  BOOST_TEST(s.dropped_damaged == 0u);
  BOOST_TEST(read(r.ids[0]).bytes == payload(7));
  BOOST_TEST(metrics.render().find("triad_kv_checksum_failures_total 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_block_that_fails_every_fetch_is_dropped_never_used) {
  start(config({{"gpu0", triad::tier::device, 0, 2}, {"host0", triad::tier::host, 0, 2}}));
  auto r = put("gpu0", tokens(4, 1), {payload(7)});
  BOOST_REQUIRE(r.ok);
  (*self)->send(kv.store, triad::kv_fault_atom::value, std::uint32_t{2});
  auto d = op(triad::kv_demote_atom::value, r.ids);
  BOOST_TEST(!d.ok);
  BOOST_TEST(d.reason.find("dropped") != std::string::npos);
  BOOST_TEST(stats().checksum_failures == 2u);
  BOOST_TEST(!read(r.ids[0]).ok);
  BOOST_TEST(lookup(tokens(4, 1)).tokens == 0u); // a miss: the caller recomputes
}

BOOST_AUTO_TEST_CASE(a_bit_flipped_in_a_read_fails_the_read_and_drops_the_block) {
  start(config({{"host0", triad::tier::host, 0, 2}}));
  auto r = put("host0", tokens(4, 1), {payload(7)});
  BOOST_REQUIRE(r.ok);
  (*self)->send(kv.store, triad::kv_fault_atom::value, std::uint32_t{1});
  auto damaged = read(r.ids[0]);
  BOOST_TEST(!damaged.ok);
  BOOST_TEST(damaged.bytes.empty()); // none of the damaged bytes reach the caller
  BOOST_TEST(damaged.reason.find("recompute") != std::string::npos, damaged.reason);
  BOOST_TEST(stats().checksum_failures == 1u);
  BOOST_TEST(stats().dropped_damaged == 1u);
  BOOST_TEST(lookup(tokens(4, 1)).tokens == 0u); // a miss from now on
}

BOOST_AUTO_TEST_CASE(a_full_tier_of_blocks_in_use_answers_busy) {
  start(config({{"gpu0", triad::tier::device, 0, 2}}));
  auto a = put("gpu0", tokens(8, 1), {payload(1), payload(2)}); // both referenced
  BOOST_REQUIRE(a.ok);
  auto b = put("gpu0", tokens(4, 77), {payload(3)});
  BOOST_TEST(!b.ok);
  BOOST_TEST(b.busy);
  BOOST_TEST(b.reason.find("gpu0") != std::string::npos);
  BOOST_TEST(stats().busy == 1u);
  // Once released, the same put goes through (the unreferenced blocks are evicted).
  BOOST_REQUIRE(op(triad::kv_release_atom::value, a.ids).ok);
  BOOST_TEST(put("gpu0", tokens(4, 77), {payload(3)}).ok);
}

BOOST_AUTO_TEST_CASE(many_concurrent_sequences_sharing_prefixes_all_complete) {
  start(config({{"gpu0", triad::tier::device, 0, 64}, {"host1", triad::tier::host, 1, 64}}));
  constexpr int sequences = 24;
  auto common = tokens(16, 1); // four shared blocks
  std::vector<caf::actor> workers;
  auto& sys = domains->orchestration().system();
  caf::scoped_actor collector{sys};
  for (int i = 0; i < sequences; ++i) {
    auto toks = common;
    auto own = tokens(8, 1000 + 100 * i);
    toks.insert(toks.end(), own.begin(), own.end());
    std::vector<std::vector<std::uint8_t>> pl{payload(1), payload(2),        payload(3),
                                              payload(4), payload(100u + i), payload(200u + i)};
    triad::kv_put p{"gpu0", toks, pl};
    sys.spawn([p, store = kv.store, to = caf::actor{collector}](caf::event_based_actor* self) {
      self->request(store, 20s, triad::kv_put_atom::value, p).then([self, to](triad::kv_reply& r) {
        self->send(to, r);
      });
    });
  }
  std::set<triad::block_id> shared;
  int ok = 0;
  for (int i = 0; i < sequences; ++i)
    collector->receive(
        [&](triad::kv_reply& r) {
          ok += r.ok;
          if (r.ok)
            shared.insert(r.ids.begin(), r.ids.begin() + 4);
        },
        caf::after(30s) >> [] { BOOST_FAIL("a put was lost"); });
  BOOST_TEST(ok == sequences);
  BOOST_TEST(shared.size() == 4u);
  auto s = stats();
  BOOST_TEST(s.blocks == 4u + 2u * sequences);
  BOOST_TEST(s.puts_shared == 4u * (sequences - 1));
}

BOOST_AUTO_TEST_CASE(the_disk_tier_survives_a_restart_and_rejects_damaged_files) {
  auto c = config({{"host0", triad::tier::host, 0, 4}});
  c.disk_dir = dir;
  c.disk_capacity_bytes = 1 << 20;
  start(c);
  auto r = put("host0", tokens(12, 1), {payload(1), payload(2), payload(3)});
  BOOST_REQUIRE(r.ok);
  BOOST_REQUIRE(op(triad::kv_demote_atom::value, r.ids).ok);
  stop_store();
  // Damage the third block's payload (its header still checks).
  auto third = triad::chain_hashes(tokens(12, 1), block_tokens)[2];
  char name[17];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(third));
  {
    std::fstream f{dir / (std::string{name} + ".kvb"),
                   std::ios::in | std::ios::out | std::ios::binary};
    BOOST_REQUIRE(f.good());
    f.seekp(-100, std::ios::end);
    f.put('\x55');
  }
  // A stray file that is not a block file at all.
  std::ofstream{dir / "0000000000000bad.kvb"} << "not a block";
  start(c);
  BOOST_TEST(stats().disk_damaged_on_open == 1u);
  auto p = lookup(tokens(12, 1));
  BOOST_TEST(p.tokens == 12u);
  BOOST_TEST(p.tiers == std::vector<std::string>(3, "disk"));
  BOOST_TEST(read(p.ids[0]).bytes == payload(1));
  BOOST_TEST(read(p.ids[1]).bytes == payload(2));
  auto damaged = read(p.ids[2]);
  BOOST_TEST(!damaged.ok);
  BOOST_TEST(damaged.reason.find("checksum") != std::string::npos);
  BOOST_TEST(lookup(tokens(12, 1)).tokens == 8u); // the damaged block is now a miss
}

BOOST_AUTO_TEST_CASE(disk_blocks_of_another_model_are_never_read) {
  auto c = config({{"host0", triad::tier::host, 0, 4}});
  c.disk_dir = dir;
  c.disk_capacity_bytes = 1 << 20;
  c.model = 0x1111;
  start(c);
  auto r = put("host0", tokens(8, 1), {payload(1), payload(2)});
  BOOST_REQUIRE(r.ok);
  BOOST_REQUIRE(op(triad::kv_demote_atom::value, r.ids).ok);
  stop_store();
  // The same shape of blocks, another model's weights: the files are rejected at start.
  c.model = 0x2222;
  start(c);
  BOOST_TEST(stats().disk_damaged_on_open == 2u);
  BOOST_TEST(lookup(tokens(8, 1)).tokens == 0u);
}

BOOST_AUTO_TEST_CASE(device_to_device_goes_direct_with_peer_access_else_through_host) {
  auto c = config({{"gpu0", triad::tier::device, 0, 2},
                   {"rdu1", triad::tier::device, 1, 2},
                   {"host1", triad::tier::host, 1, 2}});
  start(c);
  auto r = put("gpu0", tokens(4, 1), {payload(5)});
  BOOST_REQUIRE(r.ok);
  auto p =
      ask<triad::kv_reply>(kv.store, triad::kv_promote_atom::value, r.ids, std::string{"rdu1"});
  BOOST_REQUIRE_MESSAGE(p.ok, p.reason);
  auto text = metrics.render();
  BOOST_TEST(text.find(R"(triad_kv_transfer_seconds_count{path="device->host"} 1)") !=
             std::string::npos);
  BOOST_TEST(text.find(R"(triad_kv_transfer_seconds_count{path="host->device"} 1)") !=
             std::string::npos);
  BOOST_TEST(read(r.ids[0]).bytes == payload(5));
  BOOST_TEST(stats().pools[1].blocks == 1u); // rdu1
  stop_store();
  c.pools[0].peer_access = c.pools[1].peer_access = true;
  triad::metrics_registry fresh;
  c.metrics = &fresh;
  start(c);
  auto r2 = put("gpu0", tokens(4, 1), {payload(5)});
  auto p2 =
      ask<triad::kv_reply>(kv.store, triad::kv_promote_atom::value, r2.ids, std::string{"rdu1"});
  BOOST_REQUIRE_MESSAGE(p2.ok, p2.reason);
  BOOST_TEST(fresh.render().find(R"(triad_kv_transfer_seconds_count{path="device->device"} 1)") !=
             std::string::npos);
  stop_store(); // before `fresh` goes
}

BOOST_AUTO_TEST_CASE(blocks_move_between_host_pools_of_two_domains_intact) {
  start(config({{"host0", triad::tier::host, 0, 4}, {"host1", triad::tier::host, 1, 4}}));
  auto r = put("host0", tokens(12, 1), {payload(1), payload(2), payload(3)});
  BOOST_REQUIRE(r.ok);
  auto t =
      ask<triad::kv_reply>(kv.store, triad::kv_transfer_atom::value, r.ids, std::string{"host1"});
  BOOST_REQUIRE_MESSAGE(t.ok, t.reason);
  auto s = stats();
  BOOST_TEST(s.pools[0].blocks == 0u);
  BOOST_TEST(s.pools[1].blocks == 3u);
  BOOST_TEST(s.promotions == 0u);
  BOOST_TEST(read(r.ids[2]).bytes == payload(3));
  BOOST_TEST(metrics.render().find(R"(triad_kv_transfer_seconds_count{path="host->host"} 3)") !=
             std::string::npos);
  auto bad =
      ask<triad::kv_reply>(kv.store, triad::kv_transfer_atom::value, r.ids, std::string{"nowhere"});
  BOOST_TEST(bad.reason.find("unknown pool 'nowhere'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_full_host_pool_near_a_device_gives_way_to_the_home_pool) {
  // host0: the home pool (orchestration domain); host1: the pool of a device's domain.
  start(config({{"host0", triad::tier::host, 0, 4}, {"host1", triad::tier::host, 1, 2}}));
  std::vector<triad::block_id> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = put("host1", tokens(4, 100 * (i + 1)), {payload(static_cast<unsigned>(i))});
    BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
    ids.push_back(r.ids[0]);
  }
  auto s = stats();
  BOOST_TEST(s.evictions == 0u);
  BOOST_TEST(s.pools[0].blocks == 1u); // the least recently used one moved home
  BOOST_TEST(s.pools[1].blocks == 2u);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(read(ids[static_cast<std::size_t>(i)]).bytes == payload(static_cast<unsigned>(i)));
}

BOOST_AUTO_TEST_CASE(a_full_home_pool_makes_room_for_the_pool_near_a_device) {
  // Both full: the home pool drops its least recently used block, the pool near the device moves
  // its own there (least recently used across both), and the new block comes in.
  start(config({{"host0", triad::tier::host, 0, 2}, {"host1", triad::tier::host, 1, 2}}));
  std::vector<triad::block_id> ids;
  for (int i = 0; i < 4; ++i) {
    auto r = put(i < 2 ? "host0" : "host1", tokens(4, 100 * (i + 1)),
                 {payload(static_cast<unsigned>(i))});
    BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
    ids.push_back(r.ids[0]);
    BOOST_REQUIRE(op(triad::kv_release_atom::value, r.ids).ok); // cached, unreferenced
  }
  auto r = put("host1", tokens(4, 500), {payload(4)});
  BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
  auto s = stats();
  BOOST_TEST(s.evictions == 1u);
  BOOST_TEST(s.pools[0].blocks == 2u);
  BOOST_TEST(s.pools[1].blocks == 2u);
  BOOST_TEST(!read(ids[0]).ok);                 // the oldest, at home, went
  BOOST_TEST(read(ids[2]).bytes == payload(2)); // the oldest near the device moved home
  BOOST_TEST(read(r.ids[0]).bytes == payload(4));
}

BOOST_AUTO_TEST_CASE(a_move_of_many_blocks_in_several_batches_keeps_every_byte) {
  // 100 blocks go to a domain's movers in batches of 4, 8, 16, 32, 32 and 8. Each block's
  // actor in its new place must be told where that is: the last move takes domain 1's idle
  // actors, which held blocks of the other pool there, and the reads go through them.
  const std::size_t n = 100;
  start(config({{"host0", triad::tier::host, 0, n},
                {"host1", triad::tier::host, 1, n},
                {"host1b", triad::tier::host, 1, n}}));
  std::vector<std::vector<std::uint8_t>> payloads;
  for (std::size_t i = 0; i < n; ++i)
    payloads.push_back(payload(static_cast<unsigned>(100 + i)));
  auto r = put("host0", tokens(n * block_tokens, 1), payloads);
  BOOST_REQUIRE_MESSAGE(r.ok, r.reason);
  for (const char* pool : {"host1", "host0", "host1b"}) {
    auto t =
        ask<triad::kv_reply>(kv.store, triad::kv_transfer_atom::value, r.ids, std::string{pool});
    BOOST_REQUIRE_MESSAGE(t.ok, t.reason);
  }
  auto s = stats();
  BOOST_TEST(s.pools[2].blocks == n);
  BOOST_TEST(s.transfers == 3 * n);
  for (std::size_t i = 0; i < n; ++i)
    BOOST_TEST(read(r.ids[i]).bytes == payloads[i], "block " << i);
}

BOOST_AUTO_TEST_CASE(blocks_moving_back_and_forth_reuse_idle_block_actors) {
  start(config({{"host0", triad::tier::host, 0, 4}, {"host1", triad::tier::host, 1, 4}}));
  auto r = put("host0", tokens(12, 1), {payload(1), payload(2), payload(3)});
  BOOST_REQUIRE(r.ok);
  auto move_to = [&](const char* pool) {
    auto t =
        ask<triad::kv_reply>(kv.store, triad::kv_transfer_atom::value, r.ids, std::string{pool});
    BOOST_REQUIRE_MESSAGE(t.ok, t.reason);
  };
  move_to("host1");
  move_to("host0");
  auto spawned = stats().actors_spawned;
  BOOST_TEST(spawned == 6u); // three in domain 0 at put, three in domain 1 on the first move
  for (int i = 0; i < 5; ++i) {
    move_to("host1");
    move_to("host0");
  }
  BOOST_TEST(stats().actors_spawned == spawned); // later moves reuse the idle actors
  BOOST_TEST(stats().transfers == 36u);          // 3 blocks x 12 moves
  BOOST_TEST(read(r.ids[1]).bytes == payload(2));
}

BOOST_AUTO_TEST_CASE(bad_requests_name_the_problem) {
  start(config({{"gpu0", triad::tier::device, 0, 2}}));
  auto unknown = put("gpu9", tokens(4, 1), {payload(1)});
  BOOST_TEST(unknown.reason.find("unknown pool 'gpu9'; pools: gpu0") != std::string::npos);
  auto count = put("gpu0", tokens(8, 1), {payload(1)});
  BOOST_TEST(count.reason.find("8 tokens make 2 blocks") != std::string::npos);
  auto size = put("gpu0", tokens(4, 1), {std::vector<std::uint8_t>(10)});
  BOOST_TEST(size.reason.find("payload 0 has 10 bytes") != std::string::npos);
  auto missing = op(triad::kv_acquire_atom::value, {42});
  BOOST_TEST(missing.reason.find("unknown blocks 42") != std::string::npos);
  triad::kv_store_config none;
  none.block_bytes = 10;
  auto bad = triad::spawn_kv_store(*domains, domains->orchestration(), none);
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message.find("no pools") != std::string::npos);
  auto c = config({{"gpu0", triad::tier::device, 7, 2}});
  auto bad_domain = triad::spawn_kv_store(*domains, domains->orchestration(), c);
  BOOST_REQUIRE(!bad_domain.has_value());
  BOOST_TEST(bad_domain.error().message.find("gpu0") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(leased_blocks_written_in_place_are_sealed_into_the_index) {
  start(config({{"host0", triad::tier::host, 0, 8}}));
  auto lease = ask<triad::kv_lease>(kv.store, triad::kv_reserve_atom::value, std::string{"host0"},
                                    std::uint32_t{3});
  BOOST_REQUIRE_MESSAGE(lease.ok, lease.reason);
  BOOST_REQUIRE(lease.memory.size() == 3u);
  // Two full blocks and a partial one, written by the caller in place.
  auto toks = tokens(2 * block_tokens + block_tokens / 2, 0);
  std::vector<std::uint64_t> sums;
  for (std::size_t i = 0; i < 3; ++i) {
    auto bytes = payload(static_cast<unsigned>(i + 1));
    std::memcpy(lease.memory[i].data(), bytes.data(), block_bytes);
    sums.push_back(triad::block_checksum(lease.memory[i]));
  }
  (*self)->send(kv.store, triad::kv_seal_atom::value, lease.ids, toks, sums);
  BOOST_TEST(stats().blocks == 2u); // after the seal (the index heard of the blocks before)
  // The full ones are found by their tokens and read back checked; the partial one is gone.
  auto found = lookup(toks);
  BOOST_TEST(found.tokens == 2 * block_tokens);
  BOOST_REQUIRE(found.ids.size() == 2u);
  BOOST_TEST(found.ids[0] == lease.ids[0]);
  auto r = read(lease.ids[1]);
  BOOST_TEST_REQUIRE(r.ok, r.reason);
  BOOST_TEST(std::equal(r.bytes.begin(), r.bytes.end(),
                        reinterpret_cast<const std::uint8_t*>(lease.memory[1].data())));
}

BOOST_AUTO_TEST_CASE(a_lease_sealed_without_checksums_gives_every_block_back) {
  start(config({{"host0", triad::tier::host, 0, 4}}));
  auto lease = ask<triad::kv_lease>(kv.store, triad::kv_reserve_atom::value, std::string{"host0"},
                                    std::uint32_t{4});
  BOOST_REQUIRE_MESSAGE(lease.ok, lease.reason);
  (*self)->send(kv.store, triad::kv_seal_atom::value, lease.ids, tokens(4 * block_tokens, 0),
                std::vector<std::uint64_t>{});
  BOOST_TEST(stats().blocks == 0u);
  // The pool has its room back, and an unknown pool is refused by name.
  auto again = ask<triad::kv_lease>(kv.store, triad::kv_reserve_atom::value, std::string{"host0"},
                                    std::uint32_t{4});
  BOOST_TEST(again.ok);
  auto bad = ask<triad::kv_lease>(kv.store, triad::kv_reserve_atom::value, std::string{"gpu9"},
                                  std::uint32_t{1});
  BOOST_TEST(!bad.ok);
  BOOST_TEST(bad.reason.find("gpu9") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_lease_larger_than_the_room_left_is_refused_at_once_and_holds_nothing) {
  start(config({{"host0", triad::tier::host, 0, 4}}));
  auto first = ask<triad::kv_lease>(kv.store, triad::kv_reserve_atom::value, std::string{"host0"},
                                    std::uint32_t{3});
  BOOST_REQUIRE_MESSAGE(first.ok, first.reason);
  // Three of four places are leased (never evicted): a second lease of three cannot be had,
  // and says so instead of waiting for the first to end.
  auto second = ask<triad::kv_lease>(kv.store, triad::kv_reserve_atom::value, std::string{"host0"},
                                     std::uint32_t{3});
  BOOST_TEST(!second.ok);
  BOOST_TEST(second.busy);
  BOOST_TEST(second.reason.find("host0") != std::string::npos);
  // What it took is back: the one free place takes a put at once.
  auto r = put("host0", tokens(block_tokens, 0), {payload(9)});
  BOOST_TEST(r.ok);
  BOOST_TEST(stats().blocks == 4u);
}

BOOST_AUTO_TEST_CASE(a_block_pinned_by_two_callers_stays_pinned_until_both_unpin_it) {
  start(config({{"host0", triad::tier::host, 0, 1}}));
  auto a = put("host0", tokens(block_tokens, 0), {payload(1)});
  BOOST_REQUIRE_MESSAGE(a.ok, a.reason);
  op(triad::kv_release_atom::value, a.ids); // cached, unreferenced: evictable but for its pins
  std::vector<std::uint64_t> pins;
  for (int i = 0; i < 2; ++i) { // two requests keep the same shared page across their tool calls
    auto p = ask<triad::kv_reply>(kv.store, triad::kv_pin_atom::value, a.ids, std::uint32_t{60000});
    BOOST_TEST(p.ok);
    pins.push_back(p.pin);
  }
  BOOST_TEST(pins[0] != pins[1]);
  op(triad::kv_unpin_atom::value, a.ids, pins[0]); // one of them resumes
  BOOST_TEST(stats().pins_ended == 1u);
  op(triad::kv_unpin_atom::value, a.ids, pins[0]); // a stale second unpin of it ends nothing
  BOOST_TEST(stats().pins_ended == 1u);
  auto b = put("host0", tokens(block_tokens, 100), {payload(2)});
  BOOST_TEST(!b.ok); // the other's pin still holds the only place
  BOOST_TEST(b.busy);
  op(triad::kv_unpin_atom::value, a.ids, pins[1]);
  BOOST_TEST(stats().pins_ended == 2u);
  BOOST_TEST(stats().pin_expiries == 0u); // ended by their holders, not by time
  auto c = put("host0", tokens(block_tokens, 100), {payload(2)});
  BOOST_TEST(c.ok); // now it may go
}

BOOST_AUTO_TEST_CASE(a_pin_ends_at_its_own_deadline_not_at_the_latest_one) {
  start(config({{"host0", triad::tier::host, 0, 1}}));
  auto a = put("host0", tokens(block_tokens, 0), {payload(1)});
  BOOST_REQUIRE_MESSAGE(a.ok, a.reason);
  op(triad::kv_release_atom::value, a.ids);
  auto long_pin =
      ask<triad::kv_reply>(kv.store, triad::kv_pin_atom::value, a.ids, std::uint32_t{60000});
  auto short_pin =
      ask<triad::kv_reply>(kv.store, triad::kv_pin_atom::value, a.ids, std::uint32_t{1});
  BOOST_REQUIRE(long_pin.ok && short_pin.ok);
  // The long one's holder resumes; the short one has passed its deadline (or soon will), so
  // the block may go, though the long pin's deadline is a minute away.
  op(triad::kv_unpin_atom::value, a.ids, long_pin.pin);
  std::this_thread::sleep_for(5ms);
  auto b = put("host0", tokens(block_tokens, 100), {payload(2)});
  BOOST_TEST(b.ok);
}

BOOST_AUTO_TEST_CASE(an_unpinned_pin_does_not_expire_and_a_partly_unpinned_one_does) {
  start(config({{"host0", triad::tier::host, 0, 4}}));
  auto a = put("host0", tokens(2 * block_tokens, 0), {payload(1), payload(2)});
  BOOST_REQUIRE_MESSAGE(a.ok, a.reason);
  BOOST_REQUIRE(a.ids.size() == 2u);
  auto whole = ask<triad::kv_reply>(kv.store, triad::kv_pin_atom::value, a.ids, std::uint32_t{1});
  auto part = ask<triad::kv_reply>(kv.store, triad::kv_pin_atom::value, a.ids, std::uint32_t{1});
  BOOST_REQUIRE(whole.ok && part.ok);
  op(triad::kv_unpin_atom::value, a.ids, whole.pin);     // ended on both: nothing expires
  op(triad::kv_unpin_atom::value, {a.ids[0]}, part.pin); // the second block still holds it
  // Wait (bounded) for the partly unpinned one to expire, then a few more checks.
  for (int i = 0; i < 500 && stats().pin_expiries == 0; ++i)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(50ms);
  BOOST_TEST(stats().pin_expiries == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
