// The backend contract, as a device actor relies on it, run on every backend (as llama.cpp's
// test-backend-ops runs every op on every backend): admit, prefill and decode, KV export and
// import into another device, park and resume, free, and a failing step. A new backend is
// checked by adding one line to `backends()`.

#include <algorithm>
#include <functional>
#include <map>

#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "devices/cpu/cpu_backend.hpp"
#include "devices/detail/step_job.hpp"
#include "devices/device.hpp"
#include "devices/sim/profile.hpp"
#include "devices/sim/sim_backend.hpp"
#include "tests/devices/forwarding_backend.hpp"
#include "tests/printers.hpp"

namespace {

using namespace std::chrono_literals;

// A backend under test: its name and how to make one.
struct backend_case {
  std::string name;
  std::function<std::unique_ptr<triad::backend>(std::uint64_t)> make_with; // KV budget bytes
  std::unique_ptr<triad::backend> make(std::uint64_t kv_bytes = 16ull << 20) const {
    return make_with(kv_bytes);
  }
};

std::ostream& operator<<(std::ostream& out, const backend_case& c) {
  return out << c.name;
}

std::unique_ptr<triad::backend> cpu(triad::dtype type, std::uint64_t kv_bytes) {
  triad::cpu_backend_options o;
  o.shape = *triad::model_preset("tiny");
  o.type = type;
  o.kv_budget_bytes = kv_bytes;
  auto b = triad::cpu_backend::create(o);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  return std::move(b).value();
}

std::unique_ptr<triad::backend> sim(const std::string& profile, std::uint64_t kv_bytes) {
  triad::sim_backend_options o;
  o.shape = *triad::model_preset("tiny");
  o.profile = *triad::builtin_profile(profile);
  o.time_scale = 0; // no waiting in tests
  o.kv_budget_bytes = kv_bytes;
  auto b = triad::sim_backend::create(o);
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  return std::move(b).value();
}

// Every backend and dtype a device can run (simulated ones labelled by their profile).
std::vector<backend_case> backends() {
  return {
      {"cpu_f32", [](std::uint64_t kv) { return cpu(triad::dtype::f32, kv); }},
      {"cpu_bf16", [](std::uint64_t kv) { return cpu(triad::dtype::bf16, kv); }},
      {"sim_h200", [](std::uint64_t kv) { return sim("h200", kv); }},
      {"sim_sn40l", [](std::uint64_t kv) { return sim("sn40l", kv); }},
  };
}

// A domain and one or two devices of a backend case, and a test actor as the sink.
struct devices_fixture {
  explicit devices_fixture(std::unique_ptr<triad::backend> first,
                           std::unique_ptr<triad::backend> second = nullptr) {
    for (auto* b : {&first, &second}) {
      if (*b == nullptr)
        continue;
      auto d = triad::spawn_device(dom, std::move(*b), {});
      BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
      devices.push_back(*d);
    }
  }
  ~devices_fixture() {
    for (auto& d : devices)
      caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
    devices.clear();
    self.reset(); // before its actor system stops
    dom.stop(10s);
  }

  // A greedy generate order of `max_new` tokens after `prompt`.
  triad::generate_request order(triad::seq_id seq, std::vector<triad::token> prompt,
                                std::uint32_t max_new) {
    triad::generate_request r;
    r.seq = seq;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    r.sampling.temperature = 0;
    r.sink = caf::actor{*self};
    return r;
  }

  triad::admission admit(const triad::device_actor& device, triad::generate_request r) {
    triad::admission out;
    (*self)
        ->request(device, caf::infinite, triad::generate_atom::value, std::move(r))
        .receive([&](triad::admission& a) { out = std::move(a); },
                 [&](caf::error&) { BOOST_FAIL("the device did not answer"); });
    return out;
  }

  // The tokens of sequence `seq` up to its done (or failed) event, which is returned too.
  std::pair<std::vector<triad::token>, triad::device_event> run(triad::seq_id seq) {
    std::vector<triad::token> tokens;
    for (;;) {
      std::optional<triad::device_event> got;
      (*self)->receive([&](triad::device_event& e) { got = std::move(e); },
                       caf::after(60s) >> [] {});
      BOOST_REQUIRE_MESSAGE(got.has_value(), "no device event within 60 s");
      if (got->seq != seq)
        continue;
      tokens.insert(tokens.end(), got->tokens.begin(), got->tokens.end());
      if (got->kind == triad::device_event::done || got->kind == triad::device_event::failed)
        return {tokens, std::move(*got)};
    }
  }

