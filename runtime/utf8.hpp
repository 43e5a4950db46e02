#pragma once

#include <cstddef>

namespace triad {

/// Bytes of the UTF-8 character whose first byte is `lead`: 1 for ASCII and for bytes that
/// cannot start a character (a stray continuation or an invalid lead, taken alone), else 2-4.
/// Callers still check that the string holds that many bytes.
constexpr std::size_t utf8_length(unsigned char lead) noexcept {
  return lead < 0x80            ? 1
         : (lead >> 5) == 0x06 ? 2
         : (lead >> 4) == 0x0e ? 3
         : (lead >> 3) == 0x1e ? 4
                                : 1;
}

} // namespace triad
