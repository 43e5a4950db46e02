#include "devices/device.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>

#include <cstring>
#include <ctime>

#include <caf/all.hpp>

namespace triad {

namespace {

using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using export_done_atom = caf::atom_constant<caf::atom("exportdone")>;

// One forward step of a job: its batch size, tokens computed and time.
struct step_stat {
  std::size_t batch = 0;
  std::uint64_t tokens = 0;
  double seconds = 0;
};

// What a step job hands back: per item its sequence, the tokens it moved on, and the tokens
// chosen for it on the driver; or the job's error.
struct step_result {
  std::vector<seq_id> seqs;
  std::vector<std::size_t> tokens; // tokens the item moves its sequence on (computed or cached)
  std::vector<std::size_t> cached; // of those, tokens found in the prefix cache
  // Per item, the tokens chosen (one per step it took part in); all but the last were fed back
  // in the job's later steps and are in the KV (counted in `tokens`).
  std::vector<std::vector<token>> sampled;
  std::vector<step_stat> steps;   // the forward steps run, in order
  double compute_cpu_seconds = 0; // the driver thread's CPU inside the backend's steps
  expected<void> output = make_error(errc::invalid_argument, "not run");
  kv_usage kv;
};

// The calling thread's CPU time so far, in seconds.
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// How one sequence's tokens are chosen. Made at admission and then only used on the driver
// thread, which does the choosing: the actor reads its constant fields alone, and a sequence has
// one step job in flight at a time.
struct sample_plan {
  sampler pick;
  std::vector<token> forced; // scripted choices: the n-th token generated is forced[n]
  std::vector<token> stop;   // tokens that end generation besides EOS
  std::uint32_t max_new_tokens = 0;

  // The `generated`-th token (counting from 0) after these logits.
  token choose(std::uint32_t generated, std::span<const float> logits) {
    return generated < forced.size() ? forced[generated] : pick.sample(logits);
  }
  // Whether `tok` is one of the request's own stop tokens.
  bool stops_at(token tok) const { return std::find(stop.begin(), stop.end(), tok) != stop.end(); }
  // Whether `tok`, the `generated`-th token generated (counting from 1), ends the sequence, and
  // why ("stop" or "length"); nullptr when it goes on.
  const char* ends(token tok, std::uint32_t generated) const {
    if (tok == tokenizer::eos || stops_at(tok))
      return "stop";
    return generated >= max_new_tokens ? "length" : nullptr;
  }
};

// On the driver thread: sequence `seq`'s KV copied out of `be`.
expected<kv_blob> export_blob(backend& be, seq_id seq) {
  auto bytes = be.export_kv(seq);
  if (!bytes)
    return bytes.error();
  kv_blob blob;
  blob.seq = seq;
  blob.tokens = be.length(seq);
  blob.bytes = std::move(*bytes); // the backend's bytes themselves, not a copy
  return blob;
}

// On the driver thread: lets go of `seq`, the full pages of its `computed` tokens (empty: none)
// going into the prefix cache first.
void publish_and_free(backend& be, seq_id seq, const std::vector<token>& computed) {
  if (!computed.empty())
    be.publish(seq, computed);
  be.free(seq);
}

struct step_job;

} // namespace
} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<triad::step_job>)

namespace triad {

namespace {

// Per-device metrics, looked up once.
struct device_metrics {
  gauge* queue = nullptr;
  gauge* running = nullptr;
  gauge* kv_pages = nullptr;
  counter* steps = nullptr;
  counter* tokens = nullptr;
  counter* busy = nullptr;
  histogram* batch = nullptr;
  histogram* step_tokens = nullptr;
  histogram* step_seconds = nullptr;
  counter* cached = nullptr;

