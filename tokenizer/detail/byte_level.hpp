#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace triad::detail {

/// GPT-2's byte-to-character map: byte-level BPE vocabularies spell every byte as one printable
/// character (bytes 33-126, 161-172 and 174-255 as themselves, the rest as U+0100 onwards).
class byte_level {
public:
  /// Builds both directions of the map.
  byte_level();
  /// Appends the UTF-8 spelling of each byte of `bytes` to `out`.
  void encode(std::string_view bytes, std::string& out) const;
  /// The bytes a vocabulary spelling stands for; characters outside the map pass through as
  /// their UTF-8 (added tokens are stored unmapped).
  std::string decode(std::string_view spelling) const;

private:
  std::array<std::string, 256> to_char_;
  std::unordered_map<std::uint32_t, std::uint8_t> to_byte_;
};

} // namespace triad::detail
