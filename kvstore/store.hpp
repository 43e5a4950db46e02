#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "kvstore/block.hpp"
#include "kvstore/defaults.hpp"
#include "kvstore/directory.hpp"
#include "kvstore/eviction.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"

namespace triad {

/// Stores a sequence's blocks: `(kv_put_atom, kv_put)` -> kv_reply with one id per block, each
/// holding one reference for the caller. Full blocks are content-addressed: a block already
/// stored is shared, not copied.
using kv_put_atom = caf::atom_constant<caf::atom("kvput")>;
/// Adds a reference to each block (a new sequence reusing a prefix): `(.., ids)` -> kv_reply.
using kv_acquire_atom = caf::atom_constant<caf::atom("kvacquire")>;
/// Drops one reference of each block; unreferenced blocks stay cached until evicted:
/// `(.., ids)` -> kv_reply.
using kv_release_atom = caf::atom_constant<caf::atom("kvrelease")>;
/// Drops one reference of each block and frees those left unreferenced at once:
/// `(.., ids)` -> kv_reply.
using kv_free_atom = caf::atom_constant<caf::atom("kvfree")>;
/// Pins blocks for a tool call: `(.., ids, std::uint32_t ttl_ms)` (0: the store's default) ->
/// kv_reply whose `pin` names the pin. Not evicted or demoted before the deadline; at expiry
/// device blocks go to host. A block pinned by two callers holds each pin until its own
/// deadline or unpin.
using kv_pin_atom = caf::atom_constant<caf::atom("kvpin")>;
/// Ends a pin early: `(.., ids, std::uint64_t pin)` -> kv_reply; the blocks' other pins stay,
/// and a pin that already expired ends nothing.
using kv_unpin_atom = caf::atom_constant<caf::atom("kvunpin")>;
/// Moves blocks one tier down (device -> host -> disk): `(.., ids)` -> kv_reply.
using kv_demote_atom = caf::atom_constant<caf::atom("kvdemote")>;
/// Moves blocks into a device pool, from wherever they are (the prefetch when a tool returns):
/// `(.., ids, std::string pool)` -> kv_reply.
using kv_promote_atom = caf::atom_constant<caf::atom("kvpromote")>;
/// Moves blocks into any memory pool, device or host (host to host across domains, say):
/// `(.., ids, std::string pool)` -> kv_reply. Device to device across domains goes directly
/// when both pools have peer access, else staged through a host pool nearest the target.
using kv_transfer_atom = caf::atom_constant<caf::atom("kvxfer")>;
/// Reads one block's bytes, checked: `(.., block_id)` -> kv_bytes.
using kv_read_atom = caf::atom_constant<caf::atom("kvread")>;
/// Writes into a private block: `(.., block_id, std::uint64_t offset, std::vector<std::uint8_t>)`
/// -> kv_reply; refused for shared or content-addressed blocks (copy them first).
using kv_write_atom = caf::atom_constant<caf::atom("kvwrite")>;
/// Copy-on-write: `(.., block_id)` -> kv_reply with the id to write to: the block itself when the
/// caller holds its only reference and it is private, else a private copy that takes over the
/// caller's reference.
using kv_cow_atom = caf::atom_constant<caf::atom("kvcow")>;
/// Longest cached prefix of a token sequence, asked of the prefix index:
/// `(.., std::vector<token>)` -> kv_prefix.
using kv_lookup_atom = caf::atom_constant<caf::atom("kvlookup")>;
/// The blocks of a run of a chain, asked of the prefix index: `(.., std::vector<block_hash>)`
/// -> kv_prefix with the ids (and tiers) of those blocks in order, up to the first it lacks
/// (`tokens`: the tokens they cover). A device that holds a prompt's first pages asks for the
/// ones after them.
using kv_find_atom = caf::atom_constant<caf::atom("kvfind")>;
/// A kv_store_stats snapshot: `(kv_stats_atom)`; asked of the prefix index, its hit counts.
using kv_stats_atom = caf::atom_constant<caf::atom("kvstats")>;
/// Leases blocks to be written in place by their caller (a device's driver streaming a
/// sequence's KV to another device, kv_stream): `(.., std::string pool, std::uint32_t count)`
/// -> kv_lease. The blocks are the caller's (one reference each), unreadable and unindexed
/// until kv_seal_atom.
using kv_reserve_atom = caf::atom_constant<caf::atom("kvreserve")>;
/// Ends a lease: `(.., std::vector<block_id> ids, std::vector<token> tokens,
/// std::vector<std::uint64_t> checksums)`, one checksum per block the tokens fill (from the
/// first). With them the blocks hold those tokens' KV: full blocks are content-addressed and
/// indexed (unless the store holds the same already), all stay cached, unreferenced. Blocks
/// without a checksum (all, when `checksums` is empty: the writer did not finish) are freed.
using kv_seal_atom = caf::atom_constant<caf::atom("kvseal")>;
/// A device whose prefix cache's pages the store keeps blocks for: `(kv_device_join_atom,
/// std::string name, caf::actor device)`; the device lends their bytes (kv_share_atom). Its
/// block actors live in its domain ("device:<name>").
using kv_device_join_atom = caf::atom_constant<caf::atom("kvdjoin")>;
/// A device's prefix cache changed: `(kv_resident_atom, std::string device,
/// std::vector<kv_page> added, std::vector<block_hash> gone)`: each added page (identity only,
/// no bytes) becomes a block of the device tier with its actor, whose bytes stay in the
/// device's memory (kv_read asks the device to lend them, checked); gone ones (freed without a
/// copy) end. Pages evicted with a copy end through kv_put's `from_device` instead.
using kv_resident_atom = caf::atom_constant<caf::atom("kvresid")>;
/// The blocks that stand for a device's pages along a prompt's page chain: `(kv_on_device_atom,
/// std::string device, std::vector<token> tokens)` -> kv_prefix (tiers "device"), from the first
/// page up to the first the device does not hold.
using kv_on_device_atom = caf::atom_constant<caf::atom("kvondev")>;
/// A device stopped: `(kv_device_leave_atom, std::string name, caf::actor_addr device)`; the
/// blocks of its pages end (unless another device of that name joined since).
using kv_device_leave_atom = caf::atom_constant<caf::atom("kvdleave")>;
/// Fault injection for tests and drills: `(.., std::uint32_t n)` flips one bit in each of the
/// next n transfers (moves between tiers and reads), after the copy and before its check.
using kv_fault_atom = caf::atom_constant<caf::atom("kvfault")>;

/// One memory pool of the store.
struct kv_pool_config {
  std::string name;                 ///< a device's name, or e.g. "host0"; unique in the store
  tier kind = tier::host;           ///< device or host
  unsigned domain = 0;              ///< NUMA domain of its memory (a device's: from the plan)
  std::uint64_t capacity_bytes = 0; ///< budget; whole blocks only
  /// Device pools: copies to other device pools with peer_access go directly; otherwise a
  /// device-to-device transfer is staged through host memory nearest the target.
  bool peer_access = false;
};

/// Everything a store needs; every option documented where declared.
struct kv_store_config {
  std::size_t block_tokens = defaults::kvstore::block_tokens; ///< tokens per block, >= 1
  std::size_t block_bytes = 0;           ///< payload bytes of one block (all layers' K and V)
  /// Device and host pools; at least one. The first host pool is the home one (the
  /// orchestration domain's): a block leaving another host pool under pressure goes there,
  /// then to the disk.
  std::vector<kv_pool_config> pools;
  std::filesystem::path disk_dir;        ///< directory of the disk tier; empty: no disk tier
  std::uint64_t disk_capacity_bytes = 0; ///< bound of the disk tier
  /// The served model's fingerprint (model_source::fingerprint): the disk tier's files carry it,
  /// and files of another model found at start are rejected, never read.
  std::uint64_t model = 0;
  std::chrono::milliseconds pin_ttl = defaults::kvstore::pin_ttl;             ///< default TTL
  /// Pin checks: at the first pin deadline, at least this far apart (a pin expires within it).
  std::chrono::milliseconds expiry_period = defaults::kvstore::expiry_period;
  std::size_t max_waiting = defaults::kvstore::max_waiting; ///< operations waiting for space
  eviction_policy_factory policy;                           ///< one policy per pool; empty: LRU
  const topology* topo = nullptr;      ///< binds pool memory when it is this machine
  metrics_registry* metrics = nullptr; ///< where triad_kv_* metrics go (optional)
};

/// Blocks to store: the tokens of a sequence from position 0 (or from the block whose chain
/// hash is `parent`) and one payload per block (every block full but the last, which may be
/// partial and is then private to the caller).
struct kv_put {
  std::string pool;                                ///< the pool to store new blocks in
  std::vector<token> tokens;                       ///< tokens the blocks cover, in order
  std::vector<std::vector<std::uint8_t>> payloads; ///< block_bytes each
  /// The chain hash the first block continues: root_hash for a sequence's start, a page's
  /// parent for a page that a device evicted.
  block_hash parent = root_hash;
  /// True: the caller holds one reference of each block (released later). False: the blocks
  /// are kept unreferenced, cached until pressure evicts them (a device's evicted pages).
  bool hold = true;
  /// A device's evicted pages (kv_resident_atom named it): the blocks that stood for them in
  /// its memory move a tier down, keeping their ids. Empty: none.
  std::string from_device = {};
};

/// Inspector of kv_put.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_put& x) {
  return f(caf::meta::type_name("kv_put"), x.pool, x.tokens, x.payloads, x.parent, x.hold,
           x.from_device);
}

