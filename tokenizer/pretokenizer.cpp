#include "tokenizer/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace triad {

namespace {

// GPT-2's pattern (the ByteLevel pre-tokenizer's, and llama.cpp's "default").
constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's Split pattern (tokenizer.json, "llama-bpe" in llama.cpp).
constexpr const char* llama3_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's Split pattern: as Llama 3's with single digits.
constexpr const char* qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

} // namespace

struct pretokenizer::pattern {
  pcre2_code* code = nullptr;
  ~pattern() { pcre2_code_free(code); }
};

expected<pretokenizer> pretokenizer::of(const std::vector<std::string>& patterns) {
  pretokenizer p;
  for (const auto& text : patterns) {
    int status = 0;
    PCRE2_SIZE at = 0;
    auto compiled = std::make_shared<pattern>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &status, &at,
                                   nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(status, message, sizeof(message));
      return make_error(errc::invalid_argument,
                        "pre-tokenizer pattern '" + text + "' does not compile at offset " +
                            std::to_string(at) + ": " + reinterpret_cast<const char*>(message));
    }
    // JIT where this PCRE2 has it; the interpreter matches the same.
    (void)pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    p.patterns_.push_back(std::move(compiled));
  }
  return p;
}

expected<pretokenizer> pretokenizer::named(std::string_view name) {
  if (name == "default" || name == "gpt2")
    return of({gpt2_pattern});
  if (name == "llama-bpe" || name == "llama3")
    return of({llama3_pattern});
  if (name == "qwen2")
    return of({qwen2_pattern});
  if (name == "smollm")
    return of({R"(\p{N})", gpt2_pattern});
  std::string known;
  for (const auto& n : names())
    known += (known.empty() ? "" : ", ") + n;
  return make_error(errc::unsupported, "tokenizer.ggml.pre '" + std::string{name} +
                                           "' is not supported (" + known + ")");
}

std::vector<std::string> pretokenizer::names() {
  return {"default", "gpt2", "llama-bpe", "llama3", "qwen2", "smollm"};
}

void pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& p : patterns_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(p->code, nullptr);
    next.clear();
    for (auto piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      PCRE2_SIZE offset = 0, kept = 0;
      while (offset < piece.size()) {
        int rc = pcre2_match(p->code, subject, piece.size(), offset, 0, match, nullptr);
        if (rc < 0)
          break;
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        PCRE2_SIZE begin = ovector[0], end = ovector[1];
        if (begin > kept)
          next.push_back(piece.substr(kept, begin - kept)); // text between matches
        if (end > begin)
          next.push_back(piece.substr(begin, end - begin));
        kept = end;
        offset = end > begin ? end : end + 1; // an empty match moves on one code unit
      }
      if (kept < piece.size())
        next.push_back(piece.substr(kept));
    }
    pcre2_match_data_free(match);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

} // namespace triad
