#include "actors/router.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

#include <caf/all.hpp>

#include "devices/device.hpp"
#include "runtime/forget_oldest.hpp"
#include "runtime/homed_actor.hpp"

namespace triad {

namespace {

bool qualifies(device_role role, route_stage stage) {
  switch (stage) {
  case route_stage::prefill:
    return role != device_role::decode;
  case route_stage::decode:
    return role != device_role::prefill;
  case route_stage::any:
    return role == device_role::both;
  }
  return false;
}

class router_impl : public homed<router_actor::base> {
public:
  router_impl(caf::actor_config& cfg, std::vector<routed_device> devices,
              orchestration_options options, std::chrono::milliseconds queue_timeout,
              std::shared_ptr<kv_tier> tier, std::shared_ptr<trace_log> trace)
      : homed(cfg)
      , options_(std::move(options))
      , queue_timeout_(queue_timeout)
      , tier_(std::move(tier))
      , trace_(std::move(trace)) {
    for (auto& d : devices)
      devices_.push_back({std::move(d), 0, false, 0, false, unknown_kv, 0, 0, {}, true, {}});
  }

  behavior_type make_behavior() override {
    // Each device tells its free KV pages when they change (no polling: an idle node sleeps).
    for (auto& d : devices_)
      caf::anon_send(d.info.actor, watch_kv_atom::value, caf::actor_cast<caf::actor>(this));
    return {
        [this](kv_free_atom, caf::actor_addr& from, std::uint64_t free, std::uint64_t total,
               double decode_step_s) {
          for (auto& d : devices_)
            if (d.info.actor.address() == from) {
              d.kv_free = free;
              d.kv_total = total;
              d.decode_step_s = decode_step_s;
            }
        },
        [this](refresh_atom) -> caf::result<bool> {
          // Answered once every device has answered (or failed to) a fresh stats request.
          auto promise = make_response_promise<bool>();
          auto left = std::make_shared<std::size_t>(devices_.size());
          if (*left == 0)
            return true;
          for (std::size_t i = 0; i < devices_.size(); ++i)
            ask_stats(i, [promise, left]() mutable {
              if (--*left == 0)
                promise.deliver(true);
            });
          return promise;
        },
        [this](route_atom, route_order& order) -> caf::result<route_reply> {
          const order_trace traced{order.trace_id, order.trace_kept,
                                   order.trace_id != 0 ? trace_clock::now()
                                                       : trace_clock::time_point{}};
          if (!order.release.empty())
            release(order.release);
          if (!any_qualifies(order.stage, order.avoid))
            return answer(traced, no_device(order.stage, order.avoid));
          auto& queue = waiting_[static_cast<std::size_t>(order.stage)];
          if (auto* d = pick(order.stage, order.avoid, order.prefix, order.kv_store);
              d != nullptr && queue.empty())
            return answer(traced, grant(*d, order.prefix));
          if (waiting() >= options_.max_waiting) {
            auto ms = static_cast<std::uint32_t>(options_.retry_after.count());
            return answer(traced, route_reply{false,
                                              {},
                                              {},
                                              "overloaded: " + std::to_string(waiting()) +
                                                  " requests wait for devices; retry after " +
                                                  std::to_string(ms) + " ms",
                                              ms,
                                              errc::overloaded});
          }
          auto promise = make_response_promise<route_reply>();
          std::uint64_t priority = 0;
          if (options_.schedule == schedule_policy::plas)
            if (auto it = ledger_.find(order.session); it != ledger_.end())
              priority = it->second.tokens;
          const auto number = next_order_++;
          queue.emplace(key{priority, number},
                        waiter{promise, std::move(order.avoid), std::move(order.prefix),
                               order.kv_store, current_sender(), traced});
          serve();
          // Only an order still waiting gets its expiry: one that serve() answered at once
          // arms no timer on CAF's clock, whose thread each timer wakes.
          if (queue_timeout_.count() > 0 && queue.count(key{priority, number}) != 0)
            delayed_send(this, queue_timeout_, router_expire_atom::value,
                         static_cast<std::uint32_t>(order.stage), number);
          return promise;
        },
        [this](router_expire_atom, std::uint32_t stage, std::uint64_t number) {
          auto ms = static_cast<std::uint32_t>(options_.retry_after.count());
          refuse_waiting(
              stage, [number](const key& k, const waiter&) { return k.second == number; },
              route_reply{false,
                          {},
                          {},
                          "waited " + std::to_string(queue_timeout_.count()) +
                              " ms for a device ([limits].queue_timeout_ms); retry after " +
                              std::to_string(ms) + " ms",
                          ms,
                          errc::busy});
        },
        [this](withdraw_atom) {
          auto who = current_sender();
          for (std::uint32_t stage = 0; stage < waiting_.size(); ++stage)
            refuse_waiting(
                stage, [&who](const key&, const waiter& w) { return w.who == who; },
                route_reply{false, {}, {}, "withdrawn", 0, errc::stopped});
        },
        [this](release_atom, std::string& name) { release(name); },
        [this](park_release_atom, std::string& name) {
          give_back(name);
          serve();
        },
        [this](device_busy_atom, std::string& name) {
          if (auto* d = give_back(name)) {
            d->room = 0;
            d->busy_again = true;
            if (!d->said_busy) {
              d->said_busy = true;
              delayed_send(this, options_.busy_backoff, router_unbusy_atom::value, name);
            }
          }
          serve();
        },
        [this](router_unbusy_atom, std::string& name) {
          // A busy period ends after a backoff with no refusal. Until then each backoff lets
          // one request try (room for it may have come without a release: sequences held by
          // other nodes' or the embedder's requests).
          if (auto* d = find(name)) {
            if (d->busy_again) {
              d->busy_again = false;
              ++d->room;
              delayed_send(this, options_.busy_backoff, router_unbusy_atom::value, name);
            } else {
              d->said_busy = false;
              d->room = 0;
            }
          }
          serve();
        },
        [this](device_join_atom, routed_device& joined) {
          auto* d = find(joined.name);
          if (d == nullptr) {
            devices_.push_back(
                {std::move(joined), 0, false, 0, false, unknown_kv, 0, 0, {}, true, {}});
            d = &devices_.back();
          } else {
            auto prefixes = std::move(d->prefixes);
            *d = device{std::move(joined), 0, false, 0, false, unknown_kv, 0, 0, {}, true, {}};
            d->prefixes = std::move(prefixes);
          }
          caf::anon_send(d->info.actor, watch_kv_atom::value, caf::actor_cast<caf::actor>(this));
          serve();
        },
        [this](device_lost_atom, std::string& name, std::string& why) {
          auto* d = find(name);
          if (d == nullptr)
            return;
          d->up = false;
          d->lost_why = why;
          d->used = 0;
          d->prefixes.clear();
          // Orders that no device is left for are answered now, naming what was lost.
          for (std::uint32_t stage = 0; stage < waiting_.size(); ++stage)
            refuse_waiting(
                stage,
                [this, stage](const key&, const waiter& w) {
                  return !any_qualifies(static_cast<route_stage>(stage), w.avoid);
                },
                no_device(static_cast<route_stage>(stage), {}));
        },
        [this](served_atom, std::string& session, std::uint64_t tokens) {
          auto& e = ledger_[session];
          e.tokens += tokens;
          e.last = ++served_seq_;
          if (ledger_.size() > defaults::orchestration::tracked_sessions)
            forget_oldest_half(ledger_, [](const service& e) { return e.last; });
        },
        [this](attained_atom, std::string& session) -> std::uint64_t {
          auto it = ledger_.find(session);
          return it == ledger_.end() ? 0 : it->second.tokens;
        },
    };
  }