/// The answer to a store operation.
struct kv_reply {
  bool ok = false;           ///< it happened, for every block
  bool busy = false;         ///< refused for lack of space; retry later
  std::string reason;        ///< why not
  std::vector<block_id> ids; ///< the blocks concerned (put, cow: the ids to use)
  std::uint64_t pin = 0;     ///< kv_pin: the pin, to end it with kv_unpin
};

/// Inspector of kv_reply.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_reply& x) {
  return f(caf::meta::type_name("kv_reply"), x.ok, x.busy, x.reason, x.ids, x.pin);
}

/// A block's bytes, as read.
struct kv_bytes {
  bool ok = false;                 ///< read and checked
  std::string reason;              ///< why not (a damaged block is dropped: recompute it)
  std::vector<std::uint8_t> bytes; ///< block_bytes
  std::uint64_t checksum = 0;      ///< block_checksum of `bytes` (0: not given)
  bool gone = false;               ///< the block no longer exists (a page its device let go)
};

/// Inspector of kv_bytes.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_bytes& x) {
  return f(caf::meta::type_name("kv_bytes"), x.ok, x.reason, x.bytes, x.checksum, x.gone);
}

/// Blocks leased for writing in place (kv_reserve_atom): their ids and memory. In this process
/// only (the memory is the store's).
struct kv_lease {
  bool ok = false;                          ///< leased
  bool busy = false;                        ///< refused for lack of space; retry later
  std::string reason;                       ///< why not
  std::vector<block_id> ids;                ///< the blocks, in order
  std::vector<std::span<std::byte>> memory; ///< each block's bytes, block_bytes long
  /// Fault injection (kv_fault_atom): >= 0, a bit the writer damages after its check.
  std::int64_t flip_bit = -1;
};

