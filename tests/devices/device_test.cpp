#include <atomic>
#include <functional>
#include <semaphore>
#include <thread>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "devices/cpu/cpu_backend.hpp"
#include "devices/device.hpp"
#include "tests/devices/forwarding_backend.hpp"
#include "tests/printers.hpp"

namespace {

using namespace std::chrono_literals;

// A generate order for sequence `seq`: a prompt of `prompt_len` tokens (from the seq), up to
// `max_new` tokens, events to `sink`.
triad::generate_request make_request(triad::seq_id seq, std::size_t prompt_len,
                                     std::uint32_t max_new, const caf::actor& sink) {
  triad::generate_request r;
  r.seq = seq;
  for (std::size_t i = 0; i < prompt_len; ++i)
    r.prompt.push_back(static_cast<triad::token>((seq * 31 + i * 7) % 250));
  r.max_new_tokens = max_new;
  r.sink = sink;
  return r;
}

// A one-domain node piece: a domain and a device actor on the tiny cpu backend.
struct device_fixture {
  device_fixture()
      : device_fixture(triad::device_options{}) {}

  // `wrap` (optional) wraps the cpu backend (a test's forwarding_backend).
  explicit device_fixture(
      triad::device_options options, std::uint64_t kv_budget = 32ull << 20,
      std::size_t page_tokens = 16,
      std::function<std::unique_ptr<triad::backend>(std::unique_ptr<triad::backend>)> wrap = {}) {
    dom = std::make_unique<triad::domain>(0, std::vector<unsigned>{0, 1}, nullptr,
                                          triad::scheduler_config{});
    triad::cpu_backend_options o;
    o.shape = *triad::model_preset("tiny");
    o.kv_budget_bytes = kv_budget;
    o.page_tokens = page_tokens;
    auto b = triad::cpu_backend::create(o);
    BOOST_REQUIRE(b.has_value());
    options.metrics = &metrics;
    std::unique_ptr<triad::backend> be = std::move(*b);
    if (wrap)
      be = wrap(std::move(be));
    auto d = triad::spawn_device(*dom, std::move(be), options);
    BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
    device = *d;
  }

  ~device_fixture() {
    caf::anon_send_exit(device, caf::exit_reason::user_shutdown);
    dom->stop(10s);
  }

  triad::generate_request request(triad::seq_id seq, std::size_t prompt_len, std::uint32_t max_new,
                                  const caf::actor& sink) {
    return make_request(seq, prompt_len, max_new, sink);
  }

  triad::admission submit(caf::scoped_actor& self, triad::generate_request r) {
    triad::admission out;
    self->request(device, caf::infinite, triad::generate_atom::value, std::move(r))
        .receive([&](triad::admission& a) { out = std::move(a); },
                 [&](caf::error&) { BOOST_FAIL("device did not answer"); });
    return out;
  }

  // Collects events until `done` arrived for every listed sequence.
  std::map<triad::seq_id, std::vector<triad::device_event>> collect(caf::scoped_actor& self,
                                                                    std::size_t sequences) {
    std::map<triad::seq_id, std::vector<triad::device_event>> out;
    std::size_t done = 0;
    while (done < sequences) {
      bool got = false;
      self->receive(
          [&](triad::device_event& e) {
            got = true;
            done += e.kind == triad::device_event::done || e.kind == triad::device_event::failed;
            out[e.seq].push_back(std::move(e));
          },
          caf::after(60s) >> [] {});
      BOOST_REQUIRE_MESSAGE(got, "no device event within 60 s");
    }
    return out;
  }

  triad::device_stats stats(caf::scoped_actor& self) {
    triad::device_stats st;
    self->request(device, caf::infinite, triad::stats_atom::value)
        .receive([&](triad::device_stats& s) { st = s; },
                 [&](caf::error&) { BOOST_FAIL("stats"); });
    return st;
  }

  // Resumes parked sequence `seq` with a short tool result and expects it to generate on to
  // its end.
  void resume_with_tool_result(caf::scoped_actor& self, triad::seq_id seq);

  triad::metrics_registry metrics;
  std::unique_ptr<triad::domain> dom;
  triad::device_actor device;
};

std::vector<triad::token> tokens_of(const std::vector<triad::device_event>& events) {
  std::vector<triad::token> out;
  for (const auto& e : events)
    out.insert(out.end(), e.tokens.begin(), e.tokens.end());
  return out;
}

void device_fixture::resume_with_tool_result(caf::scoped_actor& self, triad::seq_id seq) {
  self->send(device, triad::resume_atom::value, seq,
             std::vector<triad::token>{triad::tokenizer::tool_response_start, 'o', 'k',
                                       triad::tokenizer::tool_response_end},
             std::shared_ptr<triad::grammar::token_constraint>{});
  auto more = collect(self, 1);
  BOOST_TEST(tokens_of(more[seq]).size() >= 1u);
  BOOST_TEST(more[seq].back().kind == triad::device_event::done);
}

} // namespace

// A backend whose every step but the first waits for the test's go (at most 5 s, then it goes
// on and says it was late): a token sent only at the end of a burst would hold the burst.
class gated_backend final : public triad::test::forwarding_backend {
public:
  using forwarding_backend::forwarding_backend;
  triad::expected<triad::step_output> step(std::span<const triad::step_item> items) override {
    if (steps_++ > 0 && !gate->try_acquire_for(5s))
      late->store(true);
    return inner_->step(items);
  }
  std::shared_ptr<std::counting_semaphore<>> gate = std::make_shared<std::counting_semaphore<>>(0);
  std::shared_ptr<std::atomic<bool>> late = std::make_shared<std::atomic<bool>>(false);

private:
  int steps_ = 0;
};

