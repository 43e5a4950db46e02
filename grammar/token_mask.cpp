#include "grammar/token_mask.hpp"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

namespace triad::grammar {

token_index::token_index(std::vector<std::string> bytes, std::vector<std::uint32_t> end_tokens)
    : bytes_(std::move(bytes))
    , end_tokens_(std::move(end_tokens)) {
  std::sort(end_tokens_.begin(), end_tokens_.end());
  for (std::uint32_t t = 0; t < bytes_.size(); ++t)
    if (!bytes_[t].empty() && !std::binary_search(end_tokens_.begin(), end_tokens_.end(), t))
      order_.push_back(t);
  std::sort(order_.begin(), order_.end(),
            [&](std::uint32_t a, std::uint32_t b) { return bytes_[a] < bytes_[b]; });
  common_.resize(order_.size());
  for (std::size_t i = 1; i < order_.size(); ++i) {
    const auto& a = bytes_[order_[i - 1]];
    const auto& b = bytes_[order_[i]];
    std::size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n])
      ++n;
    common_[i] = static_cast<std::uint32_t>(n);
  }
  for (std::uint32_t k = 0; k < 2; ++k) {
    skip_[k].resize(order_.size());
    for (std::size_t i = order_.size(); i-- > 0;)
      skip_[k][i] = i + 1 < order_.size() && common_[i + 1] >= k + 1
                        ? skip_[k][i + 1]
                        : static_cast<std::uint32_t>(i + 1);
  }
}

template<class Decide, class Step, class Whole>
void token_index::walk_tokens(automaton::session& walk, automaton::state_id from, Decide decide,
                              Step step, Whole whole) const {
  // path[i]: the state after i bytes of the token tried last (path[0]: `from`); `refused`: the
  // length of the previous token's prefix the grammar refused (its last byte refused), 0 when
  // none was.
  std::vector<automaton::state_id> path{from};
  std::size_t refused = 0;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const std::uint32_t t = order_[i];
    const std::string& b = bytes_[t];
    const std::size_t shared = i == 0 ? 0 : common_[i];
    // A token that starts with a refused prefix is refused too.
    if (refused != 0 && shared >= refused)
      continue;
    refused = 0;
    if (path.size() > shared + 1)
      path.resize(shared + 1);
    bool decided = false;
    while (path.size() <= b.size()) {
      if (decide(t, path)) {
        decided = true;
        break;
      }
      const auto next = walk.next(path.back(), static_cast<unsigned char>(b[path.size() - 1]));
      if (next == automaton::refused || !step(path, next))
        break;
      path.push_back(next);
    }
    if (decided)
      continue;
    if (path.size() == b.size() + 1) {
      whole(t);
    } else {
      refused = path.size();
      i = after_refused(i, refused);
    }
  }
}

void token_index::mask(matcher& m, std::vector<std::uint32_t>& allowed, bool shortest) const {
  allowed.assign((bytes_.size() + 31) / 32, 0u);
  automaton::session walk{m.machine()};
  walk_tokens(
      walk, m.state(), [](std::uint32_t, const auto&) { return false; },
      [&](const std::vector<automaton::state_id>& path, automaton::state_id next) {
        return !shortest || walk.min_rest(next) + 1 == walk.min_rest(path.back());
      },
      [&](std::uint32_t t) { allowed[t / 32] |= 1u << (t % 32); });
  if (walk.can_end(m.state()))
    for (auto t : end_tokens_)
      if (t < bytes_.size())
        allowed[t / 32] |= 1u << (t % 32);
}

namespace {

// Walks `items` (token, the bytes to try), sorted by those bytes, from `from`: the bits of the
// tokens whose bytes the automaton takes are set in `allowed`. Shared prefixes are walked once
// and a refused prefix skips every item that starts with it.
void walk_sorted(automaton::session& walk, automaton::state_id from,
                 const std::vector<std::pair<std::uint32_t, std::string_view>>& items,
                 std::vector<std::uint32_t>& allowed) {
  std::vector<automaton::state_id> path{from};
  std::size_t refused = 0;
  std::string_view previous;
  for (const auto& [t, b] : items) {
    std::size_t shared = 0;
    while (shared < b.size() && shared < previous.size() && b[shared] == previous[shared])
      ++shared;
    previous = b;
    if (refused != 0 && shared >= refused)
      continue;
    refused = 0;
    if (path.size() > shared + 1)
      path.resize(shared + 1);
    while (path.size() <= b.size()) {
      const auto next = walk.next(path.back(), static_cast<unsigned char>(b[path.size() - 1]));
      if (next == automaton::refused)
        break;
      path.push_back(next);
    }
    if (path.size() == b.size() + 1)
      allowed[t / 32] |= 1u << (t % 32);
    else
      refused = path.size();
  }
}

} // namespace

