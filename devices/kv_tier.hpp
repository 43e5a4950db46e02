#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/send.hpp>

#include "devices/backend.hpp"
#include "devices/kv_stream.hpp"
#include "devices/prefix_hash.hpp"

namespace triad {

/// A tier's answer to kv_tier::fetch, sent to the device: `(kv_fetched_atom, seq_id,
/// std::vector<kv_page>)`, the pages in chain order from the first asked for; fewer than asked
/// (even none) when some were gone or failed their check.
using kv_fetched_atom = caf::atom_constant<caf::atom("kvfetched")>;
/// A tier's answer to kv_tier::keep: `(kv_stored_atom, std::uint64_t key,
/// std::vector<std::uint64_t> block_ids, std::uint64_t pin)`, ids empty when the pages could not
/// be stored; `pin` names the pin that keeps them (kv_tier::release ends it).
using kv_stored_atom = caf::atom_constant<caf::atom("kvstored")>;
/// A tier's answer to kv_tier::lease, sent to the device: `(kv_leased_atom, seq_id,
/// std::shared_ptr<kv_stream>)`, null when no blocks could be had.
using kv_leased_atom = caf::atom_constant<caf::atom("kvleased")>;
/// Asks a device for pages of its prefix cache, for another device's prompt (kv_tier::
/// fetch_from_device): `(kv_share_atom, std::vector<token> tokens, std::uint64_t first,
/// std::uint64_t count)` -> std::vector<kv_page>, pages `first`.. of the chain of `tokens` it
/// holds from the first page on (each with its checksum; fewer, or none, when it holds fewer).
using kv_share_atom = caf::atom_constant<caf::atom("kvshare")>;

/// What lies below a device's own memory: where the pages its prefix cache evicts go instead of
/// being lost, and where it finds the pages of a prompt it does not hold (computed on another
/// device, or evicted earlier). The node's KV store implements it (actors/kv_link); devices know
/// only this.
class kv_tier {
public:
  virtual ~kv_tier() = default;

  /// Bytes of one page in the tier; a device whose pages have another size is not connected.
  virtual std::size_t block_bytes() const noexcept = 0;
  /// The identity of the store behind the tier (random, never 0): the block ids keep answers
  /// are its own, so a device reads kept blocks only when they name this store (a demotion on
  /// another node's device kept them in that node's store).
  virtual std::uint64_t store_id() const noexcept = 0;
  /// How many of `chain` (a prompt's page hashes in order) the tier holds, counted from the
  /// first; thread-safe and without a message, so asking costs a request nothing.
  virtual std::size_t held(std::span<const block_hash> chain) const = 0;
  /// Hands over full pages device `device` (join's number) evicted; the tier stores them (or
  /// drops what it has no room for) and the device forgets them. Each page's block moves a
  /// tier down: it keeps its identity in the tier below.
  virtual void spill(std::uint32_t device, std::vector<kv_page> pages) = 0;
  /// Reads pages `first`..`first + count - 1` of the page chain of `tokens` (each checked
  /// against its checksum) and answers `reply_to` with kv_fetched_atom for `seq`. `trace`: the
  /// traced request it is for (its messages become spans of its trace), or 0.
  virtual void fetch(std::vector<token> tokens, std::size_t first, std::size_t count, seq_id seq,
                     caf::actor reply_to, std::uint64_t trace) = 0;
  /// Stores a sequence's pages (from its first; the last may be partial) for a caller who
  /// keeps them across a tool call: the blocks are pinned for `ttl` (not evicted nor moved
  /// down before, so a caller that vanishes holds nothing for longer), and `reply_to` hears
  /// kv_stored_atom for `key`. `trace`: as for fetch.
  virtual void keep(std::vector<kv_page> pages, std::chrono::milliseconds ttl, std::uint64_t key,
                    caf::actor reply_to, std::uint64_t trace) = 0;
  /// Ends the pin `keep` gave the blocks (`pin`, from kv_stored_atom); the blocks stay cached
  /// until pressure evicts them, and other holders' pins on them stay.
  virtual void release(std::vector<std::uint64_t> block_ids, std::uint64_t pin) = 0;
  /// Leases `pages` blocks of the tier's memory for a sequence's KV to stream through to
  /// another device (kv_stream) and answers `reply_to` with kv_leased_atom for `seq`. The
  /// stream holds the blocks; when it is let go they stay cached, sealed with their checksums
  /// (or are given back, if it did not complete). `trace`: as for fetch.
  virtual void lease(std::size_t pages, seq_id seq, caf::actor reply_to, std::uint64_t trace) {
    (void)pages;
    (void)trace;
    caf::anon_send(reply_to, kv_leased_atom::value, seq, std::shared_ptr<kv_stream>{});
  }
  /// Reads the blocks `block_ids` (kept for the first tokens of `tokens`), checked, and answers
  /// `reply_to` with kv_fetched_atom for `seq`, as fetch does (`trace` too).
  virtual void fetch_kept(std::vector<std::uint64_t> block_ids, std::vector<token> tokens,
                          seq_id seq, caf::actor reply_to, std::uint64_t trace) = 0;