/// The longest cached prefix of a token sequence.
struct kv_prefix {
  std::uint64_t tokens = 0;       ///< tokens covered (a multiple of the block size)
  std::vector<block_id> ids;      ///< its blocks, in order
  std::vector<std::string> tiers; ///< each block's tier, as to_string(tier)
};

/// Inspector of kv_prefix.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_prefix& x) {
  return f(caf::meta::type_name("kv_prefix"), x.tokens, x.ids, x.tiers);
}

/// One pool's usage.
struct kv_pool_stats {
  std::string name;           ///< the pool
  std::string kind;           ///< "device", "host" or "disk"
  std::uint64_t blocks = 0;   ///< blocks held
  std::uint64_t capacity = 0; ///< blocks it can hold
};

/// Inspector of kv_pool_stats.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_pool_stats& x) {
  return f(caf::meta::type_name("kv_pool_stats"), x.name, x.kind, x.blocks, x.capacity);
}

/// A snapshot of the store's counters.
struct kv_store_stats {
  std::vector<kv_pool_stats> pools;       ///< every pool, disk last
  std::uint64_t blocks = 0;               ///< blocks known
  std::uint64_t puts_shared = 0;          ///< put blocks found already stored (shared, not copied)
  std::uint64_t bytes_moved = 0;          ///< bytes copied between tiers and pools
  std::uint64_t transfers = 0;            ///< block moves completed
  std::uint64_t demotions = 0;            ///< blocks moved a tier down
  std::uint64_t promotions = 0;           ///< blocks moved into a device pool
  std::uint64_t evictions = 0;            ///< blocks dropped for space
  std::uint64_t pin_expiries = 0;         ///< pins that reached their deadline
  std::uint64_t pins_ended = 0;           ///< pins their holder ended before their deadline
  std::uint64_t checksum_failures = 0;    ///< copies or reads that failed their check
  std::uint64_t dropped_damaged = 0;      ///< blocks dropped because their bytes were damaged
  std::uint64_t disk_damaged_on_open = 0; ///< block files rejected when the store started
  std::uint64_t busy = 0;                 ///< operations refused for lack of space
  std::uint64_t actors_spawned = 0;       ///< block actors spawned (idle ones are reused first)
  /// Blocks standing for pages in the devices' own memory (their prefix caches), by device.
  std::vector<std::pair<std::string, std::uint64_t>> device_pages;
  std::uint64_t lent = 0; ///< reads of such blocks a device answered with its page, checked
};

