#include "devices/gguf_model.hpp"

#include <algorithm>
#include <string>

#include "gguf/convert.hpp"

namespace triad {

namespace {

constexpr model_arch supported[] = {model_arch::llama, model_arch::qwen2, model_arch::qwen3};

std::string supported_list() {
  std::string out;
  for (auto a : supported)
    out += (out.empty() ? "" : ", ") + std::string{to_string(a)};
  return out;
}

std::string layer_tensor(unsigned layer, const char* part) {
  return "blk." + std::to_string(layer) + "." + part;
}

// The dims a tensor must have, fastest first.
using dims = std::vector<std::uint64_t>;

std::string describe(const dims& d) {
  std::string out = "[";
  for (std::size_t i = 0; i < d.size(); ++i)
    out += (i ? ", " : "") + std::to_string(d[i]);
  return out + "]";
}

bool readable(ggml_type t) {
  switch (t) {
  case ggml_type::f32:
  case ggml_type::f16:
  case ggml_type::bf16:
  case ggml_type::q4_0:
  case ggml_type::q8_0:
  case ggml_type::q4_k:
  case ggml_type::q6_k:
    return true;
  default:
    return false;
  }
}

// Every tensor a shape needs, with its dims.
std::vector<std::pair<std::string, dims>> needed(const model_shape& s) {
  const std::uint64_t h = s.hidden, q = std::uint64_t{s.heads} * s.head_dim,
                      kv = std::uint64_t{s.kv_heads} * s.head_dim;
  std::vector<std::pair<std::string, dims>> out{{"token_embd.weight", {h, s.vocab}},
                                                {"output_norm.weight", {h}}};
  if (!s.tied_output)
    out.push_back({"output.weight", {h, s.vocab}});
  for (unsigned l = 0; l < s.layers; ++l) {
    out.push_back({layer_tensor(l, "attn_norm.weight"), {h}});
    out.push_back({layer_tensor(l, "attn_q.weight"), {h, q}});
    out.push_back({layer_tensor(l, "attn_k.weight"), {h, kv}});
    out.push_back({layer_tensor(l, "attn_v.weight"), {h, kv}});
    out.push_back({layer_tensor(l, "attn_output.weight"), {q, h}});
    out.push_back({layer_tensor(l, "ffn_norm.weight"), {h}});
    out.push_back({layer_tensor(l, "ffn_gate.weight"), {h, s.ffn}});
    out.push_back({layer_tensor(l, "ffn_up.weight"), {h, s.ffn}});
    out.push_back({layer_tensor(l, "ffn_down.weight"), {s.ffn, h}});
    if (s.qkv_bias) {
      out.push_back({layer_tensor(l, "attn_q.bias"), {q}});
      out.push_back({layer_tensor(l, "attn_k.bias"), {kv}});
      out.push_back({layer_tensor(l, "attn_v.bias"), {kv}});
    }
    if (s.qk_norm) {
      out.push_back({layer_tensor(l, "attn_q_norm.weight"), {s.head_dim}});
      out.push_back({layer_tensor(l, "attn_k_norm.weight"), {s.head_dim}});
    }
  }
  return out;
}

// A tensor decoded to floats in its own (ggml) layout: dims[1] rows of dims[0] values.
expected<std::vector<float>> decode(const gguf_file& file, const std::string& name) {
  const auto* t = file.tensor(name);
  if (t == nullptr)
    return make_error(errc::not_found,
                      "GGUF file '" + file.source() + "' has no tensor '" + name + "'");
  std::vector<float> out(t->elements);
  if (auto ok = dequantize(t->type, t->bytes, out); !ok)
    return make_error(ok.error().code, "GGUF file '" + file.source() + "', tensor '" + name +
                                           "': " + ok.error().message);
  return out;
}

class gguf_source final : public weight_source {
public:
  gguf_source(std::shared_ptr<const gguf_file> file, const model_shape& shape, dtype type)
      : file_(std::move(file))
      , shape_(shape)
      , type_(type) {}