// A device on a gated backend whose bursts are as long as they can be: only the test's gate
// paces the steps.
struct gated_device {
  gated_device() {
    triad::device_options o;
    o.burst_steps = 64;
    o.burst_window = std::chrono::seconds{30};
    dom = std::make_unique<triad::domain>(0, std::vector<unsigned>{0, 1}, nullptr,
                                          triad::scheduler_config{});
    triad::cpu_backend_options c;
    c.shape = *triad::model_preset("tiny");
    auto inner = triad::cpu_backend::create(c);
    BOOST_REQUIRE(inner.has_value());
    auto gated = std::make_unique<gated_backend>(std::move(*inner));
    gate = gated->gate;
    late = gated->late;
    auto d = triad::spawn_device(*dom, std::move(gated), o);
    BOOST_REQUIRE(d.has_value());
    device = *d;
  }
  ~gated_device() {
    caf::anon_send_exit(device, caf::exit_reason::user_shutdown);
    dom->stop(10s);
  }
  std::unique_ptr<triad::domain> dom;
  triad::device_actor device;
  std::shared_ptr<std::counting_semaphore<>> gate;
  std::shared_ptr<std::atomic<bool>> late;
};

BOOST_AUTO_TEST_SUITE(device)

BOOST_AUTO_TEST_CASE(a_device_that_exits_lets_go_of_the_requests_it_held) {
  // A finished sequence stays (its KV kept until freed) with its sink, the request actor. The
  // fixture keeps a handle to the device, as a request's context does (through the router): the
  // device must drop its sinks when it exits, or a request and the device keep each other alive.
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  caf::actor_addr sink_addr;
  {
    auto sink =
        f.dom->system().spawn([]() -> caf::behavior { return {[](triad::device_event&) {}}; });
    sink_addr = sink.address();
    BOOST_REQUIRE(f.submit(self, f.request(1, 40, 5, sink)).accepted);
    self->send_exit(sink, caf::exit_reason::user_shutdown);
    self->wait_for(sink);
  }
  self->send_exit(f.device, caf::exit_reason::user_shutdown);
  self->wait_for(f.device);
  // Other references go a moment later, without the device: the worker that ran the sink drops
  // its own when it is done with it, on loaded cores after this thread has moved on (4 of 60
  // runs beside eight busy loops). One the device kept would stay.
  auto held = [&] { return caf::actor_cast<caf::strong_actor_ptr>(sink_addr) != nullptr; };
  for (auto until = std::chrono::steady_clock::now() + 5s;
       held() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(1ms);
  BOOST_TEST(!held(), "the exited device still holds the request actor");
}

BOOST_AUTO_TEST_CASE(a_sequence_streams_exactly_max_new_tokens_then_done) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  auto a = f.submit(self, f.request(1, 40, 12, self));
  BOOST_REQUIRE(a.accepted);
  auto events = f.collect(self, 1);
  BOOST_TEST(tokens_of(events[1]).size() == 12u);
  BOOST_TEST(events[1].back().kind == triad::device_event::done);
  BOOST_TEST(events[1].back().message == "length");
}

BOOST_AUTO_TEST_CASE(forced_tokens_are_generated_in_order_and_sampling_takes_over_after) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  auto r = f.request(1, 10, 5, self);
  r.forced = {'a', 'b', triad::tokenizer::tool_call_start};
  BOOST_REQUIRE(f.submit(self, r).accepted);
  auto events = f.collect(self, 1)[1];
  auto got = tokens_of(events);
  BOOST_REQUIRE_EQUAL(got.size(), 5u);
  BOOST_TEST(got[0] == 'a');
  BOOST_TEST(got[1] == 'b');
  BOOST_TEST(got[2] == triad::tokenizer::tool_call_start);
  auto st = f.stats(self);
  BOOST_TEST(st.tokens == 10u + 4u); // the prompt and every generated token but the last ran
}

BOOST_AUTO_TEST_CASE(concurrent_sequences_get_the_tokens_they_get_alone) {
  std::vector<triad::token> alone_tokens;
  {
    device_fixture f;
    caf::scoped_actor self{f.dom->system()};
    BOOST_REQUIRE(f.submit(self, f.request(7, 30, 10, self)).accepted);
    alone_tokens = tokens_of(f.collect(self, 1)[7]);
  }
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  for (triad::seq_id id : {5, 6, 7, 8})
    BOOST_REQUIRE(f.submit(self, f.request(id, 30, 10, self)).accepted);
  auto events = f.collect(self, 4);
  for (triad::seq_id id : {5, 6, 7, 8})
    BOOST_TEST(tokens_of(events[id]).size() == 10u);
  // Batched with others (bf16, different matmul M), greedy tokens are those of running alone.
  BOOST_TEST(tokens_of(events[7]) == alone_tokens);
  auto st = f.stats(self);
  BOOST_TEST(st.generated == 40u);
  // Continuous batching: fewer steps than running the four one after another.
  BOOST_TEST(st.steps < 4u * 10u);
}

// Runs seq 1 on `prompt`, frees it, then seq 2 on `prompt` plus five tokens; returns seq 2's
// events and the device's stats.
std::pair<std::vector<triad::device_event>, triad::device_stats>
second_prompt_on_a_shared_start(triad::device_options options, bool reuse) {
  device_fixture f{options};
  caf::scoped_actor self{f.dom->system()};
  auto first = f.request(1, 40, 4, self);
  BOOST_REQUIRE(f.submit(self, first).accepted);
  f.collect(self, 1);
  self->send(f.device, triad::free_atom::value, triad::seq_id{1});
  auto second = f.request(2, 0, 6, self);
  second.prompt = first.prompt;
  for (triad::token t : {3, 1, 4, 1, 5})
    second.prompt.push_back(t);
  second.reuse_prefix = reuse;
  BOOST_REQUIRE(f.submit(self, second).accepted);
  auto events = f.collect(self, 1)[2];
  // The driver counts a job done just after it sent the job's result: a moment for the count.
  std::this_thread::sleep_for(50ms);
  return {events, f.stats(self)};
}

BOOST_AUTO_TEST_CASE(a_prompt_starting_like_a_freed_one_reuses_its_cached_pages) {
  auto [events, st] = second_prompt_on_a_shared_start({}, true);
  // Seq 1 computed 40 + 3 tokens: two full pages of 16 went into the cache.
  BOOST_TEST(events.front().cached == 32u);
  BOOST_TEST(st.cached_tokens == 32u);
  auto [plain, plain_st] = second_prompt_on_a_shared_start({}, false);
  BOOST_TEST(plain.front().cached == 0u);
  BOOST_TEST(plain_st.cached_tokens == 0u);
  BOOST_TEST(st.tokens + 32 == plain_st.tokens);     // the cached tokens were not computed
  BOOST_TEST(tokens_of(events) == tokens_of(plain)); // and change nothing generated
}

