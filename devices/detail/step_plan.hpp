#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "devices/backend.hpp"

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
  std::size_t cached = 0;   ///< of those, attached from the prefix cache (shared pages)
  /// importing, with its KV bytes at hand: the tokens they cover.
  std::optional<std::size_t> import_tokens;
  /// waiting, with pages fetched from the tier below to attach before its first step: the
  /// tokens they hold (their pages are taken from the free ones when it is planned).
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
  /// Steps the driver may run: burst_steps when every sequence that could take part is in the
  /// step, each one's prompt completes in it and none starved; else 1.
  std::size_t max_steps = 1;
  /// Scratch of plan_step: indices of the state's sequences in admission order.
  std::vector<std::size_t> order;
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

/// The sequence that gives up its KV for memory: a finished one first (its KV is only kept for
/// reuse), then a parked one, then the most recently admitted running or waiting one; nullopt
/// when no sequence holds KV.
std::optional<seq_id> pick_victim(std::span<const planned_sequence> seqs);

} // namespace triad::detail