  triad::device_stats stats(const triad::device_actor& device) {
    triad::device_stats st;
    (*self)
        ->request(device, caf::infinite, triad::stats_atom::value)
        .receive([&](triad::device_stats& s) { st = s; }, [](caf::error&) {});
    return st;
  }

  triad::domain dom{0, {0, 1}, nullptr, triad::scheduler_config{}};
  std::optional<caf::scoped_actor> self{std::in_place, dom.system()};
  std::vector<triad::device_actor> devices;
};

std::vector<triad::token> prompt(std::size_t n) {
  std::vector<triad::token> p;
  for (std::size_t i = 0; i < n; ++i)
    p.push_back(static_cast<triad::token>(32 + (i * 7) % 90));
  return p;
}

} // namespace

namespace bdata = boost::unit_test::data;

BOOST_AUTO_TEST_SUITE(backend_contract)

BOOST_DATA_TEST_CASE(a_sequence_is_prefilled_and_decodes_to_its_length, bdata::make(backends()),
                     c) {
  devices_fixture f{c.make()};
  auto a = f.admit(f.devices[0], f.order(1, prompt(40), 6));
  BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
  auto [tokens, end] = f.run(1);
  BOOST_TEST(end.kind == triad::device_event::done, end.message);
  BOOST_TEST(tokens.size() == 6u);
  BOOST_TEST(end.message == "length");
  for (auto t : tokens)
    BOOST_TEST((t >= 0 && static_cast<unsigned>(t) < triad::model_preset("tiny")->vocab));
}

BOOST_DATA_TEST_CASE(kv_exported_and_imported_elsewhere_continues_the_same_way,
                     bdata::make(backends()), c) {
  devices_fixture f{c.make(), c.make()};
  // Straight: 8 greedy tokens on one device.
  BOOST_REQUIRE(f.admit(f.devices[0], f.order(1, prompt(40), 8)).accepted);
  auto straight = f.run(1).first;
  BOOST_REQUIRE(straight.size() == 8u);
  // Split: 4 there, the KV exported and imported into the other device, 4 more there. Computed
  // as the straight one was, not attached to its pages (a prefix computed apart from the rest
  // may differ in the last bits, and so the greedy choice).
  auto split = f.order(2, prompt(40), 4);
  split.reuse_prefix = false;
  BOOST_REQUIRE(f.admit(f.devices[0], std::move(split)).accepted);
  auto first = f.run(2).first;
  triad::kv_blob blob;
  (*f.self)
      ->request(f.devices[0], caf::infinite, triad::export_atom::value, triad::seq_id{2})
      .receive([&](triad::kv_blob& b) { blob = std::move(b); },
               [](caf::error& e) { BOOST_FAIL("export: " << to_string(e)); });
  BOOST_TEST(blob.tokens == 40u + 3u); // the last token chosen is not in the KV yet
  auto rest = prompt(40);
  rest.insert(rest.end(), first.begin(), first.end());
  triad::admission a;
  (*f.self)
      ->request(f.devices[1], caf::infinite, triad::import_atom::value, std::move(blob),
                f.order(3, rest, 4))
      .receive([&](triad::admission& x) { a = x; }, [](caf::error&) {});
  BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
  auto second = f.run(3).first;
  first.insert(first.end(), second.begin(), second.end());
  BOOST_TEST(first == straight, boost::test_tools::per_element());
}

// The logits after `tokens` prefilled and then `next` decoded, on sequence `seq`.
std::vector<float> logits_after(triad::backend& b, triad::seq_id seq,
                                const std::vector<triad::token>& tokens, triad::token next) {
  if (!tokens.empty()) {
    triad::step_item pre{seq, tokens};
    BOOST_REQUIRE(b.step({&pre, 1}).has_value());
  }
  triad::step_item one{seq, {next}};
  auto out = b.step({&one, 1});
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  return out->logits.front();
}

