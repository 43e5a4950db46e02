#pragma once

// Test GGUF model files: tiny random-weight models of each architecture triad computes, written
// the way llama.cpp's converter lays them out ([in, out] matmul dims, f32 norms, a llama file's
// q and k rows in interleaved rotary order), optionally with a chat vocabulary and template
// (test code only; gguf_reference.hpp has the reference forward pass).

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <stdexcept>

#include "devices/model.hpp"
#include "gguf/convert.hpp"
#include "gguf/file.hpp"
#include "gguf/writer.hpp"

namespace triad::test {

/// Throws when `ok` is false (the writer is also used outside Boost.Test, by
/// triad-test-write-model).
inline void require(bool ok, const std::string& what) {
  if (!ok)
    throw std::runtime_error("test model writer: " + what);
}

/// Whose control tokens, tool-call syntax and chat template a test vocabulary has.
enum class chat_family {
  chatml,  ///< ChatML and Hermes tool calls (Qwen): <|im_start|>, <tool_call>
  plain,   ///< ChatML without tool-call tokens: no call syntax
  llama3,  ///< Llama 3.1: header tokens, <|eot_id|>, <|eom_id|>, <|python_tag|>
  mistral, ///< Mistral v3: <s>, </s>, [INST], [TOOL_CALLS], [AVAILABLE_TOOLS]
};

/// What a test model file holds.
struct gguf_spec {
  model_arch arch = model_arch::llama;
  ggml_type type = ggml_type::f32; ///< of the matmul weights and the embedding
  unsigned layers = 2;
  unsigned hidden = 256;
  unsigned heads = 4;
  unsigned kv_heads = 2;
  unsigned head_dim = 64; ///< written as key_length when not hidden / heads
  unsigned ffn = 512;
  unsigned vocab = 300;
  unsigned context = 256;
  float theta = 10000.0f;
  bool tied = false;       ///< no output.weight
  bool bias = false;       ///< q, k and v biases
  bool qk_norm = false;    ///< q and k norms
  bool rope_freqs = false; ///< a rope_freqs.weight tensor (Llama 3.1's scaling)
  bool q5k_gate = false;   ///< layer 0's gate in q5_K (a type triad does not compute), zeros
  /// attn_v, ffn_down and output in this type instead of `type` (a Q4_K_M file holds them in
  /// q6_K): fused matrices of mixed types.
  std::optional<ggml_type> wide_type = std::nullopt;
  /// A byte-level BPE vocabulary with ChatML's control tokens and a ChatML chat template (the
  /// model's vocabulary is then that vocabulary's size, `vocab` is ignored).
  bool chat = false;
  std::string chat_template = {};           ///< with `chat`: instead of the family's template
  chat_family family = chat_family::chatml; ///< with `chat`: the vocabulary's family
  /// With `chat`: pads the vocabulary to this many tokens with ordinary tokens no merge makes
  /// ("<pad_N>"), so the output projection has a real model's size.
  unsigned vocab_pad = 0;
  std::uint64_t seed = 1;
};

/// Deterministic values uniform in [offset - scale, offset + scale).
inline std::vector<float> uniform(std::size_t n, float scale, float offset, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d{-1.0f, 1.0f};
  std::vector<float> out(n);
  for (auto& x : out)
    x = offset + scale * d(rng);
  return out;
}

/// GPT-2's spelling of byte `b` (byte-level BPE vocabularies).
inline std::string gpt2_spelling(unsigned b) {
  unsigned cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  if (!printable) {
    unsigned n = 0;
    for (unsigned x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
        ++n;
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

/// The ChatML template of the test models.
inline const char* chatml_template =
    "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{%- endif %}";

/// A Llama 3.1-style template: the tools as JSON in a system turn, as Llama 3.1's own template
/// shows them to the model (which answers a call as {"name", "parameters"}).
inline const char* llama3_template =
    "{{- bos_token }}{%- if tools %}<|start_header_id|>system<|end_header_id|>\n\nCall a "
    "function as {\"name\": name, \"parameters\": {...}}:\n{{ tools | tojson }}<|eot_id|>"
    "{%- endif %}{%- for message in messages %}<|start_header_id|>{{ message.role }}"
    "<|end_header_id|>\n\n{{ message.content }}<|eot_id|>{%- endfor %}{%- if "
    "add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{%- endif %}";

/// A Mistral v3-style template: the tools before the last user message.
inline const char* mistral_template =
    "{{- bos_token }}{%- for message in messages %}{%- if message.role == 'user' %}{%- if tools "
    "and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}[INST]"
    "{{ message.content }}[/INST]{%- else %}{{ message.content }}{{ eos_token }}{%- endif %}"
    "{%- endfor %}";

/// The chat vocabulary: 256 byte tokens, a few merges, then the family's control tokens (and,
/// for ChatML, the Hermes tool-call tokens); token kinds as GGUF numbers them.
inline void add_chat_vocabulary(gguf_writer& w, const gguf_spec& spec,
                                std::vector<std::string>& tokens) {
  std::vector<std::int32_t> kinds;
  for (unsigned b = 0; b < 256; ++b) {
    tokens.push_back(gpt2_spelling(b));
    kinds.push_back(1);
  }
  std::vector<std::string> merges{"h e", gpt2_spelling(' ') + " t", "l l", "he ll"};
  for (const auto& m : merges) {
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    tokens.push_back(joined);
    kinds.push_back(1);
  }
  auto add = [&](const char* spelling, std::int32_t kind) {
    tokens.push_back(spelling);
    kinds.push_back(kind);
    return static_cast<std::uint32_t>(tokens.size() - 1);
  };
  std::string tmpl = spec.chat_template;
  switch (spec.family) {
  case chat_family::chatml:
  case chat_family::plain: {
    add("<|endoftext|>", 3);
    add("<|im_start|>", 3);
    w.set_u32("tokenizer.ggml.eos_token_id", add("<|im_end|>", 3));
    if (spec.family == chat_family::chatml) {
      add("<tool_call>", 4);
      add("</tool_call>", 4);
    }
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    if (tmpl.empty())
      tmpl = chatml_template;
    break;
  }
  case chat_family::llama3: {
    w.set_u32("tokenizer.ggml.bos_token_id", add("<|begin_of_text|>", 3));
    add("<|end_of_text|>", 3);
    add("<|start_header_id|>", 3);
    add("<|end_header_id|>", 3);
    w.set_u32("tokenizer.ggml.eos_token_id", add("<|eot_id|>", 3));
    add("<|eom_id|>", 3);
    add("<|python_tag|>", 3);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    if (tmpl.empty())
      tmpl = llama3_template;
    break;
  }
  case chat_family::mistral: {
    w.set_u32("tokenizer.ggml.bos_token_id", add("<s>", 3));
    w.set_u32("tokenizer.ggml.eos_token_id", add("</s>", 3));
    for (const char* c :
         {"[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"})
      add(c, 3);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    if (tmpl.empty())
      tmpl = mistral_template;
    break;
  }
  }
  for (std::size_t i = tokens.size(); i < spec.vocab_pad; ++i)
    add(("<pad_" + std::to_string(i) + ">").c_str(), 1);
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", kinds);
  w.set_strings("tokenizer.ggml.merges", merges);
  w.set_string("tokenizer.chat_template", tmpl);
}

/// A writer holding the model `spec` describes.
inline gguf_writer model_writer(gguf_spec spec) {
  gguf_writer w;
  if (spec.chat) {
    std::vector<std::string> tokens;
    add_chat_vocabulary(w, spec, tokens);
    spec.vocab = static_cast<unsigned>(tokens.size());
  }
  const std::string arch{to_string(spec.arch)};
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "test-" + arch);
  w.set_u32(arch + ".block_count", spec.layers);
  w.set_u32(arch + ".embedding_length", spec.hidden);
  w.set_u32(arch + ".feed_forward_length", spec.ffn);
  w.set_u32(arch + ".attention.head_count", spec.heads);
  w.set_u32(arch + ".attention.head_count_kv", spec.kv_heads);
  w.set_u32(arch + ".context_length", spec.context);
  w.set_f32(arch + ".rope.freq_base", spec.theta);
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (spec.head_dim != spec.hidden / spec.heads) {
    w.set_u32(arch + ".attention.key_length", spec.head_dim);
    w.set_u32(arch + ".attention.value_length", spec.head_dim);
  }
  std::mt19937_64 rng{spec.seed};
  auto add = [&](const std::string& name, std::vector<std::uint64_t> dims, ggml_type type,
                 float scale, float offset) {
    std::size_t n = 1;
    for (auto d : dims)
      n *= d;
    auto values = uniform(n, scale, offset, rng);
    auto bytes = quantize(type, values);
    require(bytes.has_value(), name + ": " + (bytes ? std::string{} : bytes.error().message));
    auto added = w.add_tensor(name, type, std::move(dims), std::move(*bytes));
    require(added.has_value(), name + ": " + (added ? std::string{} : added.error().message));
  };
  auto fan = [](unsigned in) { return std::sqrt(3.0f / static_cast<float>(in)); };
  const unsigned q = spec.heads * spec.head_dim, kv = spec.kv_heads * spec.head_dim;
  add("token_embd.weight", {spec.hidden, spec.vocab}, spec.type, 1.0f, 0.0f);
  add("output_norm.weight", {spec.hidden}, ggml_type::f32, 0.1f, 1.0f);
  if (!spec.tied)
    add("output.weight", {spec.hidden, spec.vocab}, spec.wide_type.value_or(spec.type),
        fan(spec.hidden), 0.0f);
  if (spec.rope_freqs)
    add("rope_freqs.weight", {spec.head_dim / 2}, ggml_type::f32, 3.0f, 4.0f);
  for (unsigned l = 0; l < spec.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {spec.hidden}, ggml_type::f32, 0.1f, 1.0f);
    add(b + "attn_q.weight", {spec.hidden, q}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "attn_k.weight", {spec.hidden, kv}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "attn_v.weight", {spec.hidden, kv}, spec.wide_type.value_or(spec.type),
        fan(spec.hidden), 0.0f);
    add(b + "attn_output.weight", {q, spec.hidden}, spec.type, fan(q), 0.0f);
    if (spec.bias) {
      add(b + "attn_q.bias", {q}, ggml_type::f32, 0.2f, 0.0f);
      add(b + "attn_k.bias", {kv}, ggml_type::f32, 0.2f, 0.0f);
      add(b + "attn_v.bias", {kv}, ggml_type::f32, 0.2f, 0.0f);
    }
    if (spec.qk_norm) {
      add(b + "attn_q_norm.weight", {spec.head_dim}, ggml_type::f32, 0.3f, 1.0f);
      add(b + "attn_k_norm.weight", {spec.head_dim}, ggml_type::f32, 0.3f, 1.0f);
    }
    add(b + "ffn_norm.weight", {spec.hidden}, ggml_type::f32, 0.1f, 1.0f);
    if (spec.q5k_gate && l == 0)
      require(w.add_tensor(b + "ffn_gate.weight", ggml_type::q5_k, {spec.hidden, spec.ffn},
                           std::vector<std::byte>(tensor_bytes(
                               ggml_type::q5_k, std::uint64_t{spec.hidden} * spec.ffn)))
                  .has_value(),
              "q5_K gate");
    else
      add(b + "ffn_gate.weight", {spec.hidden, spec.ffn}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "ffn_up.weight", {spec.hidden, spec.ffn}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "ffn_down.weight", {spec.ffn, spec.hidden}, spec.wide_type.value_or(spec.type),
        fan(spec.ffn), 0.0f);
  }
  return w;
}

} // namespace triad::test
