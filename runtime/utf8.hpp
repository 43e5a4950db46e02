#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

/// Appends the UTF-8 bytes of code point `cp` (up to U+FFFF here: surrogates are not combined,
/// as the callers, Jinja escapes and byte maps, never need more).
inline void append_utf8(std::uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

} // namespace triad
