#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>

#include "devices/backend.hpp"
#include "devices/device.hpp"
#include "devices/sampling.hpp"
#include "devices/tokenizer.hpp"

/// The driver-side half of a device: the job its driver thread runs for each step (owed
/// publishes and frees, imports, prefix lookups, the forward steps of a burst, the choice of each
/// token, exports), and how a sequence's tokens are chosen and when they end it. The device actor
/// fills a job from its step plan (detail/step_plan.hpp) and reads its result (devices/device.cpp).
namespace triad::detail {

// One forward step of a job: its batch size, tokens computed and time.
struct step_stat {
  std::size_t batch = 0;
  std::uint64_t tokens = 0;
  double seconds = 0;
  double operational_intensity = 0; // step_output's (0: not modelled)
  double capacity_footprint = 0;
  std::array<double, max_memory_tiers> tier_resident{}; // step_output's
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
  // Of `cached`, tokens whose pages came from the tier below or another device.
  std::vector<std::size_t> fetched;
  std::size_t fetches_corrupted = 0; // fetched pages refused: one failed its checksum
  std::vector<step_stat> steps;      // the forward steps run, in order
  std::chrono::steady_clock::time_point started, finished;        // the job's run on the driver
  std::chrono::steady_clock::time_point imports_from, imports_to; // its KV imports, if any
  double compute_cpu_seconds = 0;    // the driver thread's CPU inside the backend's steps
  expected<void> output = make_error(errc::invalid_argument, "not run");
  kv_usage kv;
};

// How one sequence's tokens are chosen. Made at admission and then only used on the driver
// thread, which does the choosing: the actor reads its constant fields alone, and a sequence has
// one step job in flight at a time.
struct sample_plan {
  sampler pick;
  std::vector<token> forced; // scripted choices: the n-th token generated is forced[n]
  std::vector<token> stop;   // tokens that end generation besides `end`
  std::uint32_t max_new_tokens = 0;
  std::vector<token> end{tokenizer::eos}; // tokens that end the answer (never park)
  // The request's grammar (response_format), null without one: tokens it does not allow are
  // masked before sampling, and every token chosen (forced ones too) moves it on.
  std::shared_ptr<grammar::token_constraint> constraint{};
  std::vector<float> masked{}; // the masked logits (kept: one vocabulary of floats per step)
  bool logprobs = false;       // report each token's log probability (generate_request)
  std::uint8_t top_logprobs = 0; // and this many alternatives

  // The `generated`-th token (counting from 0) after these logits.
  token choose(std::uint32_t generated, std::span<const float> logits) {
    token t;
    if (generated < forced.size()) {
      t = forced[generated];
    } else if (!constraint) {
      return pick.sample(logits);
    } else {
      masked.assign(logits.begin(), logits.end());
      // Nothing allowed: the answer is complete and the model has no end token in range, or
      // (only past 1024 levels of nesting: grammars are checked to have finite documents) a
      // dead end. The answer ends.
      if (!constraint->apply(masked))
        return end.empty() ? pick.sample(logits) : end.front();
      t = pick.sample(masked);
      // Near the end of the budget: a token that leaves no room to close the output gives
      // way to one on a shortest way to its end.
      if (!constraint->fits(static_cast<std::uint32_t>(t))) {
        masked.assign(logits.begin(), logits.end());
        if (constraint->apply_shortest(masked))
          t = pick.sample(masked);
      }
    }
    if (constraint) {
      constraint->advance(static_cast<std::uint32_t>(t));
      if (!is_end(t) && !stops_at(t)) // the next mask, computed while the next step runs
        constraint->prefetch();
    }
    return t;
  }
  // Whether `tok` is one of the request's own stop tokens.
  bool stops_at(token tok) const { return std::find(stop.begin(), stop.end(), tok) != stop.end(); }
  // Whether `tok` ends the answer.
  bool is_end(token tok) const { return std::find(end.begin(), end.end(), tok) != end.end(); }
  // Whether `tok`, the `generated`-th token generated (counting from 1), ends the sequence, and
  // why ("stop" or "length"); nullptr when it goes on.
  const char* ends(token tok, std::uint32_t generated) const {
    if (is_end(tok) || stops_at(tok))
      return "stop";
    return generated >= max_new_tokens ? "length" : nullptr;
  }

