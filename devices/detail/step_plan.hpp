#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "devices/backend.hpp"
#include "devices/prefix_hash.hpp"

/// The device actor's scheduling rule as a pure function: which sequences the next step job
/// computes (decodes, chunked prefills, KV imports), which can never fit, whether the driver may
/// run a burst, and which sequence gives up its KV when nothing fits. The actor fills a
/// step_state from its sequences, plans, then applies the plan (devices/device.cpp).
namespace triad::detail {

/// Where a sequence stands on its device.
enum class seq_phase : std::uint8_t {
  importing, ///< admitted with KV bytes, imported in its first step job
  waiting,   ///< prompt tokens left to compute
  running,   ///< decoding
  parked,    ///< kept (tool call), computes nothing until resumed
  done,      ///< generation ended; KV kept until freed
  fetching,  ///< its prompt's pages are on their way from the tier below; computes nothing yet
};

/// What the planner sees of one sequence.
struct planned_sequence {
  seq_id seq = 0;
  std::uint64_t admitted_order = 0; ///< earlier admissions are served first
  seq_phase phase = seq_phase::waiting;
  bool finished = false;    ///< its generation ended (a parked sequence may have)
  std::size_t tokens = 0;   ///< prompt, generated and appended tokens
  std::size_t computed = 0; ///< tokens whose KV the backend holds
  /// The chain hashes of the pages it holds from the device's prefix cache (the first of its
  /// pages), or, about to look its prompt up (computed 0), of those the lookup attaches. Other
  /// sequences may hold the same pages: each is counted once.
  std::span<const block_hash> shared;
  /// importing, with its KV bytes at hand: the tokens they cover.
  std::optional<std::size_t> import_tokens;
  /// waiting, about to look its prompt up: the tokens its pages cover before its first step
  /// (attached from the prefix cache, fetched from the tier below); the pages not held by
  /// another sequence are taken from the free ones when it is planned.
  std::size_t incoming = 0;
};

/// Everything one planning decision reads.
struct step_state {
  std::vector<planned_sequence> seqs; ///< any order
  std::size_t pages_total = 0;        ///< KV pages of the device
  std::size_t page_tokens = 1;        ///< tokens per page, >= 1
  std::size_t token_budget = 1;       ///< tokens one step may compute
  std::size_t max_prefill_chunk = 1;  ///< longest prefill chunk of one sequence in one step
  std::size_t burst_steps = 1;        ///< decode steps one job may run back to back
  /// Pages of KV the step's sequences may hold together, so the step reads them from the
  /// device's fastest memory tier (kv_usage::pages_fast); 0: no bound. The step ends at the
  /// first sequence past it (none admitted later overtakes it); the others wait for a later
  /// step, their KV where it is (no preemption); the first always goes.
  std::size_t step_pages = 0;
};

/// One item of the step: tokens [first, first + count) of a sequence.
struct planned_item {
  seq_id seq = 0;
  std::size_t first = 0;  ///< the sequence's computed tokens (its import's, when importing)
  std::size_t count = 0;  ///< tokens computed, >= 1
  bool import = false;    ///< its KV bytes are imported before the step
  bool completes = false; ///< the item reaches the sequence's last token: a token is chosen
};

/// The next step job.
struct step_plan {
  /// Decodes (one token each) in admission order, then chunked prefills in admission order,
  /// within the token budget and the free KV pages.
  std::vector<planned_item> items;
  /// Sequences whose tokens need more pages than the device has: they fail, and their KV (if
  /// any) is freed.
  std::vector<seq_id> too_large;
  /// A sequence that could take part did not fit (no pages, no chunk left).
  bool starved = false;
  /// The step ended at a sequence whose KV would pass step_pages: it and every sequence after
  /// it (decodes, then prefills, in admission order) wait for a later step.
  bool held_back = false;
  /// The admission order of the earliest sequence that did not fit (set when starved): a
  /// sequence admitted before it is never its victim (pick_victim), or the victim, served first
  /// again, would take back the pages it gave.
  std::optional<std::uint64_t> starving;
  /// Steps the driver may run: burst_steps when every sequence that could take part is in the
  /// step, each one's prompt completes in it and none starved; else 1.
  std::size_t max_steps = 1;
  /// Scratch of plan_step: indices of the state's sequences in admission order.
  std::vector<std::size_t> order;
  /// Scratch of plan_step and pages_needed: each sequence's shared pages (a run of chain
  /// hashes), then the prompts planned to look theirs up.
  std::vector<std::span<const block_hash>> runs;
};

/// Pages a sequence of `tokens` tokens holds, at `page_tokens` (>= 1) tokens per page.
constexpr std::size_t pages_for(std::size_t tokens, std::size_t page_tokens) noexcept {
  return (tokens + page_tokens - 1) / page_tokens;
}

/// Plans the next step of `state` into `out` (cleared first; its vectors keep their memory, so
/// a device plans without allocating once warm).
void plan_step(const step_state& state, step_plan& out);

/// plan_step, answering a new plan.
step_plan plan_step(const step_state& state);

/// The pages a newcomer of `prompt_tokens` tokens needs with the unfinished sequences of `seqs`
/// at their current lengths: every page each holds or will hold, a page shared through the
/// prefix cache counted once, and the newcomer's own (`attach`: the chain hashes of those its
/// prefix lookup would attach, taken from the free ones unless another sequence holds them).
/// `runs`: scratch.
std::size_t pages_needed(std::span<const planned_sequence> seqs, std::size_t page_tokens,
                         std::size_t prompt_tokens, std::span<const block_hash> attach,
                         std::vector<std::span<const block_hash>>& runs);

/// The sequence that gives up its KV for memory: a finished one first (its KV is only kept for
/// reuse), then a parked one, then the most recently admitted running or waiting one admitted
/// after `starving` (step_plan::starving; any without it); nullopt when none holds KV.
std::optional<seq_id> pick_victim(std::span<const planned_sequence> seqs,
                                  std::optional<std::uint64_t> starving = std::nullopt);

} // namespace triad::detail
