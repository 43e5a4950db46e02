#include <algorithm>
#include <map>
#include <mutex>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/router.hpp"
#include "devices/device.hpp"
#include "kvstore/directory.hpp"
#include "tests/actors/support.hpp"

namespace {

using namespace std::chrono_literals;

// A stand-in device (a dynamic actor answering the few messages the router sends) as the typed
// handle the router takes: unchecked, as only those messages reach it.
triad::device_actor as_device(const caf::actor& a) {
  return caf::actor_cast<triad::device_actor>(a);
}

// Where the router sends `n` decode requests in turn (each keeps its slot), once it has every
// device's stats: a device's name, or the reason none was granted. `kv_store`: the store the
// requests' kept blocks are in (0: none).
std::vector<std::string> decode_routes(caf::scoped_actor& self, const triad::router_actor& router,
                                       int n, std::uint64_t kv_store = 0) {
  auto fail = [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); };
  self->request(router, 30s, triad::refresh_atom::value).receive([](bool) {}, fail);
  std::vector<std::string> order;
  for (int i = 0; i < n; ++i)
    self->request(
            router, 30s, triad::route_atom::value,
            triad::route_order{triad::route_stage::decode, "s", {}, {}, {}, 0, false, kv_store})
        .receive([&](triad::route_reply& r) { order.push_back(r.ok ? r.name : r.reason); }, fail);
  return order;
}

// A stand-in decode device with `used` of its 100 KV pages in use and decode steps of `step_s`
// (0: none yet): it answers stats and, as a real device does, tells a watcher its free pages
// and step time at once.
caf::actor decode_stand_in(caf::scoped_actor& self, std::size_t used, double step_s = 0) {
  return self->spawn([used, step_s](caf::event_based_actor* me) -> caf::behavior {
    return {[used](triad::stats_atom) {
              triad::device_stats st;
              st.kv_pages_total = 100;
              st.kv_pages_used = used;
              return st;
            },
            [used, step_s, me](triad::watch_kv_atom, caf::actor& watcher) {
              me->send(watcher, triad::kv_free_atom::value, me->address(),
                       std::uint64_t{100 - used}, std::uint64_t{100}, step_s);
            }};
  });
}

// A router over one device with one slot, in the orchestration domain of a test node; the
// device actor is a stand-in (the router hands it out and asks it for stats).
struct router_fixture {
  std::unique_ptr<triad::node> node = triad::test::start_node();
  caf::scoped_actor self{node->domains().orchestration().system()};
  caf::actor device = self->spawn([]() -> caf::behavior {
    return {[](triad::stats_atom) { return triad::device_stats{}; },
            [](triad::watch_kv_atom, caf::actor&) {}};
  });
  triad::router_actor router;

  explicit router_fixture(triad::schedule_policy policy, std::size_t slots = 1,
                          std::chrono::milliseconds busy_backoff = 5ms) {
    triad::orchestration_options o;
    o.schedule = policy;
    o.busy_backoff = busy_backoff;
    router = triad::spawn_router(node->domains().orchestration(),
                                 {{"dev0", triad::device_role::both, as_device(device), slots}}, o);
  }

  ~router_fixture() {
    caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(device, caf::exit_reason::user_shutdown);
  }

  // Asks for a slot for `session`; the answer comes with receive().
  auto route(const std::string& session, std::vector<std::string> avoid = {}) {
    return self->request(
        router, 30s, triad::route_atom::value,
        triad::route_order{triad::route_stage::any, session, std::move(avoid), {}, {}, 0, false});
  }

  void served(const std::string& session, std::uint64_t tokens) {
    self->send(router, triad::served_atom::value, session, tokens);
  }

