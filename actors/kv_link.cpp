#include "actors/kv_link.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <random>
#include <string_view>

#include <caf/all.hpp>

#include "devices/device.hpp"
#include "runtime/trace.hpp"

namespace triad {

namespace {

// Each message to the fetcher that serves one request ends with a kv_trace (its trace).

/// Asks the fetcher for pages: `(kv_fetch_atom, tokens, first, count, seq, reply_to, trace)`.
using kv_fetch_atom = caf::atom_constant<caf::atom("kvfetch")>;
/// Asks the fetcher for kept blocks: `(kv_fetch_kept_atom, ids, tokens, seq, reply_to, trace)`.
using kv_fetch_kept_atom = caf::atom_constant<caf::atom("kvfetchk")>;
/// Starts reading kept blocks before a device asks: `(kv_prefetch_atom, ids, tokens, trace)`.
using kv_prefetch_atom = caf::atom_constant<caf::atom("kvprefch")>;
/// Drops a prefetch no device joined: `(kv_unprefetch_atom, ids)`.
using kv_unprefetch_atom = caf::atom_constant<caf::atom("kvunpref")>;
/// Asks the fetcher to keep pages: `(kv_keep_atom, kv_put, ttl_ms, key, reply_to, trace)`.
using kv_keep_atom = caf::atom_constant<caf::atom("kvkeep")>;
/// Asks the fetcher for blocks to stream through: `(kv_lease_atom, pool, pages, seq, reply_to,
/// trace)`.
using kv_lease_atom = caf::atom_constant<caf::atom("kvlease")>;
/// Asks the fetcher for pages of another device's memory: `(kv_peer_atom, owner, owner's name,
/// tokens, first, count, seq, reply_to, trace)`.
using kv_peer_atom = caf::atom_constant<caf::atom("kvpeer")>;

/// Whom a fetcher's operation is for when its request is traced: the request (0: not traced),
/// the caller (a device's name, "request 17") and when it asked.
struct kv_trace {
  std::uint64_t request = 0; ///< the traced request's id, or 0
  std::string from;          ///< who asked
  std::int64_t asked_ns = 0; ///< when, on trace_log's clock (since its epoch)
};

/// Inspector of kv_trace.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_trace& x) {
  return f(caf::meta::type_name("kv_trace"), x.request, x.from, x.asked_ns);
}

// The spans of one traced operation of the fetcher, on a track of their own in the fetcher's
// domain ("request 17 kv fetch"): each message the fetcher sent for it, from the send to the
// answer, and around them the caller's message to the fetcher, from the ask to the answer.
class op_trace {
public:
  using clock_type = trace_log::clock_type;

  op_trace(std::shared_ptr<trace_log> log, kv_trace t, caf::atom_value what, std::string_view op)
      : log_(std::move(log))
      , request_(t.request)
      , from_(std::move(t.from))
      , what_(what)
      , op_(op)
      , asked_(clock_type::duration{t.asked_ns}) {}

  // One for `t` (its message `what`, the operation `op`): null when the operation is not
  // traced, or the node writes no trace.
  static std::shared_ptr<op_trace> make(const std::shared_ptr<trace_log>& log, kv_trace t,
                                        caf::atom_value what, std::string_view op) {
    if (!log || t.request == 0)
      return nullptr;
    return std::make_shared<op_trace>(log, std::move(t), what, op);
  }

  // The fetcher's message `what` to `to`, from `sent` until now, and how it went; `messages`
  // of them when they went out together (a read per block), from the first send to the last
  // answer.
  void hop(caf::atom_value what, std::string_view to, clock_type::time_point sent,
           std::string_view outcome, std::size_t messages = 1) {
    const auto message = caf::to_string(what);
    std::string name = message;
    if (messages != 1)
      name.append(" x").append(std::to_string(messages));
    name.append(" to ").append(to);
    auto args = message_args(to, message, outcome);
    if (messages != 1)
      args.append(",\"messages\":").append(std::to_string(messages));
    write(name, sent, args);
  }