// Computes the KV of a 33-token prompt on sequence 1, publishes its two full pages to the
// prefix cache and frees the sequence: the prompt and the logits after its first 32 tokens.
std::pair<std::vector<triad::token>, std::vector<float>> published_prompt(triad::backend& b) {
  auto p = prompt(33);
  const std::vector<triad::token> head{p.begin(), p.begin() + 32};
  auto straight = logits_after(b, 1, head, p[32]);
  b.publish(1, p);
  b.free(1);
  return {p, straight};
}

BOOST_DATA_TEST_CASE(pages_evicted_from_the_prefix_cache_continue_a_new_sequence_the_same_way,
                     bdata::make(backends()), c) {
  // A cache of four pages: a prompt of two full pages is published, then pushed out by a
  // sequence of four pages while evictions are captured.
  const auto page_bytes = c.make()->kv().page_bytes;
  auto b = c.make(4 * page_bytes);
  BOOST_REQUIRE(b->kv().pages_total == 4u);
  BOOST_REQUIRE(b->page_payload_bytes() > 0u);
  auto [p, straight] = published_prompt(*b);
  std::vector<triad::kv_page> evicted;
  b->capture_evictions(&evicted);
  auto other = prompt(64);
  for (auto& t : other)
    t = static_cast<triad::token>(t + 100);
  triad::step_item fill{2, other};
  BOOST_REQUIRE(b->step({&fill, 1}).has_value());
  b->capture_evictions(nullptr);
  b->free(2);
  BOOST_REQUIRE(evicted.size() == 2u);
  // Identified by their chain: the first continues the root, the second the first.
  std::sort(evicted.begin(), evicted.end(), [](const auto& x, const auto& y) {
    return (x.parent == triad::root_hash) > (y.parent == triad::root_hash);
  });
  std::span<const triad::token> ps{p};
  BOOST_TEST(evicted[0].parent == triad::root_hash);
  BOOST_TEST(evicted[0].hash == triad::chain_hash(triad::root_hash, ps.first(16)));
  BOOST_TEST(evicted[1].parent == evicted[0].hash);
  BOOST_TEST(evicted[1].hash == triad::chain_hash(evicted[0].hash, ps.subspan(16, 16)));
  BOOST_TEST(evicted[1].tokens == std::vector<triad::token>(p.begin() + 16, p.begin() + 32),
             boost::test_tools::per_element());
  for (const auto& e : evicted)
    BOOST_TEST(e.bytes.size() == b->page_payload_bytes());
  // Appended to a new sequence, they give the decode the very logits of the computed KV.
  auto ok = b->append_pages(3, evicted);
  BOOST_REQUIRE_MESSAGE(ok.has_value(), (ok ? "" : ok.error().message));
  BOOST_TEST(b->length(3) == 32u);
  auto appended = logits_after(*b, 3, {}, p[32]);
  BOOST_TEST(appended == straight, boost::test_tools::per_element());
}

BOOST_DATA_TEST_CASE(shared_pages_carry_checksums_and_a_damaged_one_is_refused_whole,
                     bdata::make(backends()), c) {
  auto b = c.make();
  BOOST_REQUIRE(b->page_payload_bytes() > 0u);
  auto [p, straight] = published_prompt(*b);
  // Another device asks for the prompt's pages from the second on: copied out of the prefix
  // cache with their checksums, the device's copy sequence gone behind it.
  auto tail = triad::detail::share_pages(*b, p, 1, 1);
  BOOST_REQUIRE(tail.size() == 1u);
  BOOST_TEST(tail[0].parent == triad::chain_hash(triad::root_hash, std::span{p}.first(16)));
  auto pages = triad::detail::share_pages(*b, p, 0, 2);
  BOOST_REQUIRE(pages.size() == 2u);
  BOOST_TEST(b->length(triad::detail::lender_seq) == 0u);
  for (const auto& page : pages)
    BOOST_TEST(page.checksum != 0u);
  const auto used = b->kv().pages_used;
  auto damaged = pages;
  damaged[1].bytes[damaged[1].bytes.size() / 2] ^= 0x10;
  auto bad = b->append_pages(3, damaged);
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST((bad.error().code == triad::errc::corrupted));
  BOOST_TEST(b->length(3) == 0u);
  BOOST_TEST(b->kv().pages_used == used);
  // Intact, they give the decode the very logits of the computed KV.
  auto ok = b->append_pages(3, pages);
  BOOST_REQUIRE_MESSAGE(ok.has_value(), (ok ? "" : ok.error().message));
  BOOST_TEST(logits_after(*b, 3, {}, p[32]) == straight, boost::test_tools::per_element());
}

