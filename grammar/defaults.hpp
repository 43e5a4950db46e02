#pragma once

#include <cstddef>

/// The grammar area's defaults, in one place.
namespace triad::defaults::grammar {

/// Grammars a node keeps compiled, with their token masks, for requests that send the same
/// schema or tools again (an agent does every turn); the least recently used leaves first.
inline constexpr std::size_t cache_grammars = 256;

/// Token masks one grammar keeps (mask_cache), one per automaton state met.
inline constexpr std::size_t masks_per_grammar = 1024;

/// Bytes of token masks a node's grammar cache keeps in all (a mask is a bit per token: 19 KB
/// at 151936 ids); past it the least recently used grammars' masks go (they are recomputed at
/// their next need).
inline constexpr std::size_t cache_mask_bytes = std::size_t{256} << 20;

} // namespace triad::defaults::grammar