  // The operation answered its caller (`outcome`, with `pages` pages or blocks): the caller's
  // message to the fetcher, around the fetcher's own; once.
  void end(std::string_view outcome, std::size_t pages) {
    if (std::exchange(ended_, true))
      return;
    const auto message = caf::to_string(what_);
    std::string args = "\"from\":";
    append_trace_string(args, from_);
    args.append(",").append(message_args("kv fetcher", message, outcome));
    args.append(",\"pages\":").append(std::to_string(pages));
    write(message + " to kv fetcher", asked_, args);
  }

private:
  // A message span's arguments: to whom, which message, how it went.
  static std::string message_args(std::string_view to, std::string_view message,
                                  std::string_view outcome) {
    std::string args = "\"to\":";
    append_trace_string(args, to);
    args += ",\"message\":";
    append_trace_string(args, message);
    args += ",\"outcome\":";
    append_trace_string(args, outcome);
    return args;
  }

  void write(std::string_view name, clock_type::time_point from, std::string_view args) {
    if (!track_) // in the fetcher's domain, made at its first span (on the fetcher's thread)
      track_ = log_->new_track("domain" + std::to_string(current_domain()),
                               "request " + std::to_string(request_) + " kv " + op_, request_);
    log_->add(*track_, name, "message", from, clock_type::now() - from, args,
              std::span{&request_, 1});
  }

  std::shared_ptr<trace_log> log_;
  std::uint64_t request_;
  std::string from_;
  caf::atom_value what_;
  std::string op_;
  clock_type::time_point asked_;
  std::optional<trace_track> track_;
  bool ended_ = false;
};

// t->hop(...) when the operation is traced (`t` not null).
void trace_hop(const std::shared_ptr<op_trace>& t, caf::atom_value what, std::string_view to,
               op_trace::clock_type::time_point sent, std::string_view outcome,
               std::size_t messages = 1) {
  if (t)
    t->hop(what, to, sent, outcome, messages);
}

// t->end(...) when the operation is traced (`t` not null).
void trace_end(const std::shared_ptr<op_trace>& t, std::string_view outcome, std::size_t pages) {
  if (t)
    t->end(outcome, pages);
}

// When the fetcher's message went, for its hop span (no clock read when untraced).
op_trace::clock_type::time_point sent_now(const std::shared_ptr<op_trace>& t) {
  return t ? op_trace::clock_type::now() : op_trace::clock_type::time_point{};
}

/// How long a device asked for its pages may take to copy them out (it does so between its
/// steps); past it the asking prompt computes them.
constexpr std::chrono::seconds share_patience{10};

// What one fetch gathers: the blocks' bytes as their reads come back, in chain order.
struct fetch_state {
  std::vector<token> tokens;
  std::size_t first = 0;
  std::vector<kv_page> pages;
  std::vector<bool> ok;
  std::size_t left = 0;
  seq_id seq = 0;
  caf::actor reply_to; // null for a prefetch no device joined yet: the pages wait in `done`
  bool finished = false;
  std::vector<kv_page> done;
  std::shared_ptr<op_trace> trace;  // the traced operation that started it, or null
  std::shared_ptr<op_trace> joined; // the traced fetch_kept that joined it (a prefetch), or null
  op_trace::clock_type::time_point reads_sent; // traced: when the block reads went out

  // The pages read and checked, up to the first that was not: the rest is computed. Page k
  // holds the tokens of page `first + k` of `tokens` (the last may be partial).
  void finish(std::size_t block_tokens) {
    std::vector<kv_page> out;
    std::span<const token> all{tokens};
    block_hash parent = root_hash;
    for (std::size_t at = 0; at < first * block_tokens && at + block_tokens <= all.size();
         at += block_tokens)
      parent = chain_hash(parent, all.subspan(at, block_tokens));
    for (std::size_t k = 0; k < pages.size() && ok[k]; ++k) {
      auto at = (first + k) * block_tokens;
      if (at >= all.size())
        break;
      auto& p = pages[k];
      auto own = all.subspan(at, std::min(block_tokens, all.size() - at));
      p.parent = parent;
      p.hash = chain_hash(parent, own);
      p.tokens.assign(own.begin(), own.end());
      parent = p.hash;
      out.push_back(std::move(p));
    }
    finished = true;
    const auto n = out.size();
    const bool answered = static_cast<bool>(reply_to);
    if (reply_to)
      caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(out));
    else
      done = std::move(out);
    for (auto* t : {trace.get(), joined.get()})
      if (t != nullptr) // a prefetch nobody joined yet is read, not answered
        t->end(answered ? "answered" : "read", n);
  }

