#include "devices/prefix_hash.hpp"

#include <xxhash.h>
// XXH3 through the library's run-time dispatch: AVX2/AVX-512 where the CPU has them (four
// times the SSE2 default on this machine).
#include <xxh_x86dispatch.h>

namespace triad {

block_hash chain_hash(block_hash parent, std::span<const token> tokens) noexcept {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

std::vector<block_hash> chain_hashes(std::span<const token> tokens, std::size_t block_tokens) {
  std::vector<block_hash> out;
  if (block_tokens == 0)
    return out;
  out.reserve(tokens.size() / block_tokens);
  block_hash parent = root_hash;
  for (std::size_t at = 0; at + block_tokens <= tokens.size(); at += block_tokens) {
    parent = chain_hash(parent, tokens.subspan(at, block_tokens));
    out.push_back(parent);
  }
  return out;
}

} // namespace triad