BOOST_AUTO_TEST_CASE(pages_a_step_published_ride_with_the_next_job) {
  auto [events, st] = second_prompt_on_a_shared_start({}, true);
  // Seq 1's computed pages went to the driver with its free, one job as the device was idle
  // then (not a job of their own after its step as well), and seq 2 found them.
  BOOST_TEST(events.front().cached == 32u);
  BOOST_TEST(st.step_jobs >= 2u);
  BOOST_TEST(st.driver_jobs <= st.step_jobs + 1);
}

BOOST_AUTO_TEST_CASE(a_device_without_a_prefix_cache_computes_every_prompt_in_full) {
  triad::device_options options;
  options.prefix_cache = false;
  auto [events, st] = second_prompt_on_a_shared_start(options, true);
  BOOST_TEST(events.front().cached == 0u);
  BOOST_TEST(st.cached_tokens == 0u);
  BOOST_TEST(st.kv_pages_cached == 0u);
}

BOOST_AUTO_TEST_CASE(a_full_device_answers_busy_at_once) {
  triad::device_options o;
  o.max_sequences = 2;
  device_fixture f{o};
  caf::scoped_actor self{f.dom->system()};
  BOOST_TEST(f.submit(self, f.request(1, 10, 50, self)).accepted);
  BOOST_TEST(f.submit(self, f.request(2, 10, 50, self)).accepted);
  auto third = f.submit(self, f.request(3, 10, 50, self));
  BOOST_TEST(!third.accepted);
  BOOST_TEST(third.reason.find("busy: 2 of 2") != std::string::npos);
  BOOST_TEST(f.stats(self).refused == 1u);
}

BOOST_AUTO_TEST_CASE(without_a_cap_a_device_admits_while_the_kv_fits) {
  // No max_sequences (the default): admission stops at memory, not at a count.
  device_fixture f{triad::device_options{}, 16ull << 20};
  caf::scoped_actor self{f.dom->system()};
  const auto pages = f.stats(self).kv_pages_total;
  BOOST_TEST_REQUIRE(pages > 100u, "the test needs room for more than 64 one-page prompts, has "
                                       << pages << " pages");
  std::size_t admitted = 0;
  triad::admission refused;
  for (triad::seq_id id = 1; id <= pages + 1; ++id) {
    auto a = f.submit(self, f.request(id, 8, 1000, self));
    if (!a.accepted) {
      refused = std::move(a);
      break;
    }
    ++admitted;
  }
  BOOST_TEST(admitted > 64u); // the old fixed bound
  BOOST_TEST(!refused.accepted);
  BOOST_TEST(refused.reason.find("busy: the KV of the") != std::string::npos, refused.reason);
}

BOOST_AUTO_TEST_CASE(invalid_requests_are_refused_with_the_reason) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  auto empty = f.request(1, 0, 5, self);
  BOOST_TEST(f.submit(self, empty).reason.find("empty prompt") != std::string::npos);
  auto bad = f.request(2, 3, 5, self);
  bad.prompt[1] = 999;
  BOOST_TEST(f.submit(self, bad).reason.find("token 999") != std::string::npos);
  BOOST_REQUIRE(f.submit(self, f.request(3, 3, 50, self)).accepted);
  BOOST_TEST(f.submit(self, f.request(3, 3, 5, self)).reason.find("already") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_parked_sequence_keeps_its_kv_and_resumes_with_appended_tokens) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  BOOST_REQUIRE(f.submit(self, f.request(1, 16, 4, self)).accepted);
  auto first = f.collect(self, 1);
  BOOST_TEST(tokens_of(first[1]).size() == 4u);
  self->send(f.device, triad::park_atom::value, triad::seq_id{1});
  auto parked = f.stats(self);
  BOOST_TEST(parked.parked == 1u);
  BOOST_TEST(parked.kv_pages_used > 0u);
  // A tool result arrives: appended, prefilled incrementally, generation goes on.
  f.resume_with_tool_result(self, 1);
}

BOOST_AUTO_TEST_CASE(a_stop_token_parks_the_sequence_when_the_request_asks) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  for (bool park : {false, true}) {
    auto seq = triad::seq_id{park ? 2u : 1u};
    auto r = f.request(seq, 16, 50, self);
    r.forced = {'a', 'b', triad::tokenizer::tool_call_end};
    r.stop = {triad::tokenizer::tool_call_end};
    r.park_on_stop = park;
    BOOST_REQUIRE(f.submit(self, std::move(r)).accepted);
    auto events = f.collect(self, 1);
    BOOST_TEST(tokens_of(events[seq]).size() == 3u);
    BOOST_TEST(events[seq].back().kind == triad::device_event::done);
    // Ended at the stop token: parked (its KV kept for a resume) only when asked.
    BOOST_TEST(f.stats(self).parked == (park ? 1u : 0u));
  }
  // The parked sequence resumes with a tool result; no park message was sent.
  f.resume_with_tool_result(self, 2);
}

// Bytes of one KV page of the tiny model on a cpu backend (a device's budget in pages).
std::uint64_t tiny_page_bytes() {
  auto probe = triad::cpu_backend::create([] {
    triad::cpu_backend_options p;
    p.shape = *triad::model_preset("tiny");
    p.kv_budget_bytes = 1 << 20;
    return p;
  }());
  BOOST_REQUIRE(probe.has_value());
  return (*probe)->kv().page_bytes;
}