  // Reads `ids` through the store, in order, then finishes. The blocks are referenced while
  // they are read, so pressure cannot drop one under its read (a block already gone ends the
  // fetch: its tokens are computed).
  void read(caf::event_based_actor* self, const kv_store& store, const std::vector<block_id>& ids,
            std::size_t block_tokens, const std::shared_ptr<fetch_state>& me) {
    if (ids.empty())
      return finish(block_tokens);
    const auto sent = sent_now(trace);
    self->request(store.store, caf::infinite, kv_acquire_atom::value, ids)
        .then(
            [self, store, ids, block_tokens, me, sent](kv_reply& r) {
              trace_hop(me->trace, kv_acquire_atom::value, "kv store", sent,
                        r.ok ? "answered" : "refused");
              if (!r.ok)
                return me->finish(block_tokens);
              me->read_held(self, store, ids, block_tokens, me);
            },
            [me, block_tokens, sent](caf::error&) {
              trace_hop(me->trace, kv_acquire_atom::value, "kv store", sent, "failed");
              me->finish(block_tokens);
            });
  }

  void read_held(caf::event_based_actor* self, const kv_store& store,
                 const std::vector<block_id>& ids, std::size_t block_tokens,
                 const std::shared_ptr<fetch_state>& me) {
    auto n = ids.size();
    pages.resize(n);
    ok.assign(n, false);
    left = n;
    reads_sent = sent_now(trace);
    // The ids once for every read's callback (a copy each made a fetch of n blocks copy n^2
    // ids: for a 100K-token context, 6250 blocks, 300 MB).
    auto held = std::make_shared<const std::vector<block_id>>(ids);
    for (std::size_t k = 0; k < n; ++k) {
      auto one = [me, k, block_tokens, store, held](bool good, std::vector<std::uint8_t> bytes) {
        me->ok[k] = good;
        me->pages[k].bytes = std::move(bytes);
        if (--me->left != 0)
          return;
        // The reads as one span: they went out together and overlap.
        trace_hop(me->trace, kv_read_atom::value, "kv store", me->reads_sent,
                  std::all_of(me->ok.begin(), me->ok.end(), [](bool b) { return b; }) ? "answered"
                                                                                      : "failed",
                  me->ok.size());
        const auto released = sent_now(me->trace);
        caf::anon_send(store.store, kv_release_atom::value, *held); // the read's references
        trace_hop(me->trace, kv_release_atom::value, "kv store", released, "sent");
        me->finish(block_tokens);
      };
      self->request(store.store, caf::infinite, kv_read_atom::value, ids[k])
          .then([one](kv_bytes& b) mutable { one(b.ok, std::move(b.bytes)); },
                [one](caf::error&) mutable { one(false, {}); });
    }
  }
};

// Prefetches the fetcher holds at most (each until a device joins it, its request is admitted
// elsewhere or its blocks are released), and their bytes at most (the KV read back waits in the
// fetcher's memory, outside the store's budget); beyond, those with the lowest ids (the oldest
// blocks) go, and a prefetch larger than the bytes alone is not made (the device reads then).
constexpr std::size_t max_prefetches = 4096;
constexpr std::size_t max_prefetch_bytes = std::size_t{256} << 20;

