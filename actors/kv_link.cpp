#include "actors/kv_link.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>

#include <caf/all.hpp>

#include "devices/device.hpp"

namespace triad {

namespace {

/// Asks the fetcher for pages: `(kv_fetch_atom, tokens, first, count, seq, reply_to)`.
using kv_fetch_atom = caf::atom_constant<caf::atom("kvfetch")>;
/// Asks the fetcher for kept blocks: `(kv_fetch_kept_atom, ids, tokens, seq, reply_to)`.
using kv_fetch_kept_atom = caf::atom_constant<caf::atom("kvfetchk")>;
/// Starts reading kept blocks before a device asks: `(kv_prefetch_atom, ids, tokens)`.
using kv_prefetch_atom = caf::atom_constant<caf::atom("kvprefch")>;
/// Drops a prefetch no device joined: `(kv_unprefetch_atom, ids)`.
using kv_unprefetch_atom = caf::atom_constant<caf::atom("kvunpref")>;
/// Asks the fetcher to keep pages: `(kv_keep_atom, kv_put, ttl_ms, key, reply_to)`.
using kv_keep_atom = caf::atom_constant<caf::atom("kvkeep")>;
/// Asks the fetcher for blocks to stream through: `(kv_lease_atom, pool, pages, seq, reply_to)`.
using kv_lease_atom = caf::atom_constant<caf::atom("kvlease")>;
/// Asks the fetcher for pages of another device's memory: `(kv_peer_atom, owner, tokens,
/// first, count, seq, reply_to)`.
using kv_peer_atom = caf::atom_constant<caf::atom("kvpeer")>;

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
    if (reply_to)
      caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(out));
    else
      done = std::move(out);
  }

  // Reads `ids` through the store, in order, then finishes. The blocks are referenced while
  // they are read, so pressure cannot drop one under its read (a block already gone ends the
  // fetch: its tokens are computed).
  void read(caf::event_based_actor* self, const kv_store& store, const std::vector<block_id>& ids,
            std::size_t block_tokens, const std::shared_ptr<fetch_state>& me) {
    if (ids.empty())
      return finish(block_tokens);
    self->request(store.store, caf::infinite, kv_acquire_atom::value, ids)
        .then(
            [self, store, ids, block_tokens, me](kv_reply& r) {
              if (!r.ok)
                return me->finish(block_tokens);
              me->read_held(self, store, ids, block_tokens, me);
            },
            [me, block_tokens](caf::error&) { me->finish(block_tokens); });
  }

  void read_held(caf::event_based_actor* self, const kv_store& store,
                 const std::vector<block_id>& ids, std::size_t block_tokens,
                 const std::shared_ptr<fetch_state>& me) {
    auto n = ids.size();
    pages.resize(n);
    ok.assign(n, false);
    left = n;
    for (std::size_t k = 0; k < n; ++k) {
      auto one = [me, k, block_tokens, store, ids](bool good, std::vector<std::uint8_t> bytes) {
        me->ok[k] = good;
        me->pages[k].bytes = std::move(bytes);
        if (--me->left != 0)
          return;
        caf::anon_send(store.store, kv_release_atom::value, ids); // the read's references
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
                      std::size_t block_bytes, std::shared_ptr<std::atomic<std::uint64_t>> joins) {
  auto prefetches = std::make_shared<prefetch_set>();
  return {
      [self, store, block_tokens, block_bytes,
       prefetches](kv_prefetch_atom, std::vector<block_id>& ids, std::vector<token>& tokens) {
        auto st = std::make_shared<fetch_state>();
        st->tokens = std::move(tokens);
        if (!ids.empty() && prefetches->add(ids, st, ids.size() * block_bytes))
          st->read(self, store, ids, block_tokens, st);
      },
      [prefetches](kv_unprefetch_atom, std::vector<block_id>& ids) { prefetches->drop(ids); },
      [self, store, block_tokens](kv_fetch_atom, std::vector<token>& tokens, std::uint64_t first,
                                  std::uint64_t count, seq_id seq, caf::actor& reply_to) {
        auto st = std::make_shared<fetch_state>();
        tokens.resize(std::min<std::size_t>(tokens.size(), (first + count) * block_tokens));
        st->tokens = std::move(tokens);
        st->first = first;
        st->seq = seq;
        st->reply_to = std::move(reply_to);
        auto chain = chain_hashes(st->tokens, block_tokens);
        chain.erase(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(
                                                       std::min<std::size_t>(first, chain.size())));
        self->request(store.index, caf::infinite, kv_find_atom::value, std::move(chain))
            .then([self, store, st,
                   block_tokens](kv_prefix& p) { st->read(self, store, p.ids, block_tokens, st); },
                  [st, block_tokens](caf::error&) { st->finish(block_tokens); });
      },
      [self, store, block_tokens, prefetches,
       joins](kv_fetch_kept_atom, std::vector<std::uint64_t>& ids, std::vector<token>& tokens,
              seq_id seq, caf::actor& reply_to) {
        // A read started when the tool returned: joined (the same blocks for the same tokens).
        if (auto st = prefetches->take(ids, tokens)) {
          joins->fetch_add(1, std::memory_order_relaxed);
          if (st->finished)
            caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(st->done));
          else
            st->seq = seq, st->reply_to = std::move(reply_to);
          return;
        }
        auto st = std::make_shared<fetch_state>();
        st->tokens = std::move(tokens);
        st->seq = seq;
        st->reply_to = std::move(reply_to);
        st->read(self, store, ids, block_tokens, st);
      },
      [self, store](kv_lease_atom, std::string& pool, std::uint32_t pages, seq_id seq,
                    caf::actor& reply_to) {
        auto none = [seq, reply_to] {
          caf::anon_send(reply_to, kv_leased_atom::value, seq, std::shared_ptr<kv_stream>{});
        };
        self->request(store.store, caf::infinite, kv_reserve_atom::value, std::move(pool), pages)
            .then(
                [store, seq, reply_to, none](kv_lease& l) {
                  if (!l.ok)
                    return none();
                  // The stream seals the blocks when its last holder lets go (any thread).
                  auto end = [to = store.store, ids = l.ids](std::vector<std::uint64_t> sums,
                                                             std::vector<token> tokens) {
                    caf::anon_send(to, kv_seal_atom::value, ids, std::move(tokens),
                                   std::move(sums));
                  };
                  auto stream =
                      std::make_shared<kv_stream>(std::move(l.memory), std::move(end), l.flip_bit);
                  caf::anon_send(reply_to, kv_leased_atom::value, seq, std::move(stream));
                },
                [none](caf::error&) { none(); });
      },
      [self](kv_peer_atom, caf::actor& owner, std::vector<token>& tokens, std::uint64_t first,
             std::uint64_t count, seq_id seq, caf::actor& reply_to) {
        // Answered whatever happens: an owner that stopped or is slow leaves the prompt to be
        // computed, not waiting.
        self->request(caf::actor_cast<device_actor>(owner), share_patience, kv_share_atom::value,
                      std::move(tokens), first, count)
            .then(
                [seq, reply_to](std::vector<kv_page>& pages) {
                  caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(pages));
                },
                [seq, reply_to](caf::error&) {
                  caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::vector<kv_page>{});
                });
      },
      [self, store](kv_keep_atom, kv_put& put, std::uint32_t ttl_ms, std::uint64_t key,
                    caf::actor& reply_to) {
        auto not_kept = [key, reply_to] {
          caf::anon_send(reply_to, kv_stored_atom::value, key, std::vector<std::uint64_t>{},
                         std::uint64_t{0});
        };
        // Stored unreferenced, then pinned: the pin, not a reference, holds them, so a caller
        // that goes away leaves nothing held past the TTL.
        self->request(store.store, caf::infinite, kv_put_atom::value, std::move(put))
            .then(
                [self, store, ttl_ms, key, reply_to, not_kept](kv_reply& r) {
                  if (!r.ok)
                    return not_kept();
                  auto ids = r.ids;
                  self->request(store.store, caf::infinite, kv_pin_atom::value, std::move(r.ids),
                                ttl_ms)
                      .then(
                          [store, key, reply_to, ids, not_kept](kv_reply& pinned) mutable {
                            if (!pinned.ok) {
                              // Some blocks went before the pin came: the pin on the others
                              // ends now, not at its deadline, as nobody will hold its id.
                              if (pinned.pin != 0)
                                caf::anon_send(store.store, kv_unpin_atom::value, ids, pinned.pin);
                              return not_kept();
                            }
                            caf::anon_send(reply_to, kv_stored_atom::value, key, std::move(ids),
                                           pinned.pin);
                          },
                          [not_kept](caf::error&) { not_kept(); });
                },
                [not_kept](caf::error&) { not_kept(); });
      },
  };
}

