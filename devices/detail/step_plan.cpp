#include "devices/detail/step_plan.hpp"

#include <algorithm>

namespace triad::detail {

void plan_step(const step_state& state, step_plan& out) {
  out.items.clear();
  out.too_large.clear();
  out.starved = false;
  out.max_steps = 1;
  const std::size_t page = std::max<std::size_t>(1, state.page_tokens);
  const auto pages = [page](std::size_t tokens) { return pages_for(tokens, page); };

  auto& order = out.order;
  order.clear();
  std::size_t used = 0;
  for (std::size_t i = 0; i < state.seqs.size(); ++i) {
    const auto& s = state.seqs[i];
    order.push_back(i);
    // Pages attached from the prefix cache are shared: counted as free here (an estimate; the
    // backend's reservation is exact and answers exhausted when it is wrong).
    used += pages(s.computed) - s.cached / page;
  }
  std::size_t free_pages = state.pages_total > used ? state.pages_total - used : 0;
  std::sort(order.begin(), order.end(), [&state](std::size_t a, std::size_t b) {
    return state.seqs[a].admitted_order < state.seqs[b].admitted_order;
  });

  std::size_t budget = state.token_budget;
  for (std::size_t i : order) {
    const auto* s = &state.seqs[i];
    if (budget == 0)
      break;
    if (s->phase == seq_phase::running && !s->finished && s->computed + 1 == s->tokens) {
      const auto need = pages(s->computed + 1) - pages(s->computed);
      if (need > free_pages) {
        out.starved = true;
        continue;
      }
      free_pages -= need;
      out.items.push_back({s->seq, s->computed, 1, false, true});
      --budget;
    }
  }
  for (std::size_t i : order) {
    const auto* s = &state.seqs[i];
    if (budget == 0)
      break;
    // An importing sequence's KV arrives in the step job, before the step: it is computed up to
    // the KV's tokens by then, and needs pages for them too.
    const bool importing = s->phase == seq_phase::importing && s->import_tokens.has_value();
    if (s->phase != seq_phase::waiting && !importing)
      continue;
    if (pages(s->tokens) > state.pages_total) {
      out.too_large.push_back(s->seq);
      continue;
    }
    // Fetched pages are appended in the job before the step: memory planned for them, not
    // taken from what this plan gave the others. A sequence they do not fit waits, and so do
    // the prompts admitted after it (they would take the pages it waits for).
    if (pages(s->incoming) > pages(s->computed) + free_pages) {
      out.starved = true;
      break;
    }
    const std::size_t computed = importing ? *s->import_tokens : s->computed;
    const std::size_t room = (pages(s->computed) + free_pages) * page;
    const std::size_t fit = room > computed ? room - computed : 0;
    const std::size_t left = s->tokens - computed;
    const std::size_t chunk = std::min({left, budget, state.max_prefill_chunk, fit});
    if (chunk == 0) {
      out.starved = true;
      continue;
    }
    free_pages -= pages(std::max(computed + chunk, s->incoming)) - pages(s->computed);
    out.items.push_back({s->seq, computed, chunk, importing, computed + chunk == s->tokens});
    budget -= chunk;
  }

  // A burst: every sequence that could take part is in the step, and each one's prompt
  // completes in it.
  std::size_t eligible = 0;
  for (const auto& s : state.seqs) {
    const bool gone =
        std::find(out.too_large.begin(), out.too_large.end(), s.seq) != out.too_large.end();
    // A fetching sequence steps as soon as its pages arrive: no burst starts without it.
    eligible +=
        !gone && (s.phase == seq_phase::waiting || s.phase == seq_phase::importing ||
                  s.phase == seq_phase::fetching || (s.phase == seq_phase::running && !s.finished));
  }
  const bool all_complete =
      std::all_of(out.items.begin(), out.items.end(), [](const auto& i) { return i.completes; });
  if (!out.items.empty() && all_complete && !out.starved && eligible == out.items.size())
    out.max_steps = state.burst_steps;
}

step_plan plan_step(const step_state& state) {
  step_plan out;
  plan_step(state, out);
  return out;
}

std::optional<seq_id> pick_victim(std::span<const planned_sequence> seqs) {
  const auto rank = [](const planned_sequence& s) {
    return s.phase == seq_phase::done ? 2 : s.phase == seq_phase::parked ? 1 : 0;
  };
  const planned_sequence* victim = nullptr;
  for (const auto& s : seqs) {
    if (s.computed == 0)
      continue;
    if (victim == nullptr || rank(s) > rank(*victim) ||
        (rank(s) == rank(*victim) && s.admitted_order > victim->admitted_order))
      victim = &s;
  }
  if (victim == nullptr)
    return std::nullopt;
  return victim->seq;
}

} // namespace triad::detail
