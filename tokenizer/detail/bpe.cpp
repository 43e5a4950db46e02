#include <cstdint>
#include <unordered_map>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include "runtime/utf8.hpp"
#include "tokenizer/detail/byte_level.hpp"
#include "tokenizer/detail/merge.hpp"
#include "tokenizer/detail/special_matcher.hpp"
#include "tokenizer/detail/spm.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace triad::detail {

namespace {

// `text` in Unicode's NFC into `out`; false (out untouched) where it is NFC already (ASCII,
// most text) or is not valid UTF-8 (its bytes then go to the byte-level BPE as they are).
bool nfc_to(std::string_view text, std::string& out) {
  std::size_t i = 0;
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80)
    ++i;
  if (i == text.size() || text.size() > static_cast<std::size_t>(INT32_MAX))
    return false;
  const auto* p = reinterpret_cast<const std::uint8_t*>(text.data());
  const auto n = static_cast<std::int32_t>(text.size());
  for (auto at = static_cast<std::int32_t>(i); at < n;) {
    UChar32 c = 0;
    U8_NEXT(p, at, n, c);
    if (c < 0)
      return false;
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status))
    return false;
  const icu::StringPiece piece(text.data(), n);
  if (nfc->isNormalizedUTF8(piece, status) || U_FAILURE(status))
    return false;
  std::string normal;
  icu::StringByteSink<std::string> sink(&normal);
  nfc->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status))
    return false;
  out = std::move(normal);
  return true;
}

// Byte-level BPE (GPT-2 style): text split at added tokens, then by the pre-tokenizer; each
// piece's bytes spelled as characters and merged pairwise, lowest merge rank first (leftmost
// among equals), as Hugging Face's BPE model does.
class bpe_tokenizer final : public model_tokenizer {
public:
  bpe_tokenizer(vocab v, pretokenizer pre, bool ignore_merges, bool nfc)
      : model_tokenizer(std::move(v))
      , pre_(std::move(pre))
      , specials_(vocab_)
      , ignore_merges_(ignore_merges)
      , nfc_(nfc) {
    ids_.reserve(vocab_.tokens.size());
    for (std::size_t id = 0; id < vocab_.tokens.size(); ++id)
      ids_.emplace(vocab_.tokens[id], static_cast<token>(id));
    ranks_.reserve(vocab_.merges.size());
    for (std::size_t r = 0; r < vocab_.merges.size(); ++r)
      ranks_.emplace(vocab_.merges[r], static_cast<int>(r));
    decoded_.resize(vocab_.tokens.size());
    for (std::size_t id = 0; id < vocab_.tokens.size(); ++id) {
      const auto kind = vocab_.kinds[id];
      decoded_[id] = kind == token_kind::control || kind == token_kind::user_defined
                         ? vocab_.tokens[id]
                         : bytes_.decode(vocab_.tokens[id]);
    }
  }

  void encode_to(std::vector<token>& out, std::string_view text, bool specials) const override {
    std::vector<std::string_view> pieces;
    std::string spelled, normal;
    specials_.split(
        text, specials,
        [&](std::string_view fragment) {
          if (nfc_ && nfc_to(fragment, normal))
            fragment = normal;
          pieces.clear();
          pre_.split(fragment, pieces);
          for (auto piece : pieces) {
            spelled.clear();
            bytes_.encode(piece, spelled);
            merge(spelled, out);
          }
        },
        [&](token id) { out.push_back(id); });
  }

  std::optional<token> control_in(std::string_view text) const override {
    auto hit = specials_.first_control(text);
    return hit.length == 0 ? std::nullopt : std::optional<token>{hit.id};
  }

  std::string decode(token id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= decoded_.size())
      return {};
    return decoded_[static_cast<std::size_t>(id)];
  }

private:
  // Appends the ids of one spelled piece.
  void merge(std::string_view s, std::vector<token>& out) const {
    if (s.empty())
      return;
    if (ignore_merges_) {
      if (auto it = ids_.find(std::string{s}); it != ids_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    // Pairs merge by rank; a pair's key is "left right", as the merges list spells it.
    std::string key;
    const auto sym =
        merge_pairs(s, [&](std::string_view left, std::string_view right) -> std::optional<double> {
          key.assign(left);
          key += ' ';
          key.append(right);
          auto it = ranks_.find(key);
          return it == ranks_.end() ? std::nullopt : std::optional<double>{it->second};
        });
    for (int i = 0; i >= 0; i = sym[i].next) {
      std::string piece{s.substr(sym[i].start, sym[i].length)};
      if (auto it = ids_.find(piece); it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      // Not in the vocabulary (a malformed file): its characters one by one, or unknown.
      for (std::size_t k = 0; k < piece.size();) {
        const auto c = static_cast<unsigned char>(piece[k]);
        std::size_t len = utf8_length(c);
        auto one = ids_.find(piece.substr(k, len));
        if (one != ids_.end())
          out.push_back(one->second);
        else if (vocab_.unknown)
          out.push_back(*vocab_.unknown);
        k += len;
      }
    }
  }

  pretokenizer pre_;
  special_matcher specials_;
  bool ignore_merges_;
  bool nfc_ = false; // Qwen's tokenizer.json normalizes to NFC first
  byte_level bytes_;
  std::unordered_map<std::string, token> ids_;
  std::unordered_map<std::string, int> ranks_;
  std::vector<std::string> decoded_;
};

} // namespace

} // namespace triad::detail

namespace triad {

expected<std::unique_ptr<model_tokenizer>> make_tokenizer(vocab v) {
  if (v.kinds.size() != v.tokens.size())
    return make_error(errc::invalid_argument, "tokenizer: token kinds and tokens differ in count");
  if (v.model == tokenizer_model::llama)
    return detail::make_spm_tokenizer(std::move(v));
  auto pre = pretokenizer::named(v.pre);
  if (!pre)
    return pre.error();
  // Llama 3's tokenizer.json sets ignore_merges: a piece that is a whole token is that token.
  const bool ignore_merges = v.pre == "llama-bpe" || v.pre == "llama3";
  // Qwen 2, 2.5 and 3's tokenizer.json normalize to NFC (GGUF does not carry normalizers; the
  // pre-tokenizer names the family).
  const bool nfc = v.pre == "qwen2";
  return std::unique_ptr<model_tokenizer>{
      new detail::bpe_tokenizer(std::move(v), std::move(*pre), ignore_merges, nfc)};
}

} // namespace triad
