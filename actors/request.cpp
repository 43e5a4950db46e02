#include "actors/request.hpp"

#include <utility>

#include <caf/all.hpp>

#include "actors/defaults.hpp"
#include "actors/router.hpp"
#include "devices/device.hpp"
#include "runtime/homed_actor.hpp"
#include "runtime/node_clock.hpp"
#include "tools/executor.hpp"
#include "tools/registry.hpp"
#include "tools/service.hpp"

namespace triad {

std::string_view to_string(request_state s) noexcept {
  static constexpr std::string_view names[] = {"queued",    "prefill", "transfer", "decode",
                                               "tool_wait", "done",    "failed",   "cancelled"};
  auto i = static_cast<std::size_t>(s);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(request_stage s) noexcept {
  static constexpr std::string_view names[] = {"queue",  "prefill", "transfer",
                                               "decode", "tool",    "orchestration"};
  auto i = static_cast<std::size_t>(s);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(finish_reason r) noexcept {
  static constexpr std::string_view names[] = {"stop", "length", "tool_calls", "tool_calls_limit"};
  auto i = static_cast<std::size_t>(r);
  return i < std::size(names) ? names[i] : "unknown";
}

request_metrics request_metrics::attach(metrics_registry& r) {
  request_metrics m;
  for (std::size_t i = 0; i < m.entered.size(); ++i) {
    auto c = r.add_counter("triad_request_transitions_total",
                           "Requests entering each state of the request state machine.",
                           {{"state", std::string{to_string(static_cast<request_state>(i))}}});
    if (c)
      m.entered[i] = *c;
  }
  if (auto c = r.add_counter("triad_request_device_retries_total",
                             "Requests moved to another device after a failed step."))
    m.device_retries = *c;
  if (auto c = r.add_counter("triad_request_kv_moved_off_total",
                             "Sequences parked at a tool call whose KV moved off their device "
                             "because it left (its node drained), to resume on another."))
    m.kv_moved_off = *c;
  // A histogram of the family, or null when it could not be registered (not counted).
  auto histogram_of = [&r](std::string_view name, std::string_view help, std::vector<double> bounds,
                           const labels& lbls = {}) -> histogram* {
    auto h = r.add_histogram(name, help, std::move(bounds), lbls);
    return h ? *h : nullptr;
  };
  m.total_seconds = histogram_of("triad_request_seconds", "Requests from submit to their end.",
                                 default_duration_buckets());
  m.ttft_seconds =
      histogram_of("triad_request_ttft_seconds", "Requests from submit to their first token.",
                   default_duration_buckets());
  for (std::size_t i = 0; i < request_stage_count; ++i)
    m.stage_seconds[i] = histogram_of(
        "triad_request_stage_seconds",
        "Each request's time by stage: queue (waiting for a device), prefill, transfer (KV from "
        "the prefill to a decode device), decode (tool time excluded), tool, orchestration (the "
        "node's own work between them); the stages add up to triad_request_seconds.",
        default_duration_buckets(),
        {{"stage", std::string{to_string(static_cast<request_stage>(i))}}});
  m.inter_token_seconds =
      histogram_of("triad_request_inter_token_seconds",
                   "Gaps between a request's tokens as the node receives them (not across a tool "
                   "call).",
                   default_duration_buckets());
  m.tpot_seconds = histogram_of("triad_request_time_per_output_token_seconds",
                                "Per request with two tokens or more: first token to end, less "
                                "tool time, per token after the first.",
                                default_duration_buckets());
  const auto& d = defaults::request_metrics::tool_call_buckets;
  m.tool_calls = histogram_of("triad_request_tool_calls", "Tool calls per request.",
                              {std::begin(d), std::end(d)});
  const auto& b = defaults::request_metrics::kv_transfer_byte_buckets;
  m.kv_transfer_bytes =
      histogram_of("triad_request_kv_transfer_bytes", "Bytes per prefill-to-decode KV transfer.",
                   {std::begin(b), std::end(b)});
  m.kv_transfer_seconds = histogram_of(
      "triad_request_kv_transfer_seconds",
      "Seconds per prefill-to-decode KV transfer: from the prefill device's hand-over to the "
      "decode device's import, the wait for a decode device excluded.",
      default_duration_buckets());
  return m;
}

namespace {

using clock_type = node_clock;
// The request's total deadline ([limits].request_timeout_ms): `(deadline_atom)` to itself.
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
/// The request's own: the pin TTL of tool call `n` passed: `(pin_expiry_atom, std::uint32_t n)`.
using pin_expiry_atom = caf::atom_constant<caf::atom("pinexpiry")>;

double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// One request as a state machine:
//   queued -> prefill -> transfer -> decode -> (tool wait -> prefill of the tool result ->
//   decode)* -> done | failed | cancelled.
// In the three-stage layout the prompt is prefilled on a prefill device, its KV exported and
// imported into a decode device; in the monolithic layout one device does both. At a tool call
// the decode device stops by itself (</tool_call> is a stop token); the KV then follows the
// kv_policy while the tool runs on a tool domain.
class request_actor : public homed_actor {
public:
  request_actor(caf::actor_config& cfg, std::uint64_t id, chat_request req,
                std::shared_ptr<const request_context> ctx, request_callback on_event)
      : homed_actor(cfg)
      , id_(id)
      , req_(std::move(req))
      , ctx_(std::move(ctx))
      , on_event_(std::move(on_event)) {}

  caf::behavior make_behavior() override {
    start_ = clock_type::now();
    stage_since_ = start_; // in orchestration: the template and the tokenizer run now
    span_since_ = start_;
    traced_ = ctx_->trace && (ctx_->trace_all || req_.trace);
    if (ctx_->trace && req_.trace) // asked: its trace is kept for GET /v1/traces/{id} too
      ctx_->trace->keep(id_, ctx_->kept_traces);
    const chat_format& format = this->format();
    if (req_.raw_prompt) {
      tokens_ = format.raw(*req_.raw_prompt);
    } else if (req_.prior) {
      tokens_ = req_.prior->tokens;
      auto turn = format.turn(req_.messages);
      if (!turn) {
        fail(turn.error().message, turn.error().code);
        return {};
      }
      tokens_.insert(tokens_.end(), turn->begin(), turn->end());
    } else {
      auto prompt = format.prompt(req_.messages, req_.tools_json);
      if (!prompt) {
        fail(prompt.error().message, prompt.error().code);
        return {};
      }
      tokens_ = std::move(*prompt);
    }
    usage_.prompt_tokens = tokens_.size();
    if (req_.script) {
      auto forced = format.script(*req_.script);
      if (!forced) {
        fail(forced.error().message, forced.error().code);
        return {};
      }
      forced_ = std::move(*forced);
    }
    // A script is forced output, still capped by the request's max_tokens like any answer.
    budget_ = req_.script ? std::min(static_cast<std::uint32_t>(forced_.size()), req_.max_tokens)
                          : req_.max_tokens;
    if (budget_ == 0) {
      fail("max_tokens must be at least 1", errc::invalid_argument);
      return {};
    }
    if (auto fits = check_context(tokens_.size(), budget_, ctx_->max_context); !fits) {
      fail(fits.error().message, fits.error().code);
      return {};
    }
    arm_deadline();
    if (req_.prior && req_.prior->kv && req_.prior->kv->tokens < tokens_.size()) {
      // The earlier turns' KV (a copy: the conversation keeps its own); only this turn's tokens
      // are new.
      parked_blob_ = std::make_shared<const kv_blob>(*req_.prior->kv);
      begin_decode();
    } else {
      begin_prefill();
    }
    return {
        [this](device_event& e) { on_device(e); },
        [this](tool_result_atom, std::uint64_t, tool_reply& r) { on_tool_result(r); },
        [this](cancel_atom) { fail("cancelled", errc::cancelled); },
        [this](pin_expiry_atom, std::uint32_t call) { on_pin_expiry(call); },
        [this](device_leaving_atom, seq_id seq) { on_device_leaving(seq); },
        [this](deadline_atom) {
          fail("the request did not finish within " +
                   std::to_string(ctx_->request_timeout.count()) +
                   " ms ([limits].request_timeout_ms)",
               errc::timed_out);
        },
    };
  }

  void on_exit() override {
    inter_token_.flush(); // while the node's metrics surely live
    release_all();
    release_kept();
    cancel_pin_ttl();
    if (deadline_timer_ != 0 && ctx_->timers)
      ctx_->timers->cancel(deadline_timer_);
    on_event_ = nullptr;
  }

private:
  enum class stage { queued, prefill, transfer, decode, tool_wait, finished };

  // A transition: counted, and reported to the caller as a state event.
  void enter(stage s) { enter(static_cast<request_state>(s)), stage_ = s; }
  void enter(request_state s) {
    if (auto* c = ctx_->metrics.entered[static_cast<std::size_t>(s)])
      c->inc();
    request_event ev;
    ev.request = id_;
    ev.kind = request_event::state;
    ev.entered = s;
    emit(std::move(ev));
  }

  // ---- devices ------------------------------------------------------------------------------

  // The router's last hint: where more of the prompt's pages may be had (route_reply).
  std::pair<std::string, std::uint64_t> prefix_hint_;

  // A device where this request holds a sequence (once admitted) and, unless its KV is pinned
  // there across a tool call, a router slot.
  struct holding {
    device_actor device;
    std::string name;
    seq_id seq = 0;             // 0: no sequence there
    bool slot = true;           // holds one of the router's slots of the device
    bool cache_counted = false; // the device's prefix-cache hit was taken off prefill_tokens
  };

  // ---- messages to other actors (each a hop in the trace) ----------------------------------

  // A message this request sent: to whom (the router, a device by name, the tools), which, and
  // when. Empty when the request is not traced.
  struct hop {
    std::string to; // a device's name or "router", "tools": no allocation when short
    caf::atom_value what{};
    clock_type::time_point sent;
  };

  hop hop_from_here(std::string_view to, caf::atom_value what) const {
    if (!traced_)
      return {};
    return {std::string{to}, what, clock_type::now()};
  }

  // The hop's span on the request's messages track ("request <id> messages"): from the send to
  // the answer, `outcome` (a one-way message's span is as long as the send).
  void trace_hop(const hop& h, std::string_view outcome) {
    if (!traced_ || h.to.empty())
      return;
    // The worker thread's scratch, reused (a span's text goes into the log at once).
    thread_local std::string name, args;
    const auto what = caf::to_string(h.what);
    name.assign(what).append(" to ").append(h.to);
    args = "\"to\":";
    append_trace_string(args, h.to);
    args += ",\"message\":";
    append_trace_string(args, what);
    args += ",\"outcome\":";
    append_trace_string(args, outcome);
    trace_on(hop_track_, " messages", name, "message", h.sent, clock_type::now(), args);
  }

  // A request's answer handle whose then() writes the hop's span as the answer (or the error)
  // comes, before its handler runs.
  template<class Reply, class Handle>
  struct traced_answer {
    request_actor* self;
    hop sent;
    Handle handle;

    template<class OnAnswer, class OnError>
    void then(OnAnswer on_answer, OnError on_error) {
      handle.then(
          [self = self, h = sent, f = std::move(on_answer)](Reply& r) mutable {
            self->trace_hop(h, "answered");
            f(r);
          },
          [self = self, h = sent, f = std::move(on_error)](caf::error& e) mutable {
            self->trace_hop(h, "failed");
            f(e);
          });
    }
  };

  // Sends `(atom, xs...)` to `dest` (named `to`) as a request answered with a `Reply`: a
  // traced hop.
  template<class Reply, class Dest, class Atom, class... Ts>
  auto ask(const Dest& dest, std::string_view to, Atom atom, Ts&&... xs) {
    auto h = hop_from_here(to, atom);
    auto handle = request(dest, caf::infinite, atom, std::forward<Ts>(xs)...);
    return traced_answer<Reply, decltype(handle)>{this, std::move(h), std::move(handle)};
  }

  // Sends `(atom, xs...)` to `dest` (named `to`), answered by no one: a traced hop.
  template<class Dest, class Atom, class... Ts>
  void tell(const Dest& dest, std::string_view to, Atom atom, Ts&&... xs) {
    auto h = hop_from_here(to, atom);
    send(dest, atom, std::forward<Ts>(xs)...);
    trace_hop(h, "sent");
  }

  // Asks the router for a device of `s`, then runs `next` with it.
  // `release`: a slot to give back in the same message (see route_order::release).
  // `kv_store`: the store a demoted request's kept blocks are in (its devices go first).
  void route(route_stage s, std::function<void(holding)> next, std::string release = {},
             std::uint64_t kv_store = 0) {
    auto asked = charge(request_stage::queue);
    enter(stage::queued);
    route_order order{
        s,          req_.session, failed_devices_, {}, std::move(release), traced_ ? id_ : 0,
        req_.trace, kv_store};
    if (s != route_stage::decode && reuse_prefix())
      order.prefix = chain_hashes(tokens_, ctx_->page_tokens);
    routing_ = true;
    ++awaiting_;
    ask<route_reply>(ctx_->router, "router", route_atom::value, order)
        .then(
            [this, next, asked](route_reply& r) {
              routing_ = false;
              --awaiting_;
              if (stage_ != stage::finished)
                usage_.queued_s +=
                    std::chrono::duration<double>(charge(request_stage::orchestration) - asked)
                        .count();
              if (stage_ == stage::finished) { // ended while waiting: answered, now it goes
                if (r.ok)
                  tell(ctx_->router, "router", release_atom::value, r.name);
                leave_when_settled();
                return;
              }
              if (!r.ok) {
                // After a device failed it, the reason that device gave too.
                fail(device_failure_.empty() ? r.reason : r.reason + " (" + device_failure_ + ")",
                     r.code, r.retry_ms);
                return;
              }
              prefix_hint_ = {std::move(r.prefix_wire), r.prefix_pages};
              next(holding{r.device, r.name, 0, true});
            },
            [this](caf::error& e) {
              routing_ = false;
              --awaiting_;
              if (stage_ == stage::finished)
                leave_when_settled();
              else
                fail("the router did not answer: " + to_string(e));
            });
  }

  seq_id next_seq() { return (id_ << 8) | (++attempt_ & 0xff); }

  // The device generate order for the tokens so far, continuing the script where it is.
  generate_request order_for(seq_id seq, std::uint32_t max_new) {
    generate_request g;
    g.seq = seq;
    g.prompt = tokens_;
    g.sampling = req_.sampling;
    g.sampling.seed += attempt_; // a fresh stream per device sequence, still reproducible
    g.max_new_tokens = max_new;
    if (calls_enabled() && format().continues_calls())
      g.stop = {*format().call_end()}; // the tool runs and its result follows the call
    g.end = format().end_tokens();
    g.sink = caf::actor_cast<caf::actor>(this);
    g.reuse_prefix = reuse_prefix();
    // Where the KV stays across a tool call, the device parks the sequence at </tool_call>.
    g.park_on_stop = keeps_kv_across_tools();
    if (produced_ < forced_.size())
      g.forced.assign(forced_.begin() + static_cast<std::ptrdiff_t>(produced_), forced_.end());
    g.constraint = constraint_from_here();
    g.logprobs = req_.logprobs;
    g.top_logprobs = req_.top_logprobs;
    g.traced = traced_;
    g.trace_id = id_;
    return g;
  }

  // The answer's grammar where the answer stands (null without one): a fresh
  // constraint per device sequence, moved on by the answer's tokens so far, so a sequence that
  // failed with tokens this actor never received leaves nothing behind.
  std::shared_ptr<grammar::token_constraint> constraint_from_here() {
    // A tool_choice holds until the first call; the response grammar (calls or the answer,
    // where tools are declared) from then on, afresh after each hosted call's result.
    const bool calls_first = usage_.tool_calls == 0 && req_.tool_grammar;
    const auto& rules = calls_first ? req_.tool_grammar : req_.response_grammar;
    if (!rules || !ctx_->vocabulary)
      return nullptr;
    if (!masks_ || masks_rules_ != rules) {
      masks_ = ctx_->grammars ? ctx_->grammars->masks(rules, ctx_->vocabulary)
                              : std::make_shared<grammar::mask_cache>(
                                    std::make_shared<grammar::automaton>(rules), ctx_->vocabulary);
      masks_rules_ = rules;
    }
    // The grammar's tokens so far: the last ones produced, since the last tool result.
    const std::uint32_t since = produced_ - grammar_from_;
    // The budget: every token the request may still generate, those under this grammar so far
    // included (the constraint moves through them below).
    auto c = std::make_shared<grammar::token_constraint>(masks_, left() + since);
    if (!calls_first && req_.response_grammar_waits_for_call)
      c->free_until_call();
    for (auto it = tokens_.end() - static_cast<std::ptrdiff_t>(since); it != tokens_.end(); ++it)
      c->advance(static_cast<std::uint32_t>(*it));
    return c;
  }

  // Whether devices may start from a cached prefix: always, but for the recompute after a tool
  // call under the discard policy (which is what discard measures).
  bool reuse_prefix() const {
    return ctx_->options.kv != kv_policy::discard || usage_.tool_calls == 0 ||
           ctx_->options.device_layout == layout::monolithic;
  }

  // Whether a sequence stays on its decode device across a tool call, parked: the pin policy,
  // and always in the monolithic layout (the device is held).
  bool keeps_kv_across_tools() const {
    return ctx_->options.device_layout == layout::monolithic || ctx_->options.kv == kv_policy::pin;
  }

  std::uint32_t left() const { return budget_ > produced_ ? budget_ - produced_ : 0; }

  // Admits `order` on `h` (import when `blob` is given); on busy, tells the router and routes
  // again.
  void admit(holding h, generate_request order, std::shared_ptr<const kv_blob> blob, route_stage s,
             std::uint64_t prefilled) {
    auto seq = order.seq;
    auto handle = [this, h, seq, s, prefilled](admission& a) mutable {
      --awaiting_;
      if (stage_ == stage::finished) { // ended meanwhile: what the answer gives goes back
        if (a.accepted)
          tell(h.device, h.name, free_atom::value, seq);
        if (!a.accepted && a.code == errc::busy) // the router hears the device is full
          tell(ctx_->router, "router", device_busy_atom::value, h.name);
        else
          tell(ctx_->router, "router", release_atom::value, h.name);
        leave_when_settled();
        return;
      }
      if (!a.accepted) {
        if (a.code == errc::busy) {
          // The slot goes back with the report: the router sends nobody else there until a
          // sequence leaves it.
          tell(ctx_->router, "router", device_busy_atom::value, h.name);
          resume_at(s);
          return;
        }
        tell(ctx_->router, "router", release_atom::value, h.name);
        fail("device " + h.name + " refused the request: " + a.reason, a.code);
        return;
      }
      usage_.prefill_tokens += prefilled;
      unreported_ += prefilled;
      h.seq = seq;
      if (s == route_stage::decode)
        parked_blob_.reset(); // the KV lives on the decode device now
      // The device asked for its kept blocks before it answered: a read started for them at
      // the tool's return that it did not join is not needed.
      if (s == route_stage::decode)
        forget_prefetch();
      (s == route_stage::prefill ? prefill_ : decode_) = h;
    };
    auto on_error = [this, h](caf::error& e) {
      --awaiting_;
      tell(ctx_->router, "router", release_atom::value, h.name);
      if (stage_ == stage::finished)
        leave_when_settled();
      else
        fail("device " + h.name + " did not answer: " + to_string(e));
    };
    ++awaiting_;
    if (blob)
      ask<admission>(h.device, h.name, import_atom::value, std::move(blob), std::move(order))
          .then(handle, on_error);
    else
      ask<admission>(h.device, h.name, generate_atom::value, std::move(order))
          .then(handle, on_error);
  }

  // Starts again from stage `s` after a busy device (the router has been told).
  void resume_at(route_stage s) {
    if (s == route_stage::prefill || s == route_stage::any)
      begin_prefill();
    else
      resume_decode();
  }

  // Routes to a decode device with the KV where it waits: a blob (a transfer, or a demotion
  // without a store), or the store's blocks (a demotion, or a pin past its TTL).
  void resume_decode() {
    if (!parked_blob_ && !kept_.blocks.empty())
      begin_decode_kept();
    else
      begin_decode();
  }

  // ---- stages -------------------------------------------------------------------------------

  // Prefill of everything so far: on a prefill device (three-stage), or on one device that
  // then decodes too (monolithic).
  void begin_prefill() {
    bool mono = ctx_->options.device_layout == layout::monolithic;
    auto s = mono ? route_stage::any : route_stage::prefill;
    route(s, [this, mono, s](holding h) {
      charge(request_stage::prefill);
      enter(stage::prefill);
      auto order = order_for(next_seq(), mono ? left() : 1);
      // A prefill device hands the KV over with its done event (no move_out round trip).
      order.move_out_when_done = !mono;
      order.prefix_wire = prefix_hint_.first; // pages another node's store may hold
      order.prefix_pages = prefix_hint_.second;
      auto n = order.prompt.size();
      admit(std::move(h), std::move(order), nullptr, s, n);
    });
  }

  // Moves the prefilled KV from the prefill device to a decode device; `moved`: the KV the
  // prefill device already handed over with its done event (it dropped the sequence).
  void begin_transfer(std::optional<kv_blob> moved = std::nullopt) {
    charge(request_stage::transfer);
    transfer_from_ = stage_s_[static_cast<std::size_t>(request_stage::transfer)];
    awaiting_import_ = true;
    if (moved && ctx_->metrics.kv_transfer_bytes != nullptr)
      ctx_->metrics.kv_transfer_bytes->observe(static_cast<double>(moved->size_bytes()));
    enter(stage::transfer);
    auto from = prefill_;
    if (moved) {
      prefill_ = {};
      parked_blob_ = std::make_shared<const kv_blob>(std::move(*moved));
      begin_decode(from.name); // gives the prefill slot back with the decode order
      return;
    }
    // The device frees the sequence behind the copy: one message for both.
    ask<kv_blob>(from.device, from.name, move_out_atom::value, from.seq)
        .then(
            [this, from](kv_blob& blob) {
              prefill_ = {};
              if (ctx_->metrics.kv_transfer_bytes != nullptr)
                ctx_->metrics.kv_transfer_bytes->observe(static_cast<double>(blob.size_bytes()));
              parked_blob_ = std::make_shared<const kv_blob>(std::move(blob));
              begin_decode(from.name); // gives the prefill slot back with the decode order
            },
            [this](caf::error& e) { fail("KV export failed: " + to_string(e)); });
  }

  // Imports the parked KV (after a transfer or a demotion) into a decode device; the tokens past
  // it are prefilled there, then decoding goes on.
  // `release`: a device slot to give back with the routing order.
  void begin_decode(std::string release = {}) {
    route(
        route_stage::decode,
        [this](holding h) {
          charge(request_stage::decode);
          enter(stage::decode);
          auto blob = parked_blob_;
          if (!blob) {
            fail("internal: no KV to import");
            return;
          }
          auto order = order_for(next_seq(), left());
          auto n = order.prompt.size() - blob->tokens;
          admit(std::move(h), std::move(order), std::move(blob), route_stage::decode, n);
        },
        std::move(release));
  }

  // Moves the KV of `held` (its sequence parked on, or just stopped at a tool call by, its
  // decode device) into the store: the device answers with the blocks, pinned in the store for
  // the tool's deadline and some; the request keeps their ids until it resumes from them.
  void demote_to_store(holding held) {
    demoting_ = true;
    const auto keep = 2 * ctx_->options.tool_deadline + std::chrono::seconds{10};
    const auto keep_ms = static_cast<std::uint32_t>(
        std::min<std::int64_t>(keep.count(), std::numeric_limits<std::uint32_t>::max()));
    ++awaiting_;
    holding by{held.device, held.name, 0, false, false};
    ask<kv_kept>(held.device, held.name, demote_atom::value, held.seq, keep_ms)
        .then([this, by](kv_kept& k) { on_kept(std::move(k), by); },
              [this](caf::error&) { on_kept({}, {}); }); // the device is gone: recompute
  }

  void on_kept(kv_kept k, holding by) {
    --awaiting_;
    release_kept();
    demoting_ = false;
    if (stage_ == stage::finished) { // ended meanwhile (cancelled, timed out): nothing to keep
      unpin(std::move(k), by);
      leave_when_settled();
      return;
    }
    kept_ = std::move(k);
    kept_by_ = std::move(by);
    if (kept_.wire.empty() && in_this_store(kept_)) // another node's device may resume it
      kept_.wire = ctx_->kept_wire;
    if (pending_result_) {
      prefetch_kept(); // while the request is routed and admitted
      continue_after_tool();
    }
  }

  // When the tool's result will resume the request from the blocks kept in the store (a
  // demotion, or a pin past its TTL), starts reading them back now: the device that takes the
  // request joins the read (kv_tier::prefetch_kept) instead of starting it at admission.
  void prefetch_kept() {
    if (!in_this_store(kept_) || parked_blob_ || (!pin_expired_ && keeps_kv_across_tools()))
      return;
    const auto n = std::min<std::size_t>(kept_.tokens, tokens_.size());
    auto h = hop_from_here("kv fetcher", caf::atom("kvprefch"));
    ctx_->tier->prefetch_kept(kept_.blocks,
                              {tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(n)},
                              traced_ ? id_ : 0);
    trace_hop(h, "sent");
    prefetching_ = true;
  }

  // Drops the read prefetch_kept started if no device joined it (once, whatever ends it).
  void forget_prefetch() {
    if (!std::exchange(prefetching_, false))
      return;
    auto h = hop_from_here("kv fetcher", caf::atom("kvunpref"));
    ctx_->tier->forget_prefetch(kept_.blocks);
    trace_hop(h, "sent");
  }

  // Ends the pin the tier's keep gave `blocks` (the tier's message to the store, a hop).
  void tier_release(std::vector<std::uint64_t> blocks, std::uint64_t pin) {
    auto h = hop_from_here("kv store", caf::atom("kvunpin"));
    ctx_->tier->release(std::move(blocks), pin);
    trace_hop(h, "sent");
  }

  // The request's total deadline on the node's coarse timers (cancelled at exit, so it holds
  // the actor no longer): a CAF delayed_send would wake CAF's clock thread for every request.
  void arm_deadline() {
    if (ctx_->request_timeout.count() <= 0)
      return;
    if (!ctx_->timers) {
      delayed_send(this, ctx_->request_timeout, deadline_atom::value);
      return;
    }
    deadline_timer_ =
        ctx_->timers->arm(clock_type::now() + ctx_->request_timeout, [self = address()] {
          if (auto a = caf::actor_cast<caf::actor>(self))
            caf::anon_send(a, deadline_atom::value);
        });
  }

  // The pin policy with a store: the parked sequence stays on its device for the p90 of the
  // tool's recent durations (clamped to [pin_ttl_min, pin_ttl_max]); then it moves to the
  // store (on_pin_expiry).
  void arm_pin_ttl() {
    if (!ctx_->tier || !ctx_->timers || ctx_->options.device_layout == layout::monolithic)
      return;
    auto ttl = ctx_->options.pin_ttl_max;
    if (ctx_->durations)
      if (auto p90 = ctx_->durations->p90(tool_name_))
        ttl = std::clamp(*p90, ctx_->options.pin_ttl_min, ctx_->options.pin_ttl_max);
    // A coarse timer, cancelled when the tool returns: most tools return before their TTL.
    pin_timer_ =
        ctx_->timers->arm(clock_type::now() + ttl, [self = address(), call = usage_.tool_calls] {
          // Weak: a timer that fires as the request ends holds nothing.
          if (auto a = caf::actor_cast<caf::actor>(self))
            caf::anon_send(a, pin_expiry_atom::value, call);
        });
  }

  void cancel_pin_ttl() {
    if (pin_timer_ != 0 && ctx_->timers)
      ctx_->timers->cancel(pin_timer_);
    pin_timer_ = 0;
  }

  void on_pin_expiry(std::uint32_t call) {
    pin_timer_ = 0;
    // Only the TTL of the call still running, while its sequence is parked on its device.
    if (stage_ != stage::tool_wait || call != usage_.tool_calls || pending_result_ || demoting_ ||
        decode_.seq == 0)
      return;
    auto held = decode_;
    decode_ = {};
    pin_expired_ = true;
    ++usage_.pin_expiries;
    demote_to_store(held);
  }

  // Resumes a demoted request on a decode device from the blocks the store keeps for it: the
  // device reads them back (checked) and computes the tokens past them.
  void begin_decode_kept() {
    route(
        route_stage::decode,
        [this](holding h) {
          charge(request_stage::decode);
          enter(stage::decode);
          auto order = order_for(next_seq(), left());
          order.kept_blocks = kept_.blocks;
          order.kept_tokens = kept_.tokens;
          order.kept_store = kept_.store;
          order.kept_wire = kept_.wire;
          // Counted as a prefill of everything; the device reports what came from the blocks
          // (as cached tokens, subtracted then), so a block that could not be read counts as
          // computed.
          auto n = order.prompt.size();
          admit(std::move(h), std::move(order), nullptr, route_stage::decode, n);
        },
        {}, kept_.store);
  }

  // Tokens of `n` in whole pages (what a prompt's page chain can find in the store).
  std::uint64_t full_pages(std::uint64_t n) const {
    const auto pt = std::max<std::size_t>(1, ctx_->page_tokens);
    return n / pt * pt;
  }

  // Whether `k`'s blocks are in this node's store (a demotion on a device of another node keeps
  // them in that node's: only a device there reads them back, and only that store unpins them).
  bool in_this_store(const kv_kept& k) const {
    return ctx_->tier && !k.blocks.empty() && k.store == ctx_->tier->store_id();
  }

  // Lets go of the blocks kept at the last demotion (a later one keeps its own).
  void release_kept() {
    forget_prefetch();
    unpin(std::exchange(kept_, {}), std::exchange(kept_by_, {}));
  }

  // Ends the pin of kept blocks `k`: in this node's store itself, in another node's through the
  // device `by` whose demotion kept them (its node's store); when that device is gone, the
  // pin's time ends it.
  void unpin(kv_kept k, const holding& by) {
    if (in_this_store(k))
      tier_release(std::move(k.blocks), k.pin);
    else if (!k.blocks.empty() && by.device)
      tell(by.device, by.name, unpin_kept_atom::value, k.store, std::move(k.blocks), k.pin);
  }

  // ---- events -------------------------------------------------------------------------------

  void on_device(device_event& e) {
    if (stage_ == stage::finished)
      return;
    bool from_prefill = prefill_.seq == e.seq && prefill_.seq != 0;
    bool from_decode = decode_.seq == e.seq && decode_.seq != 0;
    if (!from_prefill && !from_decode)
      return; // a sequence already let go
    auto& held = from_prefill ? prefill_ : decode_;
    if (!e.tokens.empty())
      time_tokens(from_decode, e.import_seconds);
    if (e.cached != 0 && !held.cache_counted) {
      // Admission counted the whole prompt as prefilled; the device reused this much of it.
      held.cache_counted = true;
      usage_.cached_tokens += e.cached;
      usage_.store_tokens += e.stored;
      usage_.prefill_tokens -= std::min<std::uint64_t>(usage_.prefill_tokens, e.cached);
      unreported_ -= std::min<std::uint64_t>(unreported_, e.cached);
    }
    for (std::size_t i = 0; i < e.tokens.size(); ++i) {
      // A token event's log probabilities are its one token's.
      step_logprobs_ = i == 0 && !e.logprobs.empty() ? &e : nullptr;
      on_token(e.tokens[i]);
    }
    step_logprobs_ = nullptr;
    switch (e.kind) {
    case device_event::token:
      return;
    case device_event::preempted:
      return; // the device recomputes it; nothing is lost
    case device_event::failed:
      on_device_failed(from_prefill ? prefill_ : decode_, e.message);
      return;
    case device_event::done:
      break;
    }
    report_service();
    bool mono = ctx_->options.device_layout == layout::monolithic;
    if (!from_prefill || mono)
      charge(request_stage::orchestration); // the device is done: what follows is the node's
    std::optional<kv_blob> moved;
    if (from_prefill && !e.kv.empty()) {
      prefill_.seq = 0; // the device let go of it; its KV came with the event
      moved = std::move(e.kv);
    }
    if (from_prefill && !mono) {
      if (ended_ || left() == 0) {
        if (moved && req_.keep_kv && moved->stream) // sealed into the store by the stream
          stored_tokens_ = full_pages(moved->tokens);
        else if (moved && req_.keep_kv)
          kept_kv_ = std::move(moved);
        return end_answer();
      }
      begin_transfer(std::move(moved));
      return;
    }
    const auto& f = format();
    if (!ended_ && f.continues_calls() && !tokens_.empty() && f.call_end() &&
        tokens_.back() == *f.call_end())
      return begin_tool();
    end_answer();
  }

  // The device stopped at the end of the turn or at max_tokens: the calls the answer made go
  // to the client (a format that cannot continue them; cut by max_tokens, the answer still
  // ends with length), and it ends as it stopped.
  void end_answer() {
    if (!calls_.empty())
      return return_calls(ended_ ? finish_reason::tool_calls : finish_reason::length);
    finish(ended_ ? finish_reason::stop : finish_reason::length);
  }

  // The device dropped the sequence after a failed step: retry on another device or end with
  // the error, per the device_failure policy. The retry resumes from the blocks the store keeps
  // for this request (its KV at the last tool call) where there are any, computing only the
  // tokens past them; else it recomputes the KV from the tokens so far (a prefill device still
  // finds the prompt's pages the store holds).
  void on_device_failed(holding& h, const std::string& message) {
    auto what = "device " + h.name + " failed: " + message;
    if (ctx_->options.device_failure == device_failure_policy::fail ||
        retries_ >= ctx_->options.max_device_retries) {
      fail(retries_ > 0 ? what + " (after " + std::to_string(retries_) + " retries)" : what);
      return;
    }
    ++retries_;
    device_failure_ = what;
    if (ctx_->metrics.device_retries != nullptr)
      ctx_->metrics.device_retries->inc();
    failed_devices_.push_back(h.name);
    release_all(); // the failed sequence is gone; any other is recomputed too
    if (!kept_.blocks.empty()) {
      ++usage_.recovered_from_store;
      begin_decode_kept();
    } else {
      begin_prefill();
    }
  }

  void on_token(token t) {
    if (usage_.completion_tokens == 0) {
      usage_.ttft_s = since(start_);
      if (ctx_->metrics.ttft_seconds != nullptr)
        ctx_->metrics.ttft_seconds->observe(usage_.ttft_s);
    }
    tokens_.push_back(t);
    ++produced_;
    ++unreported_;
    ++usage_.completion_tokens;
    const auto& f = format();
    if (f.ends(t)) {
      ended_ = true;
      if (in_call_ && !f.call_end())
        close_call(false); // Llama 3 and Mistral calls run to the end of the answer
      return;
    }
    auto piece = f.piece(t);
    bool mark = false; // a token of the call syntax, never text
    if (calls_enabled()) {
      if (in_call_ && t == f.call_start() && f.call_end()) {
        mark = true; // a call opened again before it closed: the model starts it over
        call_.clear();
        call_open_ = t;
        scanner_.reset();
      } else if (!in_call_ && (t == f.call_start() || opens_json_call(piece))) {
        in_call_ = true;
        call_.clear();
        call_open_.reset();
        scanner_.reset();
        if (t == f.call_start()) {
          mark = true;
          call_open_ = t;
        } else {
          call_.push_back(t); // the '{' that began a Llama 3 call is the call's own text
          stream_call(piece);
        }
      } else if (in_call_ && f.call_end() && t == *f.call_end()) {
        mark = true;
        if (!f.continues_calls())
          close_call(true); // the next call may follow; the device runs to the end of the turn
      } else if (in_call_) {
        call_.push_back(t);
        stream_call(piece);
      }
    }
    const bool content = !(in_call_ || mark || f.control(t));
    if (content && piece.find_first_not_of(" \t\r\n") != std::string::npos)
      wrote_text_ = true;
    emit_token(t, std::move(piece), content);
  }

  // A call token's text: what it completes of a call the client will run goes to it at once
  // (tool_call_delta), where a grammar of calls makes the call certain to be well formed.
  void stream_call(const std::string& piece) {
    const bool under_calls_grammar =
        ctx_->vocabulary && !req_.tools_json.empty() &&
        (usage_.tool_calls == 0 && req_.tool_grammar ? true : req_.response_grammar != nullptr);
    if (!under_calls_grammar)
      return;
    const auto& f = format();
    for (auto& p : scanner_.push(piece)) {
      if (!p.name.empty()) // a call the format stops at is the client's unless the node hosts it
        streams_call_ = !f.continues_calls() || (req_.return_unhosted_calls && !hosted(p.name));
      if (!streams_call_)
        continue;
      request_event ev;
      ev.request = id_;
      ev.kind = request_event::tool_call_delta;
      // A format that stops at each call returns the answer's first call it does not host.
      ev.call_index = f.continues_calls() ? 0 : static_cast<std::uint32_t>(calls_.size() + p.call);
      ev.tool_name = std::move(p.name);
      ev.arguments_json = std::move(p.arguments);
      emit(std::move(ev));
    }
  }

  // Whether the model's tool calls are taken as calls: always where its format continues them
  // (the byte format, whose limits end the request); for a model file only where the request
  // may call tools at all (not tool_choice "none", not a plain completion), else its call
  // tokens are text like any other.
  bool calls_enabled() const {
    const auto& f = format();
    return f.syntax() != call_syntax::none &&
           (f.continues_calls() ||
            (req_.max_tool_calls > 0 && !req_.raw_prompt && !req_.tools_json.empty()));
  }

  // A Llama 3 call needs no token to open it: an answer whose first text is '{' is one
  // (`piece`: the token's text).
  bool opens_json_call(const std::string& piece) const {
    if (format().syntax() != call_syntax::llama3 || wrote_text_)
      return false;
    auto at = piece.find_first_not_of(" \t\r\n");
    return at != std::string::npos && piece[at] == '{';
  }

  // A call the model closed (with its closing token, or by ending the turn): its calls join the
  // answer's; malformed, or past what one answer may return (the request's max_tool_calls, and
  // at most 64, up to which the ids of one answer's calls are distinct), it is the answer's text
  // again (the model cannot be told). Without parallel_tool_calls the answer's first call is
  // its only one: later calls at the same site are dropped, a later site is text.
  void close_call(bool closed_by_token) {
    auto parsed = parse_tool_calls(format().syntax(), call_text(), !call_open_.has_value());
    if (parsed && !req_.parallel_tool_calls && calls_.empty() && parsed->size() > 1)
      parsed->resize(1);
    const std::size_t room =
        req_.parallel_tool_calls ? std::min<std::size_t>(req_.max_tool_calls, 64) : 1;
    if (parsed && calls_.size() + parsed->size() <= room)
      calls_.insert(calls_.end(), std::make_move_iterator(parsed->begin()),
                    std::make_move_iterator(parsed->end()));
    else
      emit_call_as_text(closed_by_token);
    in_call_ = false;
    call_.clear();
  }

  // A call the format cannot take (malformed, or never closed) becomes answer text again; the
  // syntax's control tokens stay out of it, as they do of any text.
  void emit_call_as_text(bool closed_by_token) {
    const auto& f = format();
    request_event ev;
    ev.request = id_;
    ev.kind = request_event::token;
    ev.tok = call_open_ ? *call_open_ : call_.empty() ? token{0} : call_.front();
    if (call_open_ && !f.control(*call_open_))
      ev.text = f.piece(*call_open_);
    for (auto t : call_)
      if (!f.control(t))
        ev.text += f.piece(t);
    if (closed_by_token && !f.control(*f.call_end()))
      ev.text += f.piece(*f.call_end());
    ev.content = true;
    emit(std::move(ev));
    in_call_ = false;
    call_.clear();
  }

  void emit_token(token t, std::string piece, bool content) {
    request_event ev;
    ev.request = id_;
    ev.kind = request_event::token;
    ev.tok = t;
    ev.text = std::move(piece);
    ev.content = content;
    if (const auto* lp = step_logprobs_) {
      ev.logprob = lp->logprobs.front();
      for (std::size_t k = 0; k < lp->top.size() && k + 1 < lp->logprobs.size(); ++k)
        ev.top_logprobs.push_back({lp->top[k], format().piece(lp->top[k]), lp->logprobs[k + 1]});
    }
    emit(std::move(ev));
  }

  // The request's chat format (the node's).
  const chat_format& format() const { return *ctx_->format; }

  // The call's text, token by token.
  std::string call_text() const {
    std::string out;
    for (auto t : call_)
      out += format().piece(t);
    return out;
  }

  // ---- tools --------------------------------------------------------------------------------

  // The answer's calls, where the format cannot continue them (a model file's): each goes to
  // the client as a call event, and the request ends with tool_calls.
  void return_calls(finish_reason reason) {
    for (auto& c : calls_) {
      ++usage_.tool_calls;
      request_event ev;
      ev.request = id_;
      ev.kind = request_event::tool_call;
      ev.tool_name = std::move(c.name);
      ev.arguments_json = std::move(c.arguments_json);
      emit(std::move(ev));
    }
    calls_.clear();
    finish(reason);
  }

  // The device stopped at a call's closing token (a format that continues calls): the call
  // runs here, or goes to the caller, and its result follows it.
  void begin_tool() {
    auto parsed = parse_tool_call(call_text());
    enter(stage::tool_wait);
    in_call_ = false;
    tool_start_ = clock_type::now();
    token_gap_open_ = false; // the gap across the call is no inter-token latency
    ++usage_.tool_calls;
    tool_name_ = parsed ? parsed->name : std::string{};
    request_event ev;
    ev.request = id_;
    ev.kind = request_event::tool_call;
    if (parsed) {
      ev.tool_name = parsed->name;
      ev.arguments_json = parsed->arguments_json;
    } else {
      ev.tool_name = "(malformed)";
      ev.arguments_json = call_text();
    }
    emit(std::move(ev));
    if (parsed && req_.return_unhosted_calls && !hosted(parsed->name)) {
      finish(finish_reason::tool_calls); // the caller runs it
      return;
    }
    park_kv();
    if (usage_.tool_calls > req_.max_tool_calls) {
      finish(finish_reason::tool_calls_limit);
      return;
    }
    if (!parsed) {
      on_tool_result(tool_reply{false, false, parsed.error().message, {}});
      return;
    }
    if (ctx_->tools == nullptr) {
      on_tool_result(tool_reply{false, false, "this node hosts no tools", {}});
      return;
    }
    if (!hosted(parsed->name) && req_.declared_tools) { // hosted, but not for this request
      on_tool_result(tool_reply{false, false,
                                "tool '" + parsed->name + "' is not available to this request",
                                {}});
      return;
    }
    tool_invocation call{usage_.tool_calls,
                         parsed->name,
                         parsed->arguments_json,
                         ctx_->options.tool_deadline,
                         traced_ ? ctx_->trace : nullptr,
                         id_};
    ++usage_.hosted_tool_calls;
    charge(request_stage::tool);
    tool_hop_ = hop_from_here("tools", tool_call_atom::value); // answered by on_tool_result
    ctx_->tools->invoke(std::move(call), caf::actor_cast<caf::actor>(this));
  }

  // Whether a call to `name` runs on the node: a tool it hosts, which this request declared
  // (or the node exposes to every request, or the embedded caller declared nothing).
  bool hosted(const std::string& name) const {
    const bool available = ctx_->tools != nullptr && ctx_->tools->registry() != nullptr &&
                            ctx_->tools->registry()->find(name) != nullptr;
    if (!available || ctx_->expose_hosted_tools || !req_.declared_tools)
      return available;
    const auto& declared = *req_.declared_tools;
    return std::find(declared.begin(), declared.end(), name) != declared.end();
  }

  // What happens to the KV while the tool runs (kv_policy; the monolithic layout always keeps
  // the sequence and its device slot).
  void park_kv() {
    // Monolithic and pin: the device parked the sequence itself at </tool_call> (park_on_stop).
    if (ctx_->options.device_layout == layout::monolithic)
      return; // the device is held: the sequence stays, parked, and so does its router slot
    if (ctx_->options.kv == kv_policy::pin) {
      // The KV stays on the device, parked (not scheduled, evicted only after finished
      // sequences), but the slot goes back: the device decodes others meanwhile, its own
      // admission bound (sequences held, parked ones included) still applies.
      if (decode_.slot)
        tell(ctx_->router, "router", park_release_atom::value, decode_.name);
      decode_.slot = false;
      arm_pin_ttl();
      return;
    }
    auto held = decode_;
    decode_ = {};
    tell(ctx_->router, "router", release_atom::value, held.name);
    if (ctx_->options.kv == kv_policy::discard) {
      tell(held.device, held.name, free_atom::value, held.seq);
      parked_blob_.reset();
      return;
    }
    demoting_ = true;
    if (ctx_->tier) {
      // The device moves the KV into the store: the request holds its blocks, not its bytes.
      demote_to_store(held);
      return;
    }
    move_out_parked(held);
  }

  // Copies the KV of `held` (its sequence parked at a tool call) here as a blob, the device
  // freeing it; the request resumes from the blob on a decode device (with `demoting_` set).
  void move_out_parked(holding held) {
    ask<kv_blob>(held.device, held.name, move_out_atom::value, held.seq)
        .then(
            [this](kv_blob& blob) {
              parked_blob_ = std::make_shared<const kv_blob>(std::move(blob));
              demoting_ = false;
              if (pending_result_)
                continue_after_tool();
            },
            [this, held](caf::error&) {
              // Could not copy it out: fall back to recomputing after the tool.
              tell(held.device, held.name, free_atom::value, held.seq);
              parked_blob_.reset();
              demoting_ = false;
              if (pending_result_)
                continue_after_tool();
            });
  }

  // The device where this request's sequence is parked for a tool call is leaving (its node
  // drains): the KV moves here now, and the request resumes on another decode device from it
  // as after a demotion, instead of recomputing once the device is gone.
  void on_device_leaving(seq_id seq) {
    if (stage_ != stage::tool_wait || seq == 0 || decode_.seq != seq || demoting_)
      return; // resumed already (it finishes there), or not parked there
    cancel_pin_ttl();
    auto held = decode_;
    decode_ = {};
    if (held.slot) // the monolithic layout keeps the slot while parked
      tell(ctx_->router, "router", release_atom::value, held.name);
    pin_expired_ = true; // resumes from what moved, not on the device
    if (ctx_->metrics.kv_moved_off != nullptr)
      ctx_->metrics.kv_moved_off->inc();
    demoting_ = true;
    move_out_parked(held);
  }

  void on_tool_result(tool_reply r) {
    if (stage_ != stage::tool_wait)
      return;
    trace_hop(std::exchange(tool_hop_, {}), r.ok ? "answered" : "failed");
    charge(request_stage::orchestration);
    const auto took = clock_type::now() - tool_start_;
    usage_.tool_s += std::chrono::duration<double>(took).count();
    cancel_pin_ttl();
    if (ctx_->durations && !tool_name_.empty())
      ctx_->durations->record(tool_name_,
                              std::chrono::duration_cast<std::chrono::milliseconds>(took));
    request_event ev;
    ev.request = id_;
    ev.kind = request_event::tool_result;
    // A failed call reaches the model as "error: <why>" (tool_reply.ok, never the text, says
    // which it is).
    ev.tool_output = r.ok ? std::move(r.content) : "error: " + r.content;
    // What the context holds for the output: past the tokens so far and those still to be
    // generated (tool_result_overflow).
    const std::size_t used = tokens_.size() + left();
    const std::size_t room = ctx_->max_context > used ? ctx_->max_context - used : 0;
    auto fitted = fit_tool_result(ev.tool_output, room);
    if (!fitted || (*fitted != ev.tool_output &&
                    ctx_->options.tool_result_overflow == tool_overflow_policy::fail)) {
      fail("the output of tool call " + std::to_string(usage_.tool_calls) + " is " +
               std::to_string(ev.tool_output.size()) + " bytes; the model's context (" +
               std::to_string(ctx_->max_context) + " tokens) has room for " + std::to_string(room) +
               " after the conversation and the tokens still to "
               "generate ([orchestration].tool_result_overflow = " +
               std::string{to_string(ctx_->options.tool_result_overflow)} + ")",
           errc::exhausted);
      return;
    }
    ev.tool_output = std::move(*fitted);
    emit(ev);
    // The KV kept in the store comes back while the result is tokenized, routed and admitted.
    if (!demoting_)
      prefetch_kept();
    auto appended = format().tool_result(ev.tool_output);
    if (!appended) {
      fail(appended.error().message, appended.error().code);
      return;
    }
    appended_ = std::move(*appended);
    pending_result_ = true;
    if (!demoting_)
      continue_after_tool();
  }

  void continue_after_tool() {
    pending_result_ = false;
    auto appended = std::move(appended_);
    appended_.clear();
    tokens_.insert(tokens_.end(), appended.begin(), appended.end());
    grammar_from_ = produced_; // the model answers the result afresh
    // A pin past its TTL moved the KV to the store: it resumes as a demotion does.
    const bool parked = !std::exchange(pin_expired_, false) && keeps_kv_across_tools();
    if (parked)
      ++usage_.kv_kept_calls;
    else if (!kept_.blocks.empty())
      ++usage_.kv_stored_calls;
    if (parked) { // parked on its device, which resumes it
      charge(request_stage::decode);
      enter(stage::decode);
      // The device computes the tool result and the </tool_call> it stopped at (a sampled
      // token runs through the model only with the step after it).
      usage_.prefill_tokens += appended.size() + 1;
      unreported_ += appended.size() + 1;
      tell(decode_.device, decode_.name, resume_atom::value, decode_.seq, appended,
           constraint_from_here());
      return;
    }
    // Only a demotion (or that pin) leaves KV waiting off the devices at a tool call.
    if (parked_blob_ || !kept_.blocks.empty())
      resume_decode();
    else
      begin_prefill(); // discard, or a demotion that failed: recompute everything
  }

  // ---- where the time goes -----------------------------------------------------------------

  // Ends the current stage now and begins `next` (the same one: its time so far is counted);
  // returns the moment read.
  clock_type::time_point charge(request_stage next) {
    const auto now = clock_type::now();
    stage_s_[static_cast<std::size_t>(stage_now_)] +=
        std::chrono::duration<double>(now - stage_since_).count();
    if (traced_ && next != stage_now_) {
      trace(to_string(stage_now_), span_since_, now);
      span_since_ = now;
    }
    stage_now_ = next;
    stage_since_ = now;
    return now;
  }

  // A device event with tokens came: the gap since the last one is an inter-token latency
  // (unless a tool call lies between); `import_s`, on a decode device's first token after a KV
  // import, is moved from decode to the transfer it belongs to.
  void time_tokens(bool from_decode, float import_s) {
    const auto now = clock_type::now();
    if (token_gap_open_)
      inter_token_.observe(std::chrono::duration<double>(now - last_token_at_).count());
    token_gap_open_ = true;
    last_token_at_ = now;
    if (ctx_->options.device_layout == layout::monolithic && stage_now_ == request_stage::prefill)
      charge(request_stage::decode); // a monolithic device decodes on from its first token
    if (!from_decode || (import_s <= 0 && !awaiting_import_))
      return;
    charge(request_stage::decode);
    auto& decode = stage_s_[static_cast<std::size_t>(request_stage::decode)];
    auto& transfer = stage_s_[static_cast<std::size_t>(request_stage::transfer)];
    const double moved = std::min<double>(std::max(0.0f, import_s), decode);
    decode -= moved;
    transfer += moved;
    if (std::exchange(awaiting_import_, false) && ctx_->metrics.kv_transfer_seconds != nullptr)
      ctx_->metrics.kv_transfer_seconds->observe(transfer - transfer_from_);
  }

  // A span of this request on its own track (the domain it runs in, "request <id>").
  void trace(std::string_view name, clock_type::time_point from, clock_type::time_point to,
             std::string_view args = {}) {
    trace_on(trace_track_, "", name, "request", from, to, args);
  }

  // A span on one of the request's tracks (`track`, made at first use: "request <id>" and
  // `suffix`), in the trace of the request (kept when it asked).
  void trace_on(std::optional<trace_track>& track, std::string_view suffix, std::string_view name,
                std::string_view category, clock_type::time_point from, clock_type::time_point to,
                std::string_view args) {
    const std::uint64_t owner = req_.trace ? id_ : 0; // a kept trace's
    if (!track) // a track of its own, not remembered by the log: requests come and go
      track = ctx_->trace->new_track("domain" + std::to_string(current_domain()),
                                     "request " + std::to_string(id_) + std::string{suffix}, owner);
    ctx_->trace->add(*track, name, category, from, to - from, args,
                     std::span{&owner, owner != 0 ? 1u : 0u});
  }

  // At the end: each stage's time, the tool calls, the time per output token.
  void observe_stages() {
    const auto& m = ctx_->metrics;
    for (std::size_t i = 0; i < request_stage_count; ++i)
      if (m.stage_seconds[i] != nullptr)
        m.stage_seconds[i]->observe(stage_s_[i]);
    if (m.tool_calls != nullptr)
      m.tool_calls->observe(static_cast<double>(usage_.tool_calls));
    if (m.tpot_seconds != nullptr && usage_.completion_tokens >= 2)
      m.tpot_seconds->observe(std::max(0.0, usage_.total_s - usage_.ttft_s - usage_.tool_s) /
                              static_cast<double>(usage_.completion_tokens - 1));
    inter_token_.flush();
  }

  // ---- endings ------------------------------------------------------------------------------

  // Ends with done; with keep_kv, after the KV left the device that holds it: with a KV store,
  // into the store as blocks (the full ones shared and found again by the next turn's prompt,
  // under the store's budget, ageing out by tier when the session idles); without one, copied
  // out into the conversation. Should that fail, the next turn recomputes it.
  void finish(finish_reason reason) {
    if (in_call_ && stage_ != stage::tool_wait && !format().continues_calls())
      emit_call_as_text(false); // a call never closed (max_tokens) is text after all
    auto* h = decode_.seq != 0 ? &decode_ : prefill_.seq != 0 ? &prefill_ : nullptr;
    request_event ev;
    ev.kind = request_event::done;
    ev.finish = reason;
    if (!req_.keep_kv || h == nullptr)
      return end(std::move(ev));
    if (ctx_->sessions_in_store) {
      auto held = *h;
      h->seq = 0; // the device lets go of the sequence with the demotion (the slot stays held)
      ++awaiting_;
      ask<kv_kept>(held.device, held.name, demote_atom::value, held.seq, std::uint32_t{1})
          .then(
              [this, ev](kv_kept& k) mutable {
                --awaiting_;
                // The full pages, which the next turn's prompt finds; the blocks are not held
                // (their pin is a millisecond's: cached like any page, evicted by pressure).
                if (!k.blocks.empty())
                  stored_tokens_ = full_pages(k.tokens);
                end(std::move(ev)); // or, ended meanwhile, leaves now
                leave_when_settled();
              },
              [this, ev](caf::error&) mutable {
                --awaiting_;
                end(std::move(ev));
                leave_when_settled();
              });
      return;
    }
    ask<kv_blob>(h->device, h->name, export_atom::value, h->seq)
        .then(
            [this, ev](kv_blob& blob) mutable {
              kept_kv_ = std::move(blob);
              end(std::move(ev));
            },
            [this, ev](caf::error&) mutable { end(std::move(ev)); });
  }

  void fail(std::string message, errc code = errc::system_error, std::uint32_t retry_ms = 0) {
    request_event ev;
    ev.kind = request_event::error;
    ev.message = std::move(message);
    ev.code = code;
    ev.retry_ms = retry_ms;
    end(std::move(ev));
  }

  // Ends the request with its one done or error event `ev`: frees what it holds, reports,
  // exits.
  void end(request_event ev) {
    if (stage_ == stage::finished)
      return;
    // What it holds goes back first (its messages belong to its time); a tool call still out
    // ends its span here, unanswered.
    trace_hop(std::exchange(tool_hop_, {}), "unanswered");
    release_all();
    release_kept();
    cancel_pin_ttl();
    if (routing_) // still waiting for a device: the router answers the order, withdrawn
      tell(ctx_->router, "router", withdraw_atom::value);
    const auto now = charge(request_stage::orchestration);
    usage_.total_s = std::chrono::duration<double>(now - start_).count();
    observe_stages();
    if (traced_) {
      trace(to_string(stage_now_), span_since_, now);
      std::string args = "\"id\":" + std::to_string(id_) + ",\"session\":";
      append_trace_string(args, req_.session);
      args += ",\"outcome\":";
      append_trace_string(args, ev.kind == request_event::done ? "done" : ev.message);
      args += ",\"prompt_tokens\":" + std::to_string(usage_.prompt_tokens) +
              ",\"completion_tokens\":" + std::to_string(usage_.completion_tokens) +
              ",\"tool_calls\":" + std::to_string(usage_.tool_calls);
      // A nanosecond before its first stage: a viewer nests spans that start together in the
      // order it reads them, and this one is written last.
      trace("request", start_ - std::chrono::nanoseconds{1}, now, args);
    }
    const auto kind = ev.kind;
    ev.request = id_;
    ev.usage = usage_;
    if (kind == request_event::done) {
      auto state = std::make_shared<conversation_state>();
      state->tokens = tokens_;
      state->kv = std::move(kept_kv_);
      state->stored_tokens = stored_tokens_;
      ev.conversation = std::move(state);
    }
    auto last = kind == request_event::done  ? request_state::done
                : ev.code == errc::cancelled ? request_state::cancelled
                                             : request_state::failed;
    if (ctx_->metrics.total_seconds != nullptr)
      ctx_->metrics.total_seconds->observe(usage_.total_s);
    enter(last);
    report_service();
    stage_ = stage::finished;
    emit(std::move(ev));
    on_event_ = nullptr;
    // A request still waiting for a device stays until the router answers (withdrawn, or a
    // grant it then gives back), so no slot is granted to an actor that is gone; likewise for
    // a device's admission (a sequence and its slot) or demotion (kept blocks) on the way.
    leave_when_settled();
  }

  // Quits once the request has ended and every answer that gives it something to give back
  // (awaiting_) has come: an actor that quit drops its pending answers unread, and with them
  // a device sequence or a router slot no one would free.
  void leave_when_settled() {
    if (stage_ == stage::finished && awaiting_ == 0)
      quit();
  }

  // Frees every sequence this request holds and gives back its router slots.
  void release_all() {
    for (auto* h : {&prefill_, &decode_}) {
      if (h->device && h->seq != 0)
        tell(h->device, h->name, free_atom::value, h->seq);
      if (h->device && h->slot)
        tell(ctx_->router, "router", release_atom::value, h->name);
      *h = {};
    }
    parked_blob_.reset();
  }

  // Tells the router the tokens computed for this request's session since the last report
  // (PLAS orders waiting requests by each session's sum). Under FCFS nothing reads that sum,
  // and the report would be a message at every device phase for nothing.
  void report_service() {
    if (unreported_ == 0 || req_.session.empty() || ctx_->options.schedule != schedule_policy::plas)
      return;
    tell(ctx_->router, "router", served_atom::value, req_.session, unreported_);
    unreported_ = 0;
  }

  void emit(request_event ev) {
    if (on_event_)
      on_event_(ev);
  }

  std::uint64_t id_;
  chat_request req_;
  std::shared_ptr<const request_context> ctx_;
  request_callback on_event_;
  stage stage_ = stage::queued;
  clock_type::time_point start_, tool_start_;
  std::vector<token> tokens_;    // the conversation so far, as the device sees it
  std::vector<token> forced_;    // the script's tokens, when scripted
  bool routing_ = false;         // a route_atom request to the router is unanswered
  std::uint32_t awaiting_ = 0;   // unanswered requests whose answer holds something to free
  std::uint32_t budget_ = 0;     // completion tokens allowed
  std::uint32_t produced_ = 0;   // completion tokens generated
  std::uint32_t attempt_ = 0;    // device sequences started
  std::uint64_t unreported_ = 0; // tokens computed for the session, not yet told the router
  std::uint32_t retries_ = 0;    // moves to another device after failures
  std::vector<std::string> failed_devices_; // devices that failed this request
  std::string device_failure_;              // what the last of them said
  holding prefill_, decode_;
  // The KV between devices (a transfer, a demotion), shared with the device importing it, so a
  // retry elsewhere needs no copy.
  std::shared_ptr<const kv_blob> parked_blob_;
  kv_kept kept_;             // demote with a store: the blocks holding the KV across the tool call
  holding kept_by_;          // the device whose demotion kept them (seq 0): unpins another store's
  bool prefetching_ = false; // a read of kept_'s blocks started (prefetch_kept), not yet forgotten
  std::string tool_name_;    // the tool of the call running (empty: malformed)
  bool pin_expired_ = false; // the parked KV left its device during this call (TTL, device left)
  coarse_timers::key pin_timer_ = 0;      // the pin TTL armed for this call (0: none)
  coarse_timers::key deadline_timer_ = 0; // the request's deadline (0: none or CAF's clock)
  std::optional<kv_blob> kept_kv_;   // keep_kv: the KV exported at the end
  std::uint64_t stored_tokens_ = 0;  // keep_kv with a store: tokens whose KV went into it
  bool in_call_ = false, ended_ = false, demoting_ = false, pending_result_ = false;
  bool wrote_text_ = false;           // the answer has text beyond white space
  std::vector<token> call_;           // tokens of the tool call being written
  std::optional<token> call_open_;    // the token that opened it (none: a Llama 3 '{')
  std::vector<tool_call_text> calls_; // the answer's calls so far (a format that returns them)
  call_scanner scanner_;              // the call being written, read as it comes
  bool streams_call_ = false;         // its pieces go to the client
  std::vector<token> appended_;       // the tool result's tokens, until they are sent
  std::shared_ptr<grammar::mask_cache> masks_;          // the grammar's token masks
  std::shared_ptr<const grammar::grammar> masks_rules_; // the grammar masks_ is of
  std::uint32_t grammar_from_ = 0; // produced_ when the grammar began (the last tool result)
  // While a device event's tokens are taken: the one whose log probabilities it carries.
  const device_event* step_logprobs_ = nullptr;
  request_usage usage_;
  // Where the time goes (triad_request_stage_seconds): the stage now, since when, and the
  // seconds of each so far.
  request_stage stage_now_ = request_stage::orchestration;
  clock_type::time_point stage_since_;
  std::array<double, request_stage_count> stage_s_{};
  double transfer_from_ = 0;     // the transfer stage's seconds when the last transfer began
  bool awaiting_import_ = false; // a transfer's import is still to be reported by its device
  clock_type::time_point last_token_at_;
  bool token_gap_open_ = false; // a token came since the last tool call (or the start)
  histogram::tally inter_token_{ctx_->metrics.inter_token_seconds};
  bool traced_ = false;               // its spans go to the node's trace log
  clock_type::time_point span_since_; // the start of the stage's span being traced
  std::optional<trace_track> trace_track_; // its track in the trace (once asked)
  std::optional<trace_track> hop_track_;   // its messages' track in the trace (once asked)
  hop tool_hop_; // the hosted tool call on its way (traced: its span ends with the result)
};

} // namespace

caf::actor spawn_request(domain& home, std::uint64_t id, chat_request request,
                         std::shared_ptr<const request_context> context,
                         request_callback on_event) {
  return home.spawn<request_actor>(id, std::move(request), std::move(context), std::move(on_event));
}

} // namespace triad
