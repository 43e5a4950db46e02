#include "devices/device.hpp"

#include "devices/detail/step_job.hpp"
#include "devices/detail/step_plan.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <unordered_set>
#include <utility>

#include <cstdio>
#include <cstring>
#include <ctime>

#include <caf/all.hpp>

namespace triad {

namespace {

// How long an import waits for its KV from another node (kv_held) before its prompt is computed
// instead: within the minute a cluster's gateway waits for a device's answer, longer than the
// fetcher's own tries (three, none begun 30 s after the first) mostly take.
constexpr std::chrono::seconds kv_fetch_timeout{50};
// How long a prompt's pages fetched from another node's store (the router's hint) may take
// before they are looked up on this node instead: they only spare computing them.
constexpr std::chrono::seconds kv_prefix_timeout{10};

// Per-device metrics, looked up once.
struct device_metrics {
  gauge* queue = nullptr;
  gauge* running = nullptr;
  gauge* parked = nullptr;
  gauge* kv_pages = nullptr;
  gauge* kv_budget = nullptr;
  counter* steps = nullptr;
  counter* tokens = nullptr;
  counter* busy = nullptr;
  histogram* batch = nullptr;
  histogram* step_tokens = nullptr;
  histogram* step_seconds = nullptr;
  histogram* step_intensity = nullptr;
  histogram* step_footprint = nullptr;
  counter* cached = nullptr;
  counter* tier_tokens = nullptr;
  counter* peer_tokens = nullptr;
  counter* lent_pages = nullptr;
  counter* spilled = nullptr;
  counter* streamed_out = nullptr;
  counter* streamed_in = nullptr;
  counter* stream_recomputes = nullptr;
  counter* kept_elsewhere = nullptr;
  counter* kept_fetched = nullptr;
  counter* handoff_fetched = nullptr;
  counter* remote_prefix = nullptr;

  void attach(metrics_registry& r, const std::string& name) {
    labels l{{"device", name}};
    auto take = [](auto result) { return result ? *result : nullptr; };
    queue = take(r.add_gauge("triad_device_queue_length", "sequences waiting for prefill", l));
    running = take(r.add_gauge("triad_device_running", "sequences decoding", l));
    parked = take(r.add_gauge("triad_device_parked",
                              "sequences parked (their KV kept across a tool call)", l));
    kv_pages = take(r.add_gauge("triad_device_kv_pages_used", "KV pages held", l));
    kv_budget = take(r.add_gauge("triad_device_kv_budget_bytes",
                                 "KV bytes the device's own memory may hold (its tier)", l));
    steps = take(r.add_counter("triad_device_steps_total", "steps run", l));
    tokens = take(r.add_counter("triad_device_tokens_total", "tokens computed", l));
    busy = take(r.add_counter("triad_device_busy_seconds_total", "driver time in steps", l));
    batch = take(r.add_histogram("triad_device_batch_size", "sequences per step",
                                 {1, 2, 4, 8, 16, 32, 64, 128}, l));
    step_tokens = take(r.add_histogram("triad_device_step_tokens", "tokens per step",
                                       {1, 4, 16, 64, 256, 1024, 4096}, l));
    cached = take(r.add_counter("triad_device_prefix_cached_tokens_total",
                                "prompt tokens whose KV came from the prefix cache", l));
    tier_tokens = take(r.add_counter("triad_device_kv_tier_tokens_total",
                                     "prompt tokens whose KV pages came from the KV store "
                                     "or another device's memory",
                                     l));
    peer_tokens = take(
        r.add_counter("triad_device_kv_peer_tokens_total",
                      "prompt tokens whose KV pages were copied from another device's memory", l));
    lent_pages = take(r.add_counter("triad_device_kv_lent_pages_total",
                                    "prefix cache pages copied out for another device", l));
    spilled = take(r.add_counter("triad_device_kv_spilled_pages_total",
                                 "evicted prefix pages handed to the KV store", l));
    streamed_out = take(r.add_counter("triad_device_kv_streamed_out_total",
                                      "sequences whose KV left through the KV store's blocks", l));
    streamed_in = take(r.add_counter("triad_device_kv_streamed_in_total",
                                     "sequences whose KV came through the KV store's blocks", l));
    stream_recomputes =
        take(r.add_counter("triad_device_kv_stream_recomputes_total",
                           "KV streams found damaged or broken off; their tokens computed", l));
    kept_elsewhere = take(r.add_counter(
        "triad_device_kv_kept_elsewhere_total",
        "demoted sequences resumed here whose kept blocks were in another node's KV store and "
        "could not be fetched from it: their tokens computed",
        l));
    kept_fetched = take(r.add_counter(
        "triad_device_kv_kept_fetched_tokens_total",
        "prompt tokens whose KV came from kept blocks of another node's KV store (a demotion's, "
        "or a hand-off's pages: triad_device_kv_handoff_fetched_tokens_total), fetched over "
        "the KV wire",
        l));
    remote_prefix = take(r.add_counter(
        "triad_device_kv_remote_prefix_tokens_total",
        "prompt tokens whose KV came from another node's KV store (the router's hint that its "
        "device was sent them), fetched over the KV wire",
        l));
    handoff_fetched = take(r.add_counter(
        "triad_device_kv_handoff_fetched_tokens_total",
        "imported tokens whose KV came as pages of a prefill node's KV store (its hand-off's "
        "stream), fetched over the KV wire",
        l));
    step_seconds = take(
        r.add_histogram("triad_device_step_seconds", "step time", default_duration_buckets(), l));
    // The OI/CF plane (arXiv 2601.22001): where each modelled step lies, against the device's
    // ridge point (peak FLOP/s over bandwidth) and its memory.
    step_intensity = take(r.add_histogram(
        "triad_device_step_operational_intensity",
        "FLOPs per byte of memory traffic of each step (sim devices: modelled; others: none)",
        {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}, l));
    step_footprint = take(r.add_histogram(
        "triad_device_step_capacity_footprint_bytes",
        "weights, activations and KV bytes each step needs resident (sim devices: modelled)",
        {1e8, 1e9, 1e10, 3e10, 1e11, 3e11, 1e12, 3e12}, l));
  }
};

class device_impl : public homed<device_actor::base> {
public:
  device_impl(caf::actor_config& cfg, std::shared_ptr<backend> be,
              std::unique_ptr<driver_thread> driver, device_options options)
      : homed(cfg)
      , backend_(std::move(be))
      , driver_(std::move(driver))
      , options_(std::move(options)) {
    if (options_.metrics != nullptr)
      metrics_.attach(*options_.metrics, options_.name);
    // The driver has run nothing yet, so reading the backend here is safe.
    kv_ = backend_->kv();
    if (metrics_.kv_budget != nullptr)
      metrics_.kv_budget->set(static_cast<double>(kv_.pages_total * kv_.page_bytes));
    if (options_.tier && options_.prefix_cache &&
        backend_->page_payload_bytes() == options_.tier->block_bytes() &&
        backend_->page_payload_bytes() != 0)
      tier_ = options_.tier;
    streams_ = tier_ && options_.stream_moves && !backend_->stream_groups().empty();
    // A burst in flight ends after its step, not at its window.
    attach_functor([driver = driver_.get(), interrupt = interrupt_](const caf::error&) {
      interrupt->store(true, std::memory_order_relaxed);
      driver->stop();
    });
  }

  // Tells the KV watchers the free pages when they moved a step from what they last heard, or
  // reached or left zero (see watch_kv_atom).
  void report_kv(bool always = false) {
    if (kv_watchers_.empty())
      return;
    const std::uint64_t total = kv_.pages_total;
    const std::uint64_t free = total > kv_.pages_used ? total - kv_.pages_used : 0;
    const std::uint64_t step = std::max<std::uint64_t>(1, total / 32);
    const auto moved = free > kv_reported_ ? free - kv_reported_ : kv_reported_ - free;
    const bool slower_or_faster =
        std::abs(decode_step_s_ - step_reported_s_) > 0.25 * std::max(step_reported_s_, 1e-9);
    if (!always && moved < step && (free == 0) == (kv_reported_ == 0) && !slower_or_faster)
      return;
    kv_reported_ = free;
    step_reported_s_ = decode_step_s_;
    for (const auto& w : kv_watchers_)
      caf::anon_send(w, kv_free_atom::value, address(), free, total, decode_step_s_);
  }

  // Sequences hold their requests' actors (sinks), export promises their callers and queued
  // jobs this actor: dropped at exit, so no request and this device keep each other alive
  // through a cycle (CAF frees an actor only when its last strong reference goes). LeakSanitizer
  // found one at a node's stop: device -> sequence -> request -> its context -> router -> device.
  void on_exit() override {
    for (auto& [key, promise] : exports_)
      promise.deliver(caf::make_error(caf::sec::request_receiver_down));
    exports_.clear();
    for (auto& [key, d] : demotions_)
      d.promise.deliver(caf::make_error(caf::sec::request_receiver_down));
    demotions_.clear();
    for (auto& [key, promise] : shares_)
      promise.deliver(std::vector<kv_page>{});
    shares_.clear();
    if (tier_index_ != kv_tier::no_device)
      tier_->leave(tier_index_); // its pages are no longer to be had
    tier_.reset();               // the node's store may stop before this object goes
    spare_job_.reset();          // its sinks
    seqs_.clear();
    backlog_.clear();
    owed_.clear();
    swap_demotions_.clear(); // their promises are in demotions_
    kv_watchers_.clear();
    // Imports whose KV is still being fetched: busy, so the request goes elsewhere.
    for (auto& [key, promise] : std::exchange(fetches_, {}))
      promise.deliver(admission{false, "device " + options_.name + " stopped", errc::busy});
  }

