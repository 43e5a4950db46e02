#include "runtime/utf8.hpp"
#include "tokenizer/detail/byte_level.hpp"

namespace triad::detail {


byte_level::byte_level() {
  std::uint32_t next = 256;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const std::uint32_t cp = printable ? b : next++;
    triad::append_utf8(cp, to_char_[b]);
    to_byte_[cp] = static_cast<std::uint8_t>(b);
  }
}

void byte_level::encode(std::string_view bytes, std::string& out) const {
  for (unsigned char b : bytes)
    out += to_char_[b];
}

std::string byte_level::decode(std::string_view s) const {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = utf8_length(c);
    if (i + len > s.size())
      len = 1;
    std::uint32_t cp = len == 1 ? c : c & (0xff >> (len + 1));
    for (std::size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    auto it = to_byte_.find(cp);
    if (it != to_byte_.end())
      out += static_cast<char>(it->second);
    else
      out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

} // namespace triad::detail