BOOST_AUTO_TEST_CASE(memory_pressure_preempts_and_every_sequence_still_completes) {
  triad::device_options o;
  o.step_token_budget = 64;
  // Room for 6 pages of 16 tokens: three sequences of 40 tokens cannot all stay resident.
  device_fixture f{o, 6 * tiny_page_bytes()};
  caf::scoped_actor self{f.dom->system()};
  for (triad::seq_id id : {1, 2, 3})
    BOOST_REQUIRE(f.submit(self, f.request(id, 30, 10, self)).accepted);
  auto events = f.collect(self, 3);
  std::size_t preempted = 0;
  for (triad::seq_id id : {1, 2, 3}) {
    BOOST_TEST(tokens_of(events[id]).size() == 10u, "sequence " << id);
    auto dones = std::count_if(events[id].begin(), events[id].end(),
                               [](const auto& e) { return e.kind == triad::device_event::done; });
    BOOST_TEST(dones == 1, "sequence " << id);
    for (const auto& e : events[id]) {
      preempted += e.kind == triad::device_event::preempted;
      BOOST_TEST(e.kind != triad::device_event::failed, e.message);
    }
  }
  BOOST_TEST(preempted > 0u);
  // Finished sequences may lose their (kept) KV after the last done arrived.
  BOOST_TEST(f.stats(self).preemptions >= preempted);
}

BOOST_AUTO_TEST_CASE(a_prompt_whose_kv_does_not_fit_beside_the_others_waits_busy) {
  device_fixture f{triad::device_options{}, 6 * tiny_page_bytes()}; // 6 pages of 16 tokens
  caf::scoped_actor self{f.dom->system()};
  BOOST_REQUIRE(f.submit(self, f.request(1, 60, 2, self)).accepted); // 4 pages
  // 3 more pages would push sequence 1 out to be recomputed: this one waits instead.
  auto second = f.submit(self, f.request(2, 40, 2, self));
  BOOST_TEST(!second.accepted);
  BOOST_TEST((second.code == triad::errc::busy));
  BOOST_TEST(second.reason.find("1 unfinished sequences") != std::string::npos, second.reason);
  BOOST_TEST(second.reason.find("need 7 pages of its 6") != std::string::npos, second.reason);
  f.collect(self, 1);
  self->send(f.device, triad::free_atom::value, triad::seq_id{1});
  // Alone, a prompt comes in whatever it needs (one larger than the device is refused by the
  // planner, with its reason).
  BOOST_TEST(f.submit(self, f.request(2, 40, 2, self)).accepted);
}

BOOST_AUTO_TEST_CASE(device_metrics_are_exported) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  BOOST_REQUIRE(f.submit(self, f.request(1, 20, 3, self)).accepted);
  f.collect(self, 1);
  f.stats(self); // the actor has processed everything up to here
  auto text = f.metrics.render();
  BOOST_TEST(text.find("triad_device_steps_total{device=\"device\"} 3") != std::string::npos, text);
  BOOST_TEST(text.find("triad_device_step_seconds_bucket") != std::string::npos);
  // The cpu backend does not model its steps: no point in the OI/CF plane.
  BOOST_TEST(text.find("triad_device_step_operational_intensity_count{device=\"device\"} 0") !=
                 std::string::npos,
             text);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(device_transfer)

// Prefill on one device, move the KV, decode on another: the tokens equal those of one device
// doing both.
// Seq 1 (24 prompt tokens, 8 new) on a prefill device and then, by its KV, on a decode device.
struct prefill_then_decode {
  // The tokens it gets on one device alone: what the hand-over must reproduce.
  std::vector<triad::token> reference() {
    device_fixture f;
    caf::scoped_actor self{f.dom->system()};
    BOOST_REQUIRE(f.submit(self, f.request(1, 24, 8, self)).accepted);
    return tokens_of(f.collect(self, 1)[1]);
  }
  // Imports `blob` with the prompt and the prefill device's `first` token into the decode
  // device; returns `first` and the tokens decoded there.
  // Runs seq 1 on the prefill device, moving out when done; returns its events (the last one
  // done, with the KV).
  std::vector<triad::device_event> prefill_moving_out(caf::scoped_actor& self) {
    auto req = pre.request(1, 24, 8, self);
    req.move_out_when_done = true;
    BOOST_REQUIRE(pre.submit(self, req).accepted);
    auto events = pre.collect(self, 1)[1];
    BOOST_REQUIRE(!events.empty());
    BOOST_REQUIRE_EQUAL(tokens_of(events).size(), 1u); // a prefill device stops after one
    return events;
  }
  // `Blob`: a kv_blob, or a shared_ptr to one (imported without a copy).
  template<class Blob>
  std::vector<triad::token> decode(caf::scoped_actor& self, const Blob& blob, triad::token first) {
    auto cont = dec.request(1, 24, 7, self);
    cont.prompt.push_back(first);
    triad::admission a;
    self->request(dec.device, caf::infinite, triad::import_atom::value, blob, cont)
        .receive([&](triad::admission& x) { a = x; },
                 [&](caf::error&) { BOOST_FAIL("no answer"); });
    BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
    auto rest = tokens_of(dec.collect(self, 1)[1]);
    std::vector<triad::token> joined{first};
    joined.insert(joined.end(), rest.begin(), rest.end());
    return joined;
  }
  static triad::device_options role(std::string name, triad::device_role r) {
    triad::device_options o;
    o.name = std::move(name);
    o.role = r;
    return o;
  }
  explicit prefill_then_decode(triad::device_options decode = role("decode",
                                                                   triad::device_role::decode))
      : dec{std::move(decode)} {}
  device_fixture pre{role("prefill", triad::device_role::prefill)};
  device_fixture dec;
};

// A stand-in for a cluster node's KV fetcher (device_options::kv_fetcher), in a system of its
// own: answers each fetch with `bytes` (none: fails, as when the holder is gone), counting them.
struct fake_fetcher {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<std::vector<std::byte>> bytes = std::make_shared<std::vector<std::byte>>();
  std::shared_ptr<std::atomic<int>> fetches = std::make_shared<std::atomic<int>>(0);
  caf::actor actor = sys.spawn([b = bytes, n = fetches]() -> caf::behavior {
    return {[b, n](triad::kv_fetch_atom, triad::kv_blob& blob) -> caf::result<triad::kv_blob> {
      ++*n;
      if (b->empty())
        return caf::make_error(caf::sec::runtime_error, "the holder no longer has it");
      blob.bytes = *b;
      blob.held = {};
      return std::move(blob);
    }};
  });
  ~fake_fetcher() { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); }
  // Decode options whose fetcher this is.
  triad::device_options decode_options() const {
    auto o = prefill_then_decode::role("decode", triad::device_role::decode);
    o.kv_fetcher = actor.address();
    return o;
  }
  // `kv`'s reference as another node would hold it: its bytes stay with the fetcher.
  triad::kv_blob held(triad::kv_blob kv) const {
    *bytes = std::move(kv.bytes);
    kv.bytes.clear();
    kv.held = {"127.0.0.1:9", {7}, {bytes->size()}, {0}};
    return kv;
  }
};