  behavior_type make_behavior() override {
    if (tier_)
      tier_index_ = tier_->join(caf::actor_cast<caf::actor>(this), options_.name);
    return {
        [this](generate_atom, generate_request& req) { return answer(admit(std::move(req))); },
        [this](park_atom, seq_id id) {
          interrupt_burst();
          if (auto* s = find(id))
            s->state = seq_state::parked;
        },
        [this](resume_atom, seq_id id, std::vector<token>& appended,
               std::shared_ptr<grammar::token_constraint>& constraint) {
          interrupt_burst();
          auto* s = find(id);
          if (s == nullptr)
            return;
          s->tokens.insert(s->tokens.end(), appended.begin(), appended.end());
          s->state = s->tier_answers_due > 0          ? seq_state::fetching // swapped out
                     : s->computed < s->tokens.size() ? seq_state::waiting
                                                      : seq_state::running;
          s->finished = false;
          if (s->computed == 0 && s->lookup) // preempted: its lookup covers the longer prompt
            s->chain = lookup_chain(s->tokens);
          // The grammar the answer to the result follows (none: free). Parked, no job of the
          // sequence is in flight: the plan is the actor's now.
          if (s->plan)
            s->plan->constraint = std::move(constraint);
          schedule();
        },
        [this](free_atom, seq_id id) { release(id); },
        [this](stats_atom) { return snapshot(); },
        [this](watch_kv_atom, caf::actor& watcher) {
          // One subscription a watcher (a remote device asks again each time its node rejoins).
          if (std::find(kv_watchers_.begin(), kv_watchers_.end(), watcher) == kv_watchers_.end())
            kv_watchers_.push_back(std::move(watcher));
          report_kv(true);
        },
        [this](device_retry_atom) {
          retry_pending_ = false;
          schedule();
        },
        [this](export_atom, seq_id id) { return export_kv(id, false); },
        [this](move_out_atom, seq_id id) { return export_kv(id, true); },
        [this](demote_atom, seq_id id, std::uint32_t keep_ms) { return demote(id, keep_ms); },
        [this](unpin_kept_atom, std::uint64_t store, std::vector<std::uint64_t>& blocks,
               std::uint64_t pin) {
          if (tier_ && tier_->store_id() == store)
            tier_->release(std::move(blocks), pin);
        },
        [this](demote_done_atom, std::uint64_t key, std::vector<kv_page>& pages) {
          auto it = demotions_.find(key);
          if (it == demotions_.end())
            return;
          if (pages.empty()) { // nothing to keep: the caller recomputes
            it->second.promise.deliver(kv_kept{});
            demotions_.erase(it);
            return;
          }
          tier_->keep(std::move(pages), std::chrono::milliseconds{it->second.keep_ms}, key,
                      caf::actor_cast<caf::actor>(this), it->second.trace);
        },
        [this](kv_stored_atom, std::uint64_t key, std::vector<std::uint64_t>& ids,
               std::uint64_t pin) {
          auto it = demotions_.find(key);
          if (it == demotions_.end())
            return;
          it->second.promise.deliver(
              kv_kept{std::move(ids), it->second.tokens, pin, tier_ ? tier_->store_id() : 0, {}});
          demotions_.erase(it);
        },
        [this](export_done_atom, std::uint64_t key, kv_blob& blob, std::string& error) {
          auto it = exports_.find(key);
          if (it == exports_.end())
            return;
          if (error.empty())
            it->second.deliver(std::move(blob));
          else
            it->second.deliver(caf::make_error(caf::sec::invalid_argument, std::move(error)));
          exports_.erase(it);
        },
        [this](import_atom, kv_blob& blob, generate_request& req) {
          return import_here(std::make_shared<const kv_blob>(std::move(blob)), std::move(req));
        },
        [this](import_atom, std::shared_ptr<const kv_blob>& blob, generate_request& req) {
          return import_here(std::move(blob), std::move(req));
        },
        [this](kv_fetched_atom, seq_id id, std::vector<kv_page>& pages) {
          fetched(id, std::move(pages));
        },
        [this](kv_leased_atom, seq_id id, std::shared_ptr<kv_stream>& stream) {
          // Else (gone, finished, or its prompt already computed) the stream gives its blocks
          // back: nothing would take it from the slot.
          auto* s = find(id);
          if (s == nullptr)
            return;
          if (s->stream_out && stream && !s->finished && s->generated == 0)
            s->stream_out->put(std::move(stream));
          tier_answered(*s);
        },
        [this](step_done_atom, std::shared_ptr<detail::step_job>& job) { on_step(std::move(job)); },
        [this](kv_share_atom, std::vector<token>& tokens, std::uint64_t first,
               std::uint64_t count) { return share(std::move(tokens), first, count); },
        [this](swap_done_atom, seq_id id, std::uint64_t key, std::vector<kv_page>& pages) {
          swapped(id, key, std::move(pages));
        },
        [this](share_done_atom, std::uint64_t key, std::vector<kv_page>& pages, bool failed) {
          auto it = shares_.find(key);
          if (it == shares_.end())
            return;
          if (failed) { // the asker computes them, or tries again: they are not gone
            it->second.deliver(
                caf::make_error(caf::sec::runtime_error,
                                "device " + options_.name + " could not copy the pages out"));
            shares_.erase(it);
            return;
          }
          stats_.lent_pages += pages.size();
          if (metrics_.lent_pages != nullptr)
            metrics_.lent_pages->inc(static_cast<double>(pages.size()));
          it->second.deliver(std::move(pages));
          shares_.erase(it);
        },
    };
  }

private:
  using seq_state = detail::seq_phase;

  struct sequence {
    generate_request req;
    std::vector<token> tokens; // prompt, generated and appended tokens
    std::size_t computed = 0;  // tokens whose KV the backend holds
    std::size_t cached = 0;    // of those, tokens attached from the prefix cache (whole pages)
    std::size_t stored = 0;    // of `cached`, those from the tier below (reported as stored)
    std::size_t shared = 0;    // of those, from the device's own cache (the rest: the tier's)
    bool lookup = false;       // look the prompt up in the prefix cache before computing it
    // Set when it looks up (a prompt, a demoted sequence back, a swapped one): the chain hashes
    // of its tokens' whole pages a lookup can attach (the first `shared` tokens' are those it
    // holds from the prefix cache once attached).
    std::vector<block_hash> chain;
    std::uint32_t generated = 0;
    seq_state state = seq_state::waiting;
    bool finished = false;
    std::shared_ptr<detail::sample_plan> plan; // how its tokens are chosen (on the driver)
    std::uint64_t admitted_order = 0;
    std::shared_ptr<const kv_blob> import; // importing: the KV to import with its first step
    // Pages of its prompt fetched from the tier below, attached with its prefix lookup.
    std::shared_ptr<const std::vector<kv_page>> fetched;
    std::uint64_t import_tokens = 0; // importing, once in a job: the tokens its KV covers
    // Moving out when done: where the tier's blocks for its KV to stream through arrive.
    std::shared_ptr<detail::stream_slot> stream_out;
    // Answers of the tier below (a fetch of its pages, a lease of blocks to stream through)
    // it waits for in `fetching` before its prompt is computed.
    std::uint8_t tier_answers_due = 0;
    bool from_peer = false; // its fetched pages come from another device's memory
    bool kept_there = false; // its fetched pages are kept blocks of another node's store
    bool handed_off = false; // of those, a prefill node's hand-off (import_pages)
    bool from_remote = false; // its fetched pages come from another node's store (prefix_wire)
    std::size_t local_reach = 0; // pages this node held of its prompt when it asked another's
    // Preempted: the key of the copy of its pages to host memory on its way (0: none).
    std::uint64_t swap_key = 0;
    bool swapped = false; // its `fetched` pages are its own KV, swapped out when preempted
    // The chain hashes of its first full pages, those in the prefix cache's index and known to
    // the tier below as this device's (blocks of the store).
    std::vector<block_hash> published;
  };

  // One answer of the tier below came for `s`: once none is due, a fetching sequence may run
  // (a parked one resumes when told).
  // Pages of sequence `id`'s prompt came (from the tier below, another device, or another
  // node's store): attached with its prefix lookup before its first step.
  void fetched(seq_id id, std::vector<kv_page> pages) {
    auto* s = find(id);
    if (s == nullptr) // freed meanwhile
      return;
    if (pages.empty() && s->from_peer && s->computed == 0) {
      // The other device gave none (it evicted them, stopped or was slow): what the
      // store holds is fetched instead.
      s->from_peer = false;
      fetch_from_tier(*s, s->chain, false);
    }
    if (!pages.empty())
      s->fetched = std::make_shared<const std::vector<kv_page>>(std::move(pages));
    tier_answered(*s);
  }

  // Fetches the first `count` pages of `s`'s prompt from another node's store (the router's
  // hint, prefix_wire) through this node's fetcher; when fewer come than this node holds, what
  // it holds is fetched instead, and the rest computed.
  void fetch_prefix_there(sequence& s, const caf::actor& fetcher, std::size_t count) {
    const auto id = s.req.seq;
    s.state = seq_state::fetching;
    ++s.tier_answers_due;
    // The tokens of the pages asked for: the holder hashes their chain.
    std::vector<token> tokens{s.tokens.begin(),
                              s.tokens.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                     s.tokens.size(), count * kv_.page_tokens))};
    request(fetcher, kv_prefix_timeout, kv_fetch_prefix_atom::value, s.req.prefix_wire,
            std::move(tokens), std::uint64_t{0}, std::uint64_t{count})
        .then([this, id](std::vector<kv_page>& pages) { remote_fetched(id, std::move(pages)); },
              [this, id, from = s.req.prefix_wire](caf::error& e) {
                std::fprintf(stderr,
                             "triad-node: device %s: the prompt pages of sequence %llu at %s were "
                             "not fetched (%s); they are looked up here\n",
                             options_.name.c_str(), static_cast<unsigned long long>(id),
                             from.c_str(), system().render(e).c_str());
                remote_fetched(id, {});
              });
  }

