#pragma once

// A double-precision forward pass that reads a test GGUF file with llama.cpp's semantics, and
// temporary model files for Boost.Test cases (test code only).

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "tests/devices/gguf_models.hpp"

namespace triad::test {

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
