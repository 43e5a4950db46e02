#include <array>
#include <cctype>
#include <unordered_map>

#include "runtime/utf8.hpp"
#include "tokenizer/detail/merge.hpp"
#include "tokenizer/detail/special_matcher.hpp"
#include "tokenizer/detail/spm.hpp"

namespace triad::detail {

namespace {

constexpr std::string_view space_mark = "\xe2\x96\x81"; // U+2581, SentencePiece's space


// SentencePiece BPE (Llama 2, Mistral 7B, TinyLlama): text split at added tokens; each fragment
// gets a leading space (as Hugging Face's Prepend normalizer does, per fragment), spaces become
// U+2581, and characters merge pairwise, the pair whose joined piece scores highest first
// (leftmost among equals); a character with no piece falls back to its bytes' <0xXX> tokens.
class spm_tokenizer final : public model_tokenizer {
public:
  explicit spm_tokenizer(vocab v)
      : model_tokenizer(std::move(v))
      , specials_(vocab_) {
    byte_ids_.fill(-1);
    for (std::size_t id = 0; id < vocab_.tokens.size(); ++id) {
      const auto& t = vocab_.tokens[id];
      const auto kind = vocab_.kinds[id];
      if (kind == token_kind::normal)
        ids_.emplace(t, static_cast<token>(id));
      if (kind == token_kind::byte && t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
        unsigned b = 0;
        for (char c : t.substr(3, 2))
          b = b * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                                                                     : (c | 0x20) - 'a' + 10);
        byte_ids_[b & 0xff] = static_cast<token>(id);
      }
    }
  }

  void encode_to(std::vector<token>& out, std::string_view text, bool specials) const override {
    std::string normalized;
    specials_.split(
        text, specials,
        [&](std::string_view fragment) {
          normalized.clear();
          if (vocab_.add_space_prefix)
            normalized += space_mark;
          for (char c : fragment)
            if (c == ' ')
              normalized += space_mark;
            else
              normalized += c;
          merge(normalized, out);
        },
        [&](token id) { out.push_back(id); });
  }

  std::optional<token> control_in(std::string_view text) const override {
    auto hit = specials_.first_control(text);
    return hit.length == 0 ? std::nullopt : std::optional<token>{hit.id};
  }

  std::string decode(token id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab_.tokens.size())
      return {};
    const auto& t = vocab_.tokens[static_cast<std::size_t>(id)];
    const auto kind = vocab_.kinds[static_cast<std::size_t>(id)];
    if (kind == token_kind::byte) {
      for (unsigned b = 0; b < 256; ++b)
        if (byte_ids_[b] == id)
          return std::string(1, static_cast<char>(b));
      return {};
    }
    if (kind != token_kind::normal)
      return t;
    std::string out;
    for (std::size_t i = 0; i < t.size();) {
      if (t.compare(i, space_mark.size(), space_mark) == 0) {
        out += ' ';
        i += space_mark.size();
      } else {
        out += t[i++];
      }
    }
    return out;
  }

private:
  void merge(std::string_view s, std::vector<token>& out) const {
    // Pairs merge by the score of the piece they make, highest first.
    std::string key;
    const auto sym = merge_pairs(
        s, [&](std::string_view left, std::string_view right) -> std::optional<double> {
          key.assign(left.data(), left.size() + right.size()); // adjacent in `s`
          auto it = ids_.find(key);
          if (it == ids_.end())
            return std::nullopt;
          const auto id = static_cast<std::size_t>(it->second);
          return -static_cast<double>(id < vocab_.scores.size() ? vocab_.scores[id] : 0.0f);
        });
    if (sym.empty())
      return;
    for (int i = 0; i >= 0; i = sym[i].next) {
      auto piece = s.substr(sym[i].start, sym[i].length);
      if (auto it = ids_.find(std::string{piece}); it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (unsigned char b : piece) {
        if (byte_ids_[b] >= 0)
          out.push_back(byte_ids_[b]);
        else if (vocab_.unknown)
          out.push_back(*vocab_.unknown);
      }
    }
  }

  special_matcher specials_;
  std::unordered_map<std::string, token> ids_;
  std::array<token, 256> byte_ids_;
};

} // namespace

std::unique_ptr<model_tokenizer> make_spm_tokenizer(vocab v) {
  return std::make_unique<spm_tokenizer>(std::move(v));
}

} // namespace triad::detail
