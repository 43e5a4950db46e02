#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/error.hpp"

namespace triad {

/// A block's checksum: what travels with a block of KV and is checked on arrival. XXH3's
/// accumulate step over 64-byte stripes with a per-stripe key, finished by XXH3-64 (defined in
/// checksum.cpp); one pass, fused with the copy in copy_checked.
std::uint64_t block_checksum(std::span<const std::byte> bytes) noexcept;

/// Copies `src` into `dst` (same size) and checks the bytes written against `expected` (the
/// checksum of the bytes at their origin) in the same pass: each byte is read once, as by
/// memcpy. Copies of 64 KiB and more into 64-byte aligned memory use non-temporal stores.
/// `flip_bit` >= 0 flips that bit on its way into `dst` (fault injection for tests and
/// drills). errc::corrupted when the bytes do not match.
expected<void> copy_checked(std::span<std::byte> dst, std::span<const std::byte> src,
                            std::uint64_t expected, std::int64_t flip_bit = -1);

/// The checksum's running sums over some of a block's stripes. Sums over disjoint runs of
/// stripes add up to the sums of the whole, so a block copied in pieces (a KV page in layer
/// groups, by two threads) is checked piece by piece and still gets its block_checksum.
struct checksum_sums {
  alignas(64) std::uint64_t acc[8] = {}; ///< one sum per 64-bit lane
  /// Adds the sums of another run (lane by lane, modulo 2^64).
  void add(const checksum_sums& other) noexcept;
  /// Whether two runs' sums are equal (the same bytes, as far as the checksum can tell).
  bool operator==(const checksum_sums&) const = default;
};

/// Adds the bytes `src`, found at byte offset `at` of their block (a multiple of 64), to
/// `into`, and copies them to `dst` in the same pass when it is not null; `nontemporal`: with
/// stores that bypass the caches (into 64-byte aligned memory), for bytes this core will not
/// read again soon. Only the last run of a block may end inside a 64-byte stripe.
void checksum_range(std::byte* dst, std::span<const std::byte> src, std::size_t at,
                    checksum_sums& into, bool nontemporal = false) noexcept;

/// The checksum of a block of `size` bytes from the sums of all its stripes:
/// checksum_finish(sums over every byte, size) == block_checksum(bytes).
std::uint64_t checksum_finish(const checksum_sums& sums, std::size_t size) noexcept;

} // namespace triad