BOOST_DATA_TEST_CASE(a_page_of_the_wrong_size_is_refused_and_changes_nothing,
                     bdata::make(backends()), c) {
  auto b = c.make();
  triad::kv_page bad;
  bad.tokens = prompt(16);
  bad.bytes.resize(3);
  auto ok = b->append_pages(1, {&bad, 1});
  BOOST_REQUIRE(!ok.has_value());
  BOOST_TEST((ok.error().code == triad::errc::invalid_argument));
  BOOST_TEST(b->length(1) == 0u);
  BOOST_TEST(b->kv().pages_used == 0u);
}

BOOST_DATA_TEST_CASE(a_sequence_parked_at_a_stop_token_resumes_with_appended_tokens,
                     bdata::make(backends()), c) {
  devices_fixture f{c.make()};
  auto r = f.order(1, prompt(20), 30);
  r.forced = {'a', 'b', triad::tokenizer::tool_call_end};
  r.stop = {triad::tokenizer::tool_call_end};
  r.park_on_stop = true;
  BOOST_REQUIRE(f.admit(f.devices[0], std::move(r)).accepted);
  auto [tokens, end] = f.run(1);
  BOOST_TEST(tokens.size() == 3u);
  BOOST_TEST(end.message == "stop");
  BOOST_TEST(f.stats(f.devices[0]).parked == 1u);
  (*f.self)->send(f.devices[0], triad::resume_atom::value, triad::seq_id{1},
                  std::vector<triad::token>{triad::tokenizer::tool_response_start, 'o', 'k',
                                            triad::tokenizer::tool_response_end},
                  std::shared_ptr<triad::grammar::token_constraint>{});
  auto more = f.run(1);
  BOOST_TEST(more.second.kind == triad::device_event::done);
  BOOST_TEST(!more.first.empty());
}

BOOST_DATA_TEST_CASE(a_freed_sequence_gives_its_kv_back, bdata::make(backends()), c) {
  devices_fixture f{c.make()};
  BOOST_REQUIRE(f.admit(f.devices[0], f.order(1, prompt(64), 2)).accepted);
  f.run(1);
  BOOST_TEST(f.stats(f.devices[0]).kv_pages_used > 0u);
  (*f.self)->send(f.devices[0], triad::free_atom::value, triad::seq_id{1});
  // The free runs on the driver; the next job's KV report shows it.
  BOOST_REQUIRE(f.admit(f.devices[0], f.order(2, prompt(4), 1)).accepted);
  f.run(2);
  (*f.self)->send(f.devices[0], triad::free_atom::value, triad::seq_id{2});
  BOOST_REQUIRE(f.admit(f.devices[0], f.order(3, prompt(1), 1)).accepted);
  f.run(3);
  auto st = f.stats(f.devices[0]);
  BOOST_TEST(st.sequences == 1u);                       // only the last one is held
  BOOST_TEST(st.kv_pages_used <= 1u, st.kv_pages_used); // its one page; none of the freed
}

BOOST_DATA_TEST_CASE(a_failing_step_fails_its_sequence_and_the_device_goes_on,
                     bdata::make(backends()), c) {
  devices_fixture f{
      std::make_unique<triad::test::failing_backend>(c.make(), 2, false, "injected step failure")};
  BOOST_REQUIRE(f.admit(f.devices[0], f.order(1, prompt(10), 20)).accepted);
  auto [tokens, end] = f.run(1);
  BOOST_TEST(end.kind == triad::device_event::failed);
  BOOST_TEST(end.message.find("injected step failure") != std::string::npos, end.message);
  BOOST_TEST(f.stats(f.devices[0]).sequences == 0u); // dropped
  // The device still admits (its later steps fail too: the backend is broken, not the device).
  BOOST_TEST(f.admit(f.devices[0], f.order(2, prompt(10), 1)).accepted);
}

BOOST_AUTO_TEST_SUITE_END()