  // Waiting requests get an answer; the device handles go, so no device (whose sequences hold
  // requests, which hold this router through their context) is kept alive in a cycle.
  void on_exit() override {
    for (auto& queue : waiting_) {
      for (auto& [k, w] : queue)
        w.promise.deliver(answer(w.traced, route_reply{false, {}, {}, "the node is stopping", 0}));
      queue.clear();
    }
    devices_.clear();
    tier_.reset();  // the node's store may stop before this object goes
    trace_.reset(); // and its trace file closes with the node
  }

private:
  static constexpr std::size_t unknown_kv = std::numeric_limits<std::size_t>::max();
  struct device {
    routed_device info;
    std::size_t used;
    bool said_busy;      // in a busy period: answered busy, no backoff since without one
    std::size_t room;    // while said_busy: grants it may have (one per sequence that left)
    bool busy_again;     // answered busy again since the last backoff began
    std::size_t kv_free; // KV pages free as the device last said (unknown_kv: not yet)
    std::size_t kv_total; // its KV pages (0: not yet said)
    double decode_step_s; // its recent decode steps' seconds as it last said (0: none yet)
    // Prompt pages sent -> when; only for a device the KV store does not know (its directory
    // keeps that record for the others).
    std::unordered_map<block_hash, std::uint64_t> prefixes;
    bool up;              // routed to (false: lost, until it joins again)
    std::string lost_why; // while not up: why
  };