  void remote_fetched(seq_id id, std::vector<kv_page> pages) {
    auto* s = find(id);
    if (s == nullptr) // freed meanwhile
      return;
    if (pages.size() <= s->local_reach) {
      // No more came than this node holds (none: that node is gone, its store evicted them):
      // this node's own sources, as without the hint.
      s->req.prefix_wire.clear();
      if (s->computed == 0)
        fetch_from_tier(*s, s->chain);
    } else {
      s->from_remote = true;
      s->fetched = std::make_shared<const std::vector<kv_page>>(std::move(pages));
    }
    tier_answered(*s);
  }

  // Fetches a demoted sequence's kept blocks from the node whose store keeps them (the
  // request's kept_wire) through this node's fetcher; what does not come is computed.
  void fetch_kept_there(sequence& s, const caf::actor& fetcher, std::vector<token> kept) {
    const auto id = s.req.seq;
    request(fetcher, kv_fetch_timeout, kv_fetch_kept_atom::value, s.req.kept_wire, s.req.kept_store,
            std::move(s.req.kept_blocks), std::move(kept))
        .then([this, id](std::vector<kv_page>& pages) { fetched(id, std::move(pages)); },
              [this, id, from = s.req.kept_wire](caf::error& e) {
                std::fprintf(stderr,
                             "triad-node: device %s: the kept KV of sequence %llu at %s was not "
                             "fetched (%s); its tokens are computed here\n",
                             options_.name.c_str(), static_cast<unsigned long long>(id),
                             from.c_str(), system().render(e).c_str());
                if (metrics_.kept_elsewhere != nullptr)
                  metrics_.kept_elsewhere->inc();
                fetched(id, {});
              });
  }

  void tier_answered(sequence& s) {
    if (s.tier_answers_due > 0)
      --s.tier_answers_due;
    if (s.tier_answers_due == 0 && s.state == seq_state::fetching) {
      s.state = seq_state::waiting;
      schedule();
    }
  }

  // Answers the sequence's KV as bytes, copied out on the driver; with `then_free`, the sequence
  // is dropped behind the copy (the driver runs the two jobs in order).
  caf::result<kv_blob> export_kv(seq_id id, bool then_free) {
    auto* s = find(id);
    if (s == nullptr || s->computed == 0)
      return caf::make_error(caf::sec::invalid_argument,
                             "no KV for sequence " + std::to_string(id) + " on " + options_.name);
    auto promise = make_response_promise<kv_blob>();
    auto key = next_promise_++;
    exports_.emplace(key, promise);
    auto self = caf::actor_cast<device_actor>(this);
    auto job = [be = backend_, id, key, self] {
      auto out = detail::export_blob(*be, id);
      kv_blob blob;
      blob.seq = id;
      std::string error;
      if (out)
        blob = std::move(*out);
      else
        error = out.error().message;
      caf::anon_send(self, export_done_atom::value, key, std::move(blob), std::move(error));
    };
    submit(std::move(job));
    if (then_free)
      release(id);
    return promise;
  }

  // The demote policy's tool call: the sequence's pages are copied out on the driver (its full
  // pages published to the prefix cache first, then it is freed), then kept in the tier below
  // for the caller. Without a tier, or with no KV, the sequence is freed and nothing is kept.
  caf::result<kv_kept> demote(seq_id id, std::uint32_t keep_ms) {
    auto* s = find(id);
    if (s != nullptr && tier_ && s->computed == 0 && (s->swap_key != 0 || s->fetched)) {
      // Preempted meanwhile: the pages it was swapped out to are kept, once they are here.
      auto promise = make_response_promise<kv_kept>();
      auto key = next_promise_++;
      demotions_.emplace(key, demotion{promise, 0, keep_ms, trace_of(*s)});
      if (s->swap_key != 0) {
        swap_demotions_.emplace(s->swap_key, key);
      } else {
        keep_swapped(key, *s->fetched); // a copy: rare (demoted while swapped out)
      }
      seqs_.erase(id);
      update_gauges();
      return promise;
    }
    if (s == nullptr || !tier_ || s->computed == 0) {
      if (s != nullptr)
        release(id);
      return kv_kept{};
    }
    std::vector<token> computed{s->tokens.begin(),
                                s->tokens.begin() + static_cast<std::ptrdiff_t>(s->computed)};
    note_published(*s, computed.size());
    const auto trace = trace_of(*s);
    seqs_.erase(id);
    auto promise = make_response_promise<kv_kept>();
    auto key = next_promise_++;
    demotions_.emplace(key, demotion{promise, computed.size(), keep_ms, trace});
    submit([be = backend_, id, key, computed = std::move(computed),
            self = caf::actor_cast<device_actor>(this)] {
      auto pages = be->export_pages(id, computed);
      detail::publish_and_free(*be, id, computed);
      caf::anon_send(self, demote_done_atom::value, key,
                     pages ? std::move(*pages) : std::vector<kv_page>{});
    });
    update_gauges();
    return promise;
  }

  // Another device's prompt asks for pages of this device's prefix cache: copied out on the
  // driver, between steps, with their checksums.
  caf::result<std::vector<kv_page>> share(std::vector<token> tokens, std::uint64_t first,
                                          std::uint64_t count) {
    if (!options_.prefix_cache || count == 0)
      return std::vector<kv_page>{};
    auto promise = make_response_promise<std::vector<kv_page>>();
    auto key = next_promise_++;
    shares_.emplace(key, promise);
    submit([be = backend_, tokens = std::move(tokens), first, count, key,
            self = caf::actor_cast<device_actor>(this)] {
      std::vector<kv_page> pages;
      bool failed = false;
      try {
        pages = detail::share_pages(*be, tokens, first, count);
      } catch (const std::exception&) { // out of memory for the copies: none lent
        pages.clear();
        failed = true;
      }
      caf::anon_send(self, share_done_atom::value, key, std::move(pages), failed);
    });
    return promise;
  }

  // Ends the driver's burst after its current step: the batch is about to change.
  void interrupt_burst() {
    if (in_flight_)
      interrupt_->store(true, std::memory_order_relaxed);
  }

  // When `id` was admitted (the latest possible order when it is gone).
  std::uint64_t admitted_order(seq_id id) {
    const auto* s = find(id);
    return s != nullptr ? s->admitted_order : std::numeric_limits<std::uint64_t>::max();
  }

  sequence* find(seq_id id) {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? nullptr : &it->second;
  }

  admission refuse(errc code, std::string why) {
    ++stats_.refused;
    return admission{false, std::move(why), code};
  }

  // An import, admitted now or, when another node holds its KV (kv_held), once the node's
  // fetcher brought the bytes over the KV wire. A fetch that fails admits the sequence without
  // them: its prompt is computed here, and the log says why.
  caf::result<admission> import_here(std::shared_ptr<const kv_blob> blob, generate_request req) {
    auto fetcher = caf::actor_cast<caf::actor>(options_.kv_fetcher);
    if (blob && blob->held.page_tokens != 0 && fetcher && blob->bytes.empty() && !blob->stream)
      return answer(import_pages(*blob, std::move(req)));
    if (!blob || blob->held.empty() || !blob->bytes.empty() || blob->stream || !fetcher)
      return answer(import(std::move(blob), std::move(req)));
    // A fetch takes the KV off its holder: a device that is full now says so first, and the
    // KV stays held for the device the request tries next.
    if (auto why = room_for(req.prompt, {}); !why.empty())
      return answer(refuse(errc::busy, std::move(why)));
    const auto key = next_promise_++;
    fetches_.emplace(key, make_response_promise<admission>());
    auto settle = [this, key](admission a) {
      auto it = fetches_.find(key);
      if (it == fetches_.end())
        return; // the device stopped meanwhile (answered then)
      auto promise = std::move(it->second);
      fetches_.erase(it);
      deliver(promise, std::move(a));
    };
    request(fetcher, kv_fetch_timeout, kv_fetch_atom::value, kv_blob{*blob})
        .then(
            [this, settle, req](kv_blob& got) mutable {
              settle(import(std::make_shared<const kv_blob>(std::move(got)), std::move(req)));
            },
            [this, settle, req, from = blob->held.wire](caf::error& e) mutable {
              std::fprintf(stderr,
                           "triad-node: device %s: the KV of sequence %llu held at %s was not "
                           "fetched (%s); its prompt is computed here\n",
                           options_.name.c_str(), static_cast<unsigned long long>(req.seq),
                           from.c_str(), system().render(e).c_str());
              settle(admit(std::move(req)));
            });
    return fetches_.at(key);
  }

  // An import whose KV another node holds as pages of its store (a prefill node's stream,
  // kv_held::page_tokens): admitted as the prompt it is, its pages fetched from the holder as a
  // demotion's kept blocks are (the holder's exchange as store 0) and attached before the rest
  // (at least the token past them) is computed; what does not come is computed.
  admission import_pages(const kv_blob& blob, generate_request req) {
    if (auto short_prompt = too_short(req, blob.tokens))
      return std::move(*short_prompt);
    req.kept_blocks = blob.held.blocks;
    req.kept_tokens = blob.tokens;
    req.kept_store = 0;
    req.kept_wire = blob.held.wire;
    return admit(std::move(req));
  }