// Reads of kept blocks started ahead of their device (kv_prefetch_atom), by their ids.
class prefetch_set {
public:
  // Takes `st` for `ids` of `bytes`, making room; false when it cannot be held.
  bool add(const std::vector<block_id>& ids, std::shared_ptr<fetch_state> st, std::size_t bytes) {
    if (bytes > max_prefetch_bytes || reads_.count(ids) != 0)
      return false;
    while (!reads_.empty() &&
           (reads_.size() >= max_prefetches || bytes_ + bytes > max_prefetch_bytes))
      erase(reads_.begin());
    reads_.emplace(ids, entry{std::move(st), bytes});
    bytes_ += bytes;
    return true;
  }
  // The read for `ids` with `tokens`, taken out of the set; null when there is none.
  std::shared_ptr<fetch_state> take(const std::vector<block_id>& ids,
                                    const std::vector<token>& tokens) {
    auto it = reads_.find(ids);
    if (it == reads_.end() || it->second.st->tokens != tokens)
      return nullptr;
    auto st = std::move(it->second.st);
    erase(it);
    return st;
  }
  // Drops the read for `ids`, if any.
  void drop(const std::vector<block_id>& ids) {
    if (auto it = reads_.find(ids); it != reads_.end())
      erase(it);
  }

private:
  struct entry {
    std::shared_ptr<fetch_state> st;
    std::size_t bytes;
  };
  using map = std::map<std::vector<block_id>, entry>;
  void erase(map::iterator it) {
    bytes_ -= it->second.bytes;
    reads_.erase(it);
  }
  map reads_;
  std::size_t bytes_ = 0;
};

