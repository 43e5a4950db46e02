#pragma once

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "kvstore/block.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"

namespace triad::detail {

/// Records where a content-addressed block is: `(index_put_atom, block_hash, block_id,
/// std::uint8_t tier)` (a `tier` value); a later put of the same hash replaces it.
using index_put_atom = caf::atom_constant<caf::atom("iput")>;
/// Forgets a block: `(index_erase_atom, block_hash, block_id)` (ignored when the hash now
/// names another block).
using index_erase_atom = caf::atom_constant<caf::atom("ierase")>;

/// Spawns the prefix index of a store in `home`. It answers kv_lookup_atom with the longest
/// indexed prefix and counts, per lookup, each full block of the query as a hit on its tier or
/// a miss; `(kv_stats_atom)` -> std::vector<std::uint64_t>{device hits, host hits, disk hits,
/// misses}.
caf::actor spawn_index_actor(domain& home, std::size_t block_tokens, metrics_registry* metrics);

} // namespace triad::detail
