#pragma once

#include <cstddef>

/// The grammar area's defaults, in one place.
namespace triad::defaults::grammar {

/// Grammars a node keeps compiled, with their token masks, for requests that send the same
/// schema or tools again (an agent does every turn); the least recently used leaves first.
inline constexpr std::size_t cache_grammars = 256;

/// Token masks one grammar keeps (mask_cache), one per automaton state met.
inline constexpr std::size_t masks_per_grammar = 1024;

} // namespace triad::defaults::grammar