caf::behavior fetcher(caf::event_based_actor* self, kv_store store, std::size_t block_tokens,
                      std::size_t block_bytes, std::shared_ptr<std::atomic<std::uint64_t>> joins,
                      std::shared_ptr<trace_log> log) {
  auto prefetches = std::make_shared<prefetch_set>();
  return {
      [self, store, block_tokens, block_bytes, prefetches, log](
          kv_prefetch_atom a, std::vector<block_id>& ids, std::vector<token>& tokens, kv_trace& t) {
        auto st = std::make_shared<fetch_state>();
        st->tokens = std::move(tokens);
        st->trace = op_trace::make(log, std::move(t), a, "prefetch");
        if (!ids.empty() && prefetches->add(ids, st, ids.size() * block_bytes))
          st->read(self, store, ids, block_tokens, st);
        else
          trace_end(st->trace, "not made", 0); // the device reads them when it takes the request
      },
      [prefetches](kv_unprefetch_atom, std::vector<block_id>& ids) { prefetches->drop(ids); },
      [self, store, block_tokens, log](kv_fetch_atom a, std::vector<token>& tokens,
                                       std::uint64_t first, std::uint64_t count, seq_id seq,
                                       caf::actor& reply_to, kv_trace& t) {
        auto st = std::make_shared<fetch_state>();
        tokens.resize(std::min<std::size_t>(tokens.size(), (first + count) * block_tokens));
        st->tokens = std::move(tokens);
        st->first = first;
        st->seq = seq;
        st->reply_to = std::move(reply_to);
        st->trace = op_trace::make(log, std::move(t), a, "fetch");
        auto chain = chain_hashes(st->tokens, block_tokens);
        chain.erase(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(
                                                       std::min<std::size_t>(first, chain.size())));
        const auto sent = sent_now(st->trace);
        self->request(store.index, caf::infinite, kv_find_atom::value, std::move(chain))
            .then(
                [self, store, st, block_tokens, sent](kv_prefix& p) {
                  trace_hop(st->trace, kv_find_atom::value, "kv index", sent, "answered");
                  st->read(self, store, p.ids, block_tokens, st);
                },
                [st, block_tokens, sent](caf::error&) {
                  trace_hop(st->trace, kv_find_atom::value, "kv index", sent, "failed");
                  st->finish(block_tokens);
                });
      },
      [self, store, block_tokens, prefetches, joins,
       log](kv_fetch_kept_atom a, std::vector<std::uint64_t>& ids, std::vector<token>& tokens,
            seq_id seq, caf::actor& reply_to, kv_trace& t) {
        auto trace = op_trace::make(log, std::move(t), a, "fetch kept");
        // A read started when the tool returned: joined (the same blocks for the same tokens).
        if (auto st = prefetches->take(ids, tokens)) {
          joins->fetch_add(1, std::memory_order_relaxed);
          if (st->finished) {
            const auto n = st->done.size();
            caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(st->done));
            trace_end(trace, "answered from its prefetch", n);
          } else {
            st->seq = seq, st->reply_to = std::move(reply_to), st->joined = std::move(trace);
          }
          return;
        }
        auto st = std::make_shared<fetch_state>();
        st->tokens = std::move(tokens);
        st->seq = seq;
        st->reply_to = std::move(reply_to);
        st->trace = std::move(trace);
        st->read(self, store, ids, block_tokens, st);
      },
      [self, store, log](kv_lease_atom a, std::string& pool, std::uint32_t pages, seq_id seq,
                         caf::actor& reply_to, kv_trace& t) {
        auto trace = op_trace::make(log, std::move(t), a, "lease");
        auto none = [seq, reply_to, trace] {
          trace_end(trace, "none", 0);
          caf::anon_send(reply_to, kv_leased_atom::value, seq, std::shared_ptr<kv_stream>{});
        };
        const auto sent = sent_now(trace);
        self->request(store.store, caf::infinite, kv_reserve_atom::value, std::move(pool), pages)
            .then(
                [store, seq, reply_to, none, trace, sent](kv_lease& l) {
                  trace_hop(trace, kv_reserve_atom::value, "kv store", sent,
                            l.ok ? "answered" : "refused");
                  if (!l.ok)
                    return none();
                  // The stream seals the blocks when its last holder lets go (any thread).
                  auto end = [to = store.store, ids = l.ids, trace](std::vector<std::uint64_t> sums,
                                                                    std::vector<token> tokens) {
                    const auto sealed = sent_now(trace);
                    caf::anon_send(to, kv_seal_atom::value, ids, std::move(tokens),
                                   std::move(sums));
                    // After the lease's span (ended before the stream is handed over), on its
                    // track.
                    trace_hop(trace, kv_seal_atom::value, "kv store", sealed, "sent");
                  };
                  const auto n = l.ids.size();
                  auto stream =
                      std::make_shared<kv_stream>(std::move(l.memory), std::move(end), l.flip_bit);
                  // Ended first: the stream's holder may seal it at once, and the seal's span
                  // lies after this one.
                  trace_end(trace, "answered", n);
                  caf::anon_send(reply_to, kv_leased_atom::value, seq, std::move(stream));
                },
                [none, trace, sent](caf::error&) {
                  trace_hop(trace, kv_reserve_atom::value, "kv store", sent, "failed");
                  none();
                });
      },
      [self, log](kv_peer_atom a, caf::actor& owner, std::string& owner_name,
                  std::vector<token>& tokens, std::uint64_t first, std::uint64_t count, seq_id seq,
                  caf::actor& reply_to, kv_trace& t) {
        auto trace = op_trace::make(log, std::move(t), a, "from device");
        auto to = "device " + owner_name;
        // Answered whatever happens: an owner that stopped or is slow leaves the prompt to be
        // computed, not waiting.
        const auto sent = sent_now(trace);
        self->request(caf::actor_cast<device_actor>(owner), share_patience, kv_share_atom::value,
                      std::move(tokens), first, count)
            .then(
                [seq, reply_to, trace, to, sent](std::vector<kv_page>& pages) {
                  const auto n = pages.size();
                  trace_hop(trace, kv_share_atom::value, to, sent, "answered");
                  caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(pages));
                  trace_end(trace, "answered", n);
                },
                [seq, reply_to, trace, to, sent](caf::error&) {
                  trace_hop(trace, kv_share_atom::value, to, sent, "failed");
                  caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::vector<kv_page>{});
                  trace_end(trace, "answered", 0);
                });
      },
      [self, store, log](kv_keep_atom a, kv_put& put, std::uint32_t ttl_ms, std::uint64_t key,
                         caf::actor& reply_to, kv_trace& t) {
        auto trace = op_trace::make(log, std::move(t), a, "keep");
        auto not_kept = [key, reply_to, trace] {
          caf::anon_send(reply_to, kv_stored_atom::value, key, std::vector<std::uint64_t>{},
                         std::uint64_t{0});
          trace_end(trace, "not kept", 0);
        };
        // Stored unreferenced, then pinned: the pin, not a reference, holds them, so a caller
        // that goes away leaves nothing held past the TTL.
        const auto sent = sent_now(trace);
        self->request(store.store, caf::infinite, kv_put_atom::value, std::move(put))
            .then(
                [self, store, ttl_ms, key, reply_to, not_kept, trace, sent](kv_reply& r) {
                  trace_hop(trace, kv_put_atom::value, "kv store", sent,
                            r.ok ? "answered" : "refused");
                  if (!r.ok)
                    return not_kept();
                  auto ids = r.ids;
                  const auto pin_sent = sent_now(trace);
                  self->request(store.store, caf::infinite, kv_pin_atom::value, std::move(r.ids),
                                ttl_ms)
                      .then(
                          [store, key, reply_to, ids, not_kept, trace,
                           pin_sent](kv_reply& pinned) mutable {
                            trace_hop(trace, kv_pin_atom::value, "kv store", pin_sent,
                                      pinned.ok ? "answered" : "refused");
                            if (!pinned.ok) {
                              // Some blocks went before the pin came: the pin on the others
                              // ends now, not at its deadline, as nobody will hold its id.
                              if (pinned.pin != 0) {
                                const auto unpinned = sent_now(trace);
                                caf::anon_send(store.store, kv_unpin_atom::value, ids, pinned.pin);
                                trace_hop(trace, kv_unpin_atom::value, "kv store", unpinned,
                                          "sent");
                              }
                              return not_kept();
                            }
                            const auto n = ids.size();
                            caf::anon_send(reply_to, kv_stored_atom::value, key, std::move(ids),
                                           pinned.pin);
                            trace_end(trace, "answered", n);
                          },
                          [not_kept, trace, pin_sent](caf::error&) {
                            trace_hop(trace, kv_pin_atom::value, "kv store", pin_sent, "failed");
                            not_kept();
                          });
                },
                [not_kept, trace, sent](caf::error&) {
                  trace_hop(trace, kv_put_atom::value, "kv store", sent, "failed");
                  not_kept();
                });
      },
  };
}

