#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "devices/backend.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/checksum.hpp"
#include "runtime/error.hpp"

namespace triad {

/// A block's id in the store; never reused while the store runs.
using block_id = std::uint64_t;

/// Where a block's bytes live.
enum class tier : std::uint8_t {
  device, ///< a device's pool (for cpu and sim devices: host memory of the device's domain)
  host,   ///< a NUMA domain's host pool
  disk,   ///< a file under the store's disk directory
};

/// "device", "host" or "disk".
std::string_view to_string(tier t) noexcept;

} // namespace triad
