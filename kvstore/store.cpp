#include "kvstore/store.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include <caf/all.hpp>

#include "kvstore/detail/block_actor.hpp"
#include "kvstore/detail/index_actor.hpp"
#include "kvstore/detail/locations.hpp"
#include "kvstore/detail/move_batcher.hpp"
#include "kvstore/detail/resident_pages.hpp"
#include "kvstore/detail/store_metrics.hpp"
#include "kvstore/pool.hpp"
#include "runtime/deadline_alarm.hpp"
#include "runtime/node_clock.hpp"

namespace triad {

namespace {

using clock_type = node_clock;
using detail::location;

// One block as the store sees it; the bytes are with its actor.
struct block_rec {
  block_id id = 0;
  block_hash hash = 0; // chained hash (full blocks)
  block_hash parent = 0;
  std::vector<token> tokens;
  bool indexed = false; // a full, content-addressed block (shared through the index)
  location loc;         // a memory pool, or the disk
  slot_id slot = 0;
  std::uint64_t checksum = 0;
  std::uint32_t refs = 0;
  // Pins held: (pin, its deadline); each kv_pin adds one, kv_unpin or its deadline ends it.
  std::vector<std::pair<std::uint64_t, clock_type::time_point>> pins;
  caf::actor actor;
  bool busy = false;   // being filled, moved or written
  bool leased = false; // written in place by its lessee until sealed: never moved or evicted
  std::vector<std::function<void()>> after; // run once it is no longer busy
};

// What a relief attempt did for a full location.
enum class relief { none, freed, started };
// Whether a location has room for one more block.
enum class room { ready, wait, busy };

// Counts the replies of a multi-block operation and answers once all are in.
struct gather {
  caf::typed_response_promise<kv_reply> promise;
  std::size_t left = 0;
  kv_reply reply;
  void one(expected<void> r, block_id id) {
    if (!r) {
      reply.ok = false;
      reply.busy = reply.busy || r.error().code == errc::busy;
      reply.reason += (reply.reason.empty() ? "" : "; ") + std::string{"block "} +
                      std::to_string(id) + ": " + r.error().message;
    }
    if (--left == 0)
      promise.deliver(std::move(reply));
  }
};

class store_actor : public homed<kv_store_actor::base> {
public:
  store_actor(caf::actor_config& cfg, domain_set* domains, domain* home, kv_store_config config,
              detail::locations places, kv_index_actor index)
      : homed(cfg)
      , domains_(domains)
      , home_(home)
      , config_(std::move(config))
      , places_(std::move(places))
      , index_(std::move(index))
      , metrics_(config_.metrics, config_.block_bytes) {
    leaving_.assign(places_.entries(), 0);
    for (std::size_t i = 0; i < places_.pool_count(); ++i) {
      auto d = domains_->find(places_.pool(location::of_pool(i)).domain());
      pool_domains_.push_back(d ? *d : home_);
    }
    for (std::size_t i = 0; i < places_.entries(); ++i)
      policies_.push_back(config_.policy ? config_.policy() : std::make_unique<lru_policy>());
    std::array<std::uint64_t, 3> budget{};
    const std::uint64_t block = std::max<std::uint64_t>(1, config_.block_bytes);
    for (const auto& p : config_.pools)
      budget[static_cast<std::size_t>(p.kind)] += p.capacity_bytes / block * block;
    if (!config_.disk_dir.empty())
      budget[static_cast<std::size_t>(tier::disk)] = config_.disk_capacity_bytes / block * block;
    metrics_.budget(budget);
  }

  // -- behaviour --

  behavior_type make_behavior() override {
    recover_disk();
    return {
        [this](kv_put_atom, kv_put& put) -> caf::result<kv_reply> {
          return on_put(std::move(put));
        },
        [this](kv_acquire_atom, std::vector<block_id>& ids) { return on_acquire(ids); },
        [this](kv_release_atom, std::vector<block_id>& ids) { return on_release(ids, false); },
        [this](kv_free_atom, std::vector<block_id>& ids) { return on_release(ids, true); },
        [this](kv_pin_atom, std::vector<block_id>& ids, std::uint32_t ttl_ms) {
          return on_pin(ids, ttl_ms);
        },
        [this](kv_unpin_atom, std::vector<block_id>& ids, std::uint64_t pin) {
          return on_unpin(ids, pin);
        },
        [this](kv_demote_atom, std::vector<block_id>& ids) -> caf::result<kv_reply> {
          return on_demote(ids);
        },
        [this](kv_promote_atom, std::vector<block_id>& ids,
               std::string& pool) -> caf::result<kv_reply> { return on_promote(ids, pool); },
        [this](kv_transfer_atom, std::vector<block_id>& ids,
               std::string& pool) -> caf::result<kv_reply> { return on_promote(ids, pool, false); },
        [this](kv_read_atom, block_id id) -> caf::result<kv_bytes> { return on_read(id); },
        [this](kv_reserve_atom, std::string& pool, std::uint32_t count) -> caf::result<kv_lease> {
          return on_reserve(pool, count);
        },
        [this](kv_seal_atom, std::vector<block_id>& ids, std::vector<token>& tokens,
               std::vector<std::uint64_t>& checksums) { on_seal(ids, tokens, checksums); },
        [this](kv_write_atom, block_id id, std::uint64_t offset, std::vector<std::uint8_t>& bytes)
            -> caf::result<kv_reply> { return on_write(id, offset, std::move(bytes)); },
        [this](kv_cow_atom, block_id id) -> caf::result<kv_reply> { return on_cow(id); },
        [this](kv_lookup_atom, std::vector<token>& tokens) {
          return delegate(index_, kv_lookup_atom::value, std::move(tokens));
        },
        [this](kv_device_join_atom, std::string& name, caf::actor& device) {
          on_device_join(name, device);
        },
        [this](kv_resident_atom, std::string& device, std::vector<kv_page>& added,
               std::vector<block_hash>& gone) { on_resident(device, added, gone); },
        [this](kv_on_device_atom, std::string& device, std::vector<token>& tokens) {
          return on_device(device, tokens);
        },
        [this](kv_device_leave_atom, std::string& name, caf::actor_addr& device) {
          if (const auto* d = resident_.find_device(name); d != nullptr && d->owner == device)
            on_device_leave(name);
        },
        [this](kv_fault_atom, std::uint32_t n) { faults_ += n; },
        [this](kv_stats_atom) -> kv_store_stats { return stats(); },
        [this](kv_expiry_atom, std::uint64_t number) {
          if (expiry_.fire(number)) // the latest armed check: earlier ones are stale
            on_expiry();
        },
        [this](kv_flush_atom) { flush_moves(); },
    };
  }