// A store's identity: random, so the ids of two stores (two nodes', or a restarted node's)
// never pass for each other's; never 0 (no store) nor ~0 (what a node asks another node's KV
// exchange for to look a prompt's pages up, not a store's blocks).
std::uint64_t fresh_store_id() {
  std::random_device rd;
  std::uint64_t id = 0;
  while (id == 0 || id == ~std::uint64_t{0})
    id = (std::uint64_t{rd()} << 32) | rd();
  return id;
}

class store_tier final : public kv_tier {
public:
  store_tier(domain& home, kv_store store, std::string host_pool,
             std::map<std::string, std::string> device_pools, std::size_t block_tokens,
             std::size_t block_bytes, std::shared_ptr<trace_log> trace)
      : store_(std::move(store))
      , host_pool_(std::move(host_pool))
      , device_pools_(std::move(device_pools))
      , block_bytes_(block_bytes)
      , joins_(std::make_shared<std::atomic<std::uint64_t>>(0))
      , traced_(trace != nullptr)
      , fetcher_(home.spawn(fetcher, store_, block_tokens, block_bytes, joins_, std::move(trace))) {
  }

  ~store_tier() override { caf::anon_send_exit(fetcher_, caf::exit_reason::user_shutdown); }

  std::size_t block_bytes() const noexcept override { return block_bytes_; }

  std::uint64_t store_id() const noexcept override { return id_; }

  std::size_t held(std::span<const block_hash> chain) const override {
    return store_.directory ? store_.directory->leading(chain) : 0;
  }

  void spill(std::uint32_t device, std::vector<kv_page> pages) override {
    const auto name = name_of(device);
    const auto& pool = pool_of(name);
    if (store_.directory && !pages.empty()) {
      std::vector<block_hash> gone;
      gone.reserve(pages.size());
      for (const auto& p : pages)
        gone.push_back(p.hash);
      store_.directory->note_resident(device, {}, gone);
    }
    for (auto& p : pages) {
      kv_put put;
      put.pool = pool;
      put.tokens = std::move(p.tokens);
      put.payloads.push_back(std::move(p.bytes));
      put.parent = p.parent;
      put.hold = false;
      put.from_device = name; // its block moves down: the device's page becomes a host block
      caf::anon_send(store_.store, kv_put_atom::value, std::move(put));
    }
  }

