#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/tokenizer.hpp"
#include "gguf/file.hpp"
#include "runtime/error.hpp"

namespace triad {

/// What a vocabulary entry is (GGUF's `tokenizer.ggml.token_type` numbering).
enum class token_kind : std::uint8_t {
  normal = 1,       ///< text, merged from pieces
  unknown = 2,      ///< the unknown token
  control = 3,      ///< a control token (<|im_start|>, <|eot_id|>); matched in text only when asked
  user_defined = 4, ///< an added token, always matched in text as a whole
  unused = 5,       ///< a reserved id
  byte = 6,         ///< a byte-fallback token, "<0xAB>"
};

/// The tokenizer algorithms GGUF files name in `tokenizer.ggml.model`.
enum class tokenizer_model {
  gpt2,  ///< byte-level BPE with merges (Llama 3, Qwen2/2.5/3, SmolLM2)
  llama, ///< SentencePiece BPE with scores and byte fallback (Llama 2, Mistral 7B, TinyLlama)
};

/// A model's vocabulary as its GGUF file stores it (`tokenizer.ggml.*`).
struct vocab {
  tokenizer_model model = tokenizer_model::gpt2; ///< the algorithm
  std::string pre = "default";        ///< the pre-tokenizer's name (`tokenizer.ggml.pre`)
  std::vector<std::string> tokens;    ///< by id
  std::vector<token_kind> kinds;      ///< by id
  std::vector<float> scores;          ///< by id (SentencePiece); empty when absent
  std::vector<std::string> merges;    ///< "left right", by rank (byte-level BPE)
  std::optional<token> bos;           ///< begin of sequence
  std::optional<token> eos;           ///< end of sequence
  std::optional<token> eot;           ///< end of turn, where the model has one
  std::optional<token> unknown;       ///< the unknown token
  std::optional<token> padding;       ///< padding
  bool add_bos = false;               ///< the model's prompts start with bos
  bool add_space_prefix = true;       ///< SentencePiece: a space before each text fragment
  std::string chat_template;          ///< `tokenizer.chat_template`; empty when absent

  /// Reads the vocabulary of `file`. Errors name the file and key: a missing token list, an
  /// unknown tokenizer model (the supported ones are listed), lists of different lengths, a
  /// special id outside the vocabulary.
  static expected<vocab> from_gguf(const gguf_file& file);
};

/// GGUF's name of a tokenizer model: "gpt2" or "llama".
std::string_view to_string(tokenizer_model value) noexcept;

} // namespace triad
