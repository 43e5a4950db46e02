#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace triad::defaults::cluster {

/// How long connecting to a peer's KV wire may take before it is an error.
inline constexpr std::chrono::milliseconds wire_connect_timeout{5000};
/// How long one send or receive of a batch of blocks may take before it is an error.
inline constexpr std::chrono::milliseconds wire_transfer_timeout{30000};
/// The UCX tag of a KV block's header message (ASCII "triadkv"); its bytes go under the next tag.
inline constexpr std::uint64_t wire_block_tag = 0x0074726961646b76ull;

} // namespace triad::defaults::cluster
