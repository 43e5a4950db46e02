// triad-bench-cpu: the cpu backend against oneDNN's matmuls alone and against a plain read loop,
// in one run, for each dtype this CPU runs.
// Prefill: achieved matmul FLOP/s of a whole prefill step over the FLOP/s of the same matmuls
// run alone (ratio prefill_flops_over_matmul). Decode: step time against the same matmuls alone
// at M = batch (ratio decode_overhead_over_matmul = (step - matmuls) / matmuls at batch 16),
// decode tokens/s at batch 1, 4, 16, 64, and decode_bandwidth_over_stream: the bytes a batch-1
// step must read (weights + the KV of its context) x steps/s, over the read bandwidth of a plain
// multi-threaded read loop on the same cores over a buffer of the same size. The matmuls alone
// use distinct weights per layer like the model, so weight traffic is the same.
// Quantized weights (model files): a 2048 x 8192 matrix (a 1B-class model's FFN) in q4_K, q6_K,
// q8_0 and q4_0 against the same matrix on the chosen dtype's path, at M = 1, 16 and 128
// (ratios quant_<type>_over_<dtype>_m<M>: the dtype's time over the quantized time, above 1
// when the quantized weights multiply faster) and the weights' read rate at M = 1 over the
// plain read loop (quant_<type>_read_over_stream_m1).
// `--dtype` picks the dtype whose figures are the ratios (auto: what a node would run); the
// other dtypes this CPU runs are measured too, as metrics prefixed with their name.

#include <chrono>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <omp.h>

#include "bench/inputs.hpp"
#include "bench/report.hpp"
#include "devices/cpu/cpu_backend.hpp"
#include "devices/cpu/detail/kernels.hpp"
#include "devices/cpu/detail/matrix.hpp"
#include "gguf/convert.hpp"
#include "runtime/main_guard.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The model's matmuls with their shapes: per layer qkv, o, gate_up, down; then the output.
struct matmul_set {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<std::unique_ptr<triad::detail::cpu_matrix>> layers;
  std::unique_ptr<triad::detail::cpu_matrix> output;
  std::vector<float> src;
  std::vector<float> dst;

  matmul_set(const triad::model_shape& s, const triad::cpu_compute_choice& c) {
    unsigned qkv = (s.heads + 2 * s.kv_heads) * s.head_dim, attn = s.heads * s.head_dim;
    std::vector<float> plain(
        std::max<std::size_t>(std::size_t{s.hidden} * 2 * s.ffn, std::size_t{s.hidden} * s.vocab));
    std::mt19937 rng{1};
    std::uniform_real_distribution<float> u{-0.05f, 0.05f};
    for (auto& x : plain)
      x = u(rng);
    auto make = [&](unsigned k, unsigned n) {
      return std::make_unique<triad::detail::cpu_matrix>(engine, k, n, c, plain.data());
    };
    for (unsigned l = 0; l < s.layers; ++l)
      for (auto [k, n] :
           {std::pair{s.hidden, qkv}, {attn, s.hidden}, {s.hidden, 2 * s.ffn}, {s.ffn, s.hidden}})
        layers.push_back(make(k, n));
    output = make(s.hidden, s.vocab);
  }

  // Seconds to run every layer matmul at M = rows and the output at M = out_rows.
  double run(unsigned rows, unsigned out_rows) {
    std::size_t widest = 0;
    for (auto& l : layers)
      widest = std::max<std::size_t>(widest, std::max(l->k(), l->n()));
    if (src.size() < rows * widest)
      src.assign(rows * widest, 0.01f); // also valid bf16 bits in its first half
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

  // Weight elements every step reads.
  double weight_elements() const {
    double e = 0;
    for (auto& l : layers)
      e += static_cast<double>(l->k()) * l->n();
    return e + static_cast<double>(output->k()) * output->n();
  }
};

// Sums `n` floats: the plain read loop decode is compared with (vectorised for the CPU, with 64
// independent sums so that the adds' latency does not bound it).
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) float sum_run(const float* p,
                                                                                  std::size_t n) {
  float acc[64] = {};
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64)
#pragma omp simd
    for (std::size_t j = 0; j < 64; ++j)
      acc[j] += p[i + j];
  float total = 0;
  for (float a : acc)
    total += a;
  for (; i < n; ++i)
    total += p[i];
  return total;
}