  // Closures waiting here hold response promises (strong references to this actor and to
  // callers); dropping them at exit breaks those cycles so every actor can be destroyed.
  void on_exit() override {
    for (auto& [id, b] : blocks_)
      send_exit(b.actor, caf::exit_reason::user_shutdown);
    for (const auto& [name, n] : resident_.counts())
      for (auto id : resident_.of_device(name))
        if (auto p = resident_.remove(id))
          send_exit(p->actor, caf::exit_reason::user_shutdown);
    for (auto& [d, idle] : spares_)
      for (auto& a : idle)
        send_exit(a, caf::exit_reason::user_shutdown);
    spares_.clear();
    for (auto& a : movers_.all())
      send_exit(a, caf::exit_reason::user_shutdown);
    movers_.clear();
    batcher_.clear();
    waiting_.clear();
    blocks_.clear();
    by_hash_.clear();
    index_ = nullptr;
  }

private:
  // -- locations --

  domain& domain_of(location loc) { return loc.on_disk() ? *home_ : *pool_domains_[loc.index()]; }

  // Where block `b`'s bytes are (or go) at `loc`: slot `slot` of a pool, or its file.
  detail::block_location place(location loc, slot_id slot, const block_rec& b) const {
    if (!loc.on_disk())
      return places_.in_memory(loc, slot);
    return places_.on_disk(disk_entry{b.hash, b.parent, b.tokens, b.checksum, {}});
  }

  // Takes a slot (or a disk place) at `loc`; places_.has_room(loc) must hold.
  detail::block_location take(location loc, const block_rec& b, slot_id& slot) {
    auto taken = places_.take(loc);
    if (!loc.on_disk())
      slot = taken;
    return place(loc, slot, b);
  }

  detail::block_location where_is(const block_rec& b) const { return place(b.loc, b.slot, b); }

  // The next tier down for block `b`, with room.
  std::optional<location> demote_target(const block_rec& b) const {
    return places_.demote_target(b.loc, b.indexed);
  }

  // -- pressure --

  // An actor for block `id` in `d`: an idle one from the domain's pool when there is one. A
  // reused actor learns its block from the message that fills it (block_init, or block_assign
  // once its domain's mover has copied the bytes in), so taking one costs no message of its
  // own.
  caf::actor take_actor(domain& d, block_id id, const detail::block_location& where) {
    auto& idle = spares_[&d];
    if (idle.empty()) {
      metrics_.actor_spawned();
      return detail::spawn_block_actor(d, id, where);
    }
    auto a = std::move(idle.back());
    idle.pop_back();
    return a;
  }

  // Returns a block's actor to its domain's pool (or ends it when the pool is full). An idle
  // actor is not told: nothing messages it until block_assign gives it a block again, and a
  // message per retirement into the block's old domain cost a wake-up of that domain's worker
  // for every block moved (a fifth of a cross-domain transfer's time here).
  void retire(domain& d, caf::actor a) {
    auto& idle = spares_[&d];
    if (idle.size() >= defaults::kvstore::idle_actors_per_domain) {
      send_exit(a, caf::exit_reason::user_shutdown);
      return;
    }
    idle.push_back(std::move(a));
  }

  // Blocks moving out of a location right now.
  std::size_t& leaving(location loc) { return leaving_[loc.entry()]; }

  // The eviction order of a location.
  eviction_policy& policy(location loc) { return *policies_[loc.entry()]; }

  bool evictable(const block_rec& b, clock_type::time_point now) const {
    return !b.busy && !b.leased && std::none_of(b.pins.begin(), b.pins.end(), [now](const auto& p) {
      return p.second > now;
    });
  }

  // Frees or starts freeing one place at `loc`: demote the least valuable block (per the
  // policy) when a lower tier has room, else drop an unreferenced one, else relieve the tier
  // below first. A host pool near a device whose home pool is full has the home pool make room
  // first, then moves its victim there (least recently used across both, not a home pool that
  // keeps the first blocks that ever overflowed).
  relief relieve(location loc) {
    auto now = clock_type::now();
    auto& order = policy(loc);
    auto movable = order.victim([&](block_id id) {
      auto& b = blocks_.at(id);
      return evictable(b, now) && demote_target(b).has_value();
    });
    if (movable) {
      demote(*movable, *demote_target(blocks_.at(*movable)), [](expected<void>) {});
      return relief::started;
    }
    if (const auto home = places_.first_host();
        !loc.on_disk() && !places_.is_device(loc) && loc != home &&
        places_.tier_of(home) == tier::host && !places_.has_room(home) &&
        order.victim([&](block_id id) { return evictable(blocks_.at(id), now); })) {
      switch (relieve(home)) {
      case relief::freed:
        return relieve(loc); // the home pool has room now: the victim moves there
      case relief::started:
        return relief::started; // room at home first; this pool's turn comes after
      case relief::none:
        break; // nothing leaves home: this pool drops its own
      }
    }
    auto droppable = order.victim([&](block_id id) {
      auto& b = blocks_.at(id);
      return evictable(b, now) && b.refs == 0;
    });
    if (droppable) {
      metrics_.evicted();
      drop(*droppable);
      return relief::freed;
    }
    if (places_.is_device(loc)) {
      for (std::size_t i = 0; i < places_.pool_count(); ++i) {
        auto host = location::of_pool(i);
        if (places_.tier_of(host) == tier::host && !places_.has_room(host) &&
            relieve(host) != relief::none)
          return relief::started; // room below first; this tier's turn comes after
      }
    } else if (!loc.on_disk() && places_.disk() && !places_.has_room(location::disk())) {
      if (relieve(location::disk()) != relief::none)
        return relief::started;
    }
    return relief::none;
  }

  // A host pool near a device that is full of blocks in use (pinned, leased, referenced): the
  // home pool takes what it cannot. True when `loc` became the home pool.
  bool home_instead(location& loc) const {
    const auto home = places_.first_host();
    if (loc.on_disk() || places_.is_device(loc) || loc == home ||
        places_.tier_of(home) != tier::host)
      return false;
    loc = home;
    return true;
  }

  room ensure_room(location loc) {
    for (;;) {
      if (places_.has_room(loc))
        return room::ready;
      if (leaving(loc) > 0)
        return room::wait; // a block already on its way out frees a place; do not move more
      auto r = relieve(loc);
      if (r == relief::freed)
        continue;
      if (r == relief::started || moves_in_flight_ > 0 || any_busy(loc))
        return room::wait; // a block still being filled or read may be evictable once idle
      return room::busy;
    }
  }

  // Whether a block at `loc` is busy; it becomes idle by itself, and then wakes the waiters.
  bool any_busy(location loc) const {
    for (const auto& [id, b] : blocks_)
      if (b.loc == loc && b.busy)
        return true;
    return false;
  }