  void keep(std::vector<kv_page> pages, std::chrono::milliseconds ttl, std::uint64_t key,
            caf::actor reply_to, std::uint64_t trace) override {
    kv_put put;
    put.pool = pool_of(name_of(reply_to));
    put.hold = false;
    for (auto& p : pages) {
      put.tokens.insert(put.tokens.end(), p.tokens.begin(), p.tokens.end());
      put.payloads.push_back(std::move(p.bytes));
    }
    auto ttl_ms = static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(ttl.count(), 1, std::numeric_limits<std::uint32_t>::max()));
    auto t = trace_from(trace, reply_to);
    caf::anon_send(fetcher_, kv_keep_atom::value, std::move(put), ttl_ms, key, std::move(reply_to),
                   std::move(t));
  }

  void release(std::vector<std::uint64_t> block_ids, std::uint64_t pin) override {
    if (!block_ids.empty())
      caf::anon_send(store_.store, kv_unpin_atom::value, std::move(block_ids), pin);
  }

  void prefetch_kept(std::vector<std::uint64_t> block_ids, std::vector<token> tokens,
                     std::uint64_t trace) override {
    caf::anon_send(fetcher_, kv_prefetch_atom::value, std::move(block_ids), std::move(tokens),
                   trace_from_request(trace));
  }

  void forget_prefetch(std::vector<std::uint64_t> block_ids) override {
    if (!block_ids.empty())
      caf::anon_send(fetcher_, kv_unprefetch_atom::value, std::move(block_ids));
  }

  std::uint64_t prefetch_joins() const noexcept override {
    return joins_->load(std::memory_order_relaxed);
  }

  void fetch_kept(std::vector<std::uint64_t> block_ids, std::vector<token> tokens, seq_id seq,
                  caf::actor reply_to, std::uint64_t trace) override {
    auto t = trace_from(trace, reply_to);
    caf::anon_send(fetcher_, kv_fetch_kept_atom::value, std::move(block_ids), std::move(tokens),
                   seq, std::move(reply_to), std::move(t));
  }

  void lease(std::size_t pages, seq_id seq, caf::actor reply_to, std::uint64_t trace) override {
    auto t = trace_from(trace, reply_to);
    caf::anon_send(fetcher_, kv_lease_atom::value, pool_of(name_of(reply_to)),
                   static_cast<std::uint32_t>(
                       std::min<std::size_t>(pages, std::numeric_limits<std::uint32_t>::max())),
                   seq, std::move(reply_to), std::move(t));
  }

  void fetch(std::vector<token> tokens, std::size_t first, std::size_t count, seq_id seq,
             caf::actor reply_to, std::uint64_t trace) override {
    auto t = trace_from(trace, reply_to);
    caf::anon_send(fetcher_, kv_fetch_atom::value, std::move(tokens),
                   static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(count), seq,
                   std::move(reply_to), std::move(t));
  }

  // -- pages in the devices' own memory --

  std::uint32_t join(caf::actor device, std::string name) override {
    std::lock_guard lock{devices_mutex_};
    if (!store_.directory || devices_.size() >= kv_directory::max_devices)
      return no_device;
    devices_.push_back(device.address());
    names_.push_back(name);
    // The store keeps a block (and its actor) for each page the device's prefix cache holds.
    caf::anon_send(store_.store, kv_device_join_atom::value, std::move(name), std::move(device));
    return static_cast<std::uint32_t>(devices_.size() - 1);
  }

  void leave(std::uint32_t device) override {
    std::string name;
    caf::actor_addr addr;
    {
      std::lock_guard lock{devices_mutex_};
      if (device >= devices_.size())
        return;
      addr = std::move(devices_[device]);
      devices_[device] = caf::actor_addr{}; // numbers are not reused
      name = names_[device];
    }
    store_.directory->forget_device(device);
    caf::anon_send(store_.store, kv_device_leave_atom::value, std::move(name), std::move(addr));
  }

  void resident(std::uint32_t device, std::span<const kv_page> added,
                std::span<const block_hash> gone) override {
    if (!store_.directory)
      return;
    std::vector<block_hash> hashes;
    hashes.reserve(added.size());
    for (const auto& p : added)
      hashes.push_back(p.hash);
    store_.directory->note_resident(device, hashes, gone);
    caf::anon_send(store_.store, kv_resident_atom::value, name_of(device),
                   std::vector<kv_page>{added.begin(), added.end()},
                   std::vector<block_hash>{gone.begin(), gone.end()});
  }

  peer_run held_elsewhere(std::uint32_t device, std::span<const block_hash> chain) const override {
    if (!store_.directory)
      return {};
    auto run = store_.directory->longest_resident(chain, device);
    if (run.pages == 0)
      return {};
    return {run.device, run.pages};
  }

  std::size_t held_by(const caf::actor_addr& device,
                      std::span<const block_hash> chain) const override {
    if (!store_.directory)
      return 0;
    return store_.directory->run_on(number_of(device), chain);
  }

  bool note_routed(const caf::actor_addr& device, std::span<const block_hash> chain) override {
    const auto number = number_of(device);
    if (!store_.directory || number == no_device)
      return false;
    store_.directory->note_routed(number, chain);
    return true;
  }

  void fetch_from_device(std::uint32_t owner, std::vector<token> tokens, std::size_t first,
                         std::size_t count, seq_id seq, caf::actor reply_to,
                         std::uint64_t trace) override {
    caf::actor to;
    {
      std::lock_guard lock{devices_mutex_};
      if (owner < devices_.size())
        to = caf::actor_cast<caf::actor>(devices_[owner]);
    }
    if (!to) {
      caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::vector<kv_page>{});
      return;
    }
    auto t = trace_from(trace, reply_to);
    caf::anon_send(fetcher_, kv_peer_atom::value, std::move(to), name_of(owner), std::move(tokens),
                   static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(count), seq,
                   std::move(reply_to), std::move(t));
  }