  /// Where a sequence's generation stands after a token.
  struct ending {
    const char* reason = nullptr; ///< "stop" or "length"; nullptr: generation goes on
    bool parks = false; ///< it ended at one of its own stop tokens and parks on stop: kept
  };
  /// Whether `tok`, the `generated`-th token generated (from 1), ends the sequence, and whether
  /// it then parks (`park_on_stop` and one of its own stop tokens, not EOS) instead of being
  /// done. The one rule both the driver (export the KV or not) and the actor (done or parked)
  /// follow.
  ending end_of(token tok, std::uint32_t generated, bool park_on_stop) const {
    ending e{ends(tok, generated), false};
    e.parks = e.reason != nullptr && park_on_stop && !is_end(tok) && stops_at(tok);
    return e;
  }
};

// Where a sequence's stream (the tier's blocks it moves out through) arrives: the device actor
// puts it there when the tier answers, the driver takes it when the sequence moves out, whichever
// comes first (a lease that comes late is dropped with the slot and gives its blocks back).
class stream_slot {
public:
  void put(std::shared_ptr<kv_stream> s) {
    std::lock_guard<std::mutex> g{m_};
    stream_ = std::move(s);
  }
  std::shared_ptr<kv_stream> take() {
    std::lock_guard<std::mutex> g{m_};
    return std::move(stream_);
  }

private:
  std::mutex m_;
  std::shared_ptr<kv_stream> stream_;
};

// On the driver thread: sequence `seq`'s KV copied out of `be`.
expected<kv_blob> export_blob(backend& be, seq_id seq);

// On the driver thread: lets go of `seq`, the full pages of its `computed` tokens (empty: none)
// going into the prefix cache first.
void publish_and_free(backend& be, seq_id seq, const std::vector<token>& computed);

// Work a device owes its driver that no reply waits for: pages to publish to the prefix cache
// (a sequence, its computed tokens) and sequences to free. It rides in the next job the device
// sends the driver (a step job, or a job of its own in front of any other, or at once when a
// sequence is released on an idle device) instead of a job of its own each time: at 1 session of
// triad-bench-orchestration the driver jobs per request fell from 10 to 6.
struct deferred_work {
  std::vector<std::pair<seq_id, std::vector<token>>> publishes;
  std::vector<seq_id> frees;

