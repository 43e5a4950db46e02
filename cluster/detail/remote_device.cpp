#include "cluster/detail/remote_device.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "cluster/defaults.hpp"
#include "runtime/homed_actor.hpp"

namespace triad::detail {

namespace {

constexpr std::uint64_t tag_shift = 48;
constexpr std::uint64_t seq_mask = (std::uint64_t{1} << tag_shift) - 1;

class remote_device_impl : public homed<remote_device_actor::base> {
public:
  remote_device_impl(caf::actor_config& cfg, std::string name, std::uint32_t index,
                     caf::actor gateway, std::uint64_t tag, std::shared_ptr<kv_exchange> hold_in,
                     caf::actor fetcher)
      : homed(cfg)
      , name_(std::move(name))
      , index_(index)
      , gateway_(std::move(gateway))
      , tag_(tag)
      , hold_in_(std::move(hold_in))
      , fetcher_(std::move(fetcher)) {}

  behavior_type make_behavior() override {
    return {
        [this](generate_atom, generate_request& r) -> caf::result<admission> {
          return admit(std::move(r), nullptr);
        },
        [this](import_atom, kv_blob& blob, generate_request& r) -> caf::result<admission> {
          return admit(std::move(r), &blob);
        },
        [this](import_atom, std::shared_ptr<const kv_blob>& blob,
               generate_request& r) -> caf::result<admission> {
          kv_blob copy;
          if (blob)
            copy = *blob;
          return admit(std::move(r), &copy);
        },
        [this](park_atom, seq_id seq) {
          if (auto it = seqs_.find(seq); it != seqs_.end())
            it->second.active = false;
          if (up_)
            caf::anon_send(gateway_, park_atom::value, index_, wire(seq));
        },
        [this](resume_atom, seq_id seq, std::vector<token>& tokens,
               std::shared_ptr<grammar::token_constraint>& c) {
          auto it = seqs_.find(seq);
          if (it == seqs_.end())
            return; // freed, or never here
          if (!up_ || it->second.lost) {
            fail_seq(seq, it->second.sink, why_);
            seqs_.erase(it);
            drop(wire(seq));
            return;
          }
          it->second.active = true;
          caf::anon_send(gateway_, resume_atom::value, index_, wire(seq), std::move(tokens),
                         to_wire(c));
        },
        [this](free_atom, seq_id seq) {
          seqs_.erase(seq);
          drop(wire(seq));
        },
        [this](export_atom, seq_id seq) -> caf::result<kv_blob> {
          return blob_of(export_atom::value, seq);
        },
        [this](move_out_atom, seq_id seq) -> caf::result<kv_blob> {
          seqs_.erase(seq);
          if (!up_)
            orphans_.push_back(wire(seq));
          return blob_of(move_out_atom::value, seq);
        },
        [this](demote_atom, seq_id seq, std::uint32_t keep_ms) -> caf::result<kv_kept> {
          seqs_.erase(seq);
          if (!up_)
            orphans_.push_back(wire(seq));
          return ask<kv_kept>([](auto& rp, const std::string&) { rp.deliver(kv_kept{}); },
                              demote_atom::value, index_, wire(seq), keep_ms);
        },
        [this](unpin_kept_atom a, std::uint64_t store, std::vector<std::uint64_t>& blocks,
               std::uint64_t pin) {
          if (up_) // else the pin's time ends it
            caf::anon_send(gateway_, a, index_, store, std::move(blocks), pin);
        },
        [](demote_done_atom, std::uint64_t, std::vector<kv_page>&) {},
        [](kv_stored_atom, std::uint64_t, std::vector<std::uint64_t>&, std::uint64_t) {},
        [this](stats_atom) -> caf::result<device_stats> {
          return ask<device_stats>(
              [](auto& rp, const std::string&) {
                rp.deliver(caf::make_error(caf::sec::request_receiver_down));
              },
              stats_atom::value, index_);
        },
        [this](watch_kv_atom, caf::actor& watcher) {
          if (std::find(watchers_.begin(), watchers_.end(), watcher) == watchers_.end())
            watchers_.push_back(watcher);
          if (total_ != 0)
            caf::anon_send(watcher, kv_free_atom::value, address(), free_, total_, step_s_);
          if (up_ && watchers_.size() == 1)
            caf::anon_send(gateway_, watch_kv_atom::value, index_,
                           caf::actor_cast<caf::actor>(this));
        },
        [](kv_fetched_atom, seq_id, std::vector<kv_page>&) {},
        [](kv_leased_atom, seq_id, std::shared_ptr<kv_stream>&) {},
        [](step_done_atom, std::shared_ptr<detail::step_job>&) {},
        [](device_retry_atom) {},
        [](export_done_atom, std::uint64_t, kv_blob&, std::string&) {},
        [](kv_share_atom, std::vector<token>&, std::uint64_t,
           std::uint64_t) -> std::vector<kv_page> { return {}; },
        [](share_done_atom, std::uint64_t, std::vector<kv_page>&, bool) {},
        [](swap_done_atom, seq_id, std::uint64_t, std::vector<kv_page>&) {},
        // -- from the device's node --
        [this](device_event& e) { on_event(std::move(e)); },
        [this](kv_free_atom, caf::actor_addr&, std::uint64_t free, std::uint64_t total,
               double step_s) {
          free_ = free;
          total_ = total;
          step_s_ = step_s;
          for (auto& w : watchers_)
            caf::anon_send(w, kv_free_atom::value, address(), free, total, step_s);
        },
        [this](peer_lost_atom, std::string& why) { lost(why); },
        [this](peer_draining_atom) {
          draining_ = true;
          for (auto& [seq, h] : seqs_)
            if (!h.active && h.admitted)
              leaving(seq, h.sink);
        },
        [this](peer_back_atom, caf::actor& gateway, std::uint64_t tag) {
          gateway_ = std::move(gateway);
          tag_ = tag;
          up_ = true;
          draining_ = false;
          why_.clear();
          // What the node may still hold of ours from before (a partition it lived through).
          for (auto w : std::exchange(orphans_, {}))
            caf::anon_send(gateway_, free_atom::value, index_, w);
          if (!watchers_.empty())
            caf::anon_send(gateway_, watch_kv_atom::value, index_,
                           caf::actor_cast<caf::actor>(this));
        },
    };
  }