  // Runs `step` now, and again whenever a move completes, until it reports done.
  // (A template: a step that is done at once, the common case, is never wrapped.)
  template<class Step>
  void run_waiting(Step step) {
    if (step())
      return;
    waiting_.emplace_back(std::move(step));
  }

  void wake_waiters() {
    if (waking_)
      return; // a step that finishes a block lands here again; the outer pass goes on
    waking_ = true;
    auto n = waiting_.size();
    for (std::size_t i = 0; i < n && !waiting_.empty(); ++i) {
      auto step = std::move(waiting_.front());
      waiting_.pop_front();
      if (!step())
        waiting_.push_back(std::move(step));
    }
    waking_ = false;
  }

  // -- block lifecycle --

  void when_idle(block_id id, std::function<void()> fn) {
    auto it = blocks_.find(id);
    if (it == blocks_.end() || !it->second.busy) {
      fn();
      return;
    }
    it->second.after.push_back(std::move(fn));
  }

  void set_idle(block_rec& b) {
    b.busy = false;
    auto after = std::move(b.after);
    b.after.clear();
    auto id = b.id;
    for (auto& fn : after) {
      // A callback may make the block busy again; the rest wait for that to end.
      auto it = blocks_.find(id);
      if (it != blocks_.end() && it->second.busy)
        it->second.after.push_back(std::move(fn));
      else
        fn();
    }
    wake_waiters(); // steps waiting for this block to be idle
  }

  // A new block at `loc`; `id` 0: a new id (else the id of a device page moving down).
  block_rec& create(location loc, block_hash parent, std::vector<token> tokens, bool full,
                    block_id id = 0) {
    if (id == 0)
      id = next_id_++;
    auto& b = blocks_[id];
    b.id = id;
    b.parent = parent;
    b.tokens = std::move(tokens);
    b.hash = chain_hash(parent, b.tokens);
    b.indexed = full;
    b.loc = loc;
    b.actor = take_actor(domain_of(loc), id, take(loc, b, b.slot));
    policy(loc).touched(id);
    return b;
  }

  void drop(block_id id) {
    auto it = blocks_.find(id);
    if (it == blocks_.end())
      return;
    auto& b = it->second;
    places_.give_back(b.loc, b.slot, b.hash);
    policy(b.loc).erased(id);
    if (b.indexed) {
      send(index_, kv_index_erase_atom::value, b.hash, id);
      auto h = by_hash_.find(b.hash);
      if (h != by_hash_.end() && h->second == id)
        by_hash_.erase(h);
    }
    retire(domain_of(b.loc), std::move(b.actor));
    auto after = std::move(b.after);
    blocks_.erase(it);
    for (auto& fn : after)
      fn(); // they find the block gone
    update_gauges();
  }

  void announce(const block_rec& b) {
    if (b.indexed)
      send(index_, kv_index_put_atom::value, b.hash, b.id,
           static_cast<std::uint8_t>(places_.tier_of(b.loc)));
  }

  // Copies a block to `dest` through a new actor there, checked on arrival; a failed check is
  // counted and the copy fetched again once; a second failure drops the block (its bytes are
  // not trusted: the caller recomputes). The block must exist and not be busy.
  void move(block_id id, location dest, std::function<void(expected<void>)> done, int attempt = 0) {
    auto& b = blocks_.at(id);
    if (!places_.has_room(dest)) {
      done(make_error(errc::busy, places_.name_of(dest) + " is full"));
      return;
    }
    slot_id slot = 0;
    auto where = take(dest, b, slot);
    auto actor = take_actor(domain_of(dest), id, where);
    b.busy = true;
    ++moves_in_flight_;
    auto from = b.loc;
    ++leaving(from);
    detail::move_order order{where_is(b), b.checksum, -1};
    order.flip_bit = next_fault(id);
    auto start = clock_type::now();
    auto finish = [this, id, dest, slot, actor, start, done = std::move(done), attempt,
                   from](detail::pull_result r) {
      --moves_in_flight_;
      --leaving(from);
      auto& b = blocks_.at(id);
      if (!r.ok) {
        metrics_.checksum_failed();
        places_.give_back(dest, slot, b.hash);
        retire(domain_of(dest), actor);
        b.busy = false;
        if (attempt == 0) {
          move(id, dest, done, 1); // fetch it again
        } else {
          metrics_.dropped_damaged();
          drop(id);
          done(make_error(errc::corrupted, r.reason + "; the block was dropped"));
        }
        wake_waiters();
        return;
      }
      auto from_tier = places_.tier_of(b.loc);
      metrics_.moved(from_tier, places_.tier_of(dest),
                     std::chrono::duration<double>(clock_type::now() - start).count());
      places_.give_back(b.loc, b.slot, b.hash);
      policy(b.loc).erased(id);
      retire(domain_of(b.loc), std::move(b.actor));
      b.loc = dest;
      b.slot = slot;
      b.actor = actor;
      policy(dest).touched(id);
      if (places_.tier_of(dest) != from_tier)
        announce(b); // the index keeps tiers, not pools
      update_gauges();
      done({});
      set_idle(b);
      wake_waiters();
    };
    queue_copy(actor, domain_of(dest), id, std::move(where), std::move(order), std::move(finish));
  }

  // -- move batching --

  // Fills block `id` at `where` (in domain `d`) from `order`'s source, has `actor` stand for
  // it (the mover tells it), then runs `finish` with the outcome. Copies wait for the end of this
  // turn (a high-priority message to itself), or until a batch's worth is queued for the
  // domain (detail::move_batcher), and go to its mover as one batch.
  void queue_copy(caf::actor actor, domain& d, block_id id, detail::block_location where,
                  detail::move_order order, std::function<void(detail::pull_result)> finish) {
    auto added = batcher_.add(
        &d, {std::move(actor), id, std::move(where), std::move(order), std::move(finish)});
    if (added.opened_turn) // the turn's end sends what is left and resets the batch sizes
      send<caf::message_priority::high>(this, kv_flush_atom::value);
    if (!added.batch.empty())
      send_batch(d, std::move(added.batch));
  }

  void flush_moves() {
    for (auto& [d, copies] : batcher_.end_turn())
      send_batch(*d, std::move(copies));
  }

  // Sends `copies` (all into domain `d`) to its mover as one batch.
  void send_batch(domain& d, std::vector<detail::pending_copy> copies) {
    auto batch = detail::make_move_batch(std::move(copies));
    auto finishes = std::make_shared<std::vector<std::function<void(detail::pull_result)>>>(
        std::move(batch.finishes));
    request(movers_.next(d), caf::infinite, detail::move_batch_atom::value, std::move(batch.items))
        .then(
            [finishes](detail::pull_outcomes& o) {
              for (std::size_t i = 0; i < finishes->size(); ++i)
                (*finishes)[i](i < o.results.size() ? std::move(o.results[i])
                                                    : detail::pull_result{false, "no outcome"});
            },
            [finishes](caf::error& e) {
              for (auto& finish : *finishes)
                finish({false, "the copy failed: " + to_string(e)});
            });
  }

