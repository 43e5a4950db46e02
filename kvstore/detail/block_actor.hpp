#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "kvstore/block.hpp"
#include "kvstore/pool.hpp"
#include "runtime/domains.hpp"

namespace triad::detail {

/// Fills a new block from a payload: `(block_init_atom, block_id, block_location,
/// std::vector<std::uint8_t>)` -> checksum. The actor stands for that block from then on.
using block_init_atom = caf::atom_constant<caf::atom("binit")>;
/// Reads the bytes, checked: `(block_read_atom, std::uint64_t checksum, std::int64_t flip_bit)`
/// -> kv_bytes; `flip_bit` >= 0 damages that bit on the way out (fault injection).
using block_read_atom = caf::atom_constant<caf::atom("bread")>;
/// Writes into the bytes: `(block_write_atom, offset, bytes)` -> new checksum.
using block_write_atom = caf::atom_constant<caf::atom("bwrite")>;

/// Reads a block that stands for a page in a device's memory: `(block_lend_atom,
/// std::vector<token> chain, std::uint64_t page, std::uint64_t checksum)` -> kv_bytes: the
/// device lends page `page` of the chain of `chain` (its tokens up to and including the page),
/// copied out by its driver with its checksum, checked here and against `checksum` when that
/// is not 0 (the page's sum when it was first lent: a device page is never written again).
using block_lend_atom = caf::atom_constant<caf::atom("blend")>;

/// Gives a pooled actor a block that is filled already (found on disk at start, or copied in
/// by its domain's mover): `(block_assign_atom, block_id, block_location)`.
using block_assign_atom = caf::atom_constant<caf::atom("bassign")>;

/// Where a block's bytes are: a memory slot, or a disk file.
struct block_location {
  tier kind = tier::host;
  std::span<std::byte> memory; ///< device and host tiers
  disk_pool* disk = nullptr;   ///< disk tier
  /// Disk tier: what the file's header says (shared: moves copy locations, and memory tiers
  /// have none).
  std::shared_ptr<const disk_entry> meta;
  std::size_t size = 0; ///< the block's bytes
  /// Device tier, a page in the device's own memory (no `memory`): the device that lends it.
  caf::actor_addr owner;
};

/// Copies a batch of blocks into the mover's domain: `(move_batch_atom,
/// std::vector<pull_item>)` -> pull_outcomes, one outcome per item, in order.
using move_batch_atom = caf::atom_constant<caf::atom("bmove")>;

/// A copy to make: from a block's bytes (memory or file) to the new block's location. The
/// source stays valid until the batch answers (the store keeps it until then).
struct move_order {
  block_location source;
  std::uint64_t checksum = 0; ///< of the source bytes at their origin
  std::int64_t flip_bit = -1; ///< fault injection: the bit of the copy to flip, or -1
};

/// One copy of a batch: the new block, its actor and location, and where its bytes come from.
/// Once the bytes are in, the mover tells the actor its block (block_assign), before it
/// answers the store, so whatever the store sends the actor after the answer finds it told.
struct pull_item {
  caf::actor block;
  block_id id = 0;
  block_location to;
  move_order order;
};

/// The outcome of one copy.
struct pull_result {
  bool ok = false;
  std::string reason;
};

/// The outcomes of a batch, in the order of its items.
struct pull_outcomes {
  std::vector<pull_result> results;
};

/// Spawns the actor of one block in `home` (the domain of the memory at `where`). The store
/// keeps actors it no longer needs in a per-domain pool and assigns them to other blocks
/// later, so moving a block between domains does not spawn and destroy an actor each time.
caf::actor spawn_block_actor(domain& home, block_id id, block_location where);

/// Spawns the mover of `home`: it fills new blocks in its domain's memory (or files) from
/// their sources, checked, a batch per message. A move of many blocks then costs one message
/// and one actor switch instead of one per block (about a sixth of a block's copy time here),
/// and the store's worker, answered once per batch, sleeps while the copies run instead of
/// polling beside them (which slowed the copying core by a third on two cores).
caf::actor spawn_mover_actor(domain& home);

} // namespace triad::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::move_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::block_location)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::pull_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::pull_outcomes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<triad::detail::pull_item>)