  // -- pages in the devices' own memory --

  /// Starts reading the blocks `block_ids` kept for the first tokens of `tokens` before a
  /// device asks for them: a demoted sequence's tool returned, and the read overlaps with
  /// tokenizing the result (when the demotion had ended by then), routing and admission. A
  /// fetch_kept of the same blocks and tokens joins it (answered at once if it finished);
  /// forget_prefetch drops one never joined (the caller's part, once it is admitted or lets go
  /// of the blocks). `trace`: as for fetch.
  virtual void prefetch_kept(std::vector<std::uint64_t> block_ids, std::vector<token> tokens,
                             std::uint64_t trace) {
    (void)block_ids;
    (void)tokens;
    (void)trace;
  }
  /// Drops the prefetch of `block_ids` if no device joined it (the request was admitted by a
  /// device that reads them itself, or not at all).
  virtual void forget_prefetch(std::vector<std::uint64_t> block_ids) { (void)block_ids; }
  /// How many fetch_kept joined a prefetch_kept (its read already under way or done).
  virtual std::uint64_t prefetch_joins() const noexcept { return 0; }
  /// A device the tier does not know (join's answer when it cannot take more).
  static constexpr std::uint32_t no_device = ~std::uint32_t{0};
  /// A run of a prompt's pages another device holds (`pages` from the chain's first).
  struct peer_run {
    std::uint32_t device = no_device; ///< the device holding them
    std::size_t pages = 0;            ///< how many
  };
  /// Connects a device named `name` (its actor answers kv_share_atom): the tier learns of its
  /// prefix cache's pages through `resident` (each a block of the tier's, standing for the page
  /// in the device's memory) and other devices may copy them. Its number, or no_device.
  virtual std::uint32_t join(caf::actor device, std::string name) {
    (void)device;
    (void)name;
    return no_device;
  }
  /// The device stopped: its pages are no longer to be had.
  virtual void leave(std::uint32_t device) { (void)device; }
  /// `device`'s prefix cache now holds the pages `added` (their identities: chain hash,
  /// parent, tokens; no bytes) and no longer those `gone` (freed, not spilled).
  virtual void resident(std::uint32_t device, std::span<const kv_page> added,
                        std::span<const block_hash> gone) {
    (void)device;
    (void)added;
    (void)gone;
  }
  /// The longest run of `chain`, from its first page, a device other than `device` holds;
  /// thread-safe and without a message, as `held`.
  virtual peer_run held_elsewhere(std::uint32_t device, std::span<const block_hash> chain) const {
    (void)device;
    (void)chain;
    return {};
  }
  /// How many of `chain`, from its first page, the device whose actor is `device` holds in its
  /// prefix cache (as it reported them) or was routed (note_routed) and has not yet computed;
  /// thread-safe and without a message. The router routes prompts by it.
  virtual std::size_t held_by(const caf::actor_addr& device,
                              std::span<const block_hash> chain) const {
    (void)device;
    (void)chain;
    return 0;
  }
  /// Notes that a prompt whose pages are `chain` was routed to the device whose actor is
  /// `device`: held_by counts them until the device reports them computed or evicted (or they age
  /// out). False when the tier does not know the device (it is not connected): the caller keeps its
  /// own record then.
  virtual bool note_routed(const caf::actor_addr& device, std::span<const block_hash> chain) {
    (void)device;
    (void)chain;
    return false;
  }
  /// Asks device `owner` for pages `first`..`first + count - 1` of the page chain of `tokens`
  /// (copied out of its prefix cache by its driver, each with its checksum, checked when
  /// appended) and answers `reply_to` with kv_fetched_atom for `seq`: fewer pages (even none)
  /// when the owner evicted some, stopped or did not answer in time. `trace`: as for fetch.
  virtual void fetch_from_device(std::uint32_t owner, std::vector<token> tokens, std::size_t first,
                                 std::size_t count, seq_id seq, caf::actor reply_to,
                                 std::uint64_t trace) {
    (void)owner;
    (void)trace;
    (void)tokens;
    (void)first;
    (void)count;
    caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::vector<kv_page>{});
  }
};

} // namespace triad