  // Moves a block one tier down to `target` (a demote_target), counted as a demotion.
  void demote(block_id id, location target, std::function<void(expected<void>)> done) {
    metrics_.demoted();
    move(id, target, std::move(done));
  }

  // Moves a block into memory pool `dest`: directly, except device to device across domains
  // without peer access on both, which is staged through a host pool nearest the target.
  void bring(block_id id, location dest, std::function<void(expected<void>)> done) {
    auto it = blocks_.find(id);
    if (it == blocks_.end()) {
      done(make_error(errc::not_found, "unknown block"));
      return;
    }
    auto& b = it->second;
    if (b.loc == dest) {
      policy(dest).touched(id);
      done({});
      return;
    }
    bool promotion = places_.is_device(dest) && !places_.is_device(b.loc);
    bool direct = places_.direct(b.loc, dest);
    auto go = [this, id](location target, std::function<void(expected<void>)> next) {
      run_waiting([this, id, target, next = std::move(next)]() mutable {
        if (!blocks_.count(id)) {
          next(make_error(errc::not_found, "the block was dropped"));
          return true;
        }
        if (blocks_.at(id).busy)
          return false;
        switch (ensure_room(target)) {
        case room::ready:
          move(id, target, std::move(next));
          return true;
        case room::wait:
          return false;
        case room::busy:
          metrics_.refused_busy();
          next(make_error(errc::busy,
                          places_.name_of(target) + " is full of blocks in use or pinned"));
          return true;
        }
        return true;
      });
    };
    if (direct) {
      go(dest, [this, done, promotion](expected<void> r) {
        if (r && promotion) {
          metrics_.promoted();
        }
        done(std::move(r));
      });
      return;
    }
    auto stage = places_.staging_for(dest);
    if (!stage) {
      done(make_error(errc::unsupported, "no host pool to stage a device-to-device transfer"));
      return;
    }
    go(*stage, [this, dest, done, go](expected<void> r) {
      if (!r) {
        done(std::move(r));
        return;
      }
      go(dest, [done](expected<void> r2) { done(std::move(r2)); });
    });
  }

  // -- operations --

  // Refuses a new operation (`bad`: its answer) when too many wait for space already.
  template<class Reply>
  bool crowded(Reply& bad) {
    if (waiting_.size() < config_.max_waiting)
      return false;
    metrics_.refused_busy();
    bad.busy = true;
    bad.reason = "busy: " + std::to_string(waiting_.size()) + " operations wait for space";
    return true;
  }

  // Why a pool cannot take a block now.
  std::string full_reason(location loc) const {
    return "busy: pool '" + places_.name_of(loc) +
           "' is full of blocks in use or pinned, and no tier below has room";
  }

  caf::result<kv_reply> on_put(kv_put put) {
    // A device's evicted pages: the blocks that stood for them there end now, whatever becomes
    // of the put (the device no longer holds them), and lend their ids to the blocks made of
    // the copies.
    auto moving = std::make_shared<std::unordered_map<block_hash, block_id>>();
    if (!put.from_device.empty()) {
      block_hash h = put.parent;
      for (std::size_t at = 0; at + config_.block_tokens <= put.tokens.size();
           at += config_.block_tokens) {
        h = chain_hash(h, std::span<const token>{put.tokens}.subspan(at, config_.block_tokens));
        if (auto* p = resident_.find(put.from_device, h))
          (*moving)[h] = end_resident(p->id);
      }
    }
    kv_reply bad;
    auto found = places_.find(put.pool);
    if (!found) {
      bad.reason = "put: unknown pool '" + put.pool + "'; pools: " + places_.names();
      return bad;
    }
    location loc = *found;
    auto full = put.tokens.size() / config_.block_tokens;
    auto blocks = full + (put.tokens.size() % config_.block_tokens != 0 ? 1 : 0);
    if (put.payloads.size() != blocks) {
      bad.reason = "put: " + std::to_string(put.tokens.size()) + " tokens make " +
                   std::to_string(blocks) + " blocks of " + std::to_string(config_.block_tokens) +
                   ", but " + std::to_string(put.payloads.size()) + " payloads came";
      return bad;
    }
    for (std::size_t i = 0; i < blocks; ++i)
      if (put.payloads[i].size() != config_.block_bytes) {
        bad.reason = "put: payload " + std::to_string(i) + " has " +
                     std::to_string(put.payloads[i].size()) + " bytes; blocks have " +
                     std::to_string(config_.block_bytes);
        return bad;
      }
    if (crowded(bad))
      return bad;
    auto promise = make_response_promise<kv_reply>();
    auto state = std::make_shared<kv_put>(std::move(put));
    auto ids = std::make_shared<std::vector<block_id>>();
    auto parent = std::make_shared<block_hash>(state->parent);
    run_waiting([this, state, ids, parent, loc, blocks, promise, moving]() mutable {
      auto bt = config_.block_tokens;
      while (ids->size() < blocks) {
        auto i = ids->size();
        auto first = state->tokens.begin() + static_cast<std::ptrdiff_t>(i * bt);
        auto last = state->tokens.begin() +
                    static_cast<std::ptrdiff_t>(std::min(state->tokens.size(), (i + 1) * bt));
        std::vector<token> toks{first, last};
        bool is_full = toks.size() == bt;
        auto hash = chain_hash(*parent, toks);
        if (is_full) {
          auto h = by_hash_.find(hash);
          if (h != by_hash_.end()) {
            auto& b = blocks_.at(h->second);
            b.refs += state->hold ? 1 : 0;
            policy(b.loc).touched(b.id);
            metrics_.put_shared();
            ids->push_back(b.id);
            *parent = hash;
            continue;
          }
        }
        auto r = ensure_room(loc);
        if (r == room::wait)
          return false;
        if (r == room::busy && home_instead(loc))
          continue;
        if (r == room::busy) {
          metrics_.refused_busy();
          if (state->hold)
            for (auto id : *ids)
              release(id, false); // the new ones stay cached, unreferenced
          kv_reply busy;
          busy.busy = true;
          busy.reason = full_reason(loc);
          promise.deliver(std::move(busy));
          return true;
        }
        block_id reuse = 0;
        if (auto m = moving->find(hash); is_full && m != moving->end()) {
          reuse = m->second;
          metrics_.demoted(); // the device's page, a tier down under the same id
        }
        auto& b = create(loc, *parent, std::move(toks), is_full, reuse);
        b.refs = state->hold ? 1 : 0;
        b.busy = true;
        if (is_full) {
          by_hash_[b.hash] = b.id;
          announce(b); // lookups may find it now; reads wait until it is filled
        }
        auto id = b.id;
        request(b.actor, caf::infinite, detail::block_init_atom::value, id, where_is(b),
                std::move(state->payloads[i]))
            .then([this, id](std::uint64_t checksum) {
              auto it = blocks_.find(id);
              if (it == blocks_.end())
                return;
              it->second.checksum = checksum;
              set_idle(it->second);
            });
        ids->push_back(id);
        *parent = hash;
      }
      kv_reply ok;
      ok.ok = true;
      ok.ids = *ids;
      update_gauges();
      promise.deliver(std::move(ok));
      return true;
    });
    return promise;
  }