void token_index::classify(automaton::session& walk, automaton::state_id frame,
                           std::vector<std::uint32_t>& accepted, frame_exits& exits) const {
  accepted.assign((bytes_.size() + 31) / 32, 0u);
  exits = {};
  // Per state where the frame may end: its tokens and where their rests start.
  std::unordered_map<automaton::state_id, std::vector<std::pair<std::uint32_t, std::uint32_t>>>
      by_exit;
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  // `ended`: the first length after which a cut stack may have emptied (the top's state may
  // end) on the path walked, none when none may have.
  std::size_t ended = none;
  walk_tokens(
      walk, frame,
      [&](std::uint32_t t, const std::vector<automaton::state_id>& path) {
        if (ended != none && ended >= path.size())
          ended = none; // the path went back above it
        if (ended == none)
          return false;
        // Bytes after a cut stack emptied: what lies below decides them.
        by_exit[path[ended]].emplace_back(t, static_cast<std::uint32_t>(ended));
        return true;
      },
      [&](const std::vector<automaton::state_id>& path, automaton::state_id next) {
        if (walk.can_end(next) && ended == none)
          ended = path.size();
        return true;
      },
      [&](std::uint32_t t) { accepted[t / 32] |= 1u << (t % 32); });
  for (auto& [at, tokens] : by_exit) {
    frame_exits::group g;
    g.lead = tokens.front().first;
    g.lead_bytes = tokens.front().second;
    std::sort(tokens.begin(), tokens.end(), [&](const auto& a, const auto& b) {
      return std::string_view{bytes_[a.first]}.substr(a.second) <
             std::string_view{bytes_[b.first]}.substr(b.second);
    });
    for (const auto& [t, rest] : tokens) {
      g.tokens.push_back(t);
      g.rests.push_back(rest);
    }
    exits.groups.push_back(std::move(g));
  }
}

void token_index::accept_exits(automaton::session& walk, automaton::state_id from,
                               const frame_exits& exits,
                               std::vector<std::uint32_t>& allowed) const {
  std::vector<std::pair<std::uint32_t, std::string_view>> items;
  for (const auto& g : exits.groups) {
    // Where the frame may end, from `from`: the same for every token of the group.
    auto at = from;
    const std::string_view lead{bytes_[g.lead]};
    for (std::size_t k = 0; k < g.lead_bytes && at != automaton::refused; ++k)
      at = walk.next(at, static_cast<unsigned char>(lead[k]));
    if (at == automaton::refused)
      continue;
    items.clear();
    for (std::size_t k = 0; k < g.tokens.size(); ++k)
      items.emplace_back(g.tokens[k], std::string_view{bytes_[g.tokens[k]]}.substr(g.rests[k]));
    walk_sorted(walk, at, items, allowed);
  }
}

mask_cache::mask_cache(std::shared_ptr<automaton> a, std::shared_ptr<const token_index> vocabulary,
                       std::size_t max_states)
    : a_(std::move(a))
    , vocabulary_(std::move(vocabulary))
    , max_states_(max_states) {}

bool mask_cache::has(automaton::state_id s) const {
  std::lock_guard lock{mutex_};
  return kept_.count(s) != 0;
}

std::shared_ptr<const std::vector<std::uint32_t>> mask_cache::at(automaton::state_id state) {
  {
    std::lock_guard lock{mutex_};
    if (auto it = kept_.find(state); it != kept_.end())
      return it->second;
  }
  const auto& v = *vocabulary_;
  auto mask = std::make_shared<std::vector<std::uint32_t>>((v.size() + 31) / 32, 0u);
  {
    automaton::session walk{*a_};
    const auto frame = walk.top(state);
    std::shared_ptr<const frame_tokens> known;
    {
      std::lock_guard lock{mutex_};
      if (auto it = frames_.find(frame); it != frames_.end())
        known = it->second;
    }
    if (!known) {
      auto made = std::make_shared<frame_tokens>();
      v.classify(walk, frame, made->accepted, made->exits);
      known = made;
      std::lock_guard lock{mutex_};
      if (frames_.size() < max_states_)
        frames_.emplace(frame, known);
    }
    *mask = known->accepted;
    // The tokens that empty a cut stack: what lies below decides them, tried from the state.
    v.accept_exits(walk, state, known->exits, *mask);
    if (walk.can_end(state))
      for (const auto t : v.end_tokens())
        if (t < v.size())
          (*mask)[t / 32] |= 1u << (t % 32);
  }
  std::lock_guard lock{mutex_};
  if (kept_.size() < max_states_)
    kept_.emplace(state, mask);
  return mask;
}

namespace {

// The thread that computes masks ahead of the steps that need them (token_constraint::prefetch),
// off the devices' driver threads: one per process, started at the first need, its queue
// drained and the thread joined at exit. A mask its sampler claimed first is skipped.
class mask_worker {
public:
  static mask_worker& shared() {
    static mask_worker w;
    return w;
  }

  void submit(std::shared_ptr<mask_cache> masks, automaton::state_id state,
              std::shared_ptr<token_constraint::ahead> job) {
    {
      std::lock_guard lock{mutex_};
      if (!thread_.joinable())
        thread_ = std::thread{[this] { run(); }};
      queue_.push_back({std::move(masks), state, std::move(job)});
    }
    wake_.notify_one();
  }