  void attach(metrics_registry& r, const std::string& name) {
    labels l{{"device", name}};
    auto take = [](auto result) { return result ? *result : nullptr; };
    queue = take(r.add_gauge("triad_device_queue_length", "sequences waiting for prefill", l));
    running = take(r.add_gauge("triad_device_running", "sequences decoding", l));
    kv_pages = take(r.add_gauge("triad_device_kv_pages_used", "KV pages held", l));
    steps = take(r.add_counter("triad_device_steps_total", "steps run", l));
    tokens = take(r.add_counter("triad_device_tokens_total", "tokens computed", l));
    busy = take(r.add_counter("triad_device_busy_seconds_total", "driver time in steps", l));
    batch = take(r.add_histogram("triad_device_batch_size", "sequences per step",
                                 {1, 2, 4, 8, 16, 32, 64, 128}, l));
    step_tokens = take(r.add_histogram("triad_device_step_tokens", "tokens per step",
                                       {1, 4, 16, 64, 256, 1024, 4096}, l));
    cached = take(r.add_counter("triad_device_prefix_cached_tokens_total",
                                "prompt tokens whose KV came from the prefix cache", l));
    step_seconds = take(
        r.add_histogram("triad_device_step_seconds", "step time", default_duration_buckets(), l));
  }
};

// One job for the driver thread: the frees, KV imports and prefix lookups queued before the
// step, the step, and the choice of each completed prompt's next token. Then, up to `max_steps`
// steps in all, the sequences whose token did not end them decode again with it, until the steps
// have taken `window` or the actor raises `interrupt` (a message that changes the batch has
// arrived). Last, the sequences that move out when done and are done are exported and freed.
// A device keeps one job object and fills it again for each job (one job is in flight at a
// time): its vectors keep their memory, so a job costs no allocation on the actor's thread and
// no memory goes from one thread to the other to be freed there.
struct step_job {
  std::shared_ptr<backend> be;
  std::vector<step_item> items;
  std::size_t item_count = 0; // items in use; entries past it keep their memory for later jobs
  std::vector<std::shared_ptr<sample_plan>> plans; // per item; null: its prompt goes on
  std::vector<caf::actor> sinks; // per item with a plan: where each chosen token goes at once
  std::vector<std::uint32_t> generated; // per item, tokens generated before the job
  std::vector<seq_id> frees;
  std::vector<std::pair<std::size_t, std::vector<token>>> lookups; // item index, its prompt
  std::size_t lookup_count = 0;                                    // as item_count, for lookups
  // KV imported into an item's sequence before the step (its item holds the tokens past the
  // KV); `error` is the driver's answer, empty when the import succeeded.
  struct import {
    std::size_t item = 0;
    std::shared_ptr<const kv_blob> blob; // shared with its sender: not copied
    std::string error;
    bool exhausted = false; // the error was a lack of KV pages: the import waits and retries
  };
  std::vector<import> imports;
  // Items whose sequence moves out when done: if the job ends its generation (not at a stop
  // token that parks it), the driver exports its KV into `blob`, publishes `publish` (its
  // computed tokens) to the prefix cache and frees it; `moved` then says so. An export error
  // leaves the sequence in place, with the reason in `error`.
  struct move_out {
    std::size_t item = 0;
    std::vector<token> publish;
    bool park_on_stop = false;
    kv_blob blob;
    std::string error;
    bool moved = false;
    const char* reason = nullptr; // why generation ended ("stop", "length"), when it did
  };
  std::vector<move_out> move_outs;
  std::size_t max_steps = 1;
  std::chrono::microseconds window{};
  std::shared_ptr<std::atomic<bool>> interrupt;
  step_result result;

  // Empties the job for the next one, keeping every vector's memory.
  void reset() {
    item_count = 0;
    lookup_count = 0;
    imports.clear();
    move_outs.clear();
    plans.clear();
    sinks.clear();
    generated.clear();
    frees.clear();
    result.seqs.clear();
    result.tokens.clear();
    result.cached.clear();
    for (auto& s : result.sampled)
      s.clear();
    result.steps.clear();
    result.compute_cpu_seconds = 0;
    result.output = make_error(errc::invalid_argument, "not run");
  }

  // Adds an item of `seq` with the tokens [first, last), reusing an earlier job's entry.
  template<class It>
  void add_item(seq_id seq, It first, It last) {
    if (item_count == items.size())
      items.emplace_back();
    auto& item = items[item_count++];
    item.seq = seq;
    item.tokens.assign(first, last);
  }

  // Adds a prefix lookup for item `i` of the prompt `prompt`.
  void add_lookup(std::size_t i, const std::vector<token>& prompt) {
    if (lookup_count == lookups.size())
      lookups.emplace_back();
    lookups[lookup_count].first = i;
    lookups[lookup_count++].second.assign(prompt.begin(), prompt.end());
  }

