#include "devices/detail/step_plan.hpp"

#include <algorithm>

namespace triad::detail {

namespace {

// Pages at the start of the chains `a` and `b` that they share. A chain hash covers every token
// before its page, so two chains agree on a prefix and differ after it: a binary search.
std::size_t common_run(std::span<const block_hash> a, std::span<const block_hash> b) {
  std::size_t lo = 0, hi = std::min(a.size(), b.size());
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    if (a[mid - 1] == b[mid - 1])
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Distinct pages among `runs` (chains of hashes, reordered): the size of their trie, every
// run's length less the common run of each with its neighbour in lexicographic order. Costs
// O(n log n log length) against sorting every page: a step over long contexts counts
// thousands of pages per sequence.
std::size_t distinct_pages(std::vector<std::span<const block_hash>>& runs) {
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
    const auto n = common_run(a, b);
    if (n == a.size() || n == b.size())
      return a.size() < b.size();
    return a[n] < b[n];
  });
  std::size_t total = 0;
  for (std::size_t i = 0; i < runs.size(); ++i)
    total += runs[i].size() - (i == 0 ? 0 : common_run(runs[i - 1], runs[i]));
  return total;
}

// The longest run of `chain` that one of `runs` starts with: with chain hashes, how many of
// its pages those runs hold (a hash held anywhere holds every page before it).
std::size_t longest_run(std::span<const block_hash> chain,
                        std::span<const std::span<const block_hash>> runs) {
  std::size_t n = 0;
  for (const auto& r : runs)
    n = std::max(n, common_run(chain, r));
  return n;
}

} // namespace

void plan_step(const step_state& state, step_plan& out) {
  out.items.clear();
  out.too_large.clear();
  out.starved = false;
  out.held_back = false;
  out.starving.reset();
  out.max_steps = 1;
  const std::size_t page = std::max<std::size_t>(1, state.page_tokens);
  const auto pages = [page](std::size_t tokens) { return pages_for(tokens, page); };

  auto& order = out.order;
  auto& runs = out.runs;
  order.clear();
  runs.clear();
  std::size_t used = 0;
  for (std::size_t i = 0; i < state.seqs.size(); ++i) {
    const auto& s = state.seqs[i];
    order.push_back(i);
    if (s.computed == 0)
      continue; // a lookup's pages are counted when it is planned
    // Its own pages here; those of the prefix cache once, however many sequences hold them.
    const auto shared = std::min(s.shared.size(), pages(s.computed));
    used += pages(s.computed) - shared;
    if (shared > 0)
      runs.push_back(s.shared.first(shared));
  }
  used += distinct_pages(runs);
  std::size_t free_pages = state.pages_total > used ? state.pages_total - used : 0;
  std::sort(order.begin(), order.end(), [&state](std::size_t a, std::size_t b) {
    return state.seqs[a].admitted_order < state.seqs[b].admitted_order;
  });
  const auto starve = [&out](const planned_sequence& s) {
    out.starved = true;
    if (!out.starving || s.admitted_order < *out.starving)
      out.starving = s.admitted_order;
  };

  // The step's KV within step_pages (when bounded): the step ends at the first sequence past
  // it, so none admitted later overtakes it (decodes, then prefills, each in admission order);
  // the first always goes, so the device makes progress.
  std::size_t step_kv = 0;
  const auto within_fast = [&](std::size_t kv_pages) {
    if (state.step_pages == 0 || out.items.empty() || step_kv + kv_pages <= state.step_pages) {
      step_kv += kv_pages;
      return true;
    }
    out.held_back = true;
    return false;
  };
  std::size_t budget = state.token_budget;
  for (std::size_t i : order) {
    const auto* s = &state.seqs[i];
    if (budget == 0)
      break;
    if (s->phase == seq_phase::running && !s->finished && s->computed + 1 == s->tokens) {
      const auto need = pages(s->computed + 1) - pages(s->computed);
      if (need > free_pages) {
        starve(*s);
        continue;
      }
      if (!within_fast(pages(s->computed + 1)))
        break;
      free_pages -= need;
      out.items.push_back({s->seq, s->computed, 1, false, true});
      --budget;
    }
  }
  for (std::size_t i : order) {
    const auto* s = &state.seqs[i];
    if (budget == 0 || out.held_back)
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
    // The pages it has without taking free ones: those it computed, or, about to look its
    // prompt up, those of the lookup that other sequences hold already.
    const bool looks_up = s->computed == 0 && !importing;
    const std::size_t has = looks_up ? longest_run(s->shared, runs) : pages(s->computed);
    // Attached and fetched pages come in the job before the step: memory planned for them, not
    // taken from what this plan gave the others. A sequence they do not fit waits, and so do
    // the prompts admitted after it (they would take the pages it waits for).
    if (pages(s->incoming) > has + free_pages) {
      starve(*s);
      break;
    }
    const std::size_t computed = importing ? *s->import_tokens : s->computed;
    const std::size_t room = (has + free_pages) * page;
    const std::size_t fit = room > computed ? room - computed : 0;
    const std::size_t left = s->tokens - computed;
    const std::size_t chunk = std::min({left, budget, state.max_prefill_chunk, fit});
    if (chunk == 0) {
      starve(*s);
      continue;
    }
    if (!within_fast(pages(computed + chunk)))
      break;
    free_pages -= pages(std::max(computed + chunk, s->incoming)) - has;
    if (looks_up)
      runs.push_back(s->shared); // a later lookup of the same pages takes none
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

std::size_t pages_needed(std::span<const planned_sequence> seqs, std::size_t page_tokens,
                         std::size_t prompt_tokens, std::span<const block_hash> attach,
                         std::vector<std::span<const block_hash>>& runs) {
  const std::size_t page = std::max<std::size_t>(1, page_tokens);
  runs.clear();
  std::size_t need = 0;
  for (const auto& s : seqs) {
    if (s.phase == seq_phase::done)
      continue; // it goes first
    const auto shared = std::min(s.shared.size(), pages_for(s.tokens, page));
    need += pages_for(s.tokens, page) - shared;
    if (shared > 0)
      runs.push_back(s.shared.first(shared));
  }
  need += distinct_pages(runs);
  const auto own = pages_for(prompt_tokens, page);
  return need + own - std::min(own, longest_run(attach, runs));
}

std::optional<seq_id> pick_victim(std::span<const planned_sequence> seqs,
                                  std::optional<std::uint64_t> starving) {
  const auto rank = [](const planned_sequence& s) {
    return s.phase == seq_phase::done ? 2 : s.phase == seq_phase::parked ? 1 : 0;
  };
  const planned_sequence* victim = nullptr;
  for (const auto& s : seqs) {
    if (s.computed == 0 || (rank(s) == 0 && starving && s.admitted_order <= *starving))
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