  ~mask_worker() {
    {
      std::lock_guard lock{mutex_};
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable())
      thread_.join();
  }

private:
  struct task {
    std::shared_ptr<mask_cache> masks;
    automaton::state_id state;
    std::shared_ptr<token_constraint::ahead> job;
  };

  mask_worker() = default;

  void run() {
    pthread_setname_np(pthread_self(), "triad-masks");
    for (;;) {
      task t;
      {
        std::unique_lock lock{mutex_};
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty())
          return;
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      if (t.job->claimed.exchange(true))
        continue; // its sampler got there first
      try {
        t.job->result.set_value(t.masks->at(t.state));
      } catch (...) {
        t.job->result.set_exception(std::current_exception());
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<task> queue_;
  std::thread thread_;
  bool stop_ = false;
};

} // namespace

token_constraint::token_constraint(std::shared_ptr<mask_cache> masks, std::uint32_t budget)
    : masks_(std::move(masks))
    , m_(masks_->machine())
    , budget_(budget)
    , start_budget_(budget) {}

token_constraint::origin token_constraint::where_from() const {
  return {masks_->machine()->shared_rules(), start_budget_, started_waiting_, advanced_};
}

bool token_constraint::keep_only(const std::vector<std::uint32_t>& mask, std::size_t vocabulary,
                                 std::span<float> logits) {
  const std::size_t n = std::min(logits.size(), vocabulary);
  bool any = false;
  for (std::size_t t = 0; t < n && !any; ++t)
    any = allowed(mask, static_cast<std::uint32_t>(t));
  if (!any)
    return false;
  for (std::size_t t = 0; t < logits.size(); ++t)
    if (t >= n || !allowed(mask, static_cast<std::uint32_t>(t)))
      logits[t] = -std::numeric_limits<float>::infinity();
  return true;
}

bool token_constraint::opens_call(std::uint32_t t) const {
  const auto& v = masks_->vocabulary();
  return t < v.size() && !v.bytes(t).empty() &&
         static_cast<unsigned char>(v.bytes(t).front()) == call_open_marker;
}

bool token_constraint::apply(std::span<float> logits) {
  if (waiting_)
    return true; // free text until a call opens
  // The mask prefetch asked for: the worker's (waiting if it is computing it), or computed here
  // if the worker has not begun it; else computed here.
  auto job = std::exchange(pending_, nullptr);
  auto mask = job && job->claimed.exchange(true) ? job->ready.get() : masks_->at(m_);
  return keep_only(*mask, masks_->vocabulary().size(), logits);
}

void token_constraint::prefetch() {
  pending_ = nullptr;
  if (waiting_ || budget_ == 0 || m_.done() || masks_->has(m_.state()))
    return;
  auto job = std::make_shared<ahead>();
  job->ready = job->result.get_future().share();
  pending_ = job;
  mask_worker::shared().submit(masks_, m_.state(), std::move(job));
}

bool token_constraint::fits(std::uint32_t t) {
  const auto& v = masks_->vocabulary();
  if (budget_ == unlimited || t >= v.size() || v.is_end(t) || (waiting_ && !opens_call(t)))
    return true;
  const auto& b = v.bytes(t);
  if (b.empty() || !m_.accept(b))
    return true; // not this constraint's to judge (advance refuses it)
  const std::uint64_t rest = m_.min_rest();
  m_.rollback(b.size());
  // After t: budget_ - 1 tokens, one byte each, the last of them the end token.
  return rest + 2 <= budget_;
}

bool token_constraint::apply_shortest(std::span<float> logits) {
  if (waiting_) { // text may end at any token: no call it could not close
    for (std::size_t t = 0; t < logits.size(); ++t)
      if (opens_call(static_cast<std::uint32_t>(t)))
        logits[t] = -std::numeric_limits<float>::infinity();
    return true;
  }
  std::vector<std::uint32_t> mask;
  masks_->vocabulary().mask(m_, mask, true);
  return keep_only(mask, masks_->vocabulary().size(), logits);
}

bool token_constraint::advance(std::uint32_t t) {
  const auto& v = masks_->vocabulary();
  if (t >= v.size())
    return false;
  if (waiting_ && !opens_call(t)) { // free text
    if (budget_ != unlimited && budget_ > 0)
      --budget_;
    advanced_.push_back(t);
    return true;
  }
  bool ok = false;
  if (v.is_end(t)) {
    ok = m_.can_end();
  } else {
    const auto& b = v.bytes(t);
    ok = !b.empty() && m_.accept(b);
  }
  if (ok) {
    pending_ = nullptr; // of the state left
    waiting_ = false;   // a call opened, or it never waited
    advanced_.push_back(t);
  }
  if (ok && budget_ != unlimited && budget_ > 0)
    --budget_;
  return ok;
}

std::size_t mask_cache::size() const {
  std::lock_guard lock{mutex_};
  return kept_.size();
}

std::size_t mask_cache::bytes() const {
  std::lock_guard lock{mutex_};
  return (kept_.size() + frames_.size()) * ((vocabulary_->size() + 31) / 32) * 4;
}

} // namespace triad::grammar
