#include "cluster/detail/gateway.hpp"

#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include <caf/all.hpp>

#include "cluster/defaults.hpp"
#include "cluster/detail/wire.hpp"
#include "runtime/homed_actor.hpp"

namespace triad::detail {

namespace {

// The gateway's own, while it drains: looks again whether its devices are empty.
using drain_check_atom = caf::atom_constant<caf::atom("drainchk")>;
// How often a draining gateway asks its devices whether they still hold sequences.
constexpr std::chrono::milliseconds drain_check_every{50};

struct gateway_state {
  gateway_options options;
  std::map<caf::node_id, std::uint64_t> tags; // per front node
  std::set<caf::node_id> takes_held;          // fronts without devices of their own
  std::set<caf::node_id> fetching;            // fronts that fetch KV over this node's wire
  std::map<caf::node_id, caf::actor> fronts;  // the peer actor of each front that said hello
  bool draining = false;
  bool checking = false; // a round of check_drained waits for its devices' answers
  // Admissions under way (a device's answer awaited, a held KV fetched first included): the
  // sequence is on no device's books yet, so a drain waits for these too.
  std::size_t admitting = 0;
  std::vector<caf::typed_response_promise<bool>> drained; // answered once nothing is held
  std::uint64_t next_tag = 1;
  // Sequences each front's remote device holds here (by its actor), to free when it goes.
  std::map<caf::actor_addr, std::set<std::pair<std::uint32_t, seq_id>>> held;
  static inline const char* name = "triad.gateway";
};

using gateway_self = caf::stateful_actor<gateway_state, homed_actor>;

// Notes `seq` of device `i` as held by the sender's remote device (watched from now on).
void hold(gateway_self* self, const caf::actor& sink, std::uint32_t i, seq_id seq) {
  if (!sink)
    return;
  auto addr = sink.address();
  auto [it, fresh] = self->state.held.try_emplace(addr);
  if (fresh)
    self->monitor(sink);
  it->second.emplace(i, seq);
}

// Whether `owner` (a front's remote device) still holds `seq` of device `i` here.
bool holds(gateway_self* self, const caf::actor_addr& owner, std::uint32_t i, seq_id seq) {
  auto it = self->state.held.find(owner);
  return it != self->state.held.end() && it->second.count({i, seq}) != 0;
}

// Whether a front takes a reference to KV this node holds instead of its bytes: one without
// devices (a decode node fetches it), or one whose devices fetch over this node's transport.
bool takes_references(gateway_self* self, const caf::node_id& front) {
  const auto& st = self->state;
  return st.takes_held.count(front) != 0 || st.fetching.count(front) != 0;
}

void let_go(gateway_self* self, std::uint32_t i, seq_id seq) {
  for (auto& [addr, seqs] : self->state.held)
    seqs.erase({i, seq});
}

// Passes a moved-out sequence's events on to `sink`, its KV held in `exchange` on the way (the
// event then carries the reference, not the bytes or the stream); ends with the sequence.
caf::behavior kv_holder(caf::event_based_actor* self, caf::actor sink,
                        std::shared_ptr<kv_exchange> exchange) {
  return {[self, sink, exchange](device_event& e) {
    const bool last = e.kind == device_event::done || e.kind == device_event::failed;
    if (e.kind == device_event::done && e.kv.stream) { // pages of the store: they stay there
      e.kv.held = exchange->hold_stream(std::exchange(e.kv.stream, nullptr));
      if (e.kv.held.empty()) { // the node stops: the request computes its KV elsewhere
        e.kind = device_event::failed;
        e.message = "its KV could not be held for another node (the node is stopping)";
      }
    } else if (e.kind == device_event::done && !e.kv.bytes.empty())
      e.kv.held = exchange->hold(e.kv.bytes); // past the budget: the bytes stay
    self->send(sink, std::move(e));
    if (last)
      self->quit();
  }};
}

// The admission order `msg...` for device `i`, answered by the device through `rp`.
template<class... Ts>
void admit_to(gateway_self* self, caf::typed_response_promise<admission> rp, std::uint32_t i,
              generate_request& r, constraint_wire& c, Ts&&... head) {
  auto& st = self->state;
  if (i >= st.options.devices.size()) {
    rp.deliver(admission{false, "no device " + std::to_string(i) + " on node " + st.options.node,
                         errc::invalid_argument});
    return;
  }
  auto constraint = from_wire(c, st.options.grammars.get(), st.options.vocabulary);
  if (!constraint) {
    rp.deliver(admission{false, constraint.error().message, constraint.error().code});
    return;
  }
  r.constraint = std::move(*constraint);
  const bool watched = !r.move_out_when_done; // a move-out sequence leaves the device by itself
  const auto owner = r.sink ? r.sink.address() : caf::actor_addr{};
  if (watched)
    hold(self, r.sink, i, r.seq);
  else if (st.options.exchange && r.sink && takes_references(self, r.sink.node()))
    r.sink = self->spawn(kv_holder, std::move(r.sink), st.options.exchange);
  else // its KV leaves as bytes: a stream of the store's blocks cannot cross to that front
    r.stream_when_done = false;
  auto seq = r.seq;
  ++st.admitting;
  self->request(st.options.devices[i].actor, defaults::cluster::remote_answer_timeout,
                std::forward<Ts>(head)..., std::move(r))
      .then(
          [self, rp, i, seq, watched, owner](admission& a) mutable {
            --self->state.admitting;
            if (!a.accepted) {
              let_go(self, i, seq);
            } else if (watched && !holds(self, owner, i, seq)) {
              // Let go while it was being admitted (a held KV fetched first can take a while):
              // freed by its front, or the front's remote device went. The device did not
              // have it then; it goes now.
              self->send(self->state.options.devices[i].actor, free_atom::value, seq);
            }
            rp.deliver(std::move(a));
          },
          [self, rp, i, seq](caf::error& e) mutable {
            --self->state.admitting;
            // The device did not answer (stopping, gone): busy, so the request goes elsewhere.
            let_go(self, i, seq);
            rp.deliver(admission{false, self->system().render(e), errc::busy});
          });
}

// The admission order `msg...` for device `i`, answered by the device.
template<class... Ts>
caf::result<admission> admit(gateway_self* self, std::uint32_t i, generate_request& r,
                             constraint_wire& c, Ts&&... head) {
  auto rp = self->make_response_promise<admission>();
  admit_to(self, rp, i, r, c, std::forward<Ts>(head)...);
  return rp;
}

// The refusal of a new sequence while the node drains (busy: the request goes elsewhere).
admission refused_while_draining(gateway_self* self) {
  return admission{false, "node " + self->state.options.node + " is draining", errc::busy};
}

// Forwards a request with an answer of type T to device `i`; `then` sees the answer first.
template<class T, class Then, class... Ts>
caf::result<T> forward_then(gateway_self* self, std::uint32_t i, Then then, Ts&&... xs) {
  auto& st = self->state;
  if (i >= st.options.devices.size())
    return caf::make_error(caf::sec::invalid_argument,
                           "no device " + std::to_string(i) + " on node " + st.options.node);
  auto rp = self->make_response_promise<T>();
  self->request(st.options.devices[i].actor, defaults::cluster::remote_answer_timeout,
                std::forward<Ts>(xs)...)
      .then(
          [rp, then](T& x) mutable {
            then(x);
            rp.deliver(std::move(x));
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

// Forwards a request with an answer of type T to device `i`.
template<class T, class... Ts>
caf::result<T> forward(gateway_self* self, std::uint32_t i, Ts&&... xs) {
  return forward_then<T>(
      self, i, [](T&) {}, std::forward<Ts>(xs)...);
}

// Asks device `i` for a sequence's KV (`atom`: export or move-out) for the front that asks.
// When that front fetches over this node's wire, the KV waits in the exchange and the answer
// carries its reference: the bytes cross once, over the KV wire, not in the control message (a
// drain's moved-off KV too, which leaves this node as soon as the front has it).
template<class Atom>
caf::result<kv_blob> forward_kv(gateway_self* self, std::uint32_t i, Atom atom, seq_id seq) {
  auto& st = self->state;
  std::shared_ptr<kv_exchange> holder;
  if (self->current_sender() && st.fetching.count(self->current_sender()->node()) != 0)
    holder = st.options.exchange;
  return forward_then<kv_blob>(
      self, i,
      [holder](kv_blob& b) {
        if (holder && !b.bytes.empty() && b.held.empty())
          b.held = holder->hold(b.bytes); // past the budget: the bytes stay
      },
      atom, seq);
}

// While draining: answers the drain requests once no admission is under way, no device holds a
// sequence and the exchange holds no KV for another node, else looks again in a while (one
// round at a time).
void check_drained(gateway_self* self) {
  auto& st = self->state;
  if (st.drained.empty() || st.checking)
    return;
  st.checking = true;
  struct round {
    std::size_t left; // answers still to come, and this call's own
    bool busy;        // something is still held
  };
  auto r = std::make_shared<round>(
      round{st.options.devices.size() + 1,
            st.admitting != 0 || (st.options.exchange && st.options.exchange->held_bytes() != 0)});
  auto settle = [self, r] {
    if (--r->left != 0)
      return;
    self->state.checking = false;
    if (r->busy)
      self->delayed_send(self, drain_check_every, drain_check_atom::value);
    else
      for (auto& rp : std::exchange(self->state.drained, {}))
        rp.deliver(true);
  };
  for (const auto& d : st.options.devices)
    self->request(d.actor, defaults::cluster::remote_answer_timeout, stats_atom::value)
        .then(
            [r, settle](device_stats& s) {
              r->busy = r->busy || s.sequences != 0;
              settle();
            },
            [settle](caf::error&) { settle(); }); // a device that is gone holds nothing
  settle();
}

caf::behavior gateway(gateway_self* self, gateway_options options) {
  self->state.options = std::move(options);
  // A front's remote device went (its node lost or stopped): what it held here is freed.
  self->set_down_handler([self](caf::down_msg& msg) {
    auto it = self->state.held.find(msg.source);
    if (it == self->state.held.end())
      return;
    for (auto [i, seq] : it->second)
      if (i < self->state.options.devices.size())
        self->send(self->state.options.devices[i].actor, free_atom::value, seq);
    self->state.held.erase(it);
  });
  auto device = [self](std::uint32_t i) -> const device_actor* {
    auto& devices = self->state.options.devices;
    return i < devices.size() ? &devices[i].actor : nullptr;
  };
  return {
      [self](cluster_hello_atom, bool takes_held, std::string& fetches) {
        auto& st = self->state;
        if (takes_held && self->current_sender())
          st.takes_held.insert(self->current_sender()->node());
        if (self->current_sender() && st.options.exchange && !fetches.empty() &&
            fetches == cluster::to_string(st.options.exchange->transport()))
          st.fetching.insert(self->current_sender()->node());
        node_hello hello;
        hello.node = st.options.node;
        for (const auto& d : st.options.devices)
          hello.devices.push_back({d.name, static_cast<std::uint8_t>(d.role), 0, d.kv_store});
        auto from = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
        if (self->current_sender())
          st.fronts[from] = caf::actor_cast<caf::actor>(self->current_sender());
        auto [it, fresh] = st.tags.try_emplace(from, st.next_tag);
        if (fresh)
          st.next_tag = st.next_tag % 0xffff + 1;
        hello.tag = it->second;
        if (st.options.exchange)
          hello.kv_wire = std::string{cluster::to_string(st.options.exchange->transport())};
        if (st.options.exchange)
          hello.kv_address = st.options.exchange->address();
        return hello;
      },
      [](cluster_ping_atom) { return true; },
      [self](cluster_drain_atom) {
        auto& st = self->state;
        auto rp = self->make_response_promise<bool>();
        st.drained.push_back(rp);
        if (!std::exchange(st.draining, true))
          for (auto& [node, front] : st.fronts)
            self->send(front, cluster_draining_atom::value);
        check_drained(self);
        return rp;
      },
      [self](drain_check_atom) { check_drained(self); },
      [self](generate_atom a, std::uint32_t i, generate_request& r,
             constraint_wire& c) -> caf::result<admission> {
        if (self->state.draining)
          return refused_while_draining(self);
        return admit(self, i, r, c, a);
      },
      [self](import_atom a, std::uint32_t i, kv_blob& blob, generate_request& r,
             constraint_wire& c) -> caf::result<admission> {
        if (self->state.draining)
          return refused_while_draining(self);
        // KV another node holds is fetched by the device (its node's fetcher) before it admits.
        return admit(self, i, r, c, a, std::move(blob));
      },
      [self, device](park_atom a, std::uint32_t i, seq_id seq) {
        if (auto* d = device(i))
          self->send(*d, a, seq);
      },
      [self, device](resume_atom a, std::uint32_t i, seq_id seq, std::vector<token>& tokens,
                     constraint_wire& c) {
        auto* d = device(i);
        if (d == nullptr)
          return;
        auto& st = self->state;
        auto constraint = from_wire(c, st.options.grammars.get(), st.options.vocabulary);
        // A grammar that cannot be rebuilt resumes free rather than never: the request's own
        // check of the output still applies.
        self->send(*d, a, seq, std::move(tokens),
                   constraint ? std::move(*constraint)
                              : std::shared_ptr<grammar::token_constraint>{});
      },
      [self, device](free_atom a, std::uint32_t i, seq_id seq) {
        let_go(self, i, seq);
        if (auto* d = device(i))
          self->send(*d, a, seq);
      },
      [self](export_atom a, std::uint32_t i, seq_id seq) { return forward_kv(self, i, a, seq); },
      [self](move_out_atom a, std::uint32_t i, seq_id seq) {
        let_go(self, i, seq);
        return forward_kv(self, i, a, seq);
      },
      [self](demote_atom a, std::uint32_t i, seq_id seq, std::uint32_t keep_ms) {
        let_go(self, i, seq);
        // The kept blocks name where this node serves them: a device of another node fetches
        // them from there (its exchange reads them from this node's store).
        return forward_then<kv_kept>(
            self, i,
            [ex = self->state.options.exchange](kv_kept& k) {
              if (ex && ex->serves_kept() && !k.blocks.empty())
                k.wire = ex->address();
            },
            a, seq, keep_ms);
      },
      [self, device](unpin_kept_atom a, std::uint32_t i, std::uint64_t store,
                     std::vector<std::uint64_t>& blocks, std::uint64_t pin) {
        if (auto* d = device(i))
          self->send(*d, a, store, std::move(blocks), pin);
      },
      [self](stats_atom a, std::uint32_t i) { return forward<device_stats>(self, i, a); },
      [self, device](watch_kv_atom a, std::uint32_t i, caf::actor& watcher) {
        if (auto* d = device(i))
          self->send(*d, a, watcher);
      },
  };
}

} // namespace

caf::actor spawn_gateway(caf::actor_system& sys, gateway_options options) {
  return sys.spawn(gateway, std::move(options));
}

} // namespace triad::detail