  void operator()() {
    for (auto id : frees)
      be->free(id);
    for (auto& im : imports) {
      std::span<const std::byte> bytes{im.blob->bytes};
      if (auto ok = be->import_kv(items[im.item].seq, bytes); !ok) {
        im.error = ok.error().message;
        im.exhausted = ok.error().code == errc::exhausted;
        items[im.item].tokens.clear(); // leaves the step (attach_prefixes drops empty items)
      }
    }
    auto& r = result;
    if (r.sampled.size() < r.seqs.size())
      r.sampled.resize(r.seqs.size());
    std::span<step_item> batch{items.data(), item_count};
    auto live = attach_prefixes(batch); // the result index of each entry of `batch`
    if (batch.empty())
      r.output = expected<void>{};
    auto start = std::chrono::steady_clock::now();
    std::vector<step_item> next; // the burst's later steps: one token per item
    std::vector<std::size_t> next_live;
    for (std::size_t step = 0; !batch.empty(); ++step) {
      const double cpu_before = thread_cpu_seconds();
      auto out = run(batch);
      r.compute_cpu_seconds += thread_cpu_seconds() - cpu_before;
      if (!out) {
        if (step == 0) // a later step's failure ends the burst; what it made so far stands
          r.output = out.error();
        break;
      }
      r.output = expected<void>{};
      r.steps.push_back({batch.size(), out->tokens, out->seconds});
      std::size_t kept = 0;
      next_live.clear();
      for (std::size_t k = 0; k < batch.size(); ++k) {
        auto i = live[k];
        if (step > 0)
          ++r.tokens[i]; // the token chosen in the previous step is in the KV now
        auto& plan = plans[i];
        if (!plan)
          continue;
        auto n = generated[i] + static_cast<std::uint32_t>(r.sampled[i].size());
        auto tok = plan->choose(n, out->logits[k]);
        r.sampled[i].push_back(tok);
        if (sinks[i]) // each token leaves as it is chosen, not at the end of the burst
          caf::anon_send(sinks[i], device_event{r.seqs[i],
                                                device_event::token,
                                                {tok},
                                                n + 1,
                                                {},
                                                static_cast<std::uint32_t>(r.cached[i]),
                                                {}});
        if (plan->ends(tok, n + 1) == nullptr) {
          // Written in place: entry `kept` of `next` is read no more in this step.
          if (kept == next.size())
            next.emplace_back();
          next[kept].seq = batch[k].seq;
          next[kept].tokens.assign(1, tok);
          ++kept;
          next_live.push_back(i);
        }
      }
      if (step + 1 >= max_steps || interrupt->load(std::memory_order_relaxed) ||
          std::chrono::steady_clock::now() - start >= window)
        break;
      batch = std::span<step_item>{next.data(), kept};
      live.swap(next_live);
    }
    for (auto& mo : move_outs)
      export_if_ended(mo);
    r.kv = be->kv();
  }

  // See move_out.
  void export_if_ended(move_out& mo) {
    auto& r = result;
    const auto& sampled = r.sampled[mo.item];
    const auto& plan = plans[mo.item];
    if (sampled.empty() || !plan)
      return;
    auto last = sampled.back();
    mo.reason = plan->ends(last, generated[mo.item] + static_cast<std::uint32_t>(sampled.size()));
    if (mo.reason == nullptr || (mo.park_on_stop && last != tokenizer::eos && plan->stops_at(last)))
      return; // generation goes on, or the sequence parks
    auto seq = r.seqs[mo.item];
    auto blob = export_blob(*be, seq);
    if (!blob) {
      mo.error = blob.error().message;
      return;
    }
    mo.blob = std::move(*blob);
    publish_and_free(*be, seq, mo.publish);
    mo.moved = true;
  }

  // Sequences computed from their first token start from their prompt's longest prefix in the
  // cache; items wholly cached leave the step (`batch` shrinks). Returns the result index of each
  // item left.
  std::vector<std::size_t> attach_prefixes(std::span<step_item>& batch) {
    auto& r = result;
    for (std::size_t l = 0; l < lookup_count; ++l) {
      auto& [i, prompt] = lookups[l];
      auto covered = be->attach_prefix(batch[i].seq, prompt);
      if (covered == 0)
        continue;
      // The item starts at token 0; its first `covered` tokens need no computing.
      auto& toks = batch[i].tokens;
      auto skip = std::min(covered, toks.size());
      toks.erase(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(skip));
      r.tokens[i] = std::max(covered, r.tokens[i]);
      r.cached[i] = covered;
    }
    // The items left move to the front, in order (swapped: every entry keeps its memory).
    std::vector<std::size_t> live;
    live.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].tokens.empty())
        continue;
      if (live.size() != i)
        std::swap(batch[live.size()], batch[i]);
      live.push_back(i);
    }
    batch = batch.first(live.size());
    return live;
  }

  // One forward step; a backend bug must not leave the job unanswered.
  expected<step_output> run(std::span<const step_item> batch) {
    try {
      return be->step(batch);
    } catch (const std::exception& e) {
      return make_error(errc::system_error, std::string{"the backend threw: "} + e.what());
    } catch (...) {
      return make_error(errc::system_error, "the backend threw");
    }
  }
};