  expected<model_weights> globals() override {
    model_weights w;
    auto norm = decode(*file_, "output_norm.weight");
    if (!norm)
      return norm.error();
    w.final_norm = std::move(*norm);
    // The embedding: kept in its block type, or decoded to floats.
    if (kept_quantized(file_->tensor("token_embd.weight")->type)) {
      w.embedding_q = {rows_of("token_embd.weight")};
    } else {
      auto embedding = decode(*file_, "token_embd.weight");
      if (!embedding)
        return embedding.error();
      w.embedding = std::move(*embedding);
    }
    // The output projection: a tied embedding kept quantized serves as it (no output fields);
    // else its rows kept quantized, or the transpose of its floats.
    if (shape_.tied_output && !w.embedding_q.empty())
      return w;
    const char* name = shape_.tied_output ? "token_embd.weight" : "output.weight";
    if (kept_quantized(file_->tensor(name)->type)) {
      w.output_q = {rows_of(name)};
    } else if (shape_.tied_output) {
      w.output = transposed(w.embedding, shape_.vocab, shape_.hidden);
    } else {
      auto output = decode(*file_, name);
      if (!output)
        return output.error();
      w.output = transposed(*output, shape_.vocab, shape_.hidden);
    }
    return w;
  }

  expected<layer_weights> layer(unsigned l) override {
    const auto& s = shape_;
    layer_weights w;
    auto get = [&](const char* part) { return decode(*file_, layer_tensor(l, part)); };
    // q, k and v: [out][in] in the file (a llama file's q and k rows in adjacent-pair rotary
    // order, which the backend rotates so: shape.rope_adjacent). A matrix whose parts are all
    // block types stays in them: its rows are the file's mapped bytes.
    auto ok = fused(l, {"attn_q.weight", "attn_k.weight", "attn_v.weight"}, w.wqkv, w.wqkv_q);
    if (ok)
      ok = fused(l, {"attn_output.weight"}, w.wo, w.wo_q);
    if (ok)
      ok = fused(l, {"ffn_gate.weight", "ffn_up.weight"}, w.wgate_up, w.wgate_up_q);
    if (ok)
      ok = fused(l, {"ffn_down.weight"}, w.wdown, w.wdown_q);
    if (!ok)
      return ok.error();
    for (auto* m : {&w.wqkv, &w.wo, &w.wgate_up, &w.wdown})
      round_to_type(*m);
    auto attn_norm = get("attn_norm.weight"), ffn_norm = get("ffn_norm.weight");
    for (auto* t : {&attn_norm, &ffn_norm})
      if (!*t)
        return t->error();
    w.attn_norm = std::move(*attn_norm);
    w.mlp_norm = std::move(*ffn_norm);
    if (s.qkv_bias) {
      auto bq = get("attn_q.bias"), bk = get("attn_k.bias"), bv = get("attn_v.bias");
      for (auto* t : {&bq, &bk, &bv})
        if (!*t)
          return t->error();
      w.bqkv = std::move(*bq);
      w.bqkv.insert(w.bqkv.end(), bk->begin(), bk->end());
      w.bqkv.insert(w.bqkv.end(), bv->begin(), bv->end());
    }
    if (s.qk_norm) {
      auto qn = get("attn_q_norm.weight"), kn = get("attn_k_norm.weight");
      for (auto* t : {&qn, &kn})
        if (!*t)
          return t->error();
      w.q_norm = std::move(*qn);
      w.k_norm = std::move(*kn);
    }
    return w;
  }

private:
  using part_list = std::initializer_list<const char*>;

  // The matrix of `parts` of layer `l` (each [out_i][in] in the file) fused by output rows: the
  // file's rows when every part is a block type, else decoded and transposed into `plain`
  // ([in][sum of out_i]).
  expected<void> fused(unsigned l, part_list parts, std::vector<float>& plain,
                       quantized_matrix& runs) const {
    if (quantized(l, parts)) {
      for (const char* part : parts)
        runs.push_back(rows(l, part));
      return {};
    }
    const std::size_t in = file_->tensor(layer_tensor(l, *parts.begin()))->dims[0];
    std::size_t width = 0;
    for (const char* part : parts)
      width += file_->tensor(layer_tensor(l, part))->dims[1];
    plain.resize(in * width);
    std::size_t col = 0;
    for (const char* part : parts) {
      auto values = decode(*file_, layer_tensor(l, part));
      if (!values)
        return values.error();
      const std::size_t out = values->size() / in;
      transpose_into(*values, out, in, plain, width, col);
      col += out;
    }
    return {};
  }

  // Whether every one of `parts` of layer `l` is a block type the backend keeps (check_tensors
  // made sure they exist).
  bool quantized(unsigned l, part_list parts) const {
    return std::all_of(parts.begin(), parts.end(), [&](const char* part) {
      return kept_quantized(file_->tensor(layer_tensor(l, part))->type);
    });
  }

