#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "devices/tokenizer.hpp"

namespace triad {

/// The content hash of a run of tokens at the start of a sequence: XXH3-64 of one block's token
/// ids seeded with the hash of the blocks before it, so equal hashes mean equal prefixes, not
/// just equal blocks. Device prefix caches, the router and the KV store all key by it.
using block_hash = std::uint64_t;

/// The hash the first block of every sequence chains from.
inline constexpr block_hash root_hash = 0x7472'6961'645f'6b76ull; // "triad_kv"

/// The chained hash of one block: its tokens, seeded with the parent's hash.
block_hash chain_hash(block_hash parent, std::span<const token> tokens) noexcept;

/// The chained hashes of every full block of `tokens`, `block_tokens` tokens each, from the
/// root; a trailing partial block is not hashed.
std::vector<block_hash> chain_hashes(std::span<const token> tokens, std::size_t block_tokens);

} // namespace triad