private:
  // What the fetcher's spans of an operation for traced request `request` (0: none) need,
  // asked now by whom `from()` names; empty (no clock read, no name built) when untraced.
  template<class Name>
  kv_trace trace_named(std::uint64_t request, Name&& from) const {
    if (request == 0 || !traced_)
      return {};
    return {request, from(), trace_log::clock_type::now().time_since_epoch().count()};
  }
  kv_trace trace_from(std::uint64_t request, const caf::actor& device) const {
    return trace_named(request, [&] { return "device " + name_of(device); });
  }
  kv_trace trace_from_request(std::uint64_t request) const {
    return trace_named(request, [request] { return "request " + std::to_string(request); });
  }

  // The name `device` joined with (empty when unknown).
  std::string name_of(std::uint32_t device) const {
    std::lock_guard lock{devices_mutex_};
    return device < names_.size() ? names_[device] : std::string{};
  }

  // The name the device actor `device` joined with (empty when unknown).
  std::string name_of(const caf::actor& device) const {
    return name_of(number_of(device.address()));
  }

  // The number the device actor `device` joined with (no_device when unknown).
  std::uint32_t number_of(const caf::actor_addr& device) const {
    std::lock_guard lock{devices_mutex_};
    for (std::size_t i = 0; device && i < devices_.size(); ++i)
      if (devices_[i] == device)
        return static_cast<std::uint32_t>(i);
    return no_device;
  }

  // The host pool of the named device's domain: the home pool when it has none of its own.
  const std::string& pool_of(const std::string& device) const {
    auto it = device_pools_.find(device);
    return it == device_pools_.end() ? host_pool_ : it->second;
  }

  kv_store store_;
  std::string host_pool_;
  std::map<std::string, std::string> device_pools_; // device name -> its domain's host pool
  std::size_t block_bytes_;
  std::shared_ptr<std::atomic<std::uint64_t>> joins_; // fetch_kept that joined a prefetch
  bool traced_; // the node writes a trace (the fetcher holds the log)
  caf::actor fetcher_;
  std::uint64_t id_ = fresh_store_id(); // store_id()
  mutable std::mutex devices_mutex_;
  // By number (join); weak, so the tier (which each device holds) keeps none of them alive.
  std::vector<caf::actor_addr> devices_;
  std::vector<std::string> names_; // by number, as joined
};

} // namespace

std::shared_ptr<kv_tier> make_store_tier(domain& home, kv_store store, std::string host_pool,
                                         std::map<std::string, std::string> device_pools,
                                         std::size_t block_tokens, std::size_t block_bytes,
                                         std::shared_ptr<trace_log> trace) {
  return std::make_shared<store_tier>(home, std::move(store), std::move(host_pool),
                                      std::move(device_pools), block_tokens, block_bytes,
                                      std::move(trace));
}

} // namespace triad
