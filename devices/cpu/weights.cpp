#include "devices/cpu/weights.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace triad {

namespace {

// splitmix64: a tiny, well-mixed generator; one stream per tensor keeps weights independent of
// generation order.
struct splitmix {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() noexcept {
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0);
  }
};

std::vector<float> tensor(std::uint64_t seed, std::uint64_t index, std::size_t count, float scale,
                          float offset, dtype type) {
  splitmix rng{seed ^ (index * 0xd1b54a32d192ed03ull)};
  std::vector<float> out(count);
  for (auto& x : out) {
    x = offset + scale * rng.uniform();
    if (type == dtype::bf16)
      x = round_to_bf16(x);
  }
  return out;
}

} // namespace

quantized_rows owned_rows(ggml_type type, unsigned rows, std::vector<std::byte> bytes) {
  auto owner = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  return {type, rows, std::span<const std::byte>{*owner}, owner};
}

float round_to_bf16(float x) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) != 0x7f800000u) // finite: round to nearest even
    bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, sizeof(bits));
  return x;
}

model_weights generate_weights(const model_shape& s, dtype type) {
  model_weights w;
  std::uint64_t index = 0;
  // Uniform in [-a, a) has variance a^2 / 3: a = sqrt(3 / fan_in) gives variance 1 / fan_in.
  auto fan = [](unsigned fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  std::size_t qkv = static_cast<std::size_t>(s.heads + 2 * s.kv_heads) * s.head_dim;
  std::size_t attn = static_cast<std::size_t>(s.heads) * s.head_dim;
  w.embedding = tensor(s.seed, index++, std::size_t{s.vocab} * s.hidden, 1.0f, 0.0f, type);
  for (unsigned l = 0; l < s.layers; ++l) {
    layer_weights lw;
    lw.attn_norm = tensor(s.seed, index++, s.hidden, 0.1f, 1.0f, type);
    lw.wqkv = tensor(s.seed, index++, s.hidden * qkv, fan(s.hidden), 0.0f, type);
    lw.wo = tensor(s.seed, index++, attn * s.hidden, fan(static_cast<unsigned>(attn)), 0.0f, type);
    lw.mlp_norm = tensor(s.seed, index++, s.hidden, 0.1f, 1.0f, type);
    lw.wgate_up =
        tensor(s.seed, index++, std::size_t{s.hidden} * 2 * s.ffn, fan(s.hidden), 0.0f, type);
    lw.wdown = tensor(s.seed, index++, std::size_t{s.ffn} * s.hidden, fan(s.ffn), 0.0f, type);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = tensor(s.seed, index++, s.hidden, 0.1f, 1.0f, type);
  w.output = tensor(s.seed, index++, std::size_t{s.hidden} * s.vocab, fan(s.hidden), 0.0f, type);
  return w;
}

namespace {

class random_source final : public weight_source {
public:
  random_source(const model_shape& shape, dtype type)
      : all_(generate_weights(shape, type)) {}

  expected<model_weights> globals() override {
    model_weights w;
    w.embedding = std::move(all_.embedding);
    w.final_norm = std::move(all_.final_norm);
    w.output = std::move(all_.output);
    return w;
  }

  expected<layer_weights> layer(unsigned index) override {
    if (index >= all_.layers.size())
      return make_error(errc::invalid_argument,
                        "random weights: no layer " + std::to_string(index));
    return std::move(all_.layers[index]);
  }

private:
  model_weights all_;
};

} // namespace

std::unique_ptr<weight_source> random_weight_source(const model_shape& shape, dtype type) {
  return std::make_unique<random_source>(shape, type);
}

expected<model_weights> load_all(weight_source& source, unsigned layers) {
  auto w = source.globals();
  if (!w)
    return w.error();
  for (unsigned l = 0; l < layers; ++l) {
    auto lw = source.layer(l);
    if (!lw)
      return lw.error();
    w->layers.push_back(std::move(*lw));
  }
  return w;
}

} // namespace triad
