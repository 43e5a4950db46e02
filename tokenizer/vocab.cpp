#include "tokenizer/vocab.hpp"

namespace triad {

std::string_view to_string(tokenizer_model value) noexcept {
  return value == tokenizer_model::gpt2 ? "gpt2" : "llama";
}

expected<vocab> vocab::from_gguf(const gguf_file& file) {
  vocab v;
  auto bad = [&](const std::string& what) {
    return make_error(errc::parse_error, "GGUF file '" + file.source() + "': " + what);
  };
  auto model = file.string("tokenizer.ggml.model");
  if (!model)
    return model.error();
  if (*model == "gpt2")
    v.model = tokenizer_model::gpt2;
  else if (*model == "llama")
    v.model = tokenizer_model::llama;
  else
    return make_error(errc::unsupported, "GGUF file '" + file.source() +
                                             "': tokenizer.ggml.model '" + std::string{*model} +
                                             "' is not supported (gpt2, llama)");
  if (file.find("tokenizer.ggml.pre") != nullptr) {
    auto pre = file.string("tokenizer.ggml.pre");
    if (!pre)
      return pre.error();
    v.pre = std::string{*pre};
  }
  auto tokens = file.strings("tokenizer.ggml.tokens");
  if (!tokens)
    return tokens.error();
  if (tokens->empty() || tokens->size() > (1u << 24))
    return bad("tokenizer.ggml.tokens has " + std::to_string(tokens->size()) +
               " entries (allowed 1 to 2^24)");
  v.tokens.assign(tokens->begin(), tokens->end());
  const std::size_t n = v.tokens.size();
  v.kinds.assign(n, token_kind::normal);
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    auto kinds = file.integers("tokenizer.ggml.token_type");
    if (!kinds)
      return kinds.error();
    if (kinds->size() != n)
      return bad("tokenizer.ggml.token_type has " + std::to_string(kinds->size()) +
                 " entries for " + std::to_string(n) + " tokens");
    for (std::size_t i = 0; i < n; ++i) {
      auto k = (*kinds)[i];
      if (k < 1 || k > 6)
        return bad("tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                   std::to_string(k) + " (allowed 1-6)");
      v.kinds[i] = static_cast<token_kind>(k);
    }
  }
  if (file.find("tokenizer.ggml.scores") != nullptr) {
    auto scores = file.numbers("tokenizer.ggml.scores");
    if (!scores)
      return scores.error();
    if (scores->size() != n)
      return bad("tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                 " entries for " + std::to_string(n) + " tokens");
    v.scores.assign(scores->begin(), scores->end());
  }
  if (file.find("tokenizer.ggml.merges") != nullptr) {
    auto merges = file.strings("tokenizer.ggml.merges");
    if (!merges)
      return merges.error();
    v.merges.assign(merges->begin(), merges->end());
  }
  if (v.model == tokenizer_model::gpt2 && v.merges.empty())
    return bad("a gpt2 tokenizer needs tokenizer.ggml.merges");
  if (v.model == tokenizer_model::llama && v.scores.empty())
    return bad("a llama (SentencePiece) tokenizer needs tokenizer.ggml.scores");
  for (auto [key, to] : {std::pair{"tokenizer.ggml.bos_token_id", &v.bos},
                         {"tokenizer.ggml.eos_token_id", &v.eos},
                         {"tokenizer.ggml.eot_token_id", &v.eot},
                         {"tokenizer.ggml.unknown_token_id", &v.unknown},
                         {"tokenizer.ggml.padding_token_id", &v.padding}}) {
    if (file.find(key) == nullptr)
      continue;
    auto id = file.unsigned_integer(key);
    if (!id)
      return id.error();
    if (*id >= n)
      return bad(std::string{key} + " is " + std::to_string(*id) + ", outside the " +
                 std::to_string(n) + "-token vocabulary");
    *to = static_cast<token>(*id);
  }
  if (file.find("tokenizer.ggml.add_bos_token") != nullptr) {
    auto add = file.boolean("tokenizer.ggml.add_bos_token");
    if (!add)
      return add.error();
    v.add_bos = *add;
  } else {
    v.add_bos = v.model == tokenizer_model::llama; // llama.cpp's default for SentencePiece
  }
  if (file.find("tokenizer.ggml.add_space_prefix") != nullptr) {
    auto add = file.boolean("tokenizer.ggml.add_space_prefix");
    if (!add)
      return add.error();
    v.add_space_prefix = *add;
  }
  if (file.find("tokenizer.chat_template") != nullptr) {
    auto t = file.string("tokenizer.chat_template");
    if (!t)
      return t.error();
    v.chat_template = std::string{*t};
  }
  return v;
}

} // namespace triad