  bool empty() const noexcept { return publishes.empty() && frees.empty(); }
  void clear() {
    publishes.clear();
    frees.clear();
  }
  // On the driver thread: the publishes, then the frees (a sequence is published before it is
  // freed, as publish_and_free does).
  void apply(backend& be) const;
};

// The sequence id share_pages uses on the driver for its copy; no request may use it.
inline constexpr seq_id lender_seq = ~seq_id{0};

// On the driver thread: pages `first`..`first + count - 1` of the page chain of `tokens` that
// `be`'s prefix cache holds (the run from the first page; fewer when it ends sooner), copied
// out with their identity and checksum for another device to append.
std::vector<kv_page> share_pages(backend& be, std::span<const token> tokens, std::size_t first,
                                 std::size_t count);

// One job for the driver thread: the publishes and frees owed, the KV imports and prefix
// lookups queued before the step, the step, and the choice of each completed prompt's next token.
// Then, up to `max_steps` steps in all, the sequences whose token did not end them decode again
// with it, until the steps have taken `window` or the actor raises `interrupt` (a message that
// changes the batch has arrived). Last, the sequences that move out when done and are done are
// exported and freed. A device keeps one job object and fills it again for each job (one job is in
// flight at a time): its vectors keep their memory, so a job costs no allocation on the actor's
// thread and no memory goes from one thread to the other to be freed there.
struct step_job {
  std::shared_ptr<backend> be;
  std::vector<step_item> items;
  std::size_t item_count = 0; // items in use; entries past it keep their memory for later jobs
  std::vector<std::shared_ptr<sample_plan>> plans; // per item; null: its prompt goes on
  std::vector<caf::actor> sinks; // per item with a plan: where each chosen token goes at once
  std::vector<std::uint32_t> generated; // per item, tokens generated before the job
  // Per item: its lookup attaches its own KV back (swapped out when it was preempted), which
  // was computed once already: its events report no cached tokens for it.
  std::vector<bool> swap_ins;
  // Per item: prompt tokens attached from caches in earlier jobs, and of those the ones read
  // from the tier below (what its events report when this job attaches none).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> earlier_cached;
  deferred_work owed; // published and freed before anything else
  std::vector<std::pair<std::size_t, std::vector<token>>> lookups; // item index, its prompt
  std::size_t lookup_count = 0;                                    // as item_count, for lookups
  // Per lookup: pages of its prompt fetched from the tier below (kv_tier::fetch), appended past
  // what the device's own prefix cache holds; null: none.
  std::vector<std::shared_ptr<const std::vector<kv_page>>> lookup_pages;
  // Pages the prefix cache evicted during the job, copied out for the tier below (captured
  // only when `capture` is set: the device has a tier).
  std::vector<kv_page> evicted;
  bool capture = false;
  // KV imported into an item's sequence before the step (its item holds the tokens past the
  // KV); `error` is the driver's answer, empty when the import succeeded.
  struct import {
    std::size_t item = 0;
    std::shared_ptr<const kv_blob> blob; // shared with its sender: not copied
    std::string error;
    bool exhausted = false; // the error was a lack of KV pages: the import waits and retries
    // A stream that came damaged or broke off: its tokens were put back into the item and
    // computed in the step instead (`error` says why).
    bool recomputed = false;
  };
  std::vector<import> imports;
  // Per item: the seconds its import took in this job (0: none), reported with its first token.
  std::vector<float> import_seconds;
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
    // Where the tier's blocks to stream the KV through arrive (null, or empty when the job
    // ends it: a blob) and the sequence's tokens. Streamed: the driver sent the done event
    // itself, before the pages, so the receiving device starts while later layer groups are
    // copied.
    std::shared_ptr<stream_slot> slot;
    std::vector<token> tokens;
    std::size_t cached = 0; // prompt tokens attached from caches before this job
    std::size_t stored = 0; // of those, from the tier below
    bool streamed = false;
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
    import_seconds.clear();
    move_outs.clear();
    plans.clear();
    sinks.clear();
    generated.clear();
    swap_ins.clear();
    earlier_cached.clear();
    owed.clear();
    result.seqs.clear();
    result.tokens.clear();
    result.cached.clear();
    result.fetched.clear();
    for (auto& s : result.sampled)
      s.clear();
    result.steps.clear();
    result.compute_cpu_seconds = 0;
    result.fetches_corrupted = 0;
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

  // Adds a prefix lookup for item `i` of the prompt `prompt`, with the pages of it fetched
  // from the tier below (null: none).
  void add_lookup(std::size_t i, const std::vector<token>& prompt,
                  std::shared_ptr<const std::vector<kv_page>> fetched = nullptr) {
    if (lookup_count == lookups.size()) {
      lookups.emplace_back();
      lookup_pages.emplace_back();
    }
    lookups[lookup_count].first = i;
    lookup_pages[lookup_count] = std::move(fetched);
    lookups[lookup_count++].second.assign(prompt.begin(), prompt.end());
  }

  void operator()();

  // See move_out.
  void export_if_ended(move_out& mo);

  // Sequences computed from their first token start from their prompt's longest prefix in the
  // cache; items wholly cached leave the step (`batch` shrinks). Returns the result index of each
  // item left.
  std::vector<std::size_t> attach_prefixes(std::span<step_item>& batch);

  // One forward step; a backend bug must not leave the job unanswered.
  expected<step_output> run(std::span<const step_item> batch);
};

} // namespace triad::detail