BOOST_AUTO_TEST_CASE(kv_exported_from_a_prefill_device_decodes_on_another) {
  prefill_then_decode p;
  auto reference = p.reference();
  caf::scoped_actor self{p.pre.dom->system()};
  BOOST_REQUIRE(p.pre.submit(self, p.pre.request(1, 24, 8, self)).accepted);
  auto first = tokens_of(p.pre.collect(self, 1)[1]);
  BOOST_REQUIRE_EQUAL(first.size(), 1u); // a prefill device stops after the first token
  triad::kv_blob blob;
  self->request(p.pre.device, caf::infinite, triad::export_atom::value, triad::seq_id{1})
      .receive([&](triad::kv_blob& b) { blob = std::move(b); },
               [&](caf::error& e) { BOOST_FAIL("export failed: " << to_string(e)); });
  BOOST_TEST(blob.tokens == 24u);
  self->send(p.pre.device, triad::free_atom::value, triad::seq_id{1});
  BOOST_TEST(p.decode(self, blob, first[0]) == reference);
}

BOOST_AUTO_TEST_CASE(a_sequence_moving_out_when_done_hands_its_kv_over_with_done_and_leaves) {
  prefill_then_decode p;
  auto reference = p.reference();
  caf::scoped_actor self{p.pre.dom->system()};
  auto events = p.prefill_moving_out(self);
  auto& done = events.back();
  BOOST_REQUIRE(done.kind == triad::device_event::done);
  BOOST_TEST(done.message == "length");
  BOOST_TEST(done.kv.tokens == 24u);
  BOOST_REQUIRE(!done.kv.bytes.empty());
  auto first = tokens_of(events);
  // The sequence is gone from the prefill device: nothing held, nothing left to export.
  BOOST_TEST(p.pre.stats(self).sequences == 0u);
  self->request(p.pre.device, caf::infinite, triad::export_atom::value, triad::seq_id{1})
      .receive([](triad::kv_blob&) { BOOST_FAIL("the sequence is still there"); },
               [](caf::error&) {});
  // Its KV decodes on another device as an exported one does.
  BOOST_TEST(p.decode(self, done.kv, first[0]) == reference);
}

// A prefill device's hand-off held by another node (the fake fetcher's), and a decode device
// that fetches through that fetcher.
struct held_hand_off {
  fake_fetcher fetcher;
  prefill_then_decode p{fetcher.decode_options()};
  std::vector<triad::token> reference = p.reference();
  caf::scoped_actor self{p.pre.dom->system()};
  std::vector<triad::device_event> events = p.prefill_moving_out(self);
  triad::token first = tokens_of(events).at(0);
  triad::kv_blob ref = fetcher.held(std::move(events.back().kv));
};

BOOST_AUTO_TEST_CASE(kv_held_on_another_node_is_fetched_through_the_fetcher_then_imported) {
  held_hand_off h;
  BOOST_TEST(h.p.decode(h.self, h.ref, h.first) == h.reference);
  BOOST_TEST(h.fetcher.fetches->load() == 1);
}

BOOST_AUTO_TEST_CASE(an_import_whose_kv_was_not_fetched_computes_its_prompt) {
  held_hand_off h;
  h.fetcher.bytes->clear();                                      // the holder is gone
  BOOST_TEST(h.p.decode(h.self, h.ref, h.first) == h.reference); // the same answer, computed
  BOOST_TEST(h.fetcher.fetches->load() == 1);
  BOOST_TEST(h.p.dec.stats(h.self).tokens >= 25u); // the prompt's 25 tokens computed here
}

BOOST_AUTO_TEST_CASE(held_kv_without_a_fetcher_is_refused_naming_its_holder) {
  fake_fetcher fetcher; // not the device's
  prefill_then_decode p;
  caf::scoped_actor self{p.pre.dom->system()};
  auto events = p.prefill_moving_out(self);
  auto cont = p.dec.request(1, 24, 7, self);
  cont.prompt.push_back(tokens_of(events)[0]);
  triad::admission a;
  self->request(p.dec.device, caf::infinite, triad::import_atom::value,
                fetcher.held(std::move(events.back().kv)), cont)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_TEST(!a.accepted);
  BOOST_TEST((a.code == triad::errc::invalid_argument));
  BOOST_TEST(a.reason.find("held at 127.0.0.1:9") != std::string::npos, a.reason);
}

// A stand-in for a cluster node's fetcher of kept blocks another node's store keeps (a
// demotion's, kv_fetch_kept_atom): answers with `pages` (none: fails, as when that node is
// gone), counting the fetches and keeping what it was asked for.
struct fake_kept_fetcher {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<std::vector<triad::kv_page>> pages =
      std::make_shared<std::vector<triad::kv_page>>();
  std::shared_ptr<std::atomic<int>> fetches = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::string> asked_wire = std::make_shared<std::string>();
  std::shared_ptr<std::uint64_t> asked_store = std::make_shared<std::uint64_t>(~0ull);
  caf::actor actor = sys.spawn([p = pages, n = fetches, w = asked_wire,
                                st = asked_store]() -> caf::behavior {
    return {[p, n, w, st](triad::kv_fetch_kept_atom, std::string& wire, std::uint64_t store,
                          std::vector<std::uint64_t>&,
                          std::vector<triad::token>&) -> caf::result<std::vector<triad::kv_page>> {
              ++*n;
              *w = wire;
              *st = store;
              if (p->empty())
                return caf::make_error(caf::sec::runtime_error, "that node is gone");
              return *p;
            },
            // A prompt's pages another node's store holds (the router's hint): pages `first`..
            [p, n, w, st](triad::kv_fetch_prefix_atom, std::string& wire,
                          std::vector<triad::token>&, std::uint64_t first,
                          std::uint64_t count) -> caf::result<std::vector<triad::kv_page>> {
              ++*n;
              *w = wire;
              *st = first << 32 | count;
              if (p->empty())
                return caf::make_error(caf::sec::runtime_error, "that node is gone");
              return *p;
            }};
  });
  ~fake_kept_fetcher() { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); }
};

