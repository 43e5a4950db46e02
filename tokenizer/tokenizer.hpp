#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace triad {

/// A model's own tokenizer, built from the vocabulary in its GGUF file. Immutable once made, so
/// one instance serves every thread.
class model_tokenizer {
public:
  virtual ~model_tokenizer() = default;

  /// Appends the ids of `text` to `out`. Added (user-defined) tokens spelled in the text always
  /// become their ids; control tokens (<|im_start|>, <|eot_id|>) only with `specials`, so text
  /// from a client cannot forge a turn. No bos is added: templates and callers place it.
  virtual void encode_to(std::vector<token>& out, std::string_view text, bool specials) const = 0;

  /// The bytes of one id. A multi-byte character may span ids, so streams join bytes before
  /// they cut text; control and added tokens give their spelling.
  virtual std::string decode(token id) const = 0;

  /// The first control token spelled in `text` (checked on client text, which must not forge
  /// a turn where a template is tokenized with control tokens), if any.
  virtual std::optional<token> control_in(std::string_view text) const = 0;

  /// `encode_to` into a new vector.
  std::vector<token> encode(std::string_view text, bool specials) const {
    std::vector<token> out;
    encode_to(out, text, specials);
    return out;
  }

  /// The bytes of `ids`, joined.
  std::string decode(const std::vector<token>& ids) const {
    std::string out;
    for (auto id : ids)
      out += decode(id);
    return out;
  }

  /// The vocabulary it was built from.
  const triad::vocab& vocabulary() const noexcept { return vocab_; }

protected:
  /// Keeps the vocabulary the implementation was built from.
  explicit model_tokenizer(triad::vocab v)
      : vocab_(std::move(v)) {}

  triad::vocab vocab_; ///< the vocabulary, for implementations
};

/// The tokenizer `v` describes: byte-level BPE for "gpt2" with the pre-tokenizer it names,
/// SentencePiece BPE (scores, byte fallback) for "llama". Errors: an unsupported pre-tokenizer.
expected<std::unique_ptr<model_tokenizer>> make_tokenizer(vocab v);

} // namespace triad