  // Leased blocks: created busy (nothing reads or moves them) and unindexed, with one
  // reference for the writer; their tokens, hashes and checksums come with the seal.
  caf::result<kv_lease> on_reserve(const std::string& pool, std::uint32_t count) {
    kv_lease bad;
    auto found = places_.find(pool);
    if (!found || places_.tier_of(*found) == tier::disk) {
      bad.reason = "reserve: unknown pool '" + pool + "'; pools: " + places_.names();
      return bad;
    }
    if (count == 0) {
      bad.reason = "reserve: 0 blocks; at least 1";
      return bad;
    }
    if (crowded(bad))
      return bad;
    location loc = *found;
    auto promise = make_response_promise<kv_lease>();
    auto lease = std::make_shared<kv_lease>();
    run_waiting([this, lease, loc, count, promise]() mutable {
      while (lease->ids.size() < count) {
        auto r = ensure_room(loc);
        if (r == room::wait)
          return false;
        if (r == room::busy && home_instead(loc))
          continue;
        if (r == room::busy) {
          metrics_.refused_busy();
          for (auto id : lease->ids)
            drop(id);
          kv_lease busy;
          busy.busy = true;
          busy.reason = full_reason(loc);
          promise.deliver(std::move(busy));
          return true;
        }
        // Not busy (a busy block makes others wait for it to become idle; a lease lasts as
        // long as its stream): leased, which keeps it from moves and eviction, and unindexed,
        // so nobody else can ask for it.
        auto& b = create(loc, root_hash, {}, false);
        b.refs = 1;
        b.leased = true;
        lease->ids.push_back(b.id);
        lease->memory.push_back(where_is(b).memory);
      }
      lease->ok = true;
      lease->flip_bit = next_fault(lease->ids.front());
      update_gauges();
      promise.deliver(std::move(*lease));
      return true;
    });
    return promise;
  }

  void on_seal(const std::vector<block_id>& ids, const std::vector<token>& tokens,
               const std::vector<std::uint64_t>& checksums) {
    const auto bt = config_.block_tokens;
    block_hash parent = root_hash;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      auto it = blocks_.find(ids[i]);
      if (it == blocks_.end())
        continue;
      auto& b = it->second;
      const auto at = i * bt;
      b.leased = false;
      if (i >= checksums.size() || at >= tokens.size()) { // not written: given back
        b.refs = 0;
        drop(b.id);
        continue;
      }
      b.parent = parent;
      b.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                      tokens.begin() +
                          static_cast<std::ptrdiff_t>(std::min(tokens.size(), at + bt)));
      b.hash = chain_hash(parent, b.tokens);
      b.checksum = checksums[i];
      parent = b.hash;
      // Full blocks are shared through the index, unless the store holds that page already.
      b.indexed = b.tokens.size() == bt && !by_hash_.count(b.hash);
      if (b.indexed) {
        by_hash_[b.hash] = b.id;
        announce(b);
      }
      if (b.refs > 0)
        --b.refs; // the writer's
      // The actor learns its block (a reused one knew another).
      caf::anon_send(b.actor, detail::block_assign_atom::value, b.id, where_is(b));
      if (!b.indexed && b.refs == 0) // a partial page or a copy: nobody can find it again
        drop(b.id);
    }
    update_gauges();
    wake_waiters(); // the places given back
  }

  kv_reply on_acquire(const std::vector<block_id>& ids) {
    kv_reply r;
    std::string missing;
    for (auto id : ids)
      if (!blocks_.count(id))
        missing += (missing.empty() ? "" : ", ") + not_here(id);
    if (!missing.empty()) {
      r.reason = "acquire: unknown blocks " + missing + "; nothing acquired";
      return r;
    }
    for (auto id : ids) {
      auto& b = blocks_.at(id);
      ++b.refs;
      policy(b.loc).touched(id);
    }
    r.ok = true;
    r.ids = ids;
    return r;
  }

  void release(block_id id, bool free_now) {
    auto it = blocks_.find(id);
    if (it == blocks_.end())
      return;
    auto& b = it->second;
    if (b.refs > 0)
      --b.refs;
    if (free_now && b.refs == 0)
      when_idle(id, [this, id] {
        auto again = blocks_.find(id);
        if (again != blocks_.end() && again->second.refs == 0)
          drop(id);
      });
  }

  kv_reply on_release(const std::vector<block_id>& ids, bool free_now) {
    kv_reply r = for_each_known(ids, [](block_rec&) {});
    for (auto id : ids)
      release(id, free_now);
    return r;
  }

  template<class F>
  kv_reply for_each_known(const std::vector<block_id>& ids, F fn) {
    kv_reply r;
    r.ok = true;
    std::string missing;
    for (auto id : ids) {
      auto it = blocks_.find(id);
      if (it == blocks_.end()) {
        missing += (missing.empty() ? "" : ", ") + not_here(id);
        continue;
      }
      fn(it->second);
    }
    if (!missing.empty()) {
      r.ok = false;
      r.reason = "unknown blocks " + missing;
    }
    r.ids = ids;
    return r;
  }

  kv_reply on_pin(const std::vector<block_id>& ids, std::uint32_t ttl_ms) {
    auto ttl = ttl_ms == 0 ? config_.pin_ttl : std::chrono::milliseconds{ttl_ms};
    auto deadline = clock_type::now() + ttl;
    const auto pin = ++next_pin_;
    auto r = for_each_known(ids, [&](block_rec& b) { b.pins.emplace_back(pin, deadline); });
    r.pin = pin;
    pins_due_.emplace(pin, pin_deadlines_.emplace(deadline, std::make_pair(pin, ids)));
    schedule_expiry();
    return r;
  }

