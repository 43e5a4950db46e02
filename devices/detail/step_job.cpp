#include "devices/detail/step_job.hpp"

#include <algorithm>
#include <exception>

#include <caf/send.hpp>

#include "runtime/checksum.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/node_clock.hpp"
#include "runtime/scope_guard.hpp"

namespace triad::detail {

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

void publish_and_free(backend& be, seq_id seq, const std::vector<token>& computed) {
  if (!computed.empty())
    be.publish(seq, computed);
  be.free(seq);
}

void deferred_work::apply(backend& be) const {
  for (const auto& [seq, tokens] : publishes)
    be.publish(seq, tokens);
  for (auto seq : frees)
    be.free(seq);
}

std::vector<kv_page> share_pages(backend& be, std::span<const token> tokens, std::size_t first,
                                 std::size_t count) {
  // A sequence of its own for the copy, attached to the cached pages and let go behind it.
  constexpr seq_id lender = lender_seq;
  const auto pt = be.kv().page_tokens;
  if (pt == 0)
    return {};
  // The pages asked for and one token past them: a prefix lookup leaves one to compute.
  tokens = tokens.first(std::min(tokens.size(), (first + count) * pt + 1));
  std::vector<kv_page> out;
  auto let_go = make_scope_guard([&] { be.free(lender); }); // whatever the copy does
  if (auto covered = be.attach_prefix(lender, tokens); covered > first * pt)
    if (auto pages = be.export_pages(lender, tokens.first(covered), first); pages)
      out = std::move(*pages);
  for (auto& p : out)
    p.checksum = block_checksum(std::as_bytes(std::span{p.bytes}));
  return out;
}

void step_job::operator()() {
  if (capture)
    be->capture_evictions(&evicted);
  // The backend must not keep pointing into this job, whichever way the job ends.
  auto stop_capture = make_scope_guard([this] {
    if (capture)
      be->capture_evictions(nullptr);
  });
  result.started = node_clock::now();
  auto mark_finished = make_scope_guard([this] { result.finished = node_clock::now(); });
  owed.apply(*be);
  if (!imports.empty())
    import_seconds.assign(item_count, 0.0f);
  result.imports_from = node_clock::now();
  for (auto& im : imports) {
    const auto& stream = im.blob->stream;
    const auto import_start = node_clock::now();
    auto ok = stream
                  ? receive_kv(*be, items[im.item].seq, *stream)
                  : be->import_kv(items[im.item].seq, std::span<const std::byte>{im.blob->bytes});
    import_seconds[im.item] =
        std::chrono::duration<float>(node_clock::now() - import_start).count();
    if (ok)
      continue;
    im.error = ok.error().message;
    im.exhausted = ok.error().code == errc::exhausted;
    if (stream && !im.exhausted) {
      // Damaged or broken off: never used. The item computes the streamed tokens too.
      auto& toks = items[im.item].tokens;
      toks.insert(toks.begin(), stream->tokens().begin(), stream->tokens().end());
      result.tokens[im.item] += stream->tokens().size();
      im.recomputed = true;
      continue;
    }
    items[im.item].tokens.clear(); // leaves the step (attach_prefixes drops empty items)
    result.tokens[im.item] = 0;    // and moves its sequence on by nothing
  }
  result.imports_to = imports.empty() ? result.imports_from : node_clock::now();
  auto& r = result;
  if (r.sampled.size() < r.seqs.size())
    r.sampled.resize(r.seqs.size());
  std::span<step_item> batch{items.data(), item_count};
  auto live = attach_prefixes(batch); // the result index of each entry of `batch`
  if (batch.empty())
    r.output = expected<void>{};
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  // The backend's share of the driver's CPU: the thread's CPU over the burst less the wall time
  // between its steps (choosing and sending tokens: CPU work, so a preempted thread charges
  // more to triad, never less; a backend that waits in its steps, as a timed sim, counts
  // nothing for the wait). The thread CPU clock is a system call (about 0.5 us on a VM): read
  // around every step it cost more than a zero-time sim step, half of it charged to triad; the
  // steady clock is read in user space.
  const double cpu_start = batch.empty() ? 0.0 : this_thread_cpu_seconds();
  clock::duration in_steps{};
  std::vector<step_item> next; // the burst's later steps: one token per item
  std::vector<std::size_t> next_live;
  for (std::size_t step = 0; !batch.empty(); ++step) {
    const auto step_start = clock::now();
    auto out = run(batch);
    in_steps += clock::now() - step_start;
    if (!out) {
      if (step == 0) // a later step's failure ends the burst; what it made so far stands
        r.output = out.error();
      break;
    }
    r.output = expected<void>{};
    r.steps.push_back({batch.size(), out->tokens, out->seconds, out->operational_intensity,
                       out->capacity_footprint, out->tier_resident});
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
      if (sinks[i]) { // each token leaves as it is chosen, not at the end of the burst
        // Cached tokens, and of those the stored ones: this job's attach, else an earlier job's
        // (never a swapped KV's). The request counts the first event that reports any.
        const bool now = r.cached[i] != 0 && !swap_ins[i];
        device_event ev{
            r.seqs[i], device_event::token,
            {tok},     n + 1,
            {},        now ? static_cast<std::uint32_t>(r.cached[i]) : earlier_cached[i].first,
            {},        now ? static_cast<std::uint32_t>(r.fetched[i]) : earlier_cached[i].second};
        if (step == 0 && i < import_seconds.size())
          ev.import_seconds = import_seconds[i];
        if (plan->logprobs) {
          auto lp = log_probabilities(out->logits[k], tok, plan->top_logprobs);
          ev.logprobs.reserve(1 + lp.top_logprobs.size());
          ev.logprobs.push_back(lp.logprob);
          ev.logprobs.insert(ev.logprobs.end(), lp.top_logprobs.begin(), lp.top_logprobs.end());
          ev.top = std::move(lp.top);
        }
        caf::anon_send(sinks[i], std::move(ev));
      }
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
    // A sequence that ended leaves now: its done event (sent by the actor) and its KV's
    // export wait for the job's end.
    if (step + 1 >= max_steps || kept < batch.size() ||
        interrupt->load(std::memory_order_relaxed) || clock::now() - start >= window)
      break;
    batch = std::span<step_item>{next.data(), kept};
    live.swap(next_live);
  }
  if (in_steps.count() > 0) {
    const double cpu = this_thread_cpu_seconds() - cpu_start;
    const double between = std::chrono::duration<double>(clock::now() - start - in_steps).count();
    r.compute_cpu_seconds = std::max(0.0, cpu - between);
  }
  for (auto& mo : move_outs)
    export_if_ended(mo);
  r.kv = be->kv();
}

void step_job::export_if_ended(move_out& mo) {
  auto& r = result;
  const auto& sampled = r.sampled[mo.item];
  const auto& plan = plans[mo.item];
  if (sampled.empty() || !plan)
    return;
  const auto ending =
      plan->end_of(sampled.back(), generated[mo.item] + static_cast<std::uint32_t>(sampled.size()),
                   mo.park_on_stop);
  mo.reason = ending.reason;
  if (ending.reason == nullptr || ending.parks)
    return; // generation goes on, or the sequence parks
  auto seq = r.seqs[mo.item];
  auto stream = mo.slot ? mo.slot->take() : nullptr;
  if (stream && sinks[mo.item]) {
    // Through the tier's blocks, a layer group at a time: the done event goes first, so the
    // request routes the sequence to its decode device while the groups are copied.
    // Cached tokens as the actor would report them: this job's attach, else an earlier one's.
    const bool attached_now = r.cached[mo.item] != 0 && !swap_ins[mo.item];
    const auto cached = attached_now ? r.cached[mo.item] : mo.cached;
    const auto stored = attached_now ? r.fetched[mo.item] : mo.stored;
    auto announce = [&] {
      kv_blob head;
      head.seq = seq;
      head.tokens = stream->tokens().size(); // begin has run: what the stream carries
      head.stream = stream;
      caf::anon_send(sinks[mo.item],
                     device_event{seq,
                                  device_event::done,
                                  {},
                                  generated[mo.item] + static_cast<std::uint32_t>(sampled.size()),
                                  mo.reason,
                                  static_cast<std::uint32_t>(cached),
                                  std::move(head),
                                  static_cast<std::uint32_t>(stored)});
    };
    if (send_kv(*be, seq, std::move(mo.tokens), *stream, announce)) {
      mo.streamed = true; // the receiver holds the stream now
      publish_and_free(*be, seq, mo.publish);
      mo.moved = true;
      return;
    }
    // Could not stream: a blob, as without a tier (the stream gives its blocks back).
  }
  auto blob = export_blob(*be, seq);
  if (!blob) {
    mo.error = blob.error().message;
    return;
  }
  mo.blob = std::move(*blob);
  publish_and_free(*be, seq, mo.publish);
  mo.moved = true;
}

std::vector<std::size_t> step_job::attach_prefixes(std::span<step_item>& batch) {
  auto& r = result;
  for (std::size_t l = 0; l < lookup_count; ++l) {
    auto& [i, prompt] = lookups[l];
    auto covered = be->attach_prefix(batch[i].seq, prompt);
    if (const auto& pages = lookup_pages[l]; pages && !pages->empty()) {
      // The fetched pages continue the chain where the device's own cache ends, when they
      // reach past it, up to one token of the prompt left to compute (the last page may be
      // partial: a demoted sequence's). What does not fit is computed.
      const auto pt = be->kv().page_tokens;
      std::span<const token> ps{prompt};
      block_hash parent = root_hash; // the chain hash of the pages the cache gave
      for (std::size_t at = 0; at < covered; at += pt)
        parent = chain_hash(parent, ps.subspan(at, pt));
      auto it = std::find_if(pages->begin(), pages->end(),
                             [&](const kv_page& p) { return p.parent == parent; });
      std::size_t take = 0, tokens = 0;
      for (auto p = it; p != pages->end(); ++p) {
        if (covered + tokens + p->tokens.size() >= prompt.size() ||
            !std::equal(p->tokens.begin(), p->tokens.end(),
                        prompt.begin() + static_cast<std::ptrdiff_t>(covered + tokens)))
          break;
        tokens += p->tokens.size();
        ++take;
        if (p->tokens.size() < pt)
          break; // a partial page ends what can be appended
      }
      if (take > 0) {
        if (auto ok = be->append_pages(batch[i].seq, {&*it, take}); ok) {
          covered += tokens;
          r.fetched[i] = tokens;
        } else if (ok.error().code == errc::corrupted) {
          ++r.fetches_corrupted; // none of them is used: the tokens are computed
        }
      }
    }
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

expected<step_output> step_job::run(std::span<const step_item> batch) {
  try {
    return be->step(batch);
  } catch (const std::exception& e) {
    return make_error(errc::system_error, std::string{"the backend threw: "} + e.what());
  } catch (...) {
    return make_error(errc::system_error, "the backend threw");
  }
}

} // namespace triad::detail
