#pragma once

// Test GGUF model files: tiny random-weight models of each architecture triad computes, written
// the way llama.cpp's converter lays them out ([in, out] matmul dims, f32 norms, a llama file's
// q and k rows in interleaved rotary order), and a double-precision forward pass that reads the
// file with llama.cpp's semantics (test code only).

#include <cmath>
#include <filesystem>
#include <random>
#include <cstdint>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "devices/model.hpp"
#include "gguf/convert.hpp"
#include "gguf/file.hpp"
#include "gguf/writer.hpp"

namespace triad::test {

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
  bool tied = false;         ///< no output.weight
  bool bias = false;         ///< q, k and v biases
  bool qk_norm = false;      ///< q and k norms
  bool rope_freqs = false;   ///< a rope_freqs.weight tensor (Llama 3.1's scaling)
  bool q5k_gate = false;     ///< layer 0's gate in q5_K (a type triad does not compute), zeros
  /// A byte-level BPE vocabulary with ChatML's control tokens and a ChatML chat template (the
  /// model's vocabulary is then that vocabulary's size, `vocab` is ignored).
  bool chat = false;
  std::string chat_template = {}; ///< with `chat`: instead of the ChatML template
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

/// The chat vocabulary: 256 byte tokens, a few merges, ChatML's control tokens and the Hermes
/// tool-call tokens; token kinds as GGUF numbers them.
inline void add_chat_vocabulary(gguf_writer& w, const gguf_spec& spec, std::vector<std::string>& tokens) {
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
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(special);
    kinds.push_back(3);
  }
  for (const char* added : {"<tool_call>", "</tool_call>"}) {
    tokens.push_back(added);
    kinds.push_back(4);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", kinds);
  w.set_strings("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.eos_token_id", 256 + 4 + 2); // <|im_end|>
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template",
               spec.chat_template.empty() ? std::string{chatml_template} : spec.chat_template);
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
    BOOST_REQUIRE(bytes);
    BOOST_REQUIRE(w.add_tensor(name, type, std::move(dims), std::move(*bytes)));
  };
  auto fan = [](unsigned in) { return std::sqrt(3.0f / static_cast<float>(in)); };
  const unsigned q = spec.heads * spec.head_dim, kv = spec.kv_heads * spec.head_dim;
  add("token_embd.weight", {spec.hidden, spec.vocab}, spec.type, 1.0f, 0.0f);
  add("output_norm.weight", {spec.hidden}, ggml_type::f32, 0.1f, 1.0f);
  if (!spec.tied)
    add("output.weight", {spec.hidden, spec.vocab}, spec.type, fan(spec.hidden), 0.0f);
  if (spec.rope_freqs)
    add("rope_freqs.weight", {spec.head_dim / 2}, ggml_type::f32, 3.0f, 4.0f);
  for (unsigned l = 0; l < spec.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {spec.hidden}, ggml_type::f32, 0.1f, 1.0f);
    add(b + "attn_q.weight", {spec.hidden, q}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "attn_k.weight", {spec.hidden, kv}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "attn_v.weight", {spec.hidden, kv}, spec.type, fan(spec.hidden), 0.0f);
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
      BOOST_REQUIRE(w.add_tensor(
          b + "ffn_gate.weight", ggml_type::q5_k, {spec.hidden, spec.ffn},
          std::vector<std::byte>(tensor_bytes(ggml_type::q5_k, std::uint64_t{spec.hidden} * spec.ffn))));
    else
      add(b + "ffn_gate.weight", {spec.hidden, spec.ffn}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "ffn_up.weight", {spec.hidden, spec.ffn}, spec.type, fan(spec.hidden), 0.0f);
    add(b + "ffn_down.weight", {spec.ffn, spec.hidden}, spec.type, fan(spec.ffn), 0.0f);
  }
  return w;
}

/// A file in the temp directory, removed with the object.
struct temp_model {
  explicit temp_model(const gguf_spec& spec, const std::string& name = "model")
      : path(std::filesystem::temp_directory_path() /
             ("triad-" + name + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(counter()++) + ".gguf")) {
    BOOST_REQUIRE(model_writer(spec).write(path));
  }
  ~temp_model() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path;
};