// A device that computed a 40-token prompt and gives the pages of its first 32 tokens (as
// another node's store would keep them), a device whose fetcher has them, and a demoted
// sequence's order for the second naming them as kept in another store.
struct kept_elsewhere {
  fake_kept_fetcher fetcher;
  device_fixture first;
  device_fixture second;
  explicit kept_elsewhere(bool prefix_cache = true)
      : second{[this, prefix_cache] {
        triad::device_options o;
        o.kv_fetcher = fetcher.actor.address();
        o.prefix_cache = prefix_cache;
        return o;
      }()} {
    init();
  }
  caf::scoped_actor self{first.dom->system()};
  std::vector<triad::token> reference;
  triad::generate_request order;
  void init() {
    auto req = first.request(1, 40, 6, self);
    const auto prompt = req.prompt;
    BOOST_REQUIRE(first.submit(self, req).accepted);
    reference = tokens_of(first.collect(self, 1)[1]);
    self->request(first.device, caf::infinite, triad::kv_share_atom::value, prompt,
                  std::uint64_t{0}, std::uint64_t{2})
        .receive([&](std::vector<triad::kv_page>& p) { *fetcher.pages = std::move(p); },
                 [&](caf::error& e) { BOOST_FAIL("share: " << to_string(e)); });
    BOOST_REQUIRE_EQUAL(fetcher.pages->size(), 2u);
    order = second.request(1, 40, 6, self);
    order.kept_blocks = {101, 102};
    order.kept_tokens = 32;
    order.kept_store = 0x5eed; // not this device's (it has no store)
    order.kept_wire = "127.0.0.1:9";
  }
};

// A demoted sequence whose kept blocks are in another node's store: the device fetches them
// through its node's fetcher from where that node serves them, attaches them and computes only
// the rest; the same answer as where they were computed.
BOOST_AUTO_TEST_CASE(kept_blocks_of_another_nodes_store_are_fetched_through_the_fetcher) {
  kept_elsewhere k;
  BOOST_REQUIRE(k.second.submit(k.self, k.order).accepted);
  BOOST_TEST(tokens_of(k.second.collect(k.self, 1)[1]) == k.reference);
  BOOST_TEST(k.fetcher.fetches->load() == 1);
  BOOST_TEST(*k.fetcher.asked_wire == "127.0.0.1:9");
  BOOST_TEST(k.second.stats(k.self).tier_tokens == 32u); // came with the two pages
}

// When they cannot be fetched (that node is gone), the tokens are computed: the same answer.
BOOST_AUTO_TEST_CASE(kept_blocks_that_cannot_be_fetched_are_computed) {
  kept_elsewhere k;
  k.fetcher.pages->clear();
  BOOST_REQUIRE(k.second.submit(k.self, k.order).accepted);
  BOOST_TEST(tokens_of(k.second.collect(k.self, 1)[1]) == k.reference);
  BOOST_TEST(k.fetcher.fetches->load() == 1);
  BOOST_TEST(k.second.stats(k.self).tier_tokens == 0u);
}

// A prefill node's hand-off held as pages of its store (kv_held::page_tokens): the import is
// admitted as its prompt, the pages fetched as kept blocks of store 0 from the holder and
// attached, the rest computed; the same answer as one device gives. `prefix_cache`: the decode
// device's (a hand-off needs none).
void a_held_streams_pages_are_imported(bool prefix_cache) {
  kept_elsewhere k{prefix_cache};
  triad::kv_blob ref;
  ref.seq = 1;
  ref.tokens = 32;
  ref.held.wire = "127.0.0.1:9";
  ref.held.blocks = {101, 102};
  ref.held.sizes = {k.fetcher.pages->at(0).bytes.size(), k.fetcher.pages->at(1).bytes.size()};
  ref.held.page_tokens = 16;
  triad::admission a;
  k.self->request(k.second.device, caf::infinite, triad::import_atom::value, ref, k.order)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
  BOOST_TEST(tokens_of(k.second.collect(k.self, 1)[1]) == k.reference);
  BOOST_TEST(k.fetcher.fetches->load() == 1);
  BOOST_TEST(*k.fetcher.asked_wire == "127.0.0.1:9");
  BOOST_TEST(*k.fetcher.asked_store == 0u); // the holder's held streams, not a store's blocks
  const auto st = k.second.stats(k.self);
  BOOST_TEST(st.tier_tokens == 32u); // attached, not computed
  BOOST_TEST(st.tokens == 8u + 5u);  // the prompt's last 8, then a step per token but the last
  const auto text = k.second.metrics.render();
  BOOST_TEST(text.find("triad_device_kv_handoff_fetched_tokens_total{device=\"device\"} 32") !=
                 std::string::npos,
             text);
}

BOOST_AUTO_TEST_CASE(a_held_streams_pages_are_fetched_and_attached_at_import) {
  a_held_streams_pages_are_imported(true);
}

BOOST_AUTO_TEST_CASE(a_held_streams_pages_are_attached_without_a_prefix_cache) {
  a_held_streams_pages_are_imported(false);
}

// An import whose prompt does not reach past its held pages is refused, naming both counts.
BOOST_AUTO_TEST_CASE(an_import_of_held_pages_without_a_token_past_them_is_refused) {
  kept_elsewhere k;
  triad::kv_blob ref;
  ref.tokens = 40;
  ref.held = {"127.0.0.1:9", {101, 102, 103}, {1, 1, 1}, {}, 16};
  triad::admission a;
  k.self->request(k.second.device, caf::infinite, triad::import_atom::value, ref, k.order)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_TEST(!a.accepted);
  BOOST_TEST((a.code == triad::errc::invalid_argument));
  BOOST_TEST(a.reason.find("has 40 tokens; its KV covers 40") != std::string::npos, a.reason);
  BOOST_TEST(k.fetcher.fetches->load() == 0);
}

