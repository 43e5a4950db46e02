#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "kvstore/block.hpp"
#include "kvstore/pool.hpp"
#include "runtime/domains.hpp"

namespace triad::detail {

/// Fills a new block from a payload: `(block_init_atom, block_id, block_location,
/// std::vector<std::uint8_t>)` -> checksum. The actor stands for that block from then on.
using block_init_atom = caf::atom_constant<caf::atom("binit")>;
/// Fills a new block by copying another's bytes: `(block_pull_atom, block_id, block_location,
/// move_order)` -> pull_result. The actor stands for that block from then on.
using block_pull_atom = caf::atom_constant<caf::atom("bpull")>;
/// Reads the bytes, checked: `(block_read_atom, std::uint64_t checksum)` -> kv_bytes.
using block_read_atom = caf::atom_constant<caf::atom("bread")>;
/// Writes into the bytes: `(block_write_atom, offset, bytes)` -> new checksum.
using block_write_atom = caf::atom_constant<caf::atom("bwrite")>;

/// Gives a pooled actor a block that is filled already (found on disk at start):
/// `(block_assign_atom, block_id, block_location)`.
using block_assign_atom = caf::atom_constant<caf::atom("bassign")>;

/// Where a block's bytes are: a memory slot, or a disk file.
struct block_location {
  tier kind = tier::host;
  std::span<std::byte> memory; ///< device and host tiers
  disk_pool* disk = nullptr;   ///< disk tier
  disk_entry meta;             ///< disk tier: what the file's header says
  std::size_t size = 0;        ///< the block's bytes
};

/// A copy to make: from a block's bytes (memory or file) to the new block's location. The
/// source stays valid until the pull answers (the store keeps it until then).
struct move_order {
  block_location source;
  std::uint64_t checksum = 0; ///< of the source bytes at their origin
  std::int64_t flip_bit = -1; ///< fault injection: the bit of the copy to flip, or -1
};

/// The outcome of a pull.
struct pull_result {
  bool ok = false;
  std::string reason;
};

/// Spawns the actor of one block in `home` (the domain of the memory at `where`). The store
/// keeps actors it no longer needs in a per-domain pool and assigns them to other blocks
/// later, so moving a block between domains does not spawn and destroy an actor each time.
caf::actor spawn_block_actor(domain& home, block_id id, block_location where);

} // namespace triad::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::move_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::block_location)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::detail::pull_result)