  // Asks device `i` for its stats, keeps its free KV pages, then runs `then`.
  void ask_stats(std::size_t i, std::function<void()> then) {
    request(devices_[i].info.actor, defaults::orchestration::stats_interval, stats_atom::value)
        .then(
            [this, i, then](device_stats& st) {
              devices_[i].kv_free =
                  st.kv_pages_total > st.kv_pages_used ? st.kv_pages_total - st.kv_pages_used : 0;
              devices_[i].kv_total = st.kv_pages_total;
              then();
            },
            [then](caf::error&) { then(); }); // keeps the last figure
  }

  // A traced order: its request, whether that request's trace is kept, when the order came.
  using trace_clock = trace_log::clock_type;
  struct order_trace {
    std::uint64_t id = 0; // 0: not traced
    bool kept = false;
    trace_clock::time_point arrived;
  };

  // `reply`, written in the trace first when its order is traced: a span on the router's track
  // as the answer goes ("grant <device>" or "refuse"), with how long the order waited.
  route_reply answer(const order_trace& traced, route_reply reply) {
    if (!trace_ || traced.id == 0)
      return reply;
    if (!trace_track_)
      trace_track_ = trace_->track("domain" + std::to_string(current_domain()), "router");
    const auto now = trace_clock::now();
    std::string args =
        "\"request\":" + std::to_string(traced.id) + ",\"waited_us\":" +
        std::to_string(
            std::chrono::duration_cast<std::chrono::microseconds>(now - traced.arrived).count());
    if (!reply.ok) {
      args += ",\"reason\":";
      append_trace_string(args, reply.reason);
    }
    // The router serves one order at a time: its spans are the moments it answers, which never
    // overlap (a wait would: many orders wait at once).
    trace_->add(*trace_track_, reply.ok ? "grant " + reply.name : "refuse", "router", now,
                trace_clock::duration{0}, args, std::span{&traced.id, traced.kept ? 1u : 0u});
    return reply;
  }

  // Waiting order: (priority, arrival); priority is 0 under FCFS, the session's attained
  // service at arrival under PLAS.
  using key = std::pair<std::uint64_t, std::uint64_t>;
  struct waiter {
    caf::typed_response_promise<route_reply> promise;
    std::vector<std::string> avoid;
    std::vector<block_hash> prefix;
    std::uint64_t kv_store = 0; // the store its kept blocks are in (0: none)
    caf::strong_actor_ptr who;  // the request actor waiting
    order_trace traced;        // for the answer's span
  };