// A prompt whose first pages another node's store holds (the router's hint, prefix_wire): a
// device that holds none of them fetches both pages through its node's fetcher, attaches them
// and computes the rest; the same answer as where they were computed.
// The 40-token prompt's order for `k`'s second device, naming another node whose store holds
// its first two pages.
triad::generate_request hinted_order(kept_elsewhere& k) {
  auto order = k.second.request(1, 40, 6, k.self);
  order.prefix_wire = "127.0.0.1:9";
  order.prefix_pages = 2;
  return order;
}

BOOST_AUTO_TEST_CASE(a_prompts_pages_in_another_nodes_store_are_fetched_by_the_routers_hint) {
  kept_elsewhere k;
  BOOST_REQUIRE(k.second.submit(k.self, hinted_order(k)).accepted);
  BOOST_TEST(tokens_of(k.second.collect(k.self, 1)[1]) == k.reference);
  BOOST_TEST(k.fetcher.fetches->load() == 1);
  BOOST_TEST(*k.fetcher.asked_wire == "127.0.0.1:9");
  BOOST_TEST(*k.fetcher.asked_store == (0ull << 32 | 2u)); // pages 0 and 1
  BOOST_TEST(k.second.stats(k.self).tier_tokens == 32u);
  const auto text = k.second.metrics.render();
  BOOST_TEST(text.find("triad_device_kv_remote_prefix_tokens_total{device=\"device\"} 32") !=
                 std::string::npos,
             text);
}

// When that node has none of them (or is gone), the prompt is computed: the same answer.
BOOST_AUTO_TEST_CASE(a_prompts_pages_that_another_node_does_not_give_are_computed) {
  kept_elsewhere k;
  k.fetcher.pages->clear();
  BOOST_REQUIRE(k.second.submit(k.self, hinted_order(k)).accepted);
  BOOST_TEST(tokens_of(k.second.collect(k.self, 1)[1]) == k.reference);
  BOOST_TEST(k.fetcher.fetches->load() == 1);
  BOOST_TEST(k.second.stats(k.self).tier_tokens == 0u);
}

// Without a place to fetch them from, nothing is asked: the tokens are computed.
BOOST_AUTO_TEST_CASE(kept_blocks_of_another_store_without_a_wire_are_computed) {
  kept_elsewhere k;
  k.order.kept_wire.clear();
  BOOST_REQUIRE(k.second.submit(k.self, k.order).accepted);
  BOOST_TEST(tokens_of(k.second.collect(k.self, 1)[1]) == k.reference);
  BOOST_TEST(k.fetcher.fetches->load() == 0);
}

BOOST_AUTO_TEST_CASE(a_full_device_refuses_an_import_of_held_kv_before_fetching_it) {
  fake_fetcher fetcher;
  auto o = fetcher.decode_options();
  o.max_sequences = 1;
  prefill_then_decode p{o};
  caf::scoped_actor self{p.pre.dom->system()};
  auto events = p.prefill_moving_out(self);
  auto ref = fetcher.held(std::move(events.back().kv));
  BOOST_REQUIRE(p.dec.submit(self, p.dec.request(5, 8, 1000, self)).accepted); // fills it
  auto cont = p.dec.request(1, 24, 7, self);
  cont.prompt.push_back(tokens_of(events)[0]);
  triad::admission a;
  self->request(p.dec.device, caf::infinite, triad::import_atom::value, ref, cont)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_TEST(!a.accepted);
  BOOST_TEST((a.code == triad::errc::busy));
  // The KV stays with its holder for the device the request tries next.
  BOOST_TEST(fetcher.fetches->load() == 0);
  self->send(p.dec.device, triad::free_atom::value, triad::seq_id{5});
}

BOOST_AUTO_TEST_CASE(a_shared_kv_blob_is_imported_without_a_copy_and_let_go_after) {
  prefill_then_decode p;
  auto reference = p.reference();
  caf::scoped_actor self{p.pre.dom->system()};
  auto events = p.prefill_moving_out(self);
  auto first = tokens_of(events);
  auto blob = std::make_shared<const triad::kv_blob>(std::move(events.back().kv));
  auto bytes = blob->bytes; // what the holder keeps must not change
  BOOST_TEST(p.decode(self, blob, first[0]) == reference);
  BOOST_TEST((blob->bytes == bytes));
  BOOST_TEST(blob.use_count() == 1); // the device let go of it once imported
}

// A backend whose first KV import answers exhausted: the pages the device counted free were
// taken after all (by the prefix cache's shared pages, say).
class import_starved_backend final : public triad::test::forwarding_backend {
public:
  using forwarding_backend::forwarding_backend;
  triad::expected<void> import_kv(triad::seq_id s, std::span<const std::byte> b) override {
    if (!refused_) {
      refused_ = true;
      return triad::make_error(triad::errc::exhausted, "injected: no KV pages");
    }
    return inner_->import_kv(s, b);
  }

private:
  bool refused_ = false;
};

BOOST_AUTO_TEST_CASE(an_import_refused_for_lack_of_pages_waits_for_a_victim_and_then_decodes) {
  prefill_then_decode p;
  auto reference = p.reference();
  device_fixture dec{prefill_then_decode::role("decode", triad::device_role::decode), 32ull << 20,
                     16, [](std::unique_ptr<triad::backend> inner) {
                       return std::make_unique<import_starved_backend>(std::move(inner));
                     }};
  caf::scoped_actor self{p.pre.dom->system()};
  auto events = p.prefill_moving_out(self);
  const auto first = tokens_of(events);
  // A sequence decoding on the decode device: the victim that gives up its KV (in the same
  // step job as the refused import, or done by then).
  BOOST_REQUIRE(dec.submit(self, dec.request(2, 30, 40, self)).accepted);
  auto cont = dec.request(1, 24, 7, self);
  cont.prompt.push_back(first[0]);
  triad::admission a;
  self->request(dec.device, caf::infinite, triad::import_atom::value, events.back().kv, cont)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
  auto all = dec.collect(self, 2);
  for (const auto& [seq, list] : all)
    for (const auto& e : list)
      BOOST_TEST(e.kind != triad::device_event::failed, "sequence " << seq << ": " << e.message);
  std::vector<triad::token> joined{first[0]};
  const auto rest = tokens_of(all[1]);
  joined.insert(joined.end(), rest.begin(), rest.end());
  BOOST_TEST(joined == reference, boost::test_tools::per_element());
  BOOST_TEST(tokens_of(all[2]).size() == 40u);
  BOOST_TEST(dec.stats(self).preemptions >= 1u);
}

