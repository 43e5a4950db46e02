// triad-bench-cpu: the cpu backend against oneDNN's matmuls alone, in one run.
// Prefill: achieved matmul FLOP/s of a whole prefill step over the FLOP/s of the same matmuls
// run alone (ratio prefill_flops_over_matmul). Decode: step time against the same matmuls alone
// at M = batch (ratio decode_overhead_over_matmul = (step - matmuls) / matmuls at batch 16),
// and decode tokens/s at batch 1, 4, 16, 64. The matmuls alone use distinct weights per layer
// like the model, so weight traffic is the same.

#include <chrono>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>

#include "bench/inputs.hpp"
#include "bench/report.hpp"
#include "devices/cpu/cpu_backend.hpp"
#include "devices/cpu/detail/onednn_linear.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The model's matmuls with their shapes: per layer qkv, o, gate_up, down; then the output.
struct matmul_set {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<std::unique_ptr<triad::detail::onednn_linear>> layers;
  std::unique_ptr<triad::detail::onednn_linear> output;
  std::vector<std::uint16_t> src;
  std::vector<float> dst;

  matmul_set(const triad::model_shape& s, triad::dtype type) {
    unsigned qkv = (s.heads + 2 * s.kv_heads) * s.head_dim, attn = s.heads * s.head_dim;
    std::vector<float> plain(
        std::max<std::size_t>(std::size_t{s.hidden} * 2 * s.ffn, std::size_t{s.hidden} * s.vocab));
    std::mt19937 rng{1};
    std::uniform_real_distribution<float> u{-0.05f, 0.05f};
    for (auto& x : plain)
      x = u(rng);
    for (unsigned l = 0; l < s.layers; ++l) {
      for (auto [k, n] :
           {std::pair{s.hidden, qkv}, {attn, s.hidden}, {s.hidden, 2 * s.ffn}, {s.ffn, s.hidden}})
        layers.push_back(
            std::make_unique<triad::detail::onednn_linear>(engine, k, n, type, plain.data()));
    }
    output = std::make_unique<triad::detail::onednn_linear>(engine, s.hidden, s.vocab, type,
                                                            plain.data());
  }

  // Seconds to run every layer matmul at M = rows and the output at M = out_rows.
  double run(unsigned rows, unsigned out_rows) {
    std::size_t widest = 0;
    for (auto& l : layers)
      widest = std::max<std::size_t>(widest, std::max(l->k(), l->n()));
    if (src.size() < rows * widest * 2)
      src.assign(rows * widest * 2, 0x3c00); // bf16 or f32 bits; values do not matter
    if (dst.size() < rows * widest)
      dst.resize(rows * widest);
    auto start = clock_type::now();
    for (auto& l : layers)
      l->forward(stream, src.data(), dst.data(), rows);
    output->forward(stream, src.data(), dst.data(), out_rows);
    return seconds_since(start);
  }