/// The logits after the last of `tokens`, from the file's tensors in double precision with
/// llama.cpp's semantics: y = W x over [out][in] rows, llama's rotary pairs adjacent (2i, 2i+1),
/// qwen's pairs halves apart (i, i + d/2), biases, q/k norms, rope_freqs dividing frequencies,
/// the embedding as output projection when output.weight is absent.
inline std::vector<double> file_reference_logits(const gguf_file& f,
                                                 const std::vector<std::uint32_t>& tokens) {
  const std::string arch{*f.string("general.architecture")};
  auto u = [&](const std::string& key) {
    return static_cast<std::size_t>(*f.unsigned_integer(arch + "." + key));
  };
  const std::size_t L = u("block_count"), H = u("embedding_length"), F = u("feed_forward_length"),
                    NH = u("attention.head_count"), NKV = u("attention.head_count_kv");
  const std::size_t hd = f.find(arch + ".attention.key_length") ? u("attention.key_length")
                                                                 : H / NH;
  const double eps = *f.number(arch + ".attention.layer_norm_rms_epsilon");
  const double theta = *f.number(arch + ".rope.freq_base");
  const bool neox = arch != "llama";
  auto tensor = [&](const std::string& name) {
    const auto* t = f.tensor(name);
    BOOST_REQUIRE_MESSAGE(t != nullptr, name);
    std::vector<float> v(t->elements);
    BOOST_REQUIRE(dequantize(t->type, t->bytes, v));
    return std::vector<double>(v.begin(), v.end());
  };
  auto has = [&](const std::string& name) { return f.tensor(name) != nullptr; };
  std::vector<double> factors(hd / 2, 1.0);
  if (has("rope_freqs.weight"))
    factors = tensor("rope_freqs.weight");
  // y[out] = sum_in W[out][in] x[in].
  auto matvec = [](const std::vector<double>& W, const std::vector<double>& x, std::size_t out) {
    const std::size_t in = x.size();
    std::vector<double> y(out, 0.0);
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < in; ++i)
        y[o] += W[o * in + i] * x[i];
    return y;
  };
  auto rmsnorm = [&](const double* x, const double* g, std::size_t n, double* out) {
    double ss = 0;
    for (std::size_t i = 0; i < n; ++i)
      ss += x[i] * x[i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (std::size_t i = 0; i < n; ++i)
      out[i] = x[i] * scale * g[i];
  };
  auto rope = [&](double* v, std::size_t pos) {
    for (std::size_t i = 0; i < hd / 2; ++i) {
      const double freq =
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd)) / factors[i];
      const double a = static_cast<double>(pos) * freq, c = std::cos(a), s = std::sin(a);
      const std::size_t i0 = neox ? i : 2 * i, i1 = neox ? i + hd / 2 : 2 * i + 1;
      const double x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * c - x1 * s;
      v[i1] = x1 * c + x0 * s;
    }
  };
  const auto embd = tensor("token_embd.weight");
  const std::size_t T = tokens.size();
  std::vector<std::vector<double>> x(T);
  for (std::size_t t = 0; t < T; ++t)
    x[t].assign(embd.begin() + static_cast<std::ptrdiff_t>(tokens[t] * H),
                embd.begin() + static_cast<std::ptrdiff_t>((tokens[t] + 1) * H));
  for (std::size_t l = 0; l < L; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const auto an = tensor(b + "attn_norm.weight"), wq = tensor(b + "attn_q.weight"),
               wk = tensor(b + "attn_k.weight"), wv = tensor(b + "attn_v.weight"),
               wo = tensor(b + "attn_output.weight"), fn = tensor(b + "ffn_norm.weight"),
               wg = tensor(b + "ffn_gate.weight"), wu = tensor(b + "ffn_up.weight"),
               wd = tensor(b + "ffn_down.weight");
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<double> h(H);
      rmsnorm(x[t].data(), an.data(), H, h.data());
      q[t] = matvec(wq, h, NH * hd);
      k[t] = matvec(wk, h, NKV * hd);
      v[t] = matvec(wv, h, NKV * hd);
      if (has(b + "attn_q.bias")) {
        const auto bq = tensor(b + "attn_q.bias"), bk = tensor(b + "attn_k.bias"),
                   bv = tensor(b + "attn_v.bias");
        for (std::size_t i = 0; i < q[t].size(); ++i)
          q[t][i] += bq[i];
        for (std::size_t i = 0; i < k[t].size(); ++i) {
          k[t][i] += bk[i];
          v[t][i] += bv[i];
        }
      }
      if (has(b + "attn_q_norm.weight")) {
        const auto qn = tensor(b + "attn_q_norm.weight"), kn = tensor(b + "attn_k_norm.weight");
        for (std::size_t h2 = 0; h2 < NH; ++h2)
          rmsnorm(&q[t][h2 * hd], qn.data(), hd, &q[t][h2 * hd]);
        for (std::size_t h2 = 0; h2 < NKV; ++h2)
          rmsnorm(&k[t][h2 * hd], kn.data(), hd, &k[t][h2 * hd]);
      }
      for (std::size_t h2 = 0; h2 < NH; ++h2)
        rope(&q[t][h2 * hd], t);
      for (std::size_t h2 = 0; h2 < NKV; ++h2)
        rope(&k[t][h2 * hd], t);
    }
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<double> attn(NH * hd, 0.0);
      for (std::size_t h2 = 0; h2 < NH; ++h2) {
        const std::size_t g = h2 / (NH / NKV);
        std::vector<double> p(t + 1);
        double mx = -1e300, total = 0;
        for (std::size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (std::size_t i = 0; i < hd; ++i)
            d += q[t][h2 * hd + i] * k[j][g * hd + i];
          p[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[j]);
        }
        for (auto& e : p)
          total += (e = std::exp(e - mx));
        for (std::size_t j = 0; j <= t; ++j)
          for (std::size_t i = 0; i < hd; ++i)
            attn[h2 * hd + i] += p[j] / total * v[j][g * hd + i];
      }
      auto o = matvec(wo, attn, H);
      for (std::size_t i = 0; i < H; ++i)
        x[t][i] += o[i];
      std::vector<double> h(H);
      rmsnorm(x[t].data(), fn.data(), H, h.data());
      auto gate = matvec(wg, h, F), up = matvec(wu, h, F);
      std::vector<double> act(F);
      for (std::size_t i = 0; i < F; ++i)
        act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      auto down = matvec(wd, act, H);
      for (std::size_t i = 0; i < H; ++i)
        x[t][i] += down[i];
    }
  }
  std::vector<double> h(H);
  const auto on = tensor("output_norm.weight");
  rmsnorm(x[T - 1].data(), on.data(), H, h.data());
  const auto out = has("output.weight") ? tensor("output.weight") : embd;
  return matvec(out, h, out.size() / H);
}

} // namespace triad::test