  void on_exit() override {
    lost("the node is stopping");
    watchers_.clear();
    gateway_ = nullptr;
    fetcher_ = nullptr; // its thread ends only once every handle to it is gone
  }

private:
  struct held {
    caf::actor sink;        // the request's actor
    bool active = true;     // computing (not parked, not done)
    bool moves_out = false; // its done event carries its KV and ends it here
    bool lost = false;      // its node was lost while it was parked: fails at its resume
    // Until its admission is answered: the device's events, which travel from the device (its
    // driver) while the answer goes through the gateway and may come later. The request takes
    // events only for a sequence it knows admitted, so they wait here and follow the answer.
    bool admitted = false;
    std::vector<device_event> early;
  };

  std::uint64_t wire(seq_id seq) const { return tag_ << tag_shift | (seq & seq_mask); }

  // The generate (or, with `blob`, import) order of a request, sent to the device's node with
  // this actor as its sink.
  caf::result<admission> admit(generate_request r, kv_blob* blob) {
    if (!up_)
      return admission{false, "device " + name_ + ": its node is lost (" + why_ + ")", errc::busy};
    if (draining_)
      return admission{false, "device " + name_ + ": its node is draining", errc::busy};
    if (blob != nullptr && blob->stream)
      return admission{false, "device " + name_ + ": a KV stream does not cross nodes",
                       errc::invalid_argument};
    // The KV waits in this node's exchange for the device's node to fetch (past its budget
    // the bytes stay in the order); whatever the answer, it need not wait longer.
    kv_held ref;
    if (blob != nullptr && hold_in_ && blob->held.empty() && !blob->bytes.empty())
      ref = blob->held = hold_in_->hold(blob->bytes);
    auto let_go_kv = [ex = hold_in_, ref] {
      if (!ref.empty())
        ex->release(ref);
    };
    const auto seq = r.seq;
    auto c = to_wire(r.constraint);
    r.constraint.reset();
    seqs_[seq] = held{std::move(r.sink), true, r.move_out_when_done, false, false, {}};
    r.sink = caf::actor_cast<caf::actor>(this);
    r.seq = wire(seq);
    auto refused = [this, seq](auto& rp, const std::string& why) {
      seqs_.erase(seq);
      rp.deliver(admission{false, "device " + name_ + ": " + why, errc::busy});
    };
    auto rp = make_response_promise<admission>();
    const auto id = ++next_;
    pending_.emplace(id, [rp, refused, let_go_kv](const std::string& why) mutable {
      let_go_kv();
      refused(rp, why);
    });
    const auto wired = r.seq;
    auto answered = [this, id, seq, wired, rp, let_go_kv](admission& a) mutable {
      let_go_kv(); // fetched by now, or computed there
      if (pending_.erase(id) == 0) {
        if (a.accepted) // admitted after it was given up on: the node lets it go
          drop(wired);
        return;
      }
      if (!a.accepted) {
        seqs_.erase(seq);
        rp.deliver(std::move(a));
        return;
      }
      rp.deliver(std::move(a));
      // Then the events that came before the answer, in order, from this actor as the answer.
      if (auto it = seqs_.find(seq); it != seqs_.end()) {
        it->second.admitted = true;
        auto early = std::move(it->second.early);
        for (auto& e : early)
          on_event(std::move(e));
      }
    };
    // settle answers through pending_, which lets the KV go.
    auto failed = [this, id](caf::error& e) { settle(id, system().render(e)); };
    if (blob != nullptr) {
      blob->seq = r.seq;
      request(gateway_, defaults::cluster::remote_answer_timeout, import_atom::value, index_,
              std::move(*blob), std::move(r), std::move(c))
          .then(answered, failed);
    } else {
      request(gateway_, defaults::cluster::remote_answer_timeout, generate_atom::value, index_,
              std::move(r), std::move(c))
          .then(answered, failed);
    }
    return rp;
  }