BOOST_AUTO_TEST_CASE(a_burst_of_exports_past_the_driver_queue_is_answered_in_full) {
  // A driver queue of one job: the exports wait in the actor's backlog instead of failing.
  triad::device_options o;
  o.queue_capacity = 1;
  device_fixture f{o};
  caf::scoped_actor self{f.dom->system()};
  const std::size_t n = 6;
  for (triad::seq_id s = 1; s <= n; ++s)
    BOOST_REQUIRE(f.submit(self, f.request(s, 20, 2, self)).accepted);
  f.collect(self, n);
  std::vector<
      caf::response_handle<caf::blocking_actor, caf::detail::type_list<triad::kv_blob>, true>>
      pending;
  for (triad::seq_id s = 1; s <= n; ++s)
    pending.push_back(self->request(f.device, caf::infinite, triad::export_atom::value, s));
  std::size_t answered = 0;
  for (auto& p : pending)
    p.receive(
        [&](triad::kv_blob& b) {
          BOOST_TEST(b.tokens == 21u); // the prompt and the first token (the second was last)
          ++answered;
        },
        [&](caf::error& e) { BOOST_FAIL("export failed: " << to_string(e)); });
  BOOST_TEST(answered == n);
}

BOOST_AUTO_TEST_CASE(an_import_without_a_token_past_the_kv_is_refused) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  triad::kv_blob blob;
  blob.tokens = 5;
  auto req = f.request(3, 5, 4, self);
  triad::admission a;
  self->request(f.device, caf::infinite, triad::import_atom::value, blob, req)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_TEST(!a.accepted);
  BOOST_TEST(a.reason.find("at least one more") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(damaged_kv_bytes_fail_the_sequence_with_the_reason) {
  device_fixture f;
  caf::scoped_actor self{f.dom->system()};
  triad::kv_blob blob;
  blob.tokens = 4;
  blob.bytes.assign(100, std::byte{0});
  auto req = f.request(4, 6, 4, self);
  triad::admission a;
  self->request(f.device, caf::infinite, triad::import_atom::value, blob, req)
      .receive([&](triad::admission& x) { a = x; }, [&](caf::error&) { BOOST_FAIL("no answer"); });
  BOOST_REQUIRE(a.accepted);
  auto events = f.collect(self, 1);
  BOOST_TEST(events[4].back().kind == triad::device_event::failed);
  BOOST_TEST(events[4].back().message.find("KV import failed") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_free_ends_the_burst_its_sequence_is_in) {
  gated_device g;
  std::size_t tokens = 0;
  {
    caf::scoped_actor self{g.dom->system()};
    triad::admission a;
    self->request(g.device, caf::infinite, triad::generate_atom::value,
                  make_request(1, 8, 60, caf::actor{self}))
        .receive([&](triad::admission& x) { a = x; }, [](caf::error&) {});
    BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
    self->receive([&](triad::device_event& e) { tokens += e.tokens.size(); },
                  caf::after(30s) >> [] { BOOST_FAIL("no first token within 30 s"); });
    // Let go of the sequence while its burst waits at its second step, then open the gate for
    // every step it could still take: the burst ends after the step it is in.
    self->send(g.device, triad::free_atom::value, triad::seq_id{1});
    auto stats = [&] { // from self, so it is answered after the free
      triad::device_stats st;
      self->request(g.device, caf::infinite, triad::stats_atom::value)
          .receive([&](triad::device_stats& x) { st = x; }, [](caf::error&) {});
      return st;
    };
    stats();
    g.gate->release(60);
    for (bool more = true; more;)
      self->receive([&](triad::device_event& e) { tokens += e.tokens.size(); },
                    caf::after(1s) >> [&] { more = false; });
    auto st = stats();
    BOOST_TEST(st.sequences == 0u);
    BOOST_TEST(st.steps <= 3u, "the burst ran " << st.steps << " steps after the free");
  }
  BOOST_TEST(tokens <= 3u);
}

BOOST_AUTO_TEST_CASE(two_streams_get_each_token_before_the_next_step_runs) {
  gated_device g;
  {
    caf::scoped_actor self{g.dom->system()};
    // The second starts a step later at most, and so ends with the first.
    for (auto [seq, max_new] : {std::pair<triad::seq_id, std::uint32_t>{1, 6}, {2, 5}}) {
      triad::admission a;
      self->request(g.device, caf::infinite, triad::generate_atom::value,
                    make_request(seq, 8, max_new, caf::actor{self}))
          .receive([&](triad::admission& x) { a = x; }, [](caf::error&) {});
      BOOST_REQUIRE_MESSAGE(a.accepted, a.reason);
    }
    std::map<triad::seq_id, std::size_t> tokens;
    std::size_t done = 0;
    while (done < 2) {
      bool got = false;
      self->receive(
          [&](triad::device_event& e) {
            got = true;
            if (e.kind == triad::device_event::done || e.kind == triad::device_event::failed) {
              ++done;
              return;
            }
            tokens[e.seq] += e.tokens.size();
            if (e.seq != 1)
              return;
            // The first stream's token of a step lets the next step run: the second stream's
            // token of the step before came already.
            BOOST_TEST(tokens[2] + 2 >= tokens[1],
                       "first " << tokens[1] << ", second " << tokens[2]);
            g.gate->release();
          },
          caf::after(30s) >> [] {});
      BOOST_REQUIRE_MESSAGE(got, "no device event within 30 s");
    }
    BOOST_TEST(tokens[1] == 6u);
    BOOST_TEST(tokens[2] == 5u);
    BOOST_TEST(!g.late->load()); // no step waited for a token still held back
  }
}

BOOST_AUTO_TEST_SUITE_END()
