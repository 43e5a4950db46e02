#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "devices/kv_tier.hpp"
#include "kvstore/store.hpp"
#include "runtime/domains.hpp"
#include "runtime/trace.hpp"

namespace triad {

/// The node's KV store as the tier below its devices (devices/kv_tier.hpp): pages a device's
/// prefix cache evicts, the KV it keeps across a tool call and the blocks it streams through
/// are put into the host pool of its domain (`device_pools`: device name -> pool; the
/// `host_pool`, the orchestration domain's, for a device not listed), unreferenced pages cached
/// until pressure moves them to the home pool, the disk, or drops them, least recently used
/// first; a fetch looks the prompt up in the store's index and reads each block through the
/// store, checked against its checksum, in a fetcher actor in `home`. `block_tokens` and
/// `block_bytes` are the store's. `trace`: the node's trace (or null), where the fetcher writes
/// the messages it sends for a traced request, each operation on a track of its own.
std::shared_ptr<kv_tier> make_store_tier(domain& home, kv_store store, std::string host_pool,
                                         std::map<std::string, std::string> device_pools,
                                         std::size_t block_tokens, std::size_t block_bytes,
                                         std::shared_ptr<trace_log> trace);

} // namespace triad