  // Answers `reply` to the waiters of queue `stage` that `match` picks, and drops them.
  template<class Match>
  void refuse_waiting(std::uint32_t stage, Match match, const route_reply& reply) {
    if (stage >= waiting_.size())
      return;
    auto& queue = waiting_[stage];
    for (auto it = queue.begin(); it != queue.end();) {
      if (match(it->first, it->second)) {
        it->second.promise.deliver(answer(it->second.traced, reply));
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
  }
  struct service {
    std::uint64_t tokens = 0; // computed for the session so far
    std::uint64_t last = 0;   // when it was last served (a sequence number)
  };

  // A slot of `name` given back with its sequence gone from the device: a device that said
  // busy has room for one more; waiting requests are served.
  void release(const std::string& name) {
    if (auto* d = give_back(name); d != nullptr && d->said_busy)
      ++d->room;
    serve();
  }

  // Takes back one slot of device `name` (null: no such device).
  device* give_back(const std::string& name) {
    auto* d = find(name);
    if (d != nullptr && d->used > 0)
      --d->used;
    return d;
  }

  device* find(const std::string& name) {
    for (auto& d : devices_)
      if (d.info.name == name)
        return &d;
    return nullptr;
  }

  static bool avoided(const device& d, const std::vector<std::string>& avoid) {
    return std::find(avoid.begin(), avoid.end(), d.info.name) != avoid.end();
  }

  static std::string join(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names)
      out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  bool any_qualifies(route_stage stage, const std::vector<std::string>& avoid) const {
    for (const auto& d : devices_)
      if (d.up && qualifies(d.info.role, stage) && !avoided(d, avoid))
        return true;
    return false;
  }

  // The refusal of an order for `stage` avoiding `avoid` that no device serves: why (none does,
  // those there failed it, or were lost, each named with why), as unavailable.
  route_reply no_device(route_stage stage, const std::vector<std::string>& avoid) const {
    std::string lost;
    for (const auto& d : devices_)
      if (!d.up && qualifies(d.info.role, stage))
        lost += (lost.empty() ? "" : "; ") + d.info.name + " is lost: " + d.lost_why;
    std::string out = "no device serves this stage";
    if (!avoid.empty())
      out = "no device left for this stage: " + join(avoid) + " failed this request";
    if (!lost.empty())
      out += " (" + lost + ")";
    return route_reply{false, {}, {}, std::move(out), 0, errc::unavailable};
  }

  std::size_t waiting() const {
    std::size_t n = 0;
    for (const auto& queue : waiting_)
      n += queue.size();
    return n;
  }

  // Pages at the start of `prefix` that `d` holds, or soon will, as far as the router can tell:
  // the run the store's directory says its prefix cache holds or it was sent (which covers
  // prompts still being computed), or for a device the store does not know, the run the router
  // itself recorded sending it.
  std::size_t cached_run(const device& d, const std::vector<block_hash>& prefix) const {
    std::size_t n = 0;
    while (n < prefix.size() && d.prefixes.count(prefix[n]) != 0)
      ++n;
    if (tier_ && n < prefix.size())
      n = std::max(n, tier_->held_by(d.info.actor.address(), prefix));
    return n;
  }

  // Decode: whether `a` goes before `b`. A device with room (an eighth of its KV pages free, or
  // not yet said) first; then one whose decode steps are a quarter faster (both said: a token
  // of one more sequence is expected to take that long there, so a pool of unlike devices is
  // weighed by speed, not requests in flight); then the most free KV pages (a decode holds
  // its KV for long). 0: neither.
  static int decode_order(const device& a, const device& b) {
    auto roomy = [](const device& d) { return d.kv_total == 0 || d.kv_free * 8 >= d.kv_total; };
    if (roomy(a) != roomy(b))
      return roomy(a) ? 1 : -1;
    if (a.decode_step_s > 0 && b.decode_step_s > 0) {
      if (a.decode_step_s < 0.75 * b.decode_step_s)
        return 1;
      if (b.decode_step_s < 0.75 * a.decode_step_s)
        return -1;
    }
    if (a.kv_free != b.kv_free)
      return a.kv_free > b.kv_free ? 1 : -1;
    return 0;
  }

  // The qualifying device with a free slot that is best for `stage`: for decode one of
  // `kv_store` first (a demoted request's kept blocks are read back there, computed
  // elsewhere), then by decode_order, then the most free slots; for prefill the
  // longest run of `prefix` sent there before (runs within a quarter of the prompt's pages of
  // each other count as equal), then the most free slots, unless that device
  // has more than 2 (least + prefix_affinity_slack) requests in flight, where `least` is the
  // least loaded one's: then the least loaded. Ties go to the first in config order.
  device* pick(route_stage stage, const std::vector<std::string>& avoid,
               const std::vector<block_hash>& prefix, std::uint64_t kv_store = 0) {
    device* best = nullptr;
    device* lightest = nullptr;
    std::size_t best_run = 0;
    // Runs that differ by a quarter of the prompt or less count as equal: a shared system
    // prompt's few pages do not outweigh the load.
    const std::size_t slight = prefix.size() / 4;
    for (auto& d : devices_) {
      if (!d.up || !qualifies(d.info.role, stage) || (d.said_busy && d.room == 0) ||
          d.used >= d.info.slots || avoided(d, avoid))
        continue;
      if (lightest == nullptr || d.used < lightest->used)
        lightest = &d;
      auto run = prefix.empty() ? 0 : cached_run(d, prefix);
      bool better = best == nullptr;
      const bool holds = kv_store != 0 && d.info.kv_store == kv_store;
      const bool best_holds = best != nullptr && kv_store != 0 && best->info.kv_store == kv_store;
      const int order = !better && stage == route_stage::decode ? decode_order(d, *best) : 0;
      if (!better && holds != best_holds)
        better = holds;
      else if (order != 0)
        better = order > 0;
      else if (!better && std::max(run, best_run) - std::min(run, best_run) > slight)
        better = run > best_run;
      else if (!better)
        better = d.info.slots - d.used > best->info.slots - best->used;
      if (better) {
        best = &d;
        best_run = run;
      }
    }
    if (best != nullptr && stage != route_stage::decode &&
        best->used > 2 * (lightest->used + defaults::orchestration::prefix_affinity_slack))
      return lightest;
    return best;
  }

  // Hands out a slot of `d`, recording the prompt pages it will cache (in the store's directory
  // when the store knows the device).
  route_reply grant(device& d, const std::vector<block_hash>& prefix) {
    auto reply = route_reply{true, d.info.actor, d.info.name, {}, 0};
    if (!prefix.empty())
      hint(d, prefix, reply);
    ++d.used;
    if (d.said_busy)
      --d.room;
    if (!prefix.empty() && !(tier_ && tier_->note_routed(d.info.actor.address(), prefix))) {
      auto now = ++prefix_seq_;
      for (auto h : prefix)
        d.prefixes[h] = now;
      if (d.prefixes.size() > defaults::orchestration::tracked_prefixes)
        forget_oldest_half(d.prefixes, [](std::uint64_t v) { return v; });
    }
    return reply;
  }

  // Where more of `prefix` than `d` holds may be had, in `r`: the KV exchange of another node
  // with a KV store whose device was sent the longest run of it (that store keeps the pages it
  // computed, a prefill node's hand-off's included), when that run is longer than d's by more
  // than a quarter of the prompt's pages (as pick weighs runs), over d's node's transport.
  void hint(const device& d, const std::vector<block_hash>& prefix, route_reply& r) const {
    std::size_t best = cached_run(d, prefix) + prefix.size() / 4;
    for (const auto& o : devices_) {
      if (&o == &d || !o.up || o.info.kv_wire.empty() || o.info.kv_store == 0 ||
          o.info.kv_wire == d.info.kv_wire ||
          (!d.info.kv_transport.empty() && o.info.kv_transport != d.info.kv_transport))
        continue;
      if (const auto run = cached_run(o, prefix); run > best) {
        best = run;
        r.prefix_wire = o.info.kv_wire;
      }
    }
    r.prefix_pages = r.prefix_wire.empty() ? 0 : best;
  }

  // Hands free slots to waiting requests. Each stage keeps its own ordered queue, so only the
  // heads are looked at; among the heads whose stage has a free device the smallest key goes
  // first (stages share devices of role both).
  void serve() {
    for (;;) {
      std::map<key, waiter>* best = nullptr;
      device* chosen = nullptr; // the device the best head gets
      for (std::size_t i = 0; i < waiting_.size(); ++i) {
        auto& queue = waiting_[i];
        if (queue.empty())
          continue;
        const auto& head = queue.begin()->second;
        auto* d = pick(static_cast<route_stage>(i), head.avoid, head.prefix, head.kv_store);
        if (d == nullptr)
          continue;
        if (best == nullptr || queue.begin()->first < best->begin()->first) {
          best = &queue;
          chosen = d;
        }
      }
      if (best == nullptr)
        return;
      auto head = best->begin();
      auto w = std::move(head->second);
      best->erase(head);
      w.promise.deliver(answer(w.traced, grant(*chosen, w.prefix)));
    }
  }

  orchestration_options options_;
  std::chrono::milliseconds queue_timeout_;
  std::vector<device> devices_;
  std::array<std::map<key, waiter>, 3> waiting_;    // by route_stage
  std::unordered_map<std::string, service> ledger_; // attained service by session
  std::uint64_t next_order_ = 0;
  std::uint64_t served_seq_ = 0;
  std::uint64_t prefix_seq_ = 0;
  std::shared_ptr<kv_tier> tier_; // the node's KV store: what each device holds or was sent
  std::shared_ptr<trace_log> trace_;       // the node's trace (null: none)
  std::optional<trace_track> trace_track_; // the router's track in it (once asked)
};

} // namespace

router_actor spawn_router(domain& home, std::vector<routed_device> devices,
                          orchestration_options options, std::chrono::milliseconds queue_timeout,
                          std::shared_ptr<kv_tier> tier, std::shared_ptr<trace_log> trace) {
  return home.spawn<router_impl>(std::move(devices), std::move(options), queue_timeout,
                                 std::move(tier), std::move(trace));
}

} // namespace triad
