#pragma once

#include <cmath>
#include <vector>

#include "devices/cpu/weights.hpp"
#include "devices/model.hpp"
#include "devices/tokenizer.hpp"

namespace triad::test {

/// A naive forward pass in double precision, straight from the definitions (test code only):
/// the logits after the last of `tokens`, computed from scratch.
inline std::vector<double> reference_logits(const model_shape& s, const model_weights& w,
                                            const std::vector<token>& tokens) {
  const std::size_t T = tokens.size(), H = s.hidden, hd = s.head_dim;
  const std::size_t qkv_w = (s.heads + 2 * s.kv_heads) * hd, attn_w = s.heads * hd;
  auto matmul = [](const std::vector<double>& a, std::size_t rows, std::size_t k,
                   const std::vector<float>& b, std::size_t n) {
    std::vector<double> c(rows * n, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < k; ++i) {
        double av = a[r * k + i];
        for (std::size_t j = 0; j < n; ++j)
          c[r * n + j] += av * b[i * n + j];
      }
    return c;
  };
  auto rmsnorm = [&](const std::vector<double>& x, std::size_t rows, const std::vector<float>& g) {
    std::vector<double> out(rows * H);
    for (std::size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (std::size_t i = 0; i < H; ++i)
        ss += x[r * H + i] * x[r * H + i];
      double scale = 1.0 / std::sqrt(ss / static_cast<double>(H) + s.rms_eps);
      for (std::size_t i = 0; i < H; ++i)
        out[r * H + i] = x[r * H + i] * scale * g[i];
    }
    return out;
  };
  auto rope = [&](double* v, std::size_t pos) {
    std::size_t half = hd / 2;
    for (std::size_t i = 0; i < half; ++i) {
      double freq = std::pow(s.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
      double a = static_cast<double>(pos) * freq, c = std::cos(a), sn = std::sin(a);
      double x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c - x2 * sn;
      v[i + half] = x2 * c + x1 * sn;
    }
  };
  std::vector<double> x(T * H);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < H; ++i)
      x[t * H + i] = w.embedding[static_cast<std::size_t>(tokens[t]) * H + i];
  for (const auto& L : w.layers) {
    auto h = rmsnorm(x, T, L.attn_norm);
    auto qkv = matmul(h, T, H, L.wqkv, qkv_w);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t head = 0; head < s.heads + s.kv_heads; ++head)
        rope(&qkv[t * qkv_w + head * hd], t);
    std::vector<double> attn(T * attn_w, 0.0);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t head = 0; head < s.heads; ++head) {
        std::size_t g = head / (s.heads / s.kv_heads);
        const double* q = &qkv[t * qkv_w + head * hd];
        std::vector<double> p(t + 1);
        double mx = -1e300, total = 0;
        for (std::size_t j = 0; j <= t; ++j) {
          const double* k = &qkv[j * qkv_w + (s.heads + g) * hd];
          double d = 0;
          for (std::size_t i = 0; i < hd; ++i)
            d += q[i] * k[i];
          p[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[j]);
        }
        for (auto& v : p)
          total += (v = std::exp(v - mx));
        for (std::size_t j = 0; j <= t; ++j) {
          const double* v = &qkv[j * qkv_w + (s.heads + s.kv_heads + g) * hd];
          for (std::size_t i = 0; i < hd; ++i)
            attn[t * attn_w + head * hd + i] += p[j] / total * v[i];
        }
      }
    auto o = matmul(attn, T, attn_w, L.wo, H);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += o[i];
    h = rmsnorm(x, T, L.mlp_norm);
    auto gu = matmul(h, T, H, L.wgate_up, 2 * s.ffn);
    std::vector<double> act(T * s.ffn);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < s.ffn; ++i) {
        double g = gu[t * 2 * s.ffn + i], u = gu[t * 2 * s.ffn + s.ffn + i];
        act[t * s.ffn + i] = g / (1.0 + std::exp(-g)) * u;
      }
    auto down = matmul(act, T, s.ffn, L.wdown, H);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += down[i];
  }
  std::vector<double> last(x.end() - static_cast<std::ptrdiff_t>(H), x.end());
  auto normed = rmsnorm(last, 1, w.final_norm);
  return matmul(normed, 1, H, w.output, s.vocab);
}

/// ||a - b|| / ||b||.
template<class A, class B>
double relative_error(const A& a, const B& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return std::sqrt(num / den);
}

} // namespace triad::test
