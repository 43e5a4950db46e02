#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// Splits text into the pieces a byte-level BPE merges within, as the model's Hugging Face
/// pre-tokenizer does: one or more patterns applied in turn (each piece of one split by the
/// next), matches and the text between them both kept as pieces. Patterns run in PCRE2 with
/// Unicode properties (\p{L}, \p{N}, Unicode \s); invalid UTF-8 never matches and passes as
/// its own pieces. Thread-safe: `split` may run on any number of threads at once.
class pretokenizer {
public:
  /// The pre-tokenizer a GGUF file names in `tokenizer.ggml.pre`: "default" / "gpt2" (GPT-2's
  /// pattern), "llama-bpe" / "llama3" (Llama 3), "qwen2" (Qwen2, 2.5 and 3), "smollm" (single
  /// digits, then GPT-2's). Others are `errc::unsupported`, naming the known ones.
  static expected<pretokenizer> named(std::string_view name);

  /// A pre-tokenizer of the given PCRE2 patterns, applied in order.
  static expected<pretokenizer> of(const std::vector<std::string>& patterns);

  /// Appends the pieces of `text` to `pieces`, in order; together they are `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  /// The names `named` accepts.
  static std::vector<std::string> names();

private:
  struct pattern;
  std::vector<std::shared_ptr<const pattern>> patterns_;
};

} // namespace triad