  // The rows of a 2-D tensor as the file stores them: the file's mapped bytes, which the
  // rows keep mapped (every device of the process reads the same pages).
  quantized_rows rows_of(const std::string& name) const {
    const auto* t = file_->tensor(name);
    return {t->type, static_cast<unsigned>(t->dims[1]), t->bytes, file_};
  }

  quantized_rows rows(unsigned l, const char* part) const { return rows_of(layer_tensor(l, part)); }

  void round_to_type(std::vector<float>& m) const {
    if (type_ == dtype::bf16)
      for (auto& x : m)
        x = round_to_bf16(x);
  }

  // `src` is [rows][cols] (a ggml [cols, rows] tensor): writes its transpose into columns
  // col0..col0+rows-1 of the [cols][dst_cols] matrix `dst`.
  static void transpose_into(const std::vector<float>& src, std::size_t rows, std::size_t cols,
                             std::vector<float>& dst, std::size_t dst_cols, std::size_t col0) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        dst[c * dst_cols + col0 + r] = src[r * cols + c];
  }

  // The [cols][rows] transpose of the [rows][cols] matrix `src`; `out_cols` = rows.
  static std::vector<float> transposed(const std::vector<float>& src, std::size_t rows,
                                       std::size_t cols) {
    std::vector<float> out(src.size());
    transpose_into(src, rows, cols, out, rows, 0);
    return out;
  }

  std::shared_ptr<const gguf_file> file_;
  model_shape shape_;
  dtype type_;
};

} // namespace

expected<model_shape> shape_of(const gguf_file& file) {
  auto arch_name = file.string("general.architecture");
  if (!arch_name)
    return arch_name.error();
  model_shape s;
  bool known = false;
  for (auto a : supported)
    if (to_string(a) == *arch_name) {
      s.arch = a;
      known = true;
    }
  if (!known)
    return make_error(errc::unsupported, "GGUF file '" + file.source() + "': architecture '" +
                                             std::string{*arch_name} +
                                             "' is not supported (supported: " + supported_list() +
                                             ")");
  const std::string p = std::string{*arch_name} + ".";
  auto count = [&](const std::string& key, unsigned& to) -> expected<void> {
    auto v = file.unsigned_integer(p + key);
    if (!v)
      return v.error();
    if (*v == 0 || *v > (1u << 24))
      return make_error(errc::parse_error, "GGUF file '" + file.source() + "': " + p + key +
                                               " is " + std::to_string(*v) +
                                               " (allowed 1 to 2^24)");
    to = static_cast<unsigned>(*v);
    return {};
  };
  for (auto [key, to] : {std::pair{"block_count", &s.layers},
                         {"embedding_length", &s.hidden},
                         {"feed_forward_length", &s.ffn},
                         {"attention.head_count", &s.heads},
                         {"context_length", &s.max_context}})
    if (auto ok = count(key, *to); !ok)
      return ok.error();
  s.kv_heads = s.heads;
  if (file.find(p + "attention.head_count_kv") != nullptr)
    if (auto ok = count("attention.head_count_kv", s.kv_heads); !ok)
      return ok.error();
  s.head_dim = s.hidden / s.heads;
  if (file.find(p + "attention.key_length") != nullptr)
    if (auto ok = count("attention.key_length", s.head_dim); !ok)
      return ok.error();
  for (const char* key : {"attention.value_length", "rope.dimension_count"})
    if (file.find(p + key) != nullptr) {
      unsigned v = 0;
      if (auto ok = count(key, v); !ok)
        return ok.error();
      if (v != s.head_dim)
        return make_error(errc::unsupported,
                          "GGUF file '" + file.source() + "': " + p + key + " is " +
                              std::to_string(v) + " but the head width is " +
                              std::to_string(s.head_dim) +
                              "; triad computes rotary positions over whole heads with equal "
                              "key and value widths");
    }
  auto eps = file.number(p + "attention.layer_norm_rms_epsilon");
  if (!eps)
    return eps.error();
  s.rms_eps = static_cast<float>(*eps);
  if (file.find(p + "rope.freq_base") != nullptr) {
    auto base = file.number(p + "rope.freq_base");
    if (!base)
      return base.error();
    s.rope_theta = *base;
  }
  if (file.find(p + "rope.scaling.type") != nullptr) {
    auto kind = file.string(p + "rope.scaling.type");
    if (!kind)
      return kind.error();
    if (*kind == "linear") {
      auto factor = file.number(p + "rope.scaling.factor");
      if (!factor)
        return factor.error();
      if (*factor <= 0)
        return make_error(errc::parse_error, "GGUF file '" + file.source() + "': " + p +
                                                 "rope.scaling.factor must be positive");
      s.rope_freq_factors.assign(s.head_dim / 2, static_cast<float>(*factor));
    } else if (*kind != "none" && !(*kind == "llama3" && file.tensor("rope_freqs.weight"))) {
      return make_error(errc::unsupported, "GGUF file '" + file.source() + "': " + p +
                                               "rope.scaling.type '" + std::string{*kind} +
                                               "' is not supported (none, linear, and llama3 "
                                               "through rope_freqs.weight are)");
    }
  }
  if (const auto* freqs = file.tensor("rope_freqs.weight")) {
    if (freqs->elements != s.head_dim / 2)
      return make_error(errc::parse_error, "GGUF file '" + file.source() +
                                               "': rope_freqs.weight must be head_dim / 2 = " +
                                               std::to_string(s.head_dim / 2) + " floats");
    std::vector<float> f(freqs->elements);
    if (!dequantize(freqs->type, freqs->bytes, f))
      return make_error(errc::parse_error, "GGUF file '" + file.source() +
                                               "': rope_freqs.weight must be head_dim / 2 = " +
                                               std::to_string(s.head_dim / 2) + " floats");
    if (!s.rope_freq_factors.empty())
      for (std::size_t i = 0; i < f.size(); ++i)
        f[i] *= s.rope_freq_factors[i];
    s.rope_freq_factors = std::move(f);
  }
  const auto* embd = file.tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2)
    return make_error(errc::parse_error,
                      "GGUF file '" + file.source() + "' has no 2-D tensor token_embd.weight");
  if (embd->dims[1] > (1u << 24))
    return make_error(errc::parse_error, "GGUF file '" + file.source() + "': vocabulary of " +
                                             std::to_string(embd->dims[1]) + " is too large");
  s.vocab = static_cast<unsigned>(embd->dims[1]);
  s.tied_output = file.tensor("output.weight") == nullptr;
  s.qkv_bias = file.tensor("blk.0.attn_q.bias") != nullptr;
  s.qk_norm = file.tensor("blk.0.attn_q_norm.weight") != nullptr;
  // llama.cpp's converter reorders a llama model's q and k rows so rotary pairs are adjacent;
  // qwen files keep Hugging Face's halves.
  s.rope_adjacent = s.arch == model_arch::llama;
  if (s.arch == model_arch::qwen3 && !s.qk_norm)
    return make_error(errc::parse_error, "GGUF file '" + file.source() +
                                             "': a qwen3 model needs blk.N.attn_q_norm.weight");
  s.file = file.source();
  if (auto name = file.string("general.name"))
    s.name = std::string{*name};
  else
    s.name = std::filesystem::path{file.source()}.stem().string();
  if (auto ok = s.validate(); !ok)
    return make_error(ok.error().code, "GGUF file '" + file.source() + "': " + ok.error().message);
  return s;
}