class store_tier final : public kv_tier {
public:
  store_tier(domain& home, kv_store store, std::string host_pool,
             std::map<std::string, std::string> device_pools, std::size_t block_tokens,
             std::size_t block_bytes)
      : store_(std::move(store))
      , host_pool_(std::move(host_pool))
      , device_pools_(std::move(device_pools))
      , block_bytes_(block_bytes)
      , joins_(std::make_shared<std::atomic<std::uint64_t>>(0))
      , fetcher_(home.spawn(fetcher, store_, block_tokens, block_bytes, joins_)) {}

  ~store_tier() override { caf::anon_send_exit(fetcher_, caf::exit_reason::user_shutdown); }

  std::size_t block_bytes() const noexcept override { return block_bytes_; }

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
            caf::actor reply_to) override {
    kv_put put;
    put.pool = pool_of(name_of(reply_to));
    put.hold = false;
    for (auto& p : pages) {
      put.tokens.insert(put.tokens.end(), p.tokens.begin(), p.tokens.end());
      put.payloads.push_back(std::move(p.bytes));
    }
    auto ttl_ms = static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(ttl.count(), 1, std::numeric_limits<std::uint32_t>::max()));
    caf::anon_send(fetcher_, kv_keep_atom::value, std::move(put), ttl_ms, key, std::move(reply_to));
  }

  void release(std::vector<std::uint64_t> block_ids, std::uint64_t pin) override {
    if (!block_ids.empty())
      caf::anon_send(store_.store, kv_unpin_atom::value, std::move(block_ids), pin);
  }

  void prefetch_kept(std::vector<std::uint64_t> block_ids, std::vector<token> tokens) override {
    caf::anon_send(fetcher_, kv_prefetch_atom::value, std::move(block_ids), std::move(tokens));
  }

  void forget_prefetch(std::vector<std::uint64_t> block_ids) override {
    if (!block_ids.empty())
      caf::anon_send(fetcher_, kv_unprefetch_atom::value, std::move(block_ids));
  }

  std::uint64_t prefetch_joins() const noexcept override {
    return joins_->load(std::memory_order_relaxed);
  }

  void fetch_kept(std::vector<std::uint64_t> block_ids, std::vector<token> tokens, seq_id seq,
                  caf::actor reply_to) override {
    caf::anon_send(fetcher_, kv_fetch_kept_atom::value, std::move(block_ids), std::move(tokens),
                   seq, std::move(reply_to));
  }

  void lease(std::size_t pages, seq_id seq, caf::actor reply_to) override {
    caf::anon_send(fetcher_, kv_lease_atom::value, pool_of(name_of(reply_to)),
                   static_cast<std::uint32_t>(
                       std::min<std::size_t>(pages, std::numeric_limits<std::uint32_t>::max())),
                   seq, std::move(reply_to));
  }

  void fetch(std::vector<token> tokens, std::size_t first, std::size_t count, seq_id seq,
             caf::actor reply_to) override {
    caf::anon_send(fetcher_, kv_fetch_atom::value, std::move(tokens),
                   static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(count), seq,
                   std::move(reply_to));
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
                         std::size_t count, seq_id seq, caf::actor reply_to) override {
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
    caf::anon_send(fetcher_, kv_peer_atom::value, std::move(to), std::move(tokens),
                   static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(count), seq,
                   std::move(reply_to));
  }

private:
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
  caf::actor fetcher_;
  mutable std::mutex devices_mutex_;
  // By number (join); weak, so the tier (which each device holds) keeps none of them alive.
  std::vector<caf::actor_addr> devices_;
  std::vector<std::string> names_; // by number, as joined
};

} // namespace

std::shared_ptr<kv_tier> make_store_tier(domain& home, kv_store store, std::string host_pool,
                                         std::map<std::string, std::string> device_pools,
                                         std::size_t block_tokens, std::size_t block_bytes) {
  return std::make_shared<store_tier>(home, std::move(store), std::move(host_pool),
                                      std::move(device_pools), block_tokens, block_bytes);
}

} // namespace triad