// Read bandwidth (bytes/s, median of `reps`) of the calling thread's OpenMP team (the team the
// backend computes on) reading a buffer of `bytes`.
double stream_read_bandwidth(std::size_t bytes, int reps) {
  std::size_t n = bytes / sizeof(float);
  std::vector<float> buf(n);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) // first touch by the reading threads
    buf[i] = static_cast<float>(i & 7);
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r <= reps; ++r) {
    float total = 0;
    auto start = clock_type::now();
#pragma omp parallel reduction(+ : total)
    {
      auto t = static_cast<std::size_t>(omp_get_thread_num());
      auto nt = static_cast<std::size_t>(omp_get_num_threads());
      std::size_t begin = n * t / nt, end = n * (t + 1) / nt;
      total += sum_run(buf.data() + begin, end - begin);
    }
    double s = seconds_since(start);
    sink = sink + total;
    if (r > 0)
      rates.push_back(static_cast<double>(n * sizeof(float)) / s);
  }
  return triad::bench::median(rates);
}

struct sizes {
  unsigned prefill_tokens;
  unsigned context;           // cached tokens per sequence at batch 4, 16, 64
  unsigned bandwidth_context; // cached tokens at batch 1 for the bandwidth figure
  int decode_steps;
  int reps;
};

// Runs one dtype's measurements into `out` (metric names prefixed with `prefix`); sets the
// ratios when `primary`. Returns false (having printed why) on a backend error.
bool measure(const triad::model_shape& shape, const triad::cpu_compute_choice& choice,
             const sizes& z, bool primary, triad::bench::report& out) {
  triad::cpu_backend_options options;
  options.shape = shape;
  options.compute = choice;
  options.kv_budget_bytes = 1ull << 30;
  auto backend = triad::cpu_backend::create(options);
  if (!backend) {
    std::fprintf(stderr, "triad-bench-cpu: %s\n", backend.error().message.c_str());
    return false;
  }
  auto& b = **backend;
  matmul_set alone{shape, choice};
  const std::string name{triad::to_string(choice.type())};
  const std::string p = primary ? "" : name + "_";
  auto metric = [&](const std::string& key, auto value) {
    out.metrics[p + key] = value;
    if (primary)
      out.metrics[name + "_" + key] = value;
  };
  std::mt19937 rng{7};
  auto tokens = [&](std::size_t n) { return triad::bench::random_tokens(rng, n); };
  metric("path", std::string{triad::to_string(choice.kernel)});
  metric("kernel", b.kernel());

  // Prefill: one step of `prefill_tokens`, interleaved with the same matmuls alone.
  std::vector<double> prefill_s, prefill_alone_s;
  alone.run(z.prefill_tokens, 1); // warm-up: primitives created
  for (int r = 0; r <= z.reps; ++r) {
    triad::step_item item{1000 + static_cast<triad::seq_id>(r), tokens(z.prefill_tokens)};
    auto start = clock_type::now();
    auto res = b.step({&item, 1});
    auto s = seconds_since(start);
    b.free(item.seq);
    if (!res) {
      std::fprintf(stderr, "triad-bench-cpu: %s\n", res.error().message.c_str());
      return false;
    }
    double a = alone.run(z.prefill_tokens, 1);
    if (r > 0) { // the first step creates primitives
      metric("prefill_in_step_matmul_ms", b.last_profile().matmul_seconds * 1e3);
      metric("prefill_attention_ms", b.last_profile().attention_seconds * 1e3);
      prefill_s.push_back(s);
      prefill_alone_s.push_back(a);
    }
  }
  double mm_flops = alone.flops(z.prefill_tokens, 1);
  double prefill_time = triad::bench::median(prefill_s);
  double prefill_alone = triad::bench::median(prefill_alone_s);
  metric("prefill_tokens", z.prefill_tokens);
  metric("prefill_tokens_per_s", z.prefill_tokens / prefill_time);
  metric("prefill_matmul_tflops", mm_flops / prefill_time / 1e12);
  metric("matmul_alone_tflops", mm_flops / prefill_alone / 1e12);
  if (primary)
    out.ratios["prefill_flops_over_matmul"] = prefill_alone / prefill_time;

  // Decode at batch sizes 1, 4, 16, 64; batch 1 with bandwidth_context tokens cached (the
  // bandwidth figure), the others with `context`.
  metric("decode_context", z.context);
  double overhead_16 = 0;
  triad::seq_id next_seq = 1;
  for (unsigned batch : {1u, 4u, 16u, 64u}) {
    const unsigned ctx = batch == 1 ? z.bandwidth_context : z.context;
    std::vector<triad::seq_id> seqs;
    for (unsigned i = 0; i < batch; ++i) {
      triad::step_item item{next_seq, tokens(ctx)};
      seqs.push_back(next_seq++);
      if (auto r = b.step({&item, 1}); !r) {
        std::fprintf(stderr, "triad-bench-cpu: %s\n", r.error().message.c_str());
        return false;
      }
    }
    alone.run(batch, batch);
    std::vector<double> step_s, alone_s, in_step_mm, in_step_attn;
    for (int st = 0; st <= z.decode_steps; ++st) {
      std::vector<triad::step_item> items;
      for (auto id : seqs)
        items.push_back({id, tokens(1)});
      auto start = clock_type::now();
      auto res = b.step(items);
      auto s = seconds_since(start);
      if (!res) {
        std::fprintf(stderr, "triad-bench-cpu: %s\n", res.error().message.c_str());
        return false;
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
    auto n = std::to_string(batch);
    metric("decode_tokens_per_s_batch_" + n, batch / step);
    metric("decode_step_ms_batch_" + n, step * 1e3);
    metric("decode_matmul_alone_ms_batch_" + n, mm * 1e3);
    metric("decode_overhead_batch_" + n, (step - mm) / mm);
    metric("decode_in_step_matmul_ms_batch_" + n, triad::bench::median(in_step_mm) * 1e3);
    metric("decode_attention_ms_batch_" + n, triad::bench::median(in_step_attn) * 1e3);
    if (batch == 16)
      overhead_16 = (step - mm) / mm;
    if (batch == 1) {
      // What a batch-1 step must read: every weight matrix, and the KV of its context.
      double bytes = alone.weight_elements() * static_cast<double>(triad::size_of(choice.type())) +
                     static_cast<double>(shape.kv_bytes_per_token(choice.type())) * (ctx + 1);
      double stream = stream_read_bandwidth(static_cast<std::size_t>(bytes), z.reps + 2);
      double achieved = bytes / step;
      metric("decode_context_batch_1", ctx);
      metric("decode_bytes_per_step_batch_1", bytes);
      metric("decode_read_gb_s_batch_1", achieved / 1e9);
      metric("stream_read_gb_s", stream / 1e9);
      metric("decode_bandwidth_over_stream", achieved / stream);
      if (primary)
        out.ratios["decode_bandwidth_over_stream"] = achieved / stream;
    }
  }
  if (primary)
    out.ratios["decode_overhead_over_matmul"] = overhead_16;
  return true;
}

// The quantized kernels against the chosen path on one FFN-sized matrix (see the top).
bool measure_quantized(const triad::cpu_compute_choice& choice, int reps,
                       triad::bench::report& out) {
  constexpr unsigned k = 2048, n = 8192;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<float> plain(std::size_t{k} * n);
  std::mt19937 rng{2};
  std::uniform_real_distribution<float> u{-0.05f, 0.05f};
  for (auto& x : plain)
    x = u(rng);
  const std::vector<unsigned> ms{1, 16, 128};
  std::vector<float> src(std::size_t{ms.back()} * k, 0.01f), dst(std::size_t{ms.back()} * n);
  std::vector<std::uint16_t> src16(src.size());
  triad::detail::to_bf16(src.data(), src16.data(), src.size());
  auto time = [&](triad::detail::cpu_matrix& w, unsigned m) {
    std::vector<double> s;
    const void* in = w.bf16_inputs() ? static_cast<const void*>(src16.data()) : src.data();
    for (int r = 0; r < reps + 1; ++r) {
      auto start = clock_type::now();
      w.forward(stream, in, dst.data(), m);
      if (r > 0) // the first run makes oneDNN's primitives
        s.push_back(seconds_since(start));
    }
    return triad::bench::median(s);
  };
  triad::detail::cpu_matrix base(engine, k, n, choice, plain.data());
  const std::string dtype{triad::to_string(choice.type())};
  std::vector<double> base_s;
  for (auto m : ms)
    base_s.push_back(time(base, m));
  const double stream_bw = stream_read_bandwidth(base.weight_bytes(), reps + 2);
  out.metrics["quant_matrix"] = "2048x8192";
  for (auto type : {triad::ggml_type::q4_k, triad::ggml_type::q6_k, triad::ggml_type::q8_0,
                    triad::ggml_type::q4_0}) {
    // quantize() takes rows of K: the matrix's transpose, as a file stores it.
    std::vector<float> rows(plain.size());
    for (unsigned i = 0; i < k; ++i)
      for (unsigned j = 0; j < n; ++j)
        rows[std::size_t{j} * k + i] = plain[std::size_t{i} * n + j];
    auto bytes = triad::quantize(type, rows);
    if (!bytes) {
      std::fprintf(stderr, "triad-bench-cpu: %s\n", bytes.error().message.c_str());
      return false;
    }
    triad::detail::cpu_matrix q(engine, k, {triad::owned_rows(type, n, std::move(*bytes))},
                                triad::detect_cpu().own);
    const std::string p = "quant_" + std::string{triad::to_string(type)};
    out.metrics[p + "_kernel"] = q.kernel();
    out.metrics[p + "_weight_bytes"] = q.weight_bytes();
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const double t = time(q, ms[i]);
      const auto m = std::to_string(ms[i]);
      out.metrics[p + "_ms_m" + m] = t * 1e3;
      out.metrics[p + "_gflops_m" + m] = 2.0 * k * n * ms[i] / t / 1e9;
      out.metrics[dtype + "_ms_m" + m + "_same_matrix"] = base_s[i] * 1e3;
      out.ratios[p + "_over_" + dtype + "_m" + m] = base_s[i] / t;
      if (ms[i] == 1) {
        out.metrics[p + "_read_gb_s_m1"] = static_cast<double>(q.weight_bytes()) / t / 1e9;
        out.ratios[p + "_read_over_stream_m1"] =
            static_cast<double>(q.weight_bytes()) / t / stream_bw;
      }
    }
  }
  return true;
}

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-cpu: cpu backend prefill and decode against oneDNN matmuls alone "
               "and a plain read loop, per dtype"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  std::string model = "small";
  std::string dtype_name = "auto";
  triad::bench::add_common_options(app, common, "smaller inputs");
  app.add_option("--model", model, "model preset")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--dtype", dtype_name,
                 "dtype whose figures are the ratios: auto (what a node runs here), f32, bf16; "
                 "the other dtypes this CPU runs are measured too")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  bool only = false;
  app.add_flag("--only", only, "measure the chosen dtype only");
  CLI11_PARSE(app, argc, argv);

  auto shape = triad::model_preset(model);
  if (!shape) {
    std::fprintf(stderr, "triad-bench-cpu: %s\n", shape.error().message.c_str());
    return 1;
  }
  const auto& cpu = triad::detect_cpu();
  auto wanted = dtype_name == "f32"    ? triad::model_dtype::f32
                : dtype_name == "bf16" ? triad::model_dtype::bf16
                                       : triad::model_dtype::automatic;
  auto primary = triad::choose_cpu_compute(wanted, cpu);
  if (!primary) {
    std::fprintf(stderr, "triad-bench-cpu: --dtype %s: %s\n", dtype_name.c_str(),
                 primary.error().message.c_str());
    return 2;
  }
  sizes z;
  z.prefill_tokens = quick ? 256 : 1024;
  z.context = quick ? 128 : 512;
  z.bandwidth_context = 512;
  z.decode_steps = quick ? 6 : 16;
  z.reps = quick ? 3 : 5;

  triad::bench::report out;
  out.quick = quick;
  out.metrics["model"] = model;
  out.metrics["cpu"] = cpu.describe();
  out.metrics["onednn_isa"] = cpu.onednn_isa;
  out.metrics["dtype"] = std::string{triad::to_string(primary->type())};
  out.metrics["dtype_reason"] = primary->reason;
  out.metrics["threads"] = omp_get_max_threads();
  if (!measure(*shape, *primary, z, true, out))
    return 1;
  if (!measure_quantized(*primary, z.reps, out))
    return 1;
  if (!only) {
    // The other dtype this CPU runs, for comparison (bf16 against f32).
    auto other_dtype =
        primary->type() == triad::dtype::f32 ? triad::model_dtype::bf16 : triad::model_dtype::f32;
    if (auto other = triad::choose_cpu_compute(other_dtype, cpu); other) {
      if (!measure(*shape, *other, z, false, out))
        return 1;
      auto ratio = [&](const std::string& key) {
        auto bf = out.metrics.at("bf16_" + key).to_number<double>();
        auto f = out.metrics.at("f32_" + key).to_number<double>();
        out.ratios["bf16_over_f32_" + key] = bf / f;
      };
      for (auto key :
           {"decode_tokens_per_s_batch_1", "decode_tokens_per_s_batch_16", "prefill_tokens_per_s"})
        ratio(key);
    } else {
      out.metrics["skipped"] = "the other dtype: " + other.error().message;
    }
  }
  return out.finish(json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-cpu", argc, argv, run);
}