expected<void> check_tensors(const gguf_file& file, const model_shape& shape) {
  for (const auto& [name, want] : needed(shape)) {
    const auto* t = file.tensor(name);
    if (t == nullptr)
      return make_error(errc::parse_error,
                        "GGUF file '" + file.source() + "' has no tensor '" + name + "', which a " +
                            std::string{to_string(shape.arch)} + " model of this shape needs");
    if (t->dims != want)
      return make_error(errc::parse_error, "GGUF file '" + file.source() + "': tensor '" + name +
                                               "' has dims " + describe(t->dims) + ", expected " +
                                               describe(want));
    if (!readable(t->type))
      return make_error(errc::unsupported,
                        "GGUF file '" + file.source() + "': tensor '" + name + "' is " +
                            std::string{to_string(t->type)} +
                            ", which triad does not compute (f32, f16, bf16, q4_0, q8_0, q4_K "
                            "and q6_K)");
  }
  return {};
}

expected<gguf_model> open_gguf_model(const std::filesystem::path& path) {
  auto file = gguf_file::open(path);
  if (!file)
    return file.error();
  auto shape = shape_of(**file);
  if (!shape)
    return shape.error();
  if (auto ok = check_tensors(**file, *shape); !ok)
    return ok.error();
  return gguf_model{std::move(*file), std::move(*shape)};
}

std::unique_ptr<weight_source> gguf_weight_source(std::shared_ptr<const gguf_file> file,
                                                  const model_shape& shape, dtype type) {
  return std::make_unique<gguf_source>(std::move(file), shape, type);
}

} // namespace triad