class device_actor : public homed_actor {
public:
  device_actor(caf::actor_config& cfg, std::shared_ptr<backend> be,
               std::unique_ptr<driver_thread> driver, device_options options)
      : homed_actor(cfg)
      , backend_(std::move(be))
      , driver_(std::move(driver))
      , options_(std::move(options)) {
    if (options_.metrics != nullptr)
      metrics_.attach(*options_.metrics, options_.name);
    // The driver has run nothing yet, so reading the backend here is safe.
    kv_ = backend_->kv();
    attach_functor([driver = driver_.get()](const caf::error&) { driver->stop(); });
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
    if (!always && moved < step && (free == 0) == (kv_reported_ == 0))
      return;
    kv_reported_ = free;
    for (const auto& w : kv_watchers_)
      send(w, kv_free_atom::value, address(), free, total);
  }

  // Sequences hold their requests' actors (sinks), export promises their callers and queued
  // jobs this actor: dropped at exit, so no request and this device keep each other alive
  // through a cycle (CAF frees an actor only when its last strong reference goes). LeakSanitizer
  // found one at a node's stop: device -> sequence -> request -> its context -> router -> device.
  void on_exit() override {
    for (auto& [key, promise] : exports_)
      promise.deliver(caf::make_error(caf::sec::request_receiver_down));
    exports_.clear();
    spare_job_.reset(); // its sinks
    seqs_.clear();
    backlog_.clear();
    pending_frees_.clear();
    kv_watchers_.clear();
  }

  caf::behavior make_behavior() override {
    return {
        [this](generate_atom, generate_request& req) { return answer(admit(std::move(req))); },
        [this](park_atom, seq_id id) {
          interrupt_burst();
          if (auto* s = find(id))
            s->state = seq_state::parked;
        },
        [this](resume_atom, seq_id id, std::vector<token>& appended) {
          interrupt_burst();
          auto* s = find(id);
          if (s == nullptr)
            return;
          s->tokens.insert(s->tokens.end(), appended.begin(), appended.end());
          s->state = s->computed < s->tokens.size() ? seq_state::waiting : seq_state::running;
          s->finished = false;
          schedule();
        },
        [this](free_atom, seq_id id) { release(id); },
        [this](stats_atom) { return snapshot(); },
        [this](watch_kv_atom, caf::actor& watcher) {
          kv_watchers_.push_back(std::move(watcher));
          report_kv(true);
        },
        [this](retry_atom) {
          retry_pending_ = false;
          schedule();
        },
        [this](export_atom, seq_id id) { return export_kv(id, false); },
        [this](move_out_atom, seq_id id) { return export_kv(id, true); },
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
          return answer(import(std::make_shared<const kv_blob>(std::move(blob)), std::move(req)));
        },
        [this](import_atom, std::shared_ptr<const kv_blob>& blob, generate_request& req) {
          return answer(import(std::move(blob), std::move(req)));
        },
        [this](step_done_atom, std::shared_ptr<step_job>& job) { on_step(std::move(job)); },
    };
  }