  // Occupies the only slot, queues `asks_first` then `asks_second`, frees the slot and expects
  // `gets_first` to get it: the other is only served once that one releases it again, so a
  // wrong order fails by timeout.
  void expect_order(const std::string& asks_first, const std::string& asks_second,
                    const std::string& gets_first) {
    auto fail = [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); };
    route("holder").receive([](triad::route_reply& r) { BOOST_REQUIRE(r.ok); }, fail);
    auto a = route(asks_first);
    auto b = route(asks_second);
    auto& winner = gets_first == asks_first ? a : b;
    auto& other = gets_first == asks_first ? b : a;
    self->send(router, triad::release_atom::value, std::string{"dev0"});
    winner.receive([](triad::route_reply& r) { BOOST_TEST(r.ok); }, fail);
    self->send(router, triad::release_atom::value, std::string{"dev0"});
    other.receive([](triad::route_reply& r) { BOOST_TEST(r.ok); }, fail);
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(router)

BOOST_AUTO_TEST_CASE(plas_serves_the_session_with_less_attained_service_first) {
  router_fixture f{triad::schedule_policy::plas};
  f.served("heavy", 500);
  f.served("light", 20);
  std::uint64_t attained = 0;
  f.self->request(f.router, 30s, triad::attained_atom::value, std::string{"heavy"})
      .receive([&](std::uint64_t t) { attained = t; },
               [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  BOOST_TEST(attained == 500u);
  f.expect_order("heavy", "light", "light");
}

BOOST_AUTO_TEST_CASE(fcfs_serves_in_arrival_order_whatever_the_service) {
  router_fixture f{triad::schedule_policy::fcfs};
  f.served("heavy", 500);
  f.expect_order("heavy", "light", "heavy");
}

BOOST_AUTO_TEST_CASE(an_order_that_gives_a_slot_back_is_served_from_it) {
  router_fixture f{triad::schedule_policy::fcfs};
  auto fail = [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); };
  f.route("holder").receive([](triad::route_reply& r) { BOOST_REQUIRE(r.ok); }, fail);
  // The only slot is taken: an order giving it back in the same message gets it at once (without
  // the release it would wait until the 1 s limit below).
  bool granted = false;
  f.self
      ->request(f.router, 1s, triad::route_atom::value,
                triad::route_order{triad::route_stage::any, "holder", {}, {}, "dev0", 0, false})
      .receive([&](triad::route_reply& r) { granted = r.ok; }, fail);
  BOOST_TEST(granted);
}

BOOST_AUTO_TEST_CASE(a_request_is_never_sent_to_a_device_that_failed_it) {
  router_fixture f{triad::schedule_policy::fcfs};
  std::string reason;
  auto code = triad::errc::system_error;
  f.route("s", {"dev0"})
      .receive(
          [&](triad::route_reply& r) {
            reason = r.ok ? "granted" : r.reason;
            code = r.code;
          },
          [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  BOOST_TEST(reason == "no device left for this stage: dev0 failed this request");
  BOOST_TEST((code == triad::errc::unavailable)); // answered 503, to retry
}

BOOST_AUTO_TEST_CASE(a_device_that_said_busy_gets_one_request_per_sequence_that_leaves_it) {
  // Four router slots, a backoff far beyond the test: only releases open the device again.
  router_fixture f{triad::schedule_policy::fcfs, 4, 60s};
  auto fail = [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); };
  auto ok = [](triad::route_reply& r) { BOOST_TEST(r.ok); };
  f.route("a").receive(ok, fail);
  f.route("b").receive(ok, fail);
  f.self->send(f.router, triad::device_busy_atom::value, std::string{"dev0"}); // b refused
  auto c = f.route("c"); // two of four slots free, but the device said busy: c waits
  f.self->send(f.router, triad::park_release_atom::value, std::string{"dev0"}); // a parks
  // The park freed no room on the device: a request behind c waits too (it times out here;
  // granted, it would answer at once).
  auto waits = [&](const std::string& session) {
    bool waited = false;
    f.self
        ->request(f.router, 200ms, triad::route_atom::value,
                  triad::route_order{triad::route_stage::any, session, {}, {}, {}, 0, false})
        .receive([](triad::route_reply&) { BOOST_FAIL("granted while the device is full"); },
                 [&](caf::error& e) { waited = e == caf::sec::request_timeout; });
    return waited;
  };
  BOOST_TEST(waits("d"));
  f.self->send(f.router, triad::release_atom::value, std::string{"dev0"}); // a sequence left
  c.receive(ok, fail);
  BOOST_TEST(waits("e")); // that room went to c; d (still queued) and e wait for the next
}

BOOST_AUTO_TEST_CASE(decode_goes_to_the_device_with_the_most_free_kv_first) {
  auto node = triad::test::start_node();
  auto& home = node->domains().orchestration();
  caf::scoped_actor self{home.system()};
  auto full = decode_stand_in(self, 90), roomy = decode_stand_in(self, 10);
  auto router = triad::spawn_router(home,
                                    {{"full", triad::device_role::decode, as_device(full), 1},
                                     {"roomy", triad::device_role::decode, as_device(roomy), 1}},
                                    triad::orchestration_options{});
  auto order = decode_routes(self, router, 2);
  // Config order would give "full" first; its KV is nearly used up. Once "roomy"'s one slot is
  // taken, "full" is next.
  std::vector<std::string> expected = {"roomy", "full"};
  BOOST_TEST(order == expected, boost::test_tools::per_element());
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  for (auto& a : {full, roomy})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// A demoted request's decode goes to a device of the store that keeps its blocks (it reads them
// back; another device would compute them), before one with more free KV; with that device's
// slot taken, to the other. Without a store the free KV decides.
BOOST_AUTO_TEST_CASE(a_demoted_requests_decode_goes_to_a_device_of_the_store_keeping_its_blocks) {
  auto node = triad::test::start_node();
  auto& home = node->domains().orchestration();
  caf::scoped_actor self{home.system()};
  auto roomy = decode_stand_in(self, 10), keeper = decode_stand_in(self, 50);
  constexpr std::uint64_t store = 0x5eed;
  auto router =
      triad::spawn_router(home,
                          {{"roomy", triad::device_role::decode, as_device(roomy), 1, 0x1111},
                           {"keeper", triad::device_role::decode, as_device(keeper), 1, store}},
                          triad::orchestration_options{});
  auto order = decode_routes(self, router, 2, store);
  std::vector<std::string> expected = {"keeper", "roomy"};
  BOOST_TEST(order == expected, boost::test_tools::per_element());
  for (const char* name : {"keeper", "roomy"})
    self->send(router, triad::release_atom::value, std::string{name});
  order = decode_routes(self, router, 1);
  BOOST_TEST(order == std::vector<std::string>{"roomy"}, boost::test_tools::per_element());
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  for (auto& a : {roomy, keeper})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(decode_goes_to_the_faster_device_while_it_has_kv_room) {
  auto node = triad::test::start_node();
  auto& home = node->domains().orchestration();
  caf::scoped_actor self{home.system()};
  // "slow" has the most free KV, "fast" steps in a third of its time, "fast_full" faster still
  // with no room (5 of 100 pages free).
  auto slow = decode_stand_in(self, 10, 0.090), fast = decode_stand_in(self, 50, 0.030),
       fast_full = decode_stand_in(self, 95, 0.010);
  auto router =
      triad::spawn_router(home,
                          {{"slow", triad::device_role::decode, as_device(slow), 1},
                           {"fast_full", triad::device_role::decode, as_device(fast_full), 1},
                           {"fast", triad::device_role::decode, as_device(fast), 1}},
                          triad::orchestration_options{});
  auto order = decode_routes(self, router, 3);
  std::vector<std::string> expected = {"fast", "slow", "fast_full"};
  BOOST_TEST(order == expected, boost::test_tools::per_element());
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  for (auto& a : {slow, fast, fast_full})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// Two stand-in prefill devices, a (two slots) and b (one), and a router over them, in the
// orchestration domain of a test node; `order` records where each route() went.
struct two_prefill_devices {
  std::unique_ptr<triad::node> node = triad::test::start_node();
  caf::scoped_actor self{node->domains().orchestration().system()};
  caf::actor a = stand_in(), b = stand_in();
  triad::router_actor router;
  std::vector<std::string> order;
  std::vector<std::pair<std::string, std::uint64_t>> hints; // each grant's prefix_wire, _pages

  // `wires`: where each device's node serves its store's pages ("" this node's).
  explicit two_prefill_devices(std::shared_ptr<triad::kv_tier> tier = nullptr,
                               std::size_t a_slots = 2, std::size_t b_slots = 1,
                               std::pair<std::string, std::string> wires = {}) {
    router = triad::spawn_router(node->domains().orchestration(),
                                 {{"a", triad::device_role::prefill, as_device(a), a_slots,
                                   wires.first.empty() ? 0u : 1u, wires.first, "tcp"},
                                  {"b", triad::device_role::prefill, as_device(b), b_slots,
                                   wires.second.empty() ? 0u : 2u, wires.second, "tcp"}},
                                 triad::orchestration_options{}, 0ms, std::move(tier));
  }
  ~two_prefill_devices() {
    caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
    for (auto& x : {a, b})
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
  }
  caf::actor stand_in() {
    return self->spawn([]() -> caf::behavior {
      return {[](triad::stats_atom) { return triad::device_stats{}; },
              [](triad::watch_kv_atom, caf::actor&) {}};
    });
  }
  void route(std::vector<triad::block_hash> prefix) {
    self->request(router, 30s, triad::route_atom::value,
                  triad::route_order{
                      triad::route_stage::prefill, "s", {}, std::move(prefix), {}, 0, false})
        .receive(
            [&](triad::route_reply& r) {
              order.push_back(r.ok ? r.name : r.reason);
              hints.emplace_back(r.prefix_wire, r.prefix_pages);
            },
            [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  }
  void release(const std::string& name) { self->send(router, triad::release_atom::value, name); }
};

// A prompt whose start was sent to a device of another node goes to a device of a third (that
// one is full): the reply names where the first node's store serves those pages, and how many,
// so the device fetches them instead of computing them.
BOOST_AUTO_TEST_CASE(a_prefill_grant_names_another_node_that_was_sent_more_of_the_prompt) {
  two_prefill_devices f{nullptr, 1, 1, {"10.0.0.1:7000,7001", "10.0.0.2:7000,7001"}};
  f.route({1, 2, 3, 4});       // a
  f.route({1, 2, 3, 4, 5, 6}); // b: a is full
  BOOST_TEST((f.order == std::vector<std::string>{"a", "b"}));
  BOOST_TEST(f.hints[0].first.empty()); // nothing was sent anywhere before
  BOOST_TEST(f.hints[1].first == "10.0.0.1:7000,7001");
  BOOST_TEST(f.hints[1].second == 4u);
}

// Devices of one node (one store, one exchange), or of this node, name no other node.
BOOST_AUTO_TEST_CASE(a_prefill_grant_names_no_node_for_devices_of_one_node) {
  two_prefill_devices same{nullptr, 1, 1, {"10.0.0.1:7000", "10.0.0.1:7000"}};
  same.route({1, 2, 3, 4});
  same.route({1, 2, 3, 4, 5});
  BOOST_TEST((same.order == std::vector<std::string>{"a", "b"}));
  BOOST_TEST(same.hints[1].first.empty());
  BOOST_TEST(same.hints[1].second == 0u);
  two_prefill_devices local{nullptr, 1, 1};
  local.route({1, 2, 3, 4});
  local.route({1, 2, 3, 4, 5});
  BOOST_TEST(local.hints[1].first.empty());
}

BOOST_AUTO_TEST_CASE(prefill_goes_to_the_device_that_was_sent_the_prompts_start_before_load) {
  two_prefill_devices f;
  f.route({1}); // a: more free slots
  f.route({2}); // a: a tie, config order
  f.route({5}); // b: a is full
  for (const char* name : {"a", "a", "b"})
    f.release(name);
  f.route({5, 6}); // b holds its start; a has more free slots
  f.route({7});    // a
  std::vector<std::string> expected = {"a", "a", "b", "b", "a"};
  BOOST_TEST(f.order == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(without_slot_caps_a_shared_prefix_does_not_pile_every_prompt_on_one_device) {
  constexpr auto unlimited = triad::routed_device::unlimited;
  two_prefill_devices f{nullptr, unlimited, unlimited};
  for (int i = 0; i < 20; ++i)
    f.route({1, 2}); // every prompt starts with the same system prompt's pages
  const auto on_b = std::count(f.order.begin(), f.order.end(), "b");
  const auto on_a = std::count(f.order.begin(), f.order.end(), "a");
  BOOST_TEST(on_a + on_b == 20);
  // a holds the prefix: it gets the first 9 (more than 2 x (0 + 4) in flight sends the next
  // to b); then both hold it, and the less loaded gets each, b until it catches up.
  BOOST_TEST(std::count(f.order.begin(), f.order.begin() + 9, "a") == 9);
  BOOST_TEST(f.order.at(9) == "b");
  BOOST_TEST(on_a == 10);
  BOOST_TEST(on_b == 10);
}

// A tier that holds nothing and moves nothing: the router asks only what devices hold.
struct empty_tier : triad::kv_tier {
  std::size_t block_bytes() const noexcept override { return 0; }
  std::uint64_t store_id() const noexcept override { return 1; }
  std::size_t held(std::span<const triad::block_hash>) const override { return 0; }
  void spill(std::uint32_t, std::vector<triad::kv_page>) override {}
  void fetch(std::vector<triad::token>, std::size_t, std::size_t, triad::seq_id, caf::actor,
             std::uint64_t) override {}
  void keep(std::vector<triad::kv_page>, std::chrono::milliseconds, std::uint64_t, caf::actor,
            std::uint64_t) override {}
  void release(std::vector<std::uint64_t>, std::uint64_t) override {}
  void fetch_kept(std::vector<std::uint64_t>, std::vector<triad::token>, triad::seq_id, caf::actor,
                  std::uint64_t) override {}
};

// What a KV store's directory says each device holds: `runs[device]` is its run of every
// chain.
struct directory_tier final : empty_tier {
  mutable std::mutex m; // the router reads on its thread, the test writes on its own
  std::map<caf::actor_addr, std::size_t> runs;
  std::size_t held_by(const caf::actor_addr& device,
                      std::span<const triad::block_hash> chain) const override {
    std::lock_guard lock{m};
    auto it = runs.find(device);
    return it == runs.end() ? 0 : std::min(it->second, chain.size());
  }
};

BOOST_AUTO_TEST_CASE(prefill_goes_to_the_device_whose_cache_the_store_says_holds_the_prompt) {
  auto tier = std::make_shared<directory_tier>();
  two_prefill_devices f{tier};
  // b holds the prompt's first two pages although the router never sent it that prompt (a
  // decode device's answer, or pages it copied from another device).
  {
    std::lock_guard lock{tier->m};
    tier->runs[f.b.address()] = 2;
  }
  f.route({8, 9, 10}); // b: its cache holds the start, though a has more free slots
  f.release("b");
  {
    std::lock_guard lock{tier->m};
    tier->runs.clear(); // b evicted them: nothing sent there recorded
  }
  f.route({11}); // a: more free slots
  std::vector<std::string> expected = {"b", "a"};
  BOOST_TEST(f.order == expected, boost::test_tools::per_element());
}

// A KV store's tier over a real directory in which the router's devices are numbered (as
// the store's link numbers the devices that join it): what the router routes is recorded there.
struct routed_tier final : empty_tier {
  triad::kv_directory directory;
  std::map<caf::actor_addr, std::uint32_t> numbers;
  std::uint32_t number(const caf::actor_addr& device) const {
    auto it = numbers.find(device);
    return it == numbers.end() ? no_device : it->second;
  }
  std::size_t held_by(const caf::actor_addr& device,
                      std::span<const triad::block_hash> chain) const override {
    return directory.run_on(number(device), chain);
  }
  bool note_routed(const caf::actor_addr& device,
                   std::span<const triad::block_hash> chain) override {
    if (number(device) == no_device)
      return false;
    directory.note_routed(number(device), chain);
    return true;
  }
};

BOOST_AUTO_TEST_CASE(what_the_router_sent_a_device_the_store_knows_is_recorded_in_its_directory) {
  auto tier = std::make_shared<routed_tier>();
  two_prefill_devices f{tier};
  tier->numbers = {{f.a.address(), 0}, {f.b.address(), 1}}; // before any route: no race
  f.route({1});
  f.route({2});
  f.route({5}); // b: a is full
  for (const char* name : {"a", "a", "b"})
    f.release(name);
  // The record is the directory's: b will hold page 5 (not yet computed), a pages 1 and 2.
  BOOST_TEST(tier->directory.routed_pages() == 3u);
  BOOST_TEST(tier->directory.run_on(1, std::vector<triad::block_hash>{5, 6}) == 1u);
  f.route({5, 6}); // b, by the directory; a has more free slots
  // Once b reports page 5 computed it is b's in the directory, no longer only routed there.
  tier->directory.note_resident(1, std::vector<triad::block_hash>{5}, {});
  BOOST_TEST(tier->directory.routed_pages() == 3u); // 1 and 2 on a, 6 on b
  f.release("b");
  f.route({5, 7}); // b: it holds page 5
  std::vector<std::string> expected = {"a", "a", "b", "b", "b"};
  BOOST_TEST(f.order == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