  // Arms the expiry check for the first pin deadline (at least expiry_period ahead) unless one
  // is armed by then (within an expiry_period); the check armed before it is then stale.
  void schedule_expiry() {
    if (pin_deadlines_.empty())
      return;
    const auto first = pin_deadlines_.begin()->first;
    if (auto number = expiry_.arm(first))
      delayed_send(this,
                   std::max<clock_type::duration>(first - clock_type::now(), config_.expiry_period),
                   kv_expiry_atom::value, *number);
  }

  // Matches a block's entry of `pin` (its pins: pin, deadline).
  static auto is_pin(std::uint64_t pin) {
    return
        [pin](const std::pair<std::uint64_t, clock_type::time_point>& p) { return p.first == pin; };
  }

  // Ends `pin` on `ids`; once no block holds it, its deadline goes too (a pin ended on some
  // of its blocks keeps its deadline for the rest).
  kv_reply on_unpin(const std::vector<block_id>& ids, std::uint64_t pin) {
    const auto holds = [pin](const block_rec& b) {
      return std::any_of(b.pins.begin(), b.pins.end(), is_pin(pin));
    };
    auto r = for_each_known(ids, [pin](block_rec& b) { std::erase_if(b.pins, is_pin(pin)); });
    if (auto due = pins_due_.find(pin); due != pins_due_.end()) {
      const auto& held = due->second->second.second;
      if (std::none_of(held.begin(), held.end(), [&](block_id id) {
            auto it = blocks_.find(id);
            return it != blocks_.end() && holds(it->second);
          })) {
        pin_deadlines_.erase(due->second);
        pins_due_.erase(due);
        metrics_.pin_ended();
      }
    }
    return r;
  }

  // Ends the pins whose deadline passed, from the deadline index (an unpinned pin's entry
  // finds nothing left to end); a block whose last pin ended and that sits in a device's memory
  // goes down to host. Checks again at the next pin deadline while pins wait.
  void on_expiry() {
    const auto now = clock_type::now();
    std::vector<block_id> expired;
    while (!pin_deadlines_.empty() && pin_deadlines_.begin()->first <= now) {
      auto node = pin_deadlines_.extract(pin_deadlines_.begin());
      const auto& [pin, ids] = node.mapped();
      pins_due_.erase(pin);
      bool ended = false;
      for (auto id : ids) {
        auto it = blocks_.find(id);
        if (it == blocks_.end())
          continue;
        auto& b = it->second;
        if (std::erase_if(b.pins, is_pin(pin)) == 0)
          continue;
        ended = true;
        if (b.pins.empty() && places_.is_device(b.loc))
          expired.push_back(id);
      }
      if (ended)
        metrics_.pin_expired();
    }
    for (auto id : expired)
      when_idle(id, [this, id] {
        auto it = blocks_.find(id);
        if (it == blocks_.end())
          return;
        if (auto target = demote_target(it->second))
          demote(id, *target, [](expected<void>) {});
      });
    schedule_expiry();
  }

  // Runs `start(id, done)` for every block and answers once each has called its `done`.
  template<class Start>
  caf::result<kv_reply> for_each_block(const std::vector<block_id>& ids, Start start) {
    auto g = std::make_shared<gather>();
    g->promise = make_response_promise<kv_reply>();
    g->left = ids.size();
    g->reply.ok = true;
    g->reply.ids = ids;
    if (ids.empty())
      return g->reply;
    for (auto id : ids)
      start(id, [g, id](expected<void> r) { g->one(std::move(r), id); });
    return g->promise;
  }

  caf::result<kv_reply> on_demote(const std::vector<block_id>& ids) {
    return for_each_block(ids, [this](block_id id, std::function<void(expected<void>)> done) {
      when_idle(id, [this, id, done] {
        auto it = blocks_.find(id);
        if (it == blocks_.end()) {
          done(make_error(errc::not_found, "unknown block (evicted or freed)"));
          return;
        }
        if (it->second.loc.on_disk()) {
          done(make_error(errc::invalid_argument, "already on disk, the lowest tier"));
          return;
        }
        auto target = demote_target(it->second);
        if (!target) {
          metrics_.refused_busy();
          done(make_error(
              errc::busy,
              "no tier below has room" +
                  std::string{it->second.indexed ? "" : " (private blocks stay in memory)"}));
          return;
        }
        demote(id, *target, std::move(done));
      });
    });
  }

  caf::result<kv_reply> on_promote(const std::vector<block_id>& ids, const std::string& pool,
                                   bool device_only = true) {
    kv_reply bad;
    auto found = places_.find(pool);
    if (!found || (device_only && !places_.is_device(*found))) {
      bad.reason = device_only
                       ? "promote: '" + pool +
                             "' is not a device pool; device pools: " + places_.names(tier::device)
                       : "transfer: unknown pool '" + pool + "'; pools: " + places_.names();
      return bad;
    }
    const location dest = *found;
    return for_each_block(ids, [this, dest](block_id id, std::function<void(expected<void>)> done) {
      bring(id, dest, std::move(done));
    });
  }

  // The bit a transfer of block `id` damages (kv_fault_atom), or -1 once no fault is due.
  std::int64_t next_fault(block_id id) {
    if (faults_ == 0)
      return -1;
    --faults_;
    return static_cast<std::int64_t>((id * 7919 + 13) % (config_.block_bytes * 8));
  }

  caf::result<kv_bytes> on_read(block_id id) {
    if (resident_.find(id) != nullptr)
      return read_resident(id);
    if (!blocks_.count(id)) {
      kv_bytes r;
      r.reason = "read: unknown block " + std::to_string(id) + " (evicted or freed)";
      return r;
    }
    auto promise = make_response_promise<kv_bytes>();
    when_idle(id, [this, id, promise]() mutable {
      auto it = blocks_.find(id);
      if (it == blocks_.end()) {
        kv_bytes r;
        r.reason = "read: block " + std::to_string(id) + " was dropped";
        promise.deliver(std::move(r));
        return;
      }
      policy(it->second.loc).touched(id);
      request(it->second.actor, caf::infinite, detail::block_read_atom::value, it->second.checksum,
              next_fault(id))
          .then([this, id, promise](kv_bytes& r) mutable {
            if (!r.ok) {
              metrics_.checksum_failed();
              metrics_.dropped_damaged();
              drop(id);
              r.reason += "; the block was dropped: recompute it";
            }
            promise.deliver(std::move(r));
          });
    });
    return promise;
  }