private:
  enum class seq_state { importing, waiting, running, parked, done };

  struct sequence {
    generate_request req;
    std::vector<token> tokens; // prompt, generated and appended tokens
    std::size_t computed = 0;  // tokens whose KV the backend holds
    std::size_t cached = 0;    // of those, tokens attached from the prefix cache (whole pages)
    bool lookup = false;       // look the prompt up in the prefix cache before computing it
    std::uint32_t generated = 0;
    seq_state state = seq_state::waiting;
    bool finished = false;
    std::shared_ptr<sample_plan> plan; // how its tokens are chosen (on the driver)
    std::uint64_t admitted_order = 0;
    std::shared_ptr<const kv_blob> import; // importing: the KV to import with its first step
    std::uint64_t import_tokens = 0;       // importing, once in a job: the tokens its KV covers
  };

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
    auto self = caf::actor_cast<caf::actor>(this);
    auto job = [be = backend_, id, key, self] {
      auto out = export_blob(*be, id);
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

  // Ends the driver's burst after its current step: the batch is about to change.
  void interrupt_burst() {
    if (in_flight_)
      interrupt_->store(true, std::memory_order_relaxed);
  }

  sequence* find(seq_id id) {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? nullptr : &it->second;
  }

  admission refuse(errc code, std::string why) {
    ++stats_.refused;
    return admission{false, std::move(why), code};
  }

  // Admits a sequence whose KV comes from `blob`; the import runs in the sequence's first step
  // job, before the step.
  admission import(std::shared_ptr<const kv_blob> blob, generate_request req) {
    if (!blob)
      return refuse(errc::invalid_argument,
                    "invalid: sequence " + std::to_string(req.seq) + " has no KV to import");
    // At least one token past the KV: its logits give the next token.
    if (req.prompt.size() <= blob->tokens)
      return refuse(errc::invalid_argument,
                    "invalid: sequence " + std::to_string(req.seq) + " has " +
                        std::to_string(req.prompt.size()) + " tokens; its KV covers " +
                        std::to_string(blob->tokens) + ", and at least one more is needed");
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
    if (seqs_.size() >= options_.max_sequences)
      return refuse(errc::busy, "busy: " + std::to_string(seqs_.size()) + " of " +
                                    std::to_string(options_.max_sequences) +
                                    " sequences in flight on " + options_.name);
    if (options_.role == device_role::prefill)
      req.max_new_tokens = std::min<std::uint32_t>(req.max_new_tokens, 1);
    sequence s;
    s.tokens = req.prompt;
    s.state = importing ? seq_state::importing : seq_state::waiting;
    s.lookup = !importing && options_.prefix_cache && req.reuse_prefix;
    s.plan = std::make_shared<sample_plan>(sample_plan{sampler{req.sampling}, std::move(req.forced),
                                                       std::move(req.stop), req.max_new_tokens});
    s.admitted_order = next_order_++;
    s.import = std::move(import);
    s.req = std::move(req);
    auto id = s.req.seq;
    seqs_.emplace(id, std::move(s));
    return admission{true, {}, {}};
  }

  // Answers an admission, then schedules: the driver sends a sequence's tokens to its sink as
  // it chooses them, so the sink must hold the answer (and know the sequence is its own)
  // before the first step can run.
  caf::result<admission> answer(admission a) {
    auto promise = make_response_promise<admission>();
    const bool accepted = a.accepted;
    promise.deliver(std::move(a));
    if (accepted)
      schedule();
    return promise;
  }

  void release(seq_id id) {
    auto it = seqs_.find(id);
    std::vector<token> computed;
    if (it != seqs_.end() && options_.prefix_cache && it->second.computed > 0) {
      const auto& t = it->second.tokens;
      computed.assign(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(it->second.computed));
    }
    if (it != seqs_.end())
      seqs_.erase(it);
    // The backend is only touched on the driver thread; the KV's full pages go into the prefix
    // cache before the sequence lets go of them.
    submit([be = backend_, id, computed = std::move(computed)] {
      publish_and_free(*be, id, computed);
    });
    update_gauges();
  }

  // Hands a job (export, import, free) to the driver, in order: straight into its queue when
  // nothing waits before it, else behind the backlog, which goes in as the driver frees up.
  // The backlog stays small: each sequence has at most one export or import outstanding.
  void submit(driver_job&& job) {
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
      delayed_send(this, std::chrono::milliseconds{1}, retry_atom::value);
    }
  }

  // Pages a sequence of `tokens` tokens holds.
  std::size_t pages_for(std::size_t tokens) const {
    return (tokens + kv_.page_tokens - 1) / kv_.page_tokens;
  }

  // Forms the next step when none is in flight: every running decode (one token each), then
  // chunked prefills of waiting sequences in admission order, within the token budget and the
  // free KV pages (the actor mirrors the cache: a sequence holds pages_for(computed)). When not
  // even the decodes fit, the newest sequence is preempted (KV dropped, recomputed later).
  void schedule() {
    if (!drain_backlog() || in_flight_)
      return; // a step goes behind the jobs queued before it
    auto job = spare_job_ ? std::move(spare_job_) : std::make_shared<step_job>();
    job->reset();
    std::size_t budget = options_.step_token_budget;
    auto& order = order_; // kept between calls: its memory is reused
    order.clear();
    std::size_t used = 0;
    for (auto& [id, s] : seqs_) {
      order.push_back(&s);
      // Pages attached from the prefix cache are shared: counted as free here (an estimate;
      // the backend's reservation is exact and answers exhausted when it is wrong).
      used += pages_for(s.computed) - s.cached / kv_.page_tokens;
    }
    std::size_t free_pages = kv_.pages_total > used ? kv_.pages_total - used : 0;
    std::sort(order.begin(), order.end(),
              [](auto* a, auto* b) { return a->admitted_order < b->admitted_order; });
    bool starved = false;
    for (auto* s : order) {
      if (budget == 0)
        break;
      if (s->state == seq_state::running && !s->finished && s->computed + 1 == s->tokens.size()) {
        auto need = pages_for(s->computed + 1) - pages_for(s->computed);
        if (need > free_pages) {
          starved = true;
          continue;
        }
        free_pages -= need;
        job->add_item(s->req.seq, s->tokens.end() - 1, s->tokens.end());
        --budget;
      }
    }
    for (auto*& s : order) {
      if (budget == 0)
        break;
      // An importing sequence's KV arrives in the step job, before the step: it is computed up
      // to the KV's tokens by then, and needs pages for them too.
      bool importing = s->state == seq_state::importing && s->import;
      if (s->state != seq_state::waiting && !importing)
        continue;
      if (pages_for(s->tokens.size()) > kv_.pages_total) {
        auto id = s->req.seq;
        emit(*s, device_event::failed,
             "sequence of " + std::to_string(s->tokens.size()) + " tokens needs " +
                 std::to_string(pages_for(s->tokens.size())) + " KV pages; device " +
                 options_.name + " has " + std::to_string(kv_.pages_total));
        pending_frees_.push_back(id);
        seqs_.erase(id);
        s = nullptr; // gone: the loops below skip it
        continue;
      }
      auto computed = importing ? s->import->tokens : s->computed;
      auto room = (pages_for(s->computed) + free_pages) * kv_.page_tokens;
      auto fit = room > computed ? room - computed : 0;
      auto left = s->tokens.size() - computed;
      auto chunk = std::min({left, budget, options_.max_prefill_chunk, fit});
      if (chunk == 0) {
        starved = true;
        continue;
      }
      free_pages -= pages_for(computed + chunk) - pages_for(s->computed);
      auto first = s->tokens.begin() + static_cast<std::ptrdiff_t>(computed);
      job->add_item(s->req.seq, first, first + static_cast<std::ptrdiff_t>(chunk));
      if (importing) {
        s->import_tokens = computed;
        job->imports.push_back({job->item_count - 1, std::move(s->import), {}});
      }
      budget -= chunk;
    }
    if (job->item_count == 0) {
      spare_job_ = std::move(job);
      if (!starved)
        return;
      if (preempt_one())
        return schedule();
      // Nothing holds KV and still nothing fits: fail what waits rather than hang.
      for (auto* s : order)
        if (s != nullptr && (s->state == seq_state::waiting || s->state == seq_state::running)) {
          emit(*s, device_event::failed, "no KV pages free on " + options_.name);
          seqs_.erase(s->req.seq);
        }
      return;
    }
    // Every sequence that could take part is in the step and each one's prompt completes in
    // it: the driver may decode on with the same batch (a burst).
    std::size_t eligible = 0;
    for (auto& [id, s] : seqs_)
      eligible += s.state == seq_state::waiting || s.state == seq_state::importing ||
                  (s.state == seq_state::running && !s.finished);
    auto& result = job->result;
    bool all_complete = true;
    for (std::size_t i = 0; i < job->item_count; ++i) {
      const auto& item = job->items[i];
      auto* s = find(item.seq);
      result.seqs.push_back(item.seq);
      result.tokens.push_back(item.tokens.size());
      result.cached.push_back(0);
      auto computed = s->state == seq_state::importing ? s->import_tokens : s->computed;
      bool completes = computed + item.tokens.size() == s->tokens.size();
      all_complete = all_complete && completes;
      job->plans.push_back(completes ? s->plan : nullptr);
      job->sinks.push_back(completes ? s->req.sink : caf::actor{});
      if (completes && s->req.move_out_when_done) {
        job->move_outs.emplace_back();
        auto& mo = job->move_outs.back();
        mo.item = i;
        mo.park_on_stop = s->req.park_on_stop;
        if (options_.prefix_cache) // the whole prompt is computed once the item has run
          mo.publish = s->tokens;
      }
      job->generated.push_back(s->generated);
      if (s->lookup && s->computed == 0) {
        job->add_lookup(i, s->tokens);
        s->lookup = false;
      }
    }
    job->be = backend_;
    job->frees.swap(pending_frees_); // both empty before: pending_frees_ is empty after
    job->max_steps =
        all_complete && !starved && eligible == job->item_count ? options_.burst_steps : 1;
    job->window = options_.burst_window;
    interrupt_->store(false, std::memory_order_relaxed);
    job->interrupt = interrupt_;
    auto run = [job, reply_to = caf::actor_cast<caf::actor>(this)]() mutable {
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
      // The driver still holds the previous step's tail or frees: the frees taken for this
      // step go back, and scheduling is retried shortly, so no work is dropped.
      pending_frees_.swap(job->frees);
      for (auto& im : job->imports) // imported with a later job
        if (auto* s = find(job->items[im.item].seq))
          s->import = std::move(im.blob);
      for (std::size_t l = 0; l < job->lookup_count; ++l)
        if (auto* s = find(job->items[job->lookups[l].first].seq))
          s->lookup = true;
      spare_job_ = std::move(job);
      retry_soon();
      break;
    case submit_result::stopped:
      break; // the device is going down
    }
  }

  // A job's result; the job object is kept for the next job once it has been read.
  void on_step(std::shared_ptr<step_job> job) {
    in_flight_ = false;
    job->sinks.clear(); // the driver is done with them: a kept job holds no request
    auto& r = job->result;
    kv_ = r.kv;
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
      if (!im.error.empty()) {
        emit(*s, device_event::failed, "KV import failed: " + im.error);
        seqs_.erase(r.seqs[im.item]);
        continue;
      }
      s->computed = s->import_tokens;       // the tokens past it are counted below
      if (s->state == seq_state::importing) // else parked meanwhile
        s->state = seq_state::waiting;
    }
    job->imports.clear(); // the blobs' memory goes now, not with the next job
    if (!starved_imports.empty() && !preempt_one()) // nothing to make room: they fail
      for (auto& [id, error] : starved_imports)
        if (auto* s = find(id)) {
          emit(*s, device_event::failed, "KV import failed: " + error);
          seqs_.erase(id);
        }
    if (!r.output) {
      if (r.output.error().code == errc::exhausted && preempt_one()) {
        spare_job_ = std::move(job);
        return schedule();
      }
      for (auto id : r.seqs)
        if (auto* s = find(id)) {
          emit(*s, device_event::failed, r.output.error().message);
          seqs_.erase(id);
          pending_frees_.push_back(id);
        }
      spare_job_ = std::move(job);
      return schedule();
    }
    stats_.step_jobs += r.steps.empty() ? 0 : 1;
    std::uint64_t job_tokens = 0;
    double job_seconds = 0;
    for (const auto& st : r.steps) {
      job_tokens += st.tokens;
      job_seconds += st.seconds;
    }
    if (metrics_.steps != nullptr) { // the distributions per step
      metrics_.batch->observe_each(
          r.steps, [](const step_stat& st) { return static_cast<double>(st.batch); });
      metrics_.step_tokens->observe_each(
          r.steps, [](const step_stat& st) { return static_cast<double>(st.tokens); });
      metrics_.step_seconds->observe_each(r.steps, [](const step_stat& st) { return st.seconds; });
    }
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
      if (s == nullptr) // freed while the step ran
        continue;
      s->computed += r.tokens[i];
      if (r.cached[i] != 0) {
        s->cached = r.cached[i];
        stats_.cached_tokens += r.cached[i];
        if (metrics_.cached != nullptr)
          metrics_.cached->inc(static_cast<double>(r.cached[i]));
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
      const token last = sampled.back();
      const char* ended = s->plan->ends(last, s->generated);
      if (ended != nullptr) {
        s->finished = true;
        bool park = parked_meanwhile ||
                    (s->req.park_on_stop && last != tokenizer::eos && s->plan->stops_at(last));
        s->state = park ? seq_state::parked : seq_state::done;
      } else if (!parked_meanwhile) {
        s->state = seq_state::running;
      }
      auto mo = std::find_if(job->move_outs.begin(), job->move_outs.end(),
                             [i](const auto& m) { return m.item == i && m.moved; });
      if (mo != job->move_outs.end()) {
        // Exported and freed on the driver: the KV goes with the done event, the sequence goes.
        emit(*s, device_event::done, mo->reason, {}, std::move(mo->blob));
        seqs_.erase(r.seqs[i]);
      } else if (ended != nullptr) {
        emit(*s, device_event::done, ended);
      }
    }
    update_gauges();
    spare_job_ = std::move(job);
    schedule();
  }

  // Drops one sequence's KV for memory and marks it for recompute: a finished sequence first
  // (its KV is only kept for reuse), then a parked one, then the most recently admitted running
  // or waiting one. False when no sequence holds KV.
  bool preempt_one() {
    auto rank = [](const sequence& s) {
      return s.state == seq_state::done ? 2 : s.state == seq_state::parked ? 1 : 0;
    };
    sequence* victim = nullptr;
    for (auto& [id, s] : seqs_) {
      if (s.computed == 0)
        continue;
      if (victim == nullptr || rank(s) > rank(*victim) ||
          (rank(s) == rank(*victim) && s.admitted_order > victim->admitted_order))
        victim = &s;
    }
    if (victim == nullptr)
      return false;
    ++stats_.preemptions;
    pending_frees_.push_back(victim->req.seq);
    victim->computed = 0;
    victim->cached = 0;
    victim->lookup = options_.prefix_cache && victim->req.reuse_prefix;
    if (victim->state == seq_state::running)
      victim->state = seq_state::waiting;
    emit(*victim, device_event::preempted, "KV memory exhausted; recomputing when scheduled");
    return true;
  }

  void emit(const sequence& s, device_event::kind_t kind, std::string message,
            std::vector<token> tokens = {}, kv_blob kv = {}) {
    if (!s.req.sink)
      return;
    send(s.req.sink,
         device_event{s.req.seq, kind, std::move(tokens), s.generated, std::move(message),
                      static_cast<std::uint32_t>(s.cached), std::move(kv)});
  }

  device_stats snapshot() const {
    auto st = stats_;
    st.sequences = seqs_.size();
    for (const auto& [id, s] : seqs_) {
      st.waiting += s.state == seq_state::waiting;
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
    metrics_.kv_pages->set(static_cast<double>(st.kv_pages_used));
  }

  std::shared_ptr<backend> backend_;
  std::unique_ptr<driver_thread> driver_;
  device_options options_;
  device_metrics metrics_;
  std::map<seq_id, sequence> seqs_;
  std::vector<sequence*> order_;        // schedule()'s scratch: the sequences in admission order
  std::shared_ptr<step_job> spare_job_; // the job object filled again for the next job
  std::vector<seq_id> pending_frees_;
  std::map<std::uint64_t, caf::response_promise> exports_;
  std::uint64_t next_promise_ = 0;
  bool in_flight_ = false;
  // Raised when a message changes what the next step should hold: the driver ends a burst.
  std::shared_ptr<std::atomic<bool>> interrupt_ = std::make_shared<std::atomic<bool>>(false);
  bool retry_pending_ = false;
  std::deque<driver_job> backlog_; // jobs waiting for room in the driver's queue, in order
  std::uint64_t next_order_ = 0;
  device_stats stats_;
  kv_usage kv_;
  std::vector<caf::actor> kv_watchers_; // told of free KV pages (the router)
  std::uint64_t kv_reported_ = 0;       // the free pages they last heard of
};

} // namespace

expected<caf::actor> spawn_device(domain& home, std::unique_ptr<backend> be,
                                  device_options options) {
  if (be == nullptr)
    return make_error(errc::invalid_argument, "device '" + options.name + "': no backend");
  if (options.max_sequences == 0 || options.step_token_budget == 0 ||
      options.max_prefill_chunk == 0 || options.queue_capacity == 0 || options.burst_steps == 0)
    return make_error(errc::invalid_argument, "device '" + options.name +
                                                  "': max_sequences, step_token_budget, "
                                                  "max_prefill_chunk, queue_capacity and "
                                                  "burst_steps must be "
                                                  ">= 1");
  driver_options d;
  d.name = "drv." + options.name;
  d.capacity = options.queue_capacity;
  d.cpus = options.driver_cpus;
  d.topo = options.topo;
  auto driver = driver_thread::start(std::move(d));
  if (!driver)
    return driver.error();
  std::shared_ptr<backend> shared{std::move(be)};
  return home.spawn<device_actor>(std::move(shared), std::move(*driver), std::move(options));
}

} // namespace triad