/// Inspector of kv_store_stats.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_store_stats& x) {
  return f(caf::meta::type_name("kv_store_stats"), x.pools, x.blocks, x.puts_shared, x.bytes_moved,
           x.transfers, x.demotions, x.promotions, x.evictions, x.pin_expiries, x.pins_ended,
           x.checksum_failures, x.dropped_damaged, x.disk_damaged_on_open, x.busy, x.actors_spawned,
           x.device_pages, x.lent);
}

/// The store's own, to its prefix index: records where a content-addressed block is:
/// `(kv_index_put_atom, block_hash, block_id, std::uint8_t tier)` (a `tier` value); a later put
/// of the same hash replaces it.
using kv_index_put_atom = caf::atom_constant<caf::atom("iput")>;
/// The store's own, to its prefix index: forgets a block: `(kv_index_erase_atom, block_hash,
/// block_id)` (ignored when the hash now names another block).
using kv_index_erase_atom = caf::atom_constant<caf::atom("ierase")>;
/// The store's own timer: checks pins for expiry at the first pin deadline:
/// `(kv_expiry_atom, number)`; only the latest armed check acts.
using kv_expiry_atom = caf::atom_constant<caf::atom("kvexpiry")>;
/// The store's own, at the end of a turn: sends the copies queued in it to the movers, one
/// batch per destination domain: `(kv_flush_atom)`.
using kv_flush_atom = caf::atom_constant<caf::atom("kvflush")>;

