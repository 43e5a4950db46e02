#include "kvstore/block.hpp"

#include <algorithm>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY // XXH3_state_t on the stack
#include <xxhash.h>
// XXH3 through the library's run-time dispatch: AVX2/AVX-512 where the CPU has them (four
// times the SSE2 default on this machine).
#include <xxh_x86dispatch.h>

namespace triad {

std::string_view to_string(tier t) noexcept {
  switch (t) {
  case tier::device:
    return "device";
  case tier::host:
    return "host";
  case tier::disk:
    return "disk";
  }
  return "unknown";
}

block_hash chain_hash(block_hash parent, std::span<const token> tokens) noexcept {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

std::vector<block_hash> chain_hashes(std::span<const token> tokens, std::size_t block_tokens) {
  std::vector<block_hash> out;
  if (block_tokens == 0)
    return out;
  block_hash parent = root_hash;
  for (std::size_t at = 0; at + block_tokens <= tokens.size(); at += block_tokens) {
    parent = chain_hash(parent, tokens.subspan(at, block_tokens));
    out.push_back(parent);
  }
  return out;
}

std::uint64_t block_checksum(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

expected<void> copy_checked(std::span<std::byte> dst, std::span<const std::byte> src,
                            std::uint64_t expected, std::int64_t flip_bit) {
  if (dst.size() != src.size())
    return make_error(errc::invalid_argument, "copy_checked: destination holds " +
                                                  std::to_string(dst.size()) + " bytes, source " +
                                                  std::to_string(src.size()));
  // 32 KiB pieces: copied, then hashed from L1/L2 while the next piece streams in.
  constexpr std::size_t piece = 32 << 10;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::size_t at = 0; at < src.size(); at += piece) {
    auto n = std::min(piece, src.size() - at);
    std::memcpy(dst.data() + at, src.data() + at, n);
    if (flip_bit >= 0 && static_cast<std::size_t>(flip_bit / 8) >= at &&
        static_cast<std::size_t>(flip_bit / 8) < at + n)
      dst[static_cast<std::size_t>(flip_bit / 8)] ^= std::byte{1} << (flip_bit % 8);
    XXH3_64bits_update(&state, dst.data() + at, n);
  }
  auto got = XXH3_64bits_digest(&state);
  if (got != expected)
    return make_error(errc::corrupted, "block checksum mismatch after the copy: expected " +
                                           std::to_string(expected) + ", got " +
                                           std::to_string(got));
  return {};
}

} // namespace triad