  // Asks the device's node; `fail(promise, why)` answers when it cannot (the node lost, an
  // error, no answer in time).
  template<class T, class Fail, class... Ts>
  caf::result<T> ask(Fail fail, Ts&&... xs) {
    auto rp = make_response_promise<T>();
    if (!up_) {
      fail(rp, "its node is lost (" + why_ + ")");
      return rp;
    }
    const auto id = awaiting(rp, fail);
    request(gateway_, defaults::cluster::remote_answer_timeout, std::forward<Ts>(xs)...)
        .then(
            [this, id, rp](T& x) mutable {
              if (pending_.erase(id) != 0)
                rp.deliver(std::move(x));
            },
            [this, id](caf::error& e) { settle(id, system().render(e)); });
    return rp;
  }

  // Asks the device's node for a sequence's KV (export or move-out), its id made ours again.
  template<class Atom>
  caf::result<kv_blob> blob_of(Atom atom, seq_id seq) {
    auto rp = make_response_promise<kv_blob>();
    auto name = name_;
    auto fail = [name](auto& p, const std::string& why) {
      p.deliver(caf::make_error(caf::sec::request_receiver_down, "device " + name + ": " + why));
    };
    if (!up_) {
      fail(rp, "its node is lost (" + why_ + ")");
      return rp;
    }
    const auto id = awaiting(rp, fail);
    request(gateway_, defaults::cluster::remote_answer_timeout, atom, index_, wire(seq))
        .then(
            [this, id, rp, seq, fail](kv_blob& b) mutable {
              const bool held = !b.held.empty() && b.bytes.empty() && fetcher_;
              if (pending_.erase(id) == 0) {
                // Given up on (the node lost, the answer late): KV the node holds for us is
                // fetched all the same and dropped, so the node need not keep it (a draining
                // node waits for it) until it expires.
                if (held)
                  caf::anon_send(fetcher_, kv_fetch_atom::value, std::move(b));
                return;
              }
              b.seq = seq;
              if (!held) {
                rp.deliver(std::move(b));
                return;
              }
              // The node holds the KV for this node to fetch: it comes over the KV wire, and
              // the node lets it go once it arrived (a draining node can then leave). Pending
              // meanwhile, so a node lost or this actor stopping answers it.
              const auto fetch = awaiting(rp, fail);
              auto from = b.held.wire;
              request(fetcher_, defaults::cluster::wire_transfer_timeout * 2, kv_fetch_atom::value,
                      std::move(b))
                  .then(
                      [this, fetch, rp](kv_blob& got) mutable {
                        if (pending_.erase(fetch) != 0)
                          rp.deliver(std::move(got));
                      },
                      [this, fetch, from](caf::error& e) {
                        settle(fetch, "its KV was not fetched from " + from + " (" +
                                          system().render(e) + ")");
                      });
            },
            [this, id](caf::error& e) { settle(id, system().render(e)); });
    return rp;
  }