/// The typed interface of a store's prefix index: kv_lookup_atom -> kv_prefix; kv_stats_atom
/// -> std::vector<std::uint64_t>{device hits, host hits, disk hits, misses} (each full block of
/// a lookup's query counts once); the last two are the store's own.
using kv_index_actor =
    caf::typed_actor<caf::replies_to<kv_lookup_atom, std::vector<token>>::with<kv_prefix>,
                     caf::replies_to<kv_find_atom, std::vector<block_hash>>::with<kv_prefix>,
                     caf::replies_to<kv_stats_atom>::with<std::vector<std::uint64_t>>,
                     caf::reacts_to<kv_index_put_atom, block_hash, block_id, std::uint8_t>,
                     caf::reacts_to<kv_index_erase_atom, block_hash, block_id>>;

/// The typed interface of the store: a message it does not take is a compile error at the
/// sender. Each kv_*_atom above documents its message and reply (kv_lookup_atom is passed on to
/// the index, which answers); the last two are its own.
using kv_store_actor = caf::typed_actor<
    caf::replies_to<kv_put_atom, kv_put>::with<kv_reply>,
    caf::replies_to<kv_acquire_atom, std::vector<block_id>>::with<kv_reply>,
    caf::replies_to<kv_release_atom, std::vector<block_id>>::with<kv_reply>,
    caf::replies_to<kv_free_atom, std::vector<block_id>>::with<kv_reply>,
    caf::replies_to<kv_pin_atom, std::vector<block_id>, std::uint32_t>::with<kv_reply>,
    caf::replies_to<kv_unpin_atom, std::vector<block_id>, std::uint64_t>::with<kv_reply>,
    caf::replies_to<kv_demote_atom, std::vector<block_id>>::with<kv_reply>,
    caf::replies_to<kv_promote_atom, std::vector<block_id>, std::string>::with<kv_reply>,
    caf::replies_to<kv_transfer_atom, std::vector<block_id>, std::string>::with<kv_reply>,
    caf::replies_to<kv_read_atom, block_id>::with<kv_bytes>,
    caf::replies_to<kv_reserve_atom, std::string, std::uint32_t>::with<kv_lease>,
    caf::reacts_to<kv_seal_atom, std::vector<block_id>, std::vector<token>,
                   std::vector<std::uint64_t>>,
    caf::replies_to<kv_write_atom, block_id, std::uint64_t,
                    std::vector<std::uint8_t>>::with<kv_reply>,
    caf::replies_to<kv_cow_atom, block_id>::with<kv_reply>,
    caf::replies_to<kv_lookup_atom, std::vector<token>>::with<kv_prefix>,
    caf::replies_to<kv_stats_atom>::with<kv_store_stats>,
    caf::reacts_to<kv_device_join_atom, std::string, caf::actor>,
    caf::reacts_to<kv_resident_atom, std::string, std::vector<kv_page>, std::vector<block_hash>>,
    caf::replies_to<kv_on_device_atom, std::string, std::vector<token>>::with<kv_prefix>,
    caf::reacts_to<kv_device_leave_atom, std::string, caf::actor_addr>,
    caf::reacts_to<kv_fault_atom, std::uint32_t>, caf::reacts_to<kv_expiry_atom, std::uint64_t>,
    caf::reacts_to<kv_flush_atom>>;

/// A running store: the store actor (lifecycle of every block) and its prefix index actor
/// (lookups, so they never queue behind block moves).
struct kv_store {
  kv_store_actor store; ///< takes every kv_*_atom message (kv_lookup_atom: passed to the index)
  kv_index_actor index; ///< takes kv_lookup_atom
  /// The full blocks the index knows (kept by the index) and the pages devices hold in their
  /// own memory (each device's link reports them), readable from any thread.
  std::shared_ptr<kv_directory> directory;
};

/// Starts a store in `home` (the orchestration domain): opens the pools and the disk tier
/// (blocks found on disk are indexed again; damaged files are removed and counted), spawns the
/// index. Each block is an actor in the domain of the memory holding it (disk blocks: `home`),
/// so `domains` must hold every pool's domain. Errors name the bad option.
expected<kv_store> spawn_kv_store(domain_set& domains, domain& home, kv_store_config config);

} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::kv_lease)