  // The refusal of an import whose prompt does not reach past its KV's `kv_tokens` (the token
  // past them gives the next token's logits); nothing when it does.
  std::optional<admission> too_short(const generate_request& req, std::uint64_t kv_tokens) {
    if (req.prompt.size() > kv_tokens)
      return std::nullopt;
    return refuse(errc::invalid_argument,
                  "invalid: sequence " + std::to_string(req.seq) + " has " +
                      std::to_string(req.prompt.size()) + " tokens; its KV covers " +
                      std::to_string(kv_tokens) + ", and at least one more is needed");
  }

  // Admits a sequence whose KV comes from `blob`; the import runs in the sequence's first step
  // job, before the step.
  admission import(std::shared_ptr<const kv_blob> blob, generate_request req) {
    if (!blob)
      return refuse(errc::invalid_argument,
                    "invalid: sequence " + std::to_string(req.seq) + " has no KV to import");
    if (!blob->held.empty() && blob->bytes.empty() && !blob->stream)
      return refuse(errc::invalid_argument,
                    "invalid: sequence " + std::to_string(req.seq) + "'s KV is held at " +
                        blob->held.wire +
                        " and this device has no fetcher for it (only a cluster node's "
                        "devices fetch KV held on another node)");
    if (auto short_prompt = too_short(req, blob->tokens))
      return std::move(*short_prompt);
    return admit(std::move(req), std::move(blob));
  }