  // Multiply-add FLOPs of run(rows, out_rows).
  double flops(unsigned rows, unsigned out_rows) const {
    double f = 0;
    for (auto& l : layers)
      f += 2.0 * rows * l->k() * l->n();
    return f + 2.0 * out_rows * output->k() * output->n();
  }
};

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"triad-bench-cpu: cpu backend prefill and decode against oneDNN matmuls alone"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  std::string model = "small";
  triad::bench::add_common_options(app, common, "smaller inputs");
  app.add_option("--model", model, "model preset")->check(CLI::IsMember({"tiny", "small"}));
  CLI11_PARSE(app, argc, argv);

  auto shape = triad::model_preset(model);
  if (!shape) {
    std::fprintf(stderr, "triad-bench-cpu: %s\n", shape.error().message.c_str());
    return 1;
  }
  const unsigned prefill_tokens = quick ? 256 : 1024;
  const unsigned context = quick ? 128 : 512;
  const int decode_steps = quick ? 6 : 16;
  const int reps = quick ? 3 : 5;
  triad::cpu_backend_options options;
  options.shape = *shape;
  options.type = triad::dtype::bf16;
  options.kv_budget_bytes = 1ull << 30;
  auto backend = triad::cpu_backend::create(options);
  if (!backend) {
    std::fprintf(stderr, "triad-bench-cpu: %s\n", backend.error().message.c_str());
    return 1;
  }
  auto& b = **backend;
  matmul_set alone{*shape, options.type};
  std::mt19937 rng{7};
  auto tokens = [&](std::size_t n) { return triad::bench::random_tokens(rng, n); };
  triad::bench::report out;
  out.quick = quick;
  out.metrics["model"] = model;
  out.metrics["dtype"] = "bf16";
  out.metrics["kernel"] = b.kernel();

  // Prefill: one step of `prefill_tokens`, interleaved with the same matmuls alone.
  std::vector<double> prefill_s, prefill_alone_s;
  alone.run(prefill_tokens, 1); // warm-up: primitives created
  for (int r = 0; r <= reps; ++r) {
    triad::step_item item{1000 + static_cast<triad::seq_id>(r), tokens(prefill_tokens)};
    auto start = clock_type::now();
    auto res = b.step({&item, 1});
    auto s = seconds_since(start);
    b.free(item.seq);
    if (!res) {
      std::fprintf(stderr, "triad-bench-cpu: %s\n", res.error().message.c_str());
      return 1;
    }
    double a = alone.run(prefill_tokens, 1);
    if (r > 0) { // the first step creates primitives
      out.metrics["prefill_in_step_matmul_ms"] = b.last_profile().matmul_seconds * 1e3;
      out.metrics["prefill_attention_ms"] = b.last_profile().attention_seconds * 1e3;
      prefill_s.push_back(s);
      prefill_alone_s.push_back(a);
    }
  }
  double mm_flops = alone.flops(prefill_tokens, 1);
  double prefill_time = triad::bench::median(prefill_s);
  double prefill_alone = triad::bench::median(prefill_alone_s);
  out.metrics["prefill_tokens"] = prefill_tokens;
  out.metrics["prefill_tokens_per_s"] = prefill_tokens / prefill_time;
  out.metrics["prefill_matmul_tflops"] = mm_flops / prefill_time / 1e12;
  out.metrics["matmul_alone_tflops"] = mm_flops / prefill_alone / 1e12;
  out.ratios["prefill_flops_over_matmul"] = prefill_alone / prefill_time;

  // Decode at batch sizes 1, 4, 16, 64 with `context` tokens cached per sequence.
  out.metrics["decode_context"] = context;
  double overhead_16 = 0;
  triad::seq_id next_seq = 1;
  for (unsigned batch : {1u, 4u, 16u, 64u}) {
    std::vector<triad::seq_id> seqs;
    for (unsigned i = 0; i < batch; ++i) {
      triad::step_item item{next_seq, tokens(context)};
      seqs.push_back(next_seq++);
      if (auto r = b.step({&item, 1}); !r) {
        std::fprintf(stderr, "triad-bench-cpu: %s\n", r.error().message.c_str());
        return 1;
      }
    }
    alone.run(batch, batch);
    std::vector<double> step_s, alone_s, in_step_mm, in_step_attn;
    for (int st = 0; st <= decode_steps; ++st) {
      std::vector<triad::step_item> items;
      for (auto id : seqs)
        items.push_back({id, tokens(1)});
      auto start = clock_type::now();
      auto res = b.step(items);
      auto s = seconds_since(start);
      if (!res) {
        std::fprintf(stderr, "triad-bench-cpu: %s\n", res.error().message.c_str());
        return 1;
      }
      double a = alone.run(batch, batch);
      if (st > 0) {
        step_s.push_back(s);
        alone_s.push_back(a);
        in_step_mm.push_back(b.last_profile().matmul_seconds);
        in_step_attn.push_back(b.last_profile().attention_seconds);
      }
    }
    for (auto id : seqs)
      b.free(id);
    double step = triad::bench::median(step_s), mm = triad::bench::median(alone_s);
    auto name = std::to_string(batch);
    out.metrics["decode_tokens_per_s_batch_" + name] = batch / step;
    out.metrics["decode_step_ms_batch_" + name] = step * 1e3;
    out.metrics["decode_matmul_alone_ms_batch_" + name] = mm * 1e3;
    out.metrics["decode_overhead_batch_" + name] = (step - mm) / mm;
    out.metrics["decode_in_step_matmul_ms_batch_" + name] = triad::bench::median(in_step_mm) * 1e3;
    out.metrics["decode_attention_ms_batch_" + name] = triad::bench::median(in_step_attn) * 1e3;
    if (batch == 16)
      overhead_16 = (step - mm) / mm;
  }
  out.ratios["decode_overhead_over_matmul"] = overhead_16;
  out.print();
  if (!json_path.empty() && !out.write(json_path))
    return 1;
  return 0;
}