  caf::result<kv_reply> on_write(block_id id, std::uint64_t offset,
                                 std::vector<std::uint8_t> bytes) {
    kv_reply r;
    auto it = blocks_.find(id);
    if (it == blocks_.end()) {
      r.reason = "write: unknown block " + std::to_string(id);
      return r;
    }
    auto& b = it->second;
    if (b.indexed || b.refs > 1) {
      r.reason = "write: block " + std::to_string(id) + " is shared (" + std::to_string(b.refs) +
                 " references" + (b.indexed ? ", content-addressed" : "") +
                 "); copy it first (kv_cow)";
      return r;
    }
    if (offset > config_.block_bytes || bytes.size() > config_.block_bytes - offset) {
      r.reason = "write: " + std::to_string(bytes.size()) + " bytes at offset " +
                 std::to_string(offset) + " pass the block's " +
                 std::to_string(config_.block_bytes) + " bytes";
      return r;
    }
    auto promise = make_response_promise<kv_reply>();
    when_idle(id, [this, id, offset, bytes = std::move(bytes), promise]() mutable {
      auto it = blocks_.find(id);
      if (it == blocks_.end()) {
        kv_reply gone;
        gone.reason = "write: block " + std::to_string(id) + " was dropped";
        promise.deliver(std::move(gone));
        return;
      }
      if (it->second.loc.on_disk()) {
        kv_reply no;
        no.reason = "write: block " + std::to_string(id) + " is on disk; promote it first";
        promise.deliver(std::move(no));
        return;
      }
      it->second.busy = true;
      request(it->second.actor, caf::infinite, detail::block_write_atom::value, offset,
              std::move(bytes))
          .then([this, id, promise](std::uint64_t checksum) mutable {
            kv_reply ok;
            auto it = blocks_.find(id);
            if (it != blocks_.end()) {
              it->second.checksum = checksum;
              ok.ok = true;
              ok.ids = {id};
              set_idle(it->second);
            }
            promise.deliver(std::move(ok));
          });
    });
    return promise;
  }

  caf::result<kv_reply> on_cow(block_id id) {
    kv_reply r;
    auto it = blocks_.find(id);
    if (it == blocks_.end()) {
      r.reason = "cow: unknown block " + std::to_string(id);
      return r;
    }
    if (!it->second.indexed && it->second.refs <= 1) {
      r.ok = true;
      r.ids = {id};
      return r;
    }
    auto promise = make_response_promise<kv_reply>();
    run_waiting([this, id, promise]() mutable {
      auto it = blocks_.find(id);
      if (it == blocks_.end()) {
        kv_reply gone;
        gone.reason = "cow: block " + std::to_string(id) + " was dropped";
        promise.deliver(std::move(gone));
        return true;
      }
      if (it->second.busy)
        return false;
      location loc = it->second.loc;
      if (loc.on_disk())
        loc = places_.first_host();
      switch (ensure_room(loc)) {
      case room::wait:
        return false;
      case room::busy: {
        metrics_.refused_busy();
        kv_reply busy;
        busy.busy = true;
        busy.reason = "busy: no room in '" + places_.name_of(loc) + "' for a copy";
        promise.deliver(std::move(busy));
        return true;
      }
      case room::ready:
        break;
      }
      auto& src = blocks_.at(id);
      auto& copy = create(loc, src.parent, src.tokens, false);
      copy.refs = 1;
      copy.checksum = src.checksum;
      copy.busy = true;
      src.busy = true;
      ++moves_in_flight_;
      auto copy_id = copy.id;
      detail::move_order order{where_is(src), src.checksum, -1};
      queue_copy(copy.actor, domain_of(loc), copy_id, where_is(copy), std::move(order),
                 [this, id, copy_id, promise](detail::pull_result r) mutable {
                   --moves_in_flight_;
                   kv_reply out;
                   if (auto s = blocks_.find(id); s != blocks_.end()) {
                     if (r.ok && s->second.refs > 0)
                       --s->second.refs; // the caller's reference moves to the copy
                     set_idle(s->second);
                   }
                   auto c = blocks_.find(copy_id);
                   if (!r.ok) {
                     metrics_.checksum_failed();
                     drop(copy_id);
                     out.reason = "cow: " + r.reason;
                   } else if (c != blocks_.end()) {
                     out.ok = true;
                     out.ids = {copy_id};
                     set_idle(c->second);
                   }
                   update_gauges();
                   promise.deliver(std::move(out));
                   wake_waiters();
                 });
      return true;
    });
    return promise;
  }

  // -- pages in the devices' own memory --

  void on_device_join(const std::string& name, const caf::actor& device) {
    on_device_leave(name); // a device of the same name before it: its pages are gone
    auto d = domains_->find("device:" + name);
    resident_.join(name, {device.address(), d ? *d : home_});
  }

  // Each page a device's prefix cache now holds is a block of the device tier, with its actor
  // in the device's domain; its bytes stay in the device's memory.
  void on_resident(const std::string& device, std::vector<kv_page>& added,
                   const std::vector<block_hash>& gone) {
    const auto* dev = resident_.find_device(device);
    if (dev == nullptr)
      return; // it left (or never joined): nothing to stand for
    const auto now = clock_type::now();
    for (auto& p : added) {
      if (auto* known = resident_.find(device, p.hash)) {
        known->last_use = now;
        continue;
      }
      detail::resident_pages::page rec;
      rec.id = next_id_++;
      rec.hash = p.hash;
      rec.parent = p.parent;
      rec.tokens = std::move(p.tokens);
      rec.device = device;
      rec.last_use = now;
      detail::block_location where;
      where.kind = tier::device;
      where.size = config_.block_bytes;
      where.owner = dev->owner;
      rec.actor = take_actor(*dev->home, rec.id, where);
      caf::anon_send(rec.actor, detail::block_assign_atom::value, rec.id, std::move(where));
      resident_.add(std::move(rec));
    }
    if (!added.empty())
      metrics_.device_pages(device, resident_.count(device));
    for (auto h : gone)
      if (auto* p = resident_.find(device, h))
        end_resident(p->id);
  }

  void on_device_leave(const std::string& name) {
    const auto* dev = resident_.find_device(name);
    if (dev == nullptr)
      return;
    for (auto id : resident_.of_device(name))
      end_resident(id);
    resident_.leave(name);
  }

  kv_prefix on_device(const std::string& device, const std::vector<token>& tokens) {
    kv_prefix out;
    for (auto h : chain_hashes(tokens, config_.block_tokens)) {
      auto* p = resident_.find(device, h);
      if (p == nullptr)
        break;
      out.ids.push_back(p->id);
      out.tiers.emplace_back(to_string(tier::device));
      out.tokens += config_.block_tokens;
    }
    return out;
  }

  // Ends the block of a device page; returns its id (0: unknown).
  block_id end_resident(block_id id) {
    auto p = resident_.remove(id);
    if (!p)
      return 0;
    const auto* dev = resident_.find_device(p->device);
    retire(dev != nullptr ? *dev->home : *home_, std::move(p->actor));
    metrics_.device_pages(p->device, resident_.count(p->device));
    return id;
  }

