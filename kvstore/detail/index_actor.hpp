#pragma once

#include "kvstore/store.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"

namespace triad::detail {

/// Spawns the prefix index of a store in `home` (kv_index_actor). It answers kv_lookup_atom
/// with the longest indexed prefix and counts, per lookup, each full block of the query as a
/// hit on its tier or a miss; `(kv_stats_atom)` -> std::vector<std::uint64_t>{device hits, host
/// hits, disk hits, misses}. It keeps `directory` (may be null) as it learns and forgets blocks.
kv_index_actor spawn_index_actor(domain& home, std::size_t block_tokens, metrics_registry* metrics,
                                 std::shared_ptr<kv_directory> directory = nullptr);

} // namespace triad::detail