  // Registers a pending answer through `rp` (a lost node or this actor's stop answers it with
  // `fail(rp, why)`); its id, for settle() or to take it back when answered.
  template<class Promise, class Fail>
  std::uint64_t awaiting(Promise rp, Fail fail) {
    const auto id = ++next_;
    pending_.emplace(id, [rp, fail](const std::string& why) mutable { fail(rp, why); });
    return id;
  }

  // Gives the failure answer of pending call `id`, when it still waits.
  void settle(std::uint64_t id, const std::string& why) {
    auto it = pending_.find(id);
    if (it == pending_.end())
      return;
    auto f = std::move(it->second);
    pending_.erase(it);
    f(why);
  }

  void on_event(device_event e) {
    const auto seq = e.seq & seq_mask;
    auto it = seqs_.find(seq);
    if (it == seqs_.end())
      return; // a sequence let go
    if (!it->second.admitted) {
      it->second.early.push_back(std::move(e));
      return;
    }
    e.seq = seq;
    e.kv.seq = seq;
    auto sink = it->second.sink;
    bool parks = false;
    if (e.kind == device_event::failed ||
        (e.kind == device_event::done && it->second.moves_out && !e.kv.empty()))
      seqs_.erase(it);
    else if (e.kind == device_event::done)
      parks = std::exchange(it->second.active, false);
    if (sink)
      caf::anon_send(sink, std::move(e));
    if (parks && draining_)
      leaving(seq, sink);
  }

  // Tells the request of parked sequence `seq` that its node drains: it moves the KV off.
  static void leaving(seq_id seq, const caf::actor& sink) {
    if (sink)
      caf::anon_send(sink, device_leaving_atom::value, seq);
  }

  // Frees sequence `w` (a wire id) on the node, now or, while the node is lost, when it is back.
  void drop(std::uint64_t w) {
    if (up_)
      caf::anon_send(gateway_, free_atom::value, index_, w);
    else
      orphans_.push_back(w);
  }

  void fail_seq(seq_id seq, const caf::actor& sink, const std::string& why) {
    if (!sink)
      return;
    device_event ev;
    ev.seq = seq;
    ev.kind = device_event::failed;
    ev.message = "the node of device " + name_ + " is lost: " + why;
    caf::anon_send(sink, std::move(ev));
  }

  // The node is gone: every answer it owes is given, every sequence computing there fails (its
  // request resumes elsewhere or ends), parked ones fail at their resume.
  void lost(const std::string& why) {
    if (!up_ && pending_.empty() && why_ == why)
      return;
    up_ = false;
    why_ = why;
    auto pending = std::exchange(pending_, {});
    for (auto& [id, f] : pending)
      f("its node is lost (" + why + ")");
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      if (it->second.active) {
        fail_seq(it->first, it->second.sink, why);
        orphans_.push_back(wire(it->first));
        it = seqs_.erase(it);
      } else {
        it->second.lost = true;
        ++it;
      }
    }
  }

  std::string name_;
  std::uint32_t index_;
  caf::actor gateway_;
  std::uint64_t tag_;
  std::shared_ptr<kv_exchange> hold_in_; // the front's exchange, where imports' KV waits (or null)
  caf::actor fetcher_; // the front's, fetches what the node holds for it (or null)
  bool up_ = true;
  bool draining_ = false; // its node drains: nothing new, parked sequences move off
  std::string why_;       // why its node was lost
  std::unordered_map<seq_id, held> seqs_;
  std::map<std::uint64_t, std::function<void(const std::string&)>> pending_;
  std::uint64_t next_ = 0;
  std::vector<caf::actor> watchers_;
  // Sequences (wire ids) given up on while the node was lost, freed there when it is back.
  std::vector<std::uint64_t> orphans_;
  std::uint64_t free_ = 0;
  std::uint64_t total_ = 0;
  double step_s_ = 0;
};

} // namespace

remote_device_actor spawn_remote_device(caf::actor_system& sys, std::string name,
                                        std::uint32_t index, caf::actor gateway, std::uint64_t tag,
                                        std::shared_ptr<kv_exchange> hold_in, caf::actor fetcher) {
  return sys.spawn<remote_device_impl>(std::move(name), index, std::move(gateway), tag,
                                       std::move(hold_in), std::move(fetcher));
}

} // namespace triad::detail
