#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "devices/kv_tier.hpp"
#include "kvstore/store.hpp"
#include "runtime/domains.hpp"

namespace triad {

/// The node's KV store as the tier below its devices (devices/kv_tier.hpp): pages a device's
/// prefix cache evicts are put into the store's `host_pool`, unreferenced (cached until the
/// host tier's pressure moves them to disk or drops them, least recently used first); a fetch
/// looks the prompt up in the store's index and reads each block through the store, checked
/// against its checksum, in a fetcher actor in `home`. `block_tokens` and `block_bytes` are the
/// store's.
std::shared_ptr<kv_tier> make_store_tier(domain& home, kv_store store, std::string host_pool,
                                         std::size_t block_tokens, std::size_t block_bytes);

} // namespace triad
