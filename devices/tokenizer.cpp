#include "devices/tokenizer.hpp"

#include <algorithm>
#include <array>

namespace triad {

namespace {

struct special {
  token id;
  std::string_view text;
};

constexpr std::array<special, 7> specials_table{{
    {tokenizer::bos, "<|bos|>"},
    {tokenizer::eos, "<|eos|>"},
    {tokenizer::pad, "<|pad|>"},
    {tokenizer::tool_call_start, "<tool_call>"},
    {tokenizer::tool_call_end, "</tool_call>"},
    {tokenizer::tool_response_start, "<tool_response>"},
    {tokenizer::tool_response_end, "</tool_response>"},
}};

} // namespace

std::string_view tokenizer::special_spelling(token id) noexcept {
  for (const auto& s : specials_table)
    if (s.id == id)
      return s.text;
  return {};
}

std::vector<token> tokenizer::encode(std::string_view text, bool specials) const {
  std::vector<token> out;
  encode_to(out, text, specials);
  return out;
}

void tokenizer::encode_to(std::vector<token>& out, std::string_view text, bool specials) const {
  // At most one id per byte; growing geometrically keeps piece-by-piece rendering linear.
  if (auto need = out.size() + text.size(); need > out.capacity())
    out.reserve(std::max(need, 2 * out.capacity()));
  for (std::size_t i = 0; i < text.size();) {
    bool matched = false;
    if (specials && text[i] == '<') {
      for (const auto& s : specials_table) {
        if (text.substr(i, s.text.size()) == s.text) {
          out.push_back(s.id);
          i += s.text.size();
          matched = true;
          break;
        }
      }
    }
    if (!matched)
      out.push_back(static_cast<token>(static_cast<unsigned char>(text[i++])));
  }
}

std::string tokenizer::decode(const std::vector<token>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (auto id : ids)
    out += decode(id);
  return out;
}

std::string tokenizer::decode(token id) const {
  if (id >= 0 && id < 256)
    return std::string(1, static_cast<char>(id));
  if (auto s = special_spelling(id); !s.empty())
    return std::string{s};
  return "<|" + std::to_string(id) + "|>";
}

} // namespace triad