  // A block standing for a device page, read: the device lends the page (its driver copies it
  // out between steps), checked against the checksum of its first lending.
  caf::result<kv_bytes> read_resident(block_id id) {
    auto* p = resident_.find(id);
    auto chain = resident_.chain_of(id);
    if (!chain) {
      kv_bytes r;
      r.reason = "read: block " + std::to_string(id) + " is a page of device " + p->device +
                 ", whose earlier pages it no longer holds";
      return r;
    }
    p->last_use = clock_type::now();
    auto promise = make_response_promise<kv_bytes>();
    request(p->actor, caf::infinite, detail::block_lend_atom::value, std::move(chain->first),
            chain->second, p->checksum)
        .then(
            [this, id, promise](kv_bytes& r) mutable {
              if (r.ok) {
                metrics_.lent();
                if (auto* again = resident_.find(id); again != nullptr && again->checksum == 0)
                  again->checksum = r.checksum;
              } else if (r.gone) {
                end_resident(id); // the device let it go unreported (a publish that found none)
              }
              promise.deliver(std::move(r));
            },
            [id, promise](caf::error& e) mutable {
              kv_bytes r;
              r.reason = "read: block " + std::to_string(id) +
                         " (a device page): its actor did not answer: " + caf::to_string(e);
              promise.deliver(std::move(r));
            });
    return promise;
  }

  // Why block `id` takes no operation but reads: unknown, or a page in a device's memory.
  std::string not_here(block_id id) {
    if (auto* p = resident_.find(id))
      return std::to_string(id) + " (a page in device " + p->device +
             "'s memory: only kv_read serves it)";
    return std::to_string(id) + " (evicted or freed)";
  }

  // -- start-up, stats --

  // Indexes the blocks found on disk (content-addressed: the same prefix finds them again).
  void recover_disk() {
    if (places_.disk() == nullptr)
      return;
    for (const auto& e : places_.disk()->recovered()) {
      auto id = next_id_++;
      auto& b = blocks_[id];
      b.id = id;
      b.hash = e.hash;
      b.parent = e.parent;
      b.tokens = e.tokens;
      b.indexed = true;
      b.loc = location::disk();
      b.checksum = e.checksum;
      places_.take(location::disk());
      b.actor = take_actor(*home_, id, where_is(b));
      // Filled already. (Sent anonymously: a typed actor sends only to typed ones.)
      caf::anon_send(b.actor, detail::block_assign_atom::value, id, where_is(b));
      by_hash_[b.hash] = id;
      policy(location::disk()).touched(id);
      announce(b);
    }
    update_gauges();
  }

  kv_store_stats stats() const {
    kv_store_stats s;
    s.pools = places_.pool_stats();
    s.blocks = blocks_.size();
    metrics_.fill(s);
    s.disk_damaged_on_open = places_.disk() ? places_.disk()->damaged_on_open() : 0;
    s.device_pages = resident_.counts();
    return s;
  }

  void update_gauges() {
    if (!metrics_.exported())
      return;
    metrics_.held(places_.blocks_by_tier());
  }

  domain_set* domains_;
  domain* home_;
  kv_store_config config_;
  detail::locations places_;
  kv_index_actor index_;
  detail::store_metrics metrics_;     // after config_, which it is made from
  std::vector<domain*> pool_domains_; // by pool: the domain of its memory (else home_)
  std::vector<std::unique_ptr<eviction_policy>> policies_; // by location::entry()
  std::unordered_map<block_id, block_rec> blocks_;
  std::unordered_map<block_hash, block_id> by_hash_;
  detail::resident_pages resident_; // blocks of the pages in the devices' own memory
  std::deque<std::function<bool()>> waiting_;
  block_id next_id_ = 1;
  std::size_t moves_in_flight_ = 0;
  std::vector<std::size_t> leaving_;                  // by location::entry()
  std::map<domain*, std::vector<caf::actor>> spares_; // idle block actors by domain
  std::uint32_t faults_ = 0;
  deadline_alarm expiry_{config_.expiry_period}; // the armed expiry check
  std::uint64_t next_pin_ = 0; // the last pin given (kv_pin)
  // Each pin's deadline, with the pin and its blocks: an expiry check reads the pins due, not
  // every block (a code-agent run holds hundreds of thousands).
  std::multimap<clock_type::time_point, std::pair<std::uint64_t, std::vector<block_id>>>
      pin_deadlines_;
  // Each pin's entry in pin_deadlines_, so an unpin drops it.
  std::unordered_map<std::uint64_t, decltype(pin_deadlines_)::iterator> pins_due_;
  bool waking_ = false;
  detail::mover_pool movers_;                                   // by domain
  detail::move_batcher<domain*, detail::pending_copy> batcher_; // copies of this turn
};

} // namespace

expected<kv_store> spawn_kv_store(domain_set& domains, domain& home, kv_store_config config) {
  if (config.block_tokens == 0)
    return make_error(errc::invalid_argument, "kv store: block_tokens is 0; allowed: 1 or more");
  if (config.block_bytes == 0)
    return make_error(errc::invalid_argument, "kv store: block_bytes is 0; allowed: 1 or more");
  if (config.pools.empty())
    return make_error(errc::invalid_argument, "kv store: no pools; give at least one");
  std::vector<std::unique_ptr<memory_pool>> pools;
  for (const auto& p : config.pools) {
    for (auto& q : pools)
      if (q->name() == p.name)
        return make_error(errc::invalid_argument, "kv store: pool name '" + p.name + "' twice");
    if (auto d = domains.find(p.domain); !d)
      return make_error(errc::invalid_argument,
                        "kv store: pool '" + p.name + "': " + d.error().message);
    auto pool = memory_pool::create(p.name, p.kind, p.domain, config.block_bytes, p.capacity_bytes,
                                    config.topo);
    if (!pool)
      return pool.error();
    pools.push_back(std::move(*pool));
  }
  std::unique_ptr<disk_pool> disk;
  if (!config.disk_dir.empty()) {
    auto d = disk_pool::open(config.disk_dir, config.block_tokens, config.block_bytes,
                             config.disk_capacity_bytes, config.model);
    if (!d)
      return d.error();
    disk = std::move(*d);
  }
  std::vector<bool> peer_access;
  for (const auto& p : config.pools)
    peer_access.push_back(p.peer_access);
  detail::locations places{std::move(pools), std::move(peer_access), std::move(disk),
                           config.block_bytes};
  auto directory = std::make_shared<kv_directory>();
  auto index = detail::spawn_index_actor(home, config.block_tokens, config.metrics, directory);
  auto store =
      home.spawn<store_actor>(&domains, &home, std::move(config), std::move(places), index);
  return kv_store{store, index, std::move(directory)};
}

} // namespace triad