  // Admits a sequence; with `import`, its KV comes from those bytes, imported in the step job
  // that first computes the tokens past them.
  admission admit(generate_request req, std::shared_ptr<const kv_blob> import = nullptr) {
    bool importing = import != nullptr;
    interrupt_burst();
    if (req.prompt.empty())
      return refuse(errc::invalid_argument,
                    "invalid: sequence " + std::to_string(req.seq) + " has an empty prompt");
    if (auto ok = req.sampling.validate(); !ok)
      return refuse(errc::invalid_argument, "invalid: " + ok.error().message);
    const auto vocab = backend_->shape().vocab;
    for (const auto* list : {&req.prompt, &req.forced})
      for (auto t : *list)
        if (t < 0 || static_cast<unsigned>(t) >= vocab)
          return refuse(errc::invalid_argument,
                        "invalid: token " + std::to_string(t) + " outside the vocabulary");
    if (seqs_.count(req.seq) != 0)
      return refuse(errc::invalid_argument, "invalid: sequence " + std::to_string(req.seq) +
                                                " already on device " + options_.name);
    if (req.seq == detail::lender_seq)
      return refuse(errc::invalid_argument,
                    "invalid: sequence " + std::to_string(req.seq) +
                        " is reserved (the device's own, to copy pages out for another)");
    // Kept blocks of another store (a demotion on another node's device kept them there) are
    // not this tier's to read: block ids are a store's own. They are fetched from the node that
    // serves them (through the node's fetcher, into the prefix cache's lookup), or computed.
    auto fetcher = caf::actor_cast<caf::actor>(options_.kv_fetcher);
    const bool kept_here = !req.kept_blocks.empty() && tier_ && req.kept_store == tier_->store_id();
    // A prefill node's hand-off (store 0: pages its exchange holds) is attached whether or not
    // this device keeps a prefix cache; a demotion's kept blocks come back through it.
    const bool handed_off = !req.kept_blocks.empty() && req.kept_store == 0;
    const bool kept_there = !req.kept_blocks.empty() && !kept_here && !req.kept_wire.empty() &&
                            fetcher && (options_.prefix_cache || handed_off);
    if (!req.kept_blocks.empty() && !kept_here && !kept_there) {
      if (metrics_.kept_elsewhere != nullptr)
        metrics_.kept_elsewhere->inc();
      req.kept_blocks.clear();
      req.kept_tokens = 0;
    }
    // The chain of the prompt's pages a prefix cache could give, hashed once for the memory
    // check (when others hold memory) and the fetch from the tier below (when it looks up).
    const bool looks_up = !importing && options_.prefix_cache && req.reuse_prefix;
    const bool comes_back = (kept_here || kept_there) && (options_.prefix_cache || handed_off);
    auto chain = looks_up || comes_back ? lookup_chain(req.prompt) : std::vector<block_hash>{};
    if (auto full = room_for(req.prompt, chain); !full.empty())
      return refuse(errc::busy, std::move(full));
    if (options_.role == device_role::prefill)
      req.max_new_tokens = std::min<std::uint32_t>(req.max_new_tokens, 1);
    sequence s;
    s.tokens = req.prompt;
    s.state = importing ? seq_state::importing : seq_state::waiting;
    s.lookup = looks_up;
    s.plan = std::make_shared<detail::sample_plan>(
        detail::sample_plan{sampler{req.sampling}, std::move(req.forced), std::move(req.stop),
                            req.max_new_tokens, req.end, std::move(req.constraint), {},
                            req.logprobs, req.top_logprobs});
    s.admitted_order = next_order_++;
    s.import = std::move(import);
    s.req = std::move(req);
    if (tier_ && s.req.move_out_when_done && streams_ && s.req.stream_when_done &&
        detail::pages_for(s.tokens.size(), kv_.page_tokens) * tier_->block_bytes() >=
            options_.stream_min_bytes &&
        (options_.stream_max_tokens == 0 || s.tokens.size() <= options_.stream_max_tokens)) {
      // Blocks of the tier for its KV to stream through when it moves out, asked for now and
      // waited for (a round trip to the store, against a prompt's compute): the driver takes
      // them from the slot when the prompt is computed (none to be had: a blob).
      s.stream_out = std::make_shared<detail::stream_slot>();
      s.state = seq_state::fetching;
      ++s.tier_answers_due;
      tier_->lease(detail::pages_for(s.tokens.size(), kv_.page_tokens), s.req.seq,
                   caf::actor_cast<caf::actor>(this), trace_of(s));
    }
    if (s.lookup || comes_back)
      s.chain = std::move(chain);
    if (comes_back) {
      // A demoted sequence comes back: its kept blocks are read before its first step (and
      // looked up in its own cache first, as any prompt).
      s.lookup = true; // without a prefix cache (a hand-off) it attaches only the fetched pages
      s.state = seq_state::fetching;
      ++s.tier_answers_due;
      std::vector<token> kept{s.tokens.begin(),
                              s.tokens.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                                     s.req.kept_tokens, s.tokens.size()))};
      if (kept_here)
        tier_->fetch_kept(std::move(s.req.kept_blocks), std::move(kept), s.req.seq,
                          caf::actor_cast<caf::actor>(this), trace_of(s));
      else {
        s.kept_there = true;
        s.handed_off = handed_off;
        fetch_kept_there(s, fetcher, std::move(kept));
      }
    } else if (s.lookup) {
      fetch_from_tier(s, s.chain);
    }
    auto id = s.req.seq;
    seqs_.emplace(id, std::move(s));
    return admission{true, {}, {}};
  }

  // Why a sequence of `prompt` waits (busy; empty: it may come in): the device runs as many
  // sequences as it may, or their memory (memory_full) leaves no room.
  std::string room_for(const std::vector<token>& prompt, std::span<const block_hash> chain) {
    if (options_.max_sequences != 0 && seqs_.size() >= options_.max_sequences)
      return "busy: " + std::to_string(seqs_.size()) + " of " +
             std::to_string(options_.max_sequences) + " sequences in flight on " + options_.name;
    return memory_full(prompt, chain);
  }

  // Why `prompt` waits (empty: it may come in): the KV pages the unfinished sequences here need
  // for their tokens so far (a page shared through the prefix cache counted once, as the
  // planner counts them) and the prompt's own (those of its prefix cache that another
  // sequence holds aside) must fit the device. A newcomer that does not fit waits (busy)
  // instead of pushing others out to be recomputed: preemption is for growth, not admission.
  // Parked sequences count (a pin keeps their KV here across a tool call; a pin's TTL, not a
  // newcomer, moves it to the store); finished ones do not (they go first). A prompt alone
  // larger than the device comes in, and the planner refuses it with its reason.
  // `chain`: lookup_chain(prompt) when it looks up, else empty.
  std::string memory_full(const std::vector<token>& prompt, std::span<const block_hash> chain) {
    const auto pt = kv_.page_tokens;
    const auto total = kv_.pages_total;
    if (pt == 0 || seqs_.empty() || detail::pages_for(prompt.size(), pt) > total)
      return {};
    const auto& st = plan_state();
    const auto need =
        detail::pages_needed(st.seqs, pt, prompt.size(), chain.first(own_run(chain)), plan_.runs);
    if (need <= total)
      return {};
    const auto active = std::count_if(seqs_.begin(), seqs_.end(), [](const auto& e) {
      return e.second.state != seq_state::done;
    });
    return "busy: the KV of the " + std::to_string(active) + " unfinished sequences on " +
           options_.name + " and this prompt's " + std::to_string(prompt.size()) + " tokens need " +
           std::to_string(need) + " pages of its " + std::to_string(total);
  }

  // A prompt's pages that the tier below or another device holds past those the device itself
  // holds (as far as the actor knows: the pages it published, less those evicted since) are
  // fetched before its first step, from whichever holds more of them, when the copy takes less
  // time than computing them: the sequence waits in `fetching` until they arrive
  // (kv_fetched_atom). `chain`: lookup_chain(s.tokens); `peers`: false to leave other
  // devices out (one just gave none).
  void fetch_from_tier(sequence& s, std::span<const block_hash> chain, bool peers = true) {
    auto fetcher = caf::actor_cast<caf::actor>(options_.kv_fetcher);
    if ((!tier_ && !fetcher) || chain.empty())
      return;
    const std::size_t own = own_run(chain);
    const auto below = tier_ ? tier_->held(chain.subspan(own)) : 0;
    const auto peer =
        peers && tier_ ? tier_->held_elsewhere(tier_index_, chain) : kv_tier::peer_run{};
    // Another node's store may hold more (the router's hint): fetched over the KV wire.
    const std::size_t remote =
        fetcher && !s.req.prefix_wire.empty()
            ? static_cast<std::size_t>(std::min<std::uint64_t>(s.req.prefix_pages, chain.size()))
            : 0;
    const auto pt = kv_.page_tokens;
    // (The store path below may copy the device's own pages too, from the first: a bound on
    // the copy, not its size.)
    if (const auto reach = std::max({own + below, peer.pages, remote});
        reach > own && !backend_->import_cheaper(own * pt, (reach - own) * pt)) {
      ++stats_.imports_declined; // computing them here takes less time than the copy
      return;
    }
    // The hint is the router's record of what it sent there, not a checked count: it goes
    // first only when it reaches well past what this node holds (a quarter of the chain, at
    // least a page). From the first page: this device's own may be evicted meanwhile.
    const auto local = std::max(own + below, peer.pages);
    if (remote > local + std::max<std::size_t>(1, chain.size() / 4)) {
      s.local_reach = local;
      fetch_prefix_there(s, fetcher, remote);
      return;
    }
    if (!tier_)
      return;
    // Another device may hold more of it in its own memory (a decode device holds the pages
    // of the answers it generated): copied from there, checked, instead of computed.
    if (peer.pages > own + below) {
      s.state = seq_state::fetching;
      s.from_peer = true;
      ++s.tier_answers_due;
      tier_->fetch_from_device(peer.device, s.tokens, own, peer.pages - own, s.req.seq,
                               caf::actor_cast<caf::actor>(this), trace_of(s));
      return;
    }
    if (below == 0)
      return;
    // When the store holds the whole run from the first page, all of it is fetched: pages the
    // device evicts meanwhile (a step in flight) are then still at hand.
    const std::size_t first = own > 0 && tier_->held(chain) >= own + below ? 0 : own;
    s.state = seq_state::fetching;
    ++s.tier_answers_due;
    tier_->fetch(s.tokens, first, own + below - first, s.req.seq, caf::actor_cast<caf::actor>(this),
                 trace_of(s));
  }

  // The chain hashes of the whole pages of `tokens` a prefix lookup can attach (at least one
  // token is left to compute).
  std::vector<block_hash> lookup_chain(const std::vector<token>& tokens) const {
    const auto pt = kv_.page_tokens;
    if (pt == 0 || tokens.size() <= pt)
      return {};
    return chain_hashes(std::span<const token>{tokens.data(), (tokens.size() - 1) / pt * pt}, pt);
  }

  // How many pages from the start of `chain` the device's own prefix cache holds (as far as the
  // actor knows: the pages it published, less those evicted since).
  std::size_t own_run(std::span<const block_hash> chain) const {
    std::size_t own = 0;
    while (own < chain.size() && own_pages_.count(chain[own]) != 0)
      ++own;
    return own;
  }

  // Notes the full pages among the first `tokens` tokens of `s` as the device's own (they are
  // published to its prefix cache), so a later prompt does not fetch them from the tier below,
  // and tells the tier (they are blocks of the store, other devices may copy them). Hashes only
  // the pages past those noted before.
  void note_published(sequence& s, std::size_t tokens) {
    const auto pt = kv_.page_tokens;
    if (pt == 0)
      return;
    const auto full = std::min(tokens, s.tokens.size()) / pt;
    std::vector<kv_page> added;
    const std::span<const token> all{s.tokens};
    while (s.published.size() < full) {
      auto own = all.subspan(s.published.size() * pt, pt);
      const auto parent = s.published.empty() ? root_hash : s.published.back();
      const auto hash = chain_hash(parent, own);
      if (tier_ && own_pages_.insert(hash).second)
        added.push_back(kv_page{hash, parent, {own.begin(), own.end()}, {}, 0});
      s.published.push_back(hash);
    }
    if (!added.empty())
      tier_->resident(tier_index_, added, {});
  }

  // The full pages the job's sequences computed become blocks as they are computed: indexed in
  // the prefix cache on the driver (other prompts attach them, the store reads them through
  // the device), then noted (note_published). The driver indexes them with its next job.
  void publish_computed(const std::vector<seq_id>& ids) {
    const auto pt = kv_.page_tokens;
    if (!options_.prefix_cache || pt == 0)
      return;
    for (auto id : ids) {
      auto* s = find(id);
      if (s == nullptr || s->computed / pt <= s->published.size())
        continue;
      const auto end = s->tokens.begin() + static_cast<std::ptrdiff_t>(s->computed / pt * pt);
      owed_.publishes.emplace_back(id, std::vector<token>{s->tokens.begin(), end});
      note_published(*s, owed_.publishes.back().second.size());
    }
  }

  // Answers an admission, then schedules: the driver sends a sequence's tokens to its sink as
  // it chooses them, so the sink must hold the answer (and know the sequence is its own)
  // before the first step can run.
  caf::result<admission> answer(admission a) {
    auto promise = make_response_promise<admission>();
    deliver(promise, std::move(a));
    return promise;
  }

  void deliver(caf::typed_response_promise<admission>& promise, admission a) {
    const bool accepted = a.accepted;
    promise.deliver(std::move(a));
    if (accepted)
      schedule();
  }

  void release(seq_id id) {
    auto it = seqs_.find(id);
    std::vector<token> computed;
    if (it != seqs_.end() && options_.prefix_cache && it->second.computed > 0) {
      const auto& t = it->second.tokens;
      computed.assign(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(it->second.computed));
      note_published(it->second, computed.size());
    }
    if (it != seqs_.end())
      seqs_.erase(it);
    // The backend is only touched on the driver thread: the KV's full pages go into the prefix
    // cache before the sequence lets go of them, with the driver's next job.
    if (!computed.empty())
      owed_.publishes.emplace_back(id, std::move(computed));
    owed_.frees.push_back(id);
    if (in_flight_)
      interrupt_burst(); // the batch changed: the step job after this one carries the free
    else
      pay_owed(); // an idle device lets the memory go now, not at its next request
    update_gauges();
  }

  // Hands a job (export, demote, swap, share) to the driver, in order, behind what the driver is
  // owed (owed_: publishes and frees, which must come first, else they ride with the next step).
  void submit(driver_job&& job) {
    pay_owed();
    enqueue(std::move(job));
  }

  // What the driver is owed, in a job of its own.
  void pay_owed() {
    if (owed_.empty())
      return;
    enqueue([be = backend_, owed = std::exchange(owed_, {})] { owed.apply(*be); });
  }

  // Straight into the driver's queue when nothing waits before it, else behind the backlog,
  // which goes in as the driver frees up. The backlog stays small: each sequence has at most
  // one export or import outstanding, and the owed work goes as one job in front of one.
  void enqueue(driver_job&& job) {
    interrupt_burst();
    if (backlog_.empty() && driver_->try_submit_in_order(std::move(job)) != submit_result::full)
      return; // accepted, or refused because the device is stopping
    backlog_.push_back(std::move(job));
    retry_soon();
  }

  // Moves the backlog into the driver's queue while it has room; true when none is left.
  bool drain_backlog() {
    while (!backlog_.empty()) {
      if (driver_->try_submit_in_order(std::move(backlog_.front())) == submit_result::full) {
        retry_soon();
        return false;
      }
      backlog_.pop_front();
    }
    return true;
  }

  void retry_soon() {
    if (!retry_pending_) {
      retry_pending_ = true;
      delayed_send(this, std::chrono::milliseconds{1}, device_retry_atom::value);
    }
  }

  // What the planner sees of the sequences (plan_state_, its memory kept between calls).
  const detail::step_state& plan_state() {
    auto& st = plan_state_;
    st.seqs.clear();
    for (const auto& [id, s] : seqs_) {
      std::optional<std::size_t> import_tokens;
      if (s.state == seq_state::importing && s.import)
        import_tokens = s.import->tokens;
      // The pages it holds from the prefix cache; about to look up, those the lookup attaches
      // and the tokens they and the fetched pages cover.
      std::span<const block_hash> shared{s.chain};
      std::size_t incoming = 0;
      const auto pt = std::max<std::size_t>(1, kv_.page_tokens);
      if (s.computed > 0) {
        // Its published pages are in the prefix cache's index, where other sequences may
        // attach them: listed by hash, each counted once (the pages it attached among them).
        if (s.published.size() >= s.shared / pt)
          shared = s.published;
        else
          shared = shared.first(std::min(shared.size(), s.shared / pt));
      } else if (s.lookup && s.state != seq_state::importing) {
        shared = shared.first(own_run(shared));
        incoming = shared.size() * pt;
        if (s.fetched && !s.fetched->empty()) {
          // Fetched pages start at the first page or where the own cache ended when asked.
          const auto from = std::find(s.chain.begin(), s.chain.end(), s.fetched->front().hash);
          std::size_t tokens =
              from == s.chain.end() ? 0 : static_cast<std::size_t>(from - s.chain.begin()) * pt;
          for (const auto& p : *s.fetched)
            tokens += p.tokens.size();
          incoming = std::max(incoming, tokens);
        }
      } else {
        shared = {};
      }
      st.seqs.push_back({id, s.admitted_order, s.state, s.finished, s.tokens.size(), s.computed,
                         shared, import_tokens, incoming});
    }
    st.pages_total = kv_.pages_total;
    st.page_tokens = kv_.page_tokens;
    st.token_budget = options_.step_token_budget;
    st.max_prefill_chunk = options_.max_prefill_chunk;
    st.burst_steps = options_.burst_steps;
    st.step_pages = options_.step_kv_fast_tier ? kv_.pages_fast : 0;
    return st;
  }

  // Forms the next step when none is in flight: plans it (detail::plan_step: decodes, then
  // chunked prefills within the token budget and the free KV pages), then fills the job and
  // hands it to the driver. When nothing fits, a sequence gives up its KV (preempt_one).
  void schedule() {
    if (!drain_backlog() || in_flight_)
      return; // a step goes behind the jobs queued before it
    auto& plan = plan_;
    detail::plan_step(plan_state(), plan);
    for (seq_id id : plan.too_large) {
      auto* s = find(id);
      emit(*s, device_event::failed,
           "sequence of " + std::to_string(s->tokens.size()) + " tokens needs " +
               std::to_string(detail::pages_for(s->tokens.size(), kv_.page_tokens)) +
               " KV pages; device " + options_.name + " has " + std::to_string(kv_.pages_total));
      owed_.frees.push_back(id);
      seqs_.erase(id);
    }
    if (plan.items.empty()) {
      if (!plan.starved)
        return;
      // A sequence admitted after the earliest that starved gives up its KV; when none holds
      // any, another does (nothing runs: waiting on the older ones would wait forever).
      if (preempt_one(plan.starving))
        return schedule();
      // Nothing holds KV and still nothing fits: fail what waits rather than hang.
      for (auto it = seqs_.begin(); it != seqs_.end();) {
        auto& s = it->second;
        if (s.state == seq_state::waiting || s.state == seq_state::running) {
          emit(s, device_event::failed, "no KV pages free on " + options_.name);
          it = seqs_.erase(it);
        } else {
          ++it;
        }
      }
      return;
    }
    auto job = spare_job_ ? std::move(spare_job_) : std::make_shared<detail::step_job>();
    job->reset();
    auto& result = job->result;
    for (const auto& item : plan.items) {
      auto* s = find(item.seq);
      const auto first = s->tokens.begin() + static_cast<std::ptrdiff_t>(item.first);
      job->add_item(item.seq, first, first + static_cast<std::ptrdiff_t>(item.count));
      const std::size_t i = job->item_count - 1;
      if (item.import) {
        s->import_tokens = item.first;
        job->imports.push_back({i, std::move(s->import), {}});
      }
      result.seqs.push_back(item.seq);
      result.tokens.push_back(item.count);
      result.cached.push_back(0);
      result.fetched.push_back(0);
      job->plans.push_back(item.completes ? s->plan : nullptr);
      job->sinks.push_back(item.completes ? s->req.sink : caf::actor{});
      if (item.completes && s->req.move_out_when_done) {
        job->move_outs.emplace_back();
        auto& mo = job->move_outs.back();
        mo.item = i;
        mo.park_on_stop = s->req.park_on_stop;
        if (s->stream_out) {
          mo.slot = s->stream_out;
          mo.tokens = s->tokens;
          // What the done event the driver sends says came from caches (an earlier job may
          // have attached them; this job's own attach, if any, is the driver's to tell).
          mo.cached = s->cached;
          mo.stored = s->stored;
        }
        if (options_.prefix_cache) // the whole prompt is computed once the item has run
          mo.publish = s->tokens;
      }
      job->generated.push_back(s->generated);
      job->swap_ins.push_back(s->swapped && s->lookup && s->computed == 0);
      job->earlier_cached.emplace_back(static_cast<std::uint32_t>(s->cached),
                                       static_cast<std::uint32_t>(s->stored));
      if (s->lookup && s->computed == 0) {
        job->add_lookup(i, s->tokens, std::move(s->fetched));
        s->lookup = false;
      }
    }
    job->be = backend_;
    job->capture = tier_ != nullptr;
    std::swap(job->owed, owed_); // the job's was empty: owed_ is empty after
    job->max_steps = plan.max_steps;
    job->window = options_.burst_window;
    interrupt_->store(false, std::memory_order_relaxed);
    job->interrupt = interrupt_;
    auto run = [job, reply_to = caf::actor_cast<device_actor>(this)]() mutable {
      // The step itself is guarded in the job; this guards the imports, lookups and exports
      // around it, so a throw fails the job's sequences instead of leaving the device waiting
      // for a result forever.
      try {
        (*job)();
      } catch (const std::exception& e) {
        job->result.output =
            make_error(errc::system_error, std::string{"the driver job threw: "} + e.what());
      } catch (...) {
        job->result.output = make_error(errc::system_error, "the driver job threw");
      }
      caf::anon_send(reply_to, step_done_atom::value, std::move(job));
    };
    switch (driver_->try_submit_in_order(std::move(run))) {
    case submit_result::accepted:
      in_flight_ = true;
      break;
    case submit_result::full:
      // The driver's queue is full: what it is owed goes back to wait for the next job, and
      // scheduling is retried shortly, so no work is dropped.
      std::swap(job->owed, owed_);
      for (auto& im : job->imports) // imported with a later job
        if (auto* s = find(job->items[im.item].seq))
          s->import = std::move(im.blob);
      for (std::size_t l = 0; l < job->lookup_count; ++l)
        if (auto* s = find(job->items[job->lookups[l].first].seq)) {
          s->lookup = true;
          s->fetched = std::move(job->lookup_pages[l]);
        }
      spare_job_ = std::move(job);
      retry_soon();
      break;
    case submit_result::stopped:
      break; // the device is going down
    }
  }

  // A job's result; the job object is kept for the next job once it has been read.
  void on_step(std::shared_ptr<detail::step_job> job) {
    in_flight_ = false;
    job->sinks.clear(); // the driver is done with them: a kept job holds no request
    auto& r = job->result;
    kv_ = r.kv;
    spill(job->evicted);
    stats_.fetches_corrupted += r.fetches_corrupted; // whether the step then ran or not
    // Imports first: a sequence whose KV arrived holds it even when the step then failed.
    std::vector<std::pair<seq_id, std::string>> starved_imports;
    for (auto& im : job->imports) {
      auto* s = find(r.seqs[im.item]);
      if (s == nullptr) // freed while the job ran (its KV is freed with the next job)
        continue;
      if (im.exhausted) { // no KV pages for it after all: it waits, another sequence yields
        s->import = std::move(im.blob);
        starved_imports.emplace_back(r.seqs[im.item], std::move(im.error));
        continue;
      }
      if (im.recomputed) { // a stream that could not be used: its tokens were computed
        ++stats_.stream_recomputes;
        if (metrics_.stream_recomputes != nullptr)
          metrics_.stream_recomputes->inc();
        s->import_tokens = 0;
      } else if (!im.error.empty()) {
        emit(*s, device_event::failed, "KV import failed: " + im.error);
        seqs_.erase(r.seqs[im.item]);
        continue;
      } else if (im.blob && im.blob->stream) {
        ++stats_.streamed_in;
        if (metrics_.streamed_in != nullptr)
          metrics_.streamed_in->inc();
      }
      s->computed = s->import_tokens;       // the tokens past it are counted below
      if (s->state == seq_state::importing) // else parked meanwhile
        s->state = seq_state::waiting;
    }
    job->imports.clear(); // the blobs' memory goes now, not with the next job
    // A starved import waits for another sequence to give up its KV; the victim is chosen once
    // the job's results are applied (before, it could be a sequence of this very job, whose
    // KV the results then count again). Nothing to make room: they fail.
    const auto settle_starved_imports = [&] {
      if (starved_imports.empty())
        return;
      std::uint64_t earliest = std::numeric_limits<std::uint64_t>::max();
      for (auto& [id, error] : starved_imports)
        earliest = std::min(earliest, admitted_order(id));
      if (!preempt_one(earliest))
        for (auto& [id, error] : starved_imports)
          if (auto* s = find(id)) {
            emit(*s, device_event::failed, "KV import failed: " + error);
            seqs_.erase(id);
          }
    };
    const auto starved = [&](seq_id id) {
      return std::any_of(starved_imports.begin(), starved_imports.end(),
                         [id](const auto& si) { return si.first == id; });
    };
    if (!r.output) { // starved imports go with the job's sequences: retried, or failed below
      // The victim is admitted after every sequence of the job, when one is (else any).
      std::uint64_t earliest = std::numeric_limits<std::uint64_t>::max();
      for (auto id : r.seqs)
        earliest = std::min(earliest, admitted_order(id));
      if (r.output.error().code == errc::exhausted && preempt_one(earliest)) {
        // The prefixes the job attached before the step stay on the backend's sequences:
        // they go, and the retry looks them up again (with the pages fetched for them).
        for (std::size_t l = 0; l < job->lookup_count; ++l) {
          auto seq = job->items[job->lookups[l].first].seq;
          if (auto* s = find(seq); s != nullptr && s->computed == 0) {
            owed_.frees.push_back(seq);
            s->lookup = true;
            s->fetched = std::move(job->lookup_pages[l]);
          }
        }
        spare_job_ = std::move(job);
        return schedule();
      }
      for (auto id : r.seqs)
        if (auto* s = find(id)) {
          emit(*s, device_event::failed, r.output.error().message);
          seqs_.erase(id);
          owed_.frees.push_back(id);
        }
      spare_job_ = std::move(job);
      return schedule();
    }
    for (std::size_t l = 0; l < job->lookup_count; ++l)
      job->lookup_pages[l].reset(); // the fetched pages' memory goes now
    stats_.step_jobs += r.steps.empty() ? 0 : 1;
    std::uint64_t job_tokens = 0;
    double job_seconds = 0;
    for (const auto& st : r.steps) {
      job_tokens += st.tokens;
      job_seconds += st.seconds;
    }
    if (options_.trace && !r.steps.empty())
      trace_job(r, job_tokens);
    if (metrics_.steps != nullptr) { // the distributions per step
      metrics_.batch->observe_each(
          r.steps, [](const detail::step_stat& st) { return static_cast<double>(st.batch); });
      metrics_.step_tokens->observe_each(
          r.steps, [](const detail::step_stat& st) { return static_cast<double>(st.tokens); });
      metrics_.step_seconds->observe_each(r.steps,
                                          [](const detail::step_stat& st) { return st.seconds; });
      for (const auto& st : r.steps)
        if (st.capacity_footprint > 0) { // a modelled step
          metrics_.step_intensity->observe(st.operational_intensity);
          metrics_.step_footprint->observe(st.capacity_footprint);
        }
    }
    for (const auto& st : r.steps)
      if (st.capacity_footprint > 0) { // a modelled step: its cell of the OI/CF plane
        if (stats_.oi_cf_steps.empty())
          stats_.oi_cf_steps.assign(oi_cf_grid::cells, 0);
        ++stats_.oi_cf_steps[oi_cf_grid::cell(st.operational_intensity, st.capacity_footprint)];
        if (stats_.tier_peak_bytes.empty())
          stats_.tier_peak_bytes.assign(max_memory_tiers, 0.0);
        for (std::size_t t = 0; t < max_memory_tiers; ++t)
          stats_.tier_peak_bytes[t] = std::max(stats_.tier_peak_bytes[t], st.tier_resident[t]);
      }
    for (const auto& st : r.steps)
      if (st.tokens == st.batch) // a decode step: one token a sequence
        decode_step_s_ = decode_step_s_ == 0 ? st.seconds : 0.8 * decode_step_s_ + 0.2 * st.seconds;
    stats_.steps += r.steps.size();
    stats_.tokens += job_tokens;
    stats_.busy_seconds += job_seconds;
    stats_.compute_cpu_seconds += r.compute_cpu_seconds;
    if (metrics_.steps != nullptr && !r.steps.empty()) { // the totals once per job
      metrics_.steps->inc(static_cast<double>(r.steps.size()));
      metrics_.tokens->inc(static_cast<double>(job_tokens));
      metrics_.busy->inc(job_seconds);
    }
    for (std::size_t i = 0; i < r.seqs.size(); ++i) {
      auto* s = find(r.seqs[i]);
      if (s == nullptr || starved(r.seqs[i])) // freed while the step ran, or its import waits
        continue;
      s->computed += r.tokens[i];
      if (job->swap_ins[i]) {
        s->swapped = false; // attached back (or, unusable, computed again)
        if (r.cached[i] != 0) {
          ++stats_.swapped_in;
          s->shared = r.cached[i] - r.fetched[i];
        }
      } else if (r.cached[i] != 0) {
        s->cached = r.cached[i];
        s->stored = r.fetched[i];
        // Only the pages attached from the device's own cache are shared; those fetched from
        // the tier below are the sequence's own memory, as computed ones are.
        s->shared = r.cached[i] - r.fetched[i];
        stats_.cached_tokens += r.cached[i];
        stats_.tier_tokens += r.fetched[i];
        if (s->from_peer)
          stats_.peer_tokens += r.fetched[i];
        if (metrics_.cached != nullptr) {
          metrics_.cached->inc(static_cast<double>(r.cached[i]));
          metrics_.tier_tokens->inc(static_cast<double>(r.fetched[i]));
          if (s->from_peer)
            metrics_.peer_tokens->inc(static_cast<double>(r.fetched[i]));
          if (s->kept_there && metrics_.kept_fetched != nullptr)
            metrics_.kept_fetched->inc(static_cast<double>(r.fetched[i]));
          if (s->handed_off && metrics_.handoff_fetched != nullptr)
            metrics_.handoff_fetched->inc(static_cast<double>(r.fetched[i]));
          if (s->from_remote && metrics_.remote_prefix != nullptr)
            metrics_.remote_prefix->inc(static_cast<double>(r.fetched[i]));
        }
      }
      const auto& sampled = r.sampled[i];
      if (sampled.empty()) { // the prompt goes on (or was all cached)
        if (s->state != seq_state::parked)
          s->state = seq_state::waiting;
        continue;
      }
      // The driver sent each token to the sink as it chose it: they are the sequence's now.
      // The last one is not in the KV yet (computed excludes it): a sequence parked meanwhile
      // computes it when it resumes.
      const bool parked_meanwhile = s->state == seq_state::parked;
      s->tokens.insert(s->tokens.end(), sampled.begin(), sampled.end());
      s->generated += static_cast<std::uint32_t>(sampled.size());
      stats_.generated += sampled.size();
      const auto ending = s->plan->end_of(sampled.back(), s->generated, s->req.park_on_stop);
      const char* ended = ending.reason;
      if (ended != nullptr) {
        s->finished = true;
        s->state = parked_meanwhile || ending.parks ? seq_state::parked : seq_state::done;
      } else if (!parked_meanwhile) {
        s->state = seq_state::running;
      }
      auto mo = std::find_if(job->move_outs.begin(), job->move_outs.end(),
                             [i](const auto& m) { return m.item == i && m.moved; });
      if (mo != job->move_outs.end()) {
        // Exported and freed on the driver: the KV goes with the done event (sent by the
        // driver before it streamed the pages, when they went through the tier's blocks), the
        // sequence goes.
        note_published(*s, mo->publish.size());
        if (s->stream_out)
          s->stream_out->take(); // a lease that came too late gives its blocks back now
        if (mo->streamed) {
          ++stats_.streamed_out;
          if (metrics_.streamed_out != nullptr)
            metrics_.streamed_out->inc();
        } else
          emit(*s, device_event::done, mo->reason, std::move(mo->blob));
        seqs_.erase(r.seqs[i]);
      } else if (ended != nullptr) {
        emit(*s, device_event::done, ended);
      }
    }
    publish_computed(r.seqs);
    settle_starved_imports();
    update_gauges();
    job->move_outs.clear(); // no stream slot stays with the kept job object
    spare_job_ = std::move(job);
    schedule();
  }

  // Hands the pages a job's steps evicted from the prefix cache to the tier below.
  void spill(std::vector<kv_page>& evicted) {
    if (evicted.empty() || !tier_)
      return;
    for (const auto& p : evicted)
      own_pages_.erase(p.hash);
    stats_.spilled_pages += evicted.size();
    if (metrics_.spilled != nullptr)
      metrics_.spilled->inc(static_cast<double>(evicted.size()));
    tier_->spill(tier_index_, std::move(evicted)); // no longer resident: a tier down
    evicted.clear();
  }

  // One sequence's KV gives way for memory: a finished sequence first (its KV is only kept for
  // reuse), then a parked one, then the most recently admitted running or waiting one admitted
  // after `starving` (any when none is, or without it). It is swapped: its pages are copied to host
  // memory on the driver (its full pages also go into the prefix cache) and attached back when it
  // is scheduled, or kept in the tier below when its request demotes it meanwhile. A sequence that
  // computes every token (reuse_prefix off), or a finished one with no tier to keep its KV in, is
  // recomputed instead. False when no such sequence holds KV.
  bool preempt_one(std::optional<std::uint64_t> starving = std::nullopt) {
    auto id = detail::pick_victim(plan_state().seqs, starving);
    if (!id && starving) // nothing runs behind the one that starved: waiting would be forever
      id = detail::pick_victim(plan_state_.seqs);
    if (!id)
      return false;
    auto* victim = find(*id);
    ++stats_.preemptions;
    const bool swap = options_.prefix_cache && victim->req.reuse_prefix &&
                      (victim->state != seq_state::done || tier_ != nullptr);
    if (swap) {
      std::vector<token> computed{victim->tokens.begin(),
                                  victim->tokens.begin() +
                                      static_cast<std::ptrdiff_t>(victim->computed)};
      note_published(*victim, computed.size());
      victim->swap_key = next_promise_++;
      ++victim->tier_answers_due;
      submit([be = backend_, id = *id, key = victim->swap_key, computed = std::move(computed),
              self = caf::actor_cast<device_actor>(this)] {
        // Answered whatever happens: the sequence waits for it.
        std::vector<kv_page> pages;
        try {
          if (auto out = be->export_pages(id, computed))
            pages = std::move(*out);
          detail::publish_and_free(*be, id, computed);
        } catch (...) { // no memory for the copy: recomputed instead
          pages.clear();
          be->free(id);
        }
        caf::anon_send(self, swap_done_atom::value, id, key, std::move(pages));
      });
    } else {
      owed_.frees.push_back(victim->req.seq);
    }
    victim->computed = 0;
    if (!swap) { // recomputed: its next lookup is what it reports; swapped, it keeps its hit
      victim->cached = 0;
      victim->stored = 0;
    }
    victim->shared = 0;
    victim->published.clear(); // its pages come back attached or appended: noted again
    victim->fetched.reset();
    victim->swapped = false;
    victim->lookup = swap || (options_.prefix_cache && victim->req.reuse_prefix);
    victim->chain = victim->lookup ? lookup_chain(victim->tokens) : std::vector<block_hash>{};
    if (victim->state == seq_state::running || victim->state == seq_state::waiting)
      victim->state = swap ? seq_state::fetching : seq_state::waiting;
    emit(*victim, device_event::preempted,
         swap ? "KV memory exhausted; swapping to host memory until scheduled (recomputed if the "
                "copy fails)"
              : "KV memory exhausted; recomputing when scheduled");
    return true;
  }

  // A preempted sequence's pages were copied out (empty: they could not be): they wait in host
  // memory until it is scheduled again, when its step job attaches them; or, demoted
  // meanwhile, they are kept in the tier below for its request.
  void swapped(seq_id id, std::uint64_t key, std::vector<kv_page> pages) {
    if (auto d = swap_demotions_.find(key); d != swap_demotions_.end()) {
      const auto demotion_key = d->second;
      swap_demotions_.erase(d);
      keep_swapped(demotion_key, std::move(pages));
      return;
    }
    auto* s = find(id);
    if (s == nullptr || s->swap_key != key)
      return; // freed meanwhile
    s->swap_key = 0;
    // Its next lookup attaches its own KV back (its published pages too, when the copy could not
    // be made): not a cache hit to report.
    s->swapped = true;
    if (!pages.empty())
      s->fetched = std::make_shared<const std::vector<kv_page>>(std::move(pages));
    tier_answered(*s);
  }

  // Keeps a preempted sequence's swapped pages in the tier below for demotion `key` (none: its
  // request recomputes them).
  void keep_swapped(std::uint64_t key, std::vector<kv_page> pages) {
    auto it = demotions_.find(key);
    if (it == demotions_.end())
      return;
    if (pages.empty()) {
      it->second.promise.deliver(kv_kept{});
      demotions_.erase(it);
      return;
    }
    for (const auto& p : pages)
      it->second.tokens += p.tokens.size();
    tier_->keep(std::move(pages), std::chrono::milliseconds{it->second.keep_ms}, key,
                caf::actor_cast<caf::actor>(this), it->second.trace);
  }

  // The trace id of a traced sequence's request, for the tier's spans; 0 when untraced.
  static std::uint64_t trace_of(const sequence& s) noexcept {
    return s.req.traced ? s.req.trace_id : 0;
  }

  // A driver job that a traced request took part in, as one span on the device's driver track:
  // its steps, their largest batch and tokens, and the traced requests in it; its KV imports as a
  // span inside it. One span per job, not per step, so tracing every request costs little beside
  // the steps themselves.
  void trace_job(const detail::step_result& r, std::uint64_t tokens) {
    // The driver thread's scratch, reused from job to job (a job may list many requests).
    thread_local std::string traced, args;
    thread_local std::vector<std::uint64_t> owners; // whose kept traces get a copy
    traced.clear();
    owners.clear();
    for (auto id : r.seqs)
      if (const auto* s = find(id); s != nullptr && s->req.traced) {
        if (!traced.empty())
          traced += ',';
        char digits[24];
        traced.append(digits, std::to_chars(digits, digits + sizeof digits, s->req.trace_id).ptr);
        owners.push_back(s->req.trace_id);
      }
    if (traced.empty())
      return;
    std::size_t batch_max = 0;
    for (const auto& st : r.steps)
      batch_max = std::max(batch_max, st.batch);
    if (!trace_track_)
      trace_track_ = options_.trace->track("device " + options_.name, "driver");
    args.assign("\"steps\":").append(std::to_string(r.steps.size()));
    args.append(",\"batch_max\":").append(std::to_string(batch_max));
    args.append(",\"tokens\":").append(std::to_string(tokens)).append(",");
    const auto requests_at = args.size(); // the import's span has only the requests
    args += "\"requests\":";
    append_trace_string(args, traced);
    options_.trace->add(*trace_track_, r.steps.size() == 1 ? "step" : "steps", "device", r.started,
                        r.finished - r.started, args, owners);
    if (r.imports_to > r.imports_from) // the KV it imported before its steps
      options_.trace->add(*trace_track_, "kv import", "device", r.imports_from,
                          r.imports_to - r.imports_from, std::string_view{args}.substr(requests_at),
                          owners);
  }

  void emit(const sequence& s, device_event::kind_t kind, std::string message, kv_blob kv = {}) {
    if (!s.req.sink)
      return;
    device_event ev;
    ev.seq = s.req.seq;
    ev.kind = kind;
    ev.generated = s.generated;
    ev.message = std::move(message);
    ev.cached = static_cast<std::uint32_t>(s.cached);
    ev.kv = std::move(kv);
    ev.stored = static_cast<std::uint32_t>(s.stored);
    caf::anon_send(s.req.sink, std::move(ev));
  }

  device_stats snapshot() const {
    auto st = stats_;
    st.driver_jobs = driver_->stats().completed;
    st.sequences = seqs_.size();
    for (const auto& [id, s] : seqs_) {
      st.waiting += s.state == seq_state::waiting || s.state == seq_state::fetching;
      st.running += s.state == seq_state::running;
      st.parked += s.state == seq_state::parked;
    }
    st.kv_pages_used = kv_.pages_used;
    st.kv_pages_total = kv_.pages_total;
    st.kv_pages_cached = kv_.pages_cached;
    return st;
  }

  void update_gauges() {
    report_kv();
    if (metrics_.queue == nullptr)
      return;
    auto st = snapshot();
    metrics_.queue->set(static_cast<double>(st.waiting));
    metrics_.running->set(static_cast<double>(st.running));
    metrics_.parked->set(static_cast<double>(st.parked));
    metrics_.kv_pages->set(static_cast<double>(st.kv_pages_used));
  }

  std::shared_ptr<backend> backend_;
  std::unique_ptr<driver_thread> driver_;
  device_options options_;
  std::optional<trace_track> trace_track_; // the driver's track in the trace (once asked)
  device_metrics metrics_;
  std::map<seq_id, sequence> seqs_;
  detail::step_state plan_state_;               // the planner's view of the sequences (memory kept)
  detail::step_plan plan_;                      // the last plan (memory kept)
  std::shared_ptr<detail::step_job> spare_job_; // the job object filled again for the next job
  // Publishes and frees the driver is owed, sent with the next job (detail::deferred_work).
  detail::deferred_work owed_;
  std::map<std::uint64_t, caf::typed_response_promise<kv_blob>> exports_;
  // Imports waiting for their KV from another node (import_here), by key.
  std::map<std::uint64_t, caf::typed_response_promise<admission>> fetches_;
  // Pages other devices asked for (kv_share_atom), being copied out on the driver.
  std::map<std::uint64_t, caf::typed_response_promise<std::vector<kv_page>>> shares_;
  struct demotion {
    caf::typed_response_promise<kv_kept> promise;
    std::uint64_t tokens = 0;  // tokens kept
    std::uint32_t keep_ms = 0; // how long the store keeps them pinned
    std::uint64_t trace = 0;   // the traced request's id (trace_of), or 0
  };
  // Demotions of preempted sequences waiting for their swapped pages: swap key -> demotion key.
  std::map<std::uint64_t, std::uint64_t> swap_demotions_;
  std::map<std::uint64_t, demotion> demotions_; // per demotion in flight
  std::uint64_t next_promise_ = 1;              // 0: no key (sequence::swap_key)
  bool in_flight_ = false;
  // Raised when a message changes what the next step should hold: the driver ends a burst.
  std::shared_ptr<std::atomic<bool>> interrupt_ = std::make_shared<std::atomic<bool>>(false);
  bool retry_pending_ = false;
  std::deque<driver_job> backlog_; // jobs waiting for room in the driver's queue, in order
  std::uint64_t next_order_ = 0;
  device_stats stats_;
  kv_usage kv_;
  std::vector<caf::actor> kv_watchers_; // told of free KV pages (the router)
  std::shared_ptr<kv_tier> tier_;       // the tier below, when connected (options_.tier)
  bool streams_ = false; // a tier, and pages the backend can stream (move-outs go through it)
  std::unordered_set<block_hash> own_pages_;      // with a tier: the pages its prefix cache holds
  std::uint32_t tier_index_ = kv_tier::no_device; // its number in the tier (join)
  std::uint64_t kv_reported_ = 0;                 // the free pages they last heard of
  double decode_step_s_ = 0;   // recent decode steps' seconds, a moving mean (0: none yet)
  double step_reported_s_ = 0; // the decode step time the watchers last heard of
};

} // namespace

expected<device_actor> spawn_device(domain& home, std::unique_ptr<backend> be,
                                    device_options options) {
  if (be == nullptr)
    return make_error(errc::invalid_argument, "device '" + options.name + "': no backend");
  if (options.step_token_budget == 0 || options.max_prefill_chunk == 0 ||
      options.queue_capacity == 0 || options.burst_steps == 0)
    return make_error(errc::invalid_argument, "device '" + options.name +
                                                  "': step_token_budget, max_prefill_chunk, "
                                                  "queue_capacity and burst_steps must be >= 1");
  driver_options d;
  d.name = "drv." + options.name;
  d.domain = static_cast<int>(home.id());
  d.capacity = options.queue_capacity;
  d.cpus = options.driver_cpus;
  d.topo = options.topo;
  auto driver = driver_thread::start(std::move(d));
  if (!driver)
    return driver.error();
  std::shared_ptr<backend> shared{std::move(be)};
  return home.spawn<device_impl>(std::move(shared), std::move(*driver), std::move(options));
}

} // namespace triad
