#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "devices/backend.hpp"
#include "devices/prefix_hash.hpp"
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

/// A block's checksum: what travels with a block and is checked on arrival. XXH3's accumulate
/// step over 64-byte stripes with a per-stripe key, finished by XXH3-64 (defined in block.cpp);
/// one pass, fused with the copy in copy_checked.
std::uint64_t block_checksum(std::span<const std::byte> bytes) noexcept;

/// Copies `src` into `dst` (same size) and checks the bytes written against `expected` (the
/// checksum of the bytes at their origin) in the same pass: each byte is read once, as by
/// memcpy. Copies of 64 KiB and more into 64-byte aligned memory use non-temporal stores.
/// `flip_bit` >= 0 flips that bit on its way into `dst` (fault injection for tests and
/// drills). errc::corrupted when the bytes do not match.
expected<void> copy_checked(std::span<std::byte> dst, std::span<const std::byte> src,
                            std::uint64_t expected, std::int64_t flip_bit = -1);

} // namespace triad
