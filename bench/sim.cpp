// triad-bench-sim: calibrates the roofline model (the sim backend's) against the real cpu
// backend on this machine. A profile is measured here (matmul peak from oneDNN, memory
// bandwidth from a streaming read); the roofline then predicts the cpu backend's prefill and
// decode step times for the `small` preset across batch sizes 1-32 and contexts 128-2048, and
// the table of predicted vs measured times, with the error per point, goes to the JSON.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include <omp.h>

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>

#include "bench/inputs.hpp"
#include "bench/report.hpp"
#include "devices/cpu/cpu_backend.hpp"
#include "devices/cpu/detail/kernels.hpp"
#include "devices/cpu/detail/onednn_linear.hpp"
#include "devices/sim/profile.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Best bf16 matmul FLOP/s oneDNN reaches here on large shapes.
double measure_matmul_peak() {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  const unsigned m = 1024, k = 2048, n = 2048;
  std::vector<float> w(std::size_t{k} * n, 0.01f);
  triad::detail::onednn_linear lin{eng, k, n, triad::dtype::bf16, w.data()};
  std::vector<std::uint16_t> src(std::size_t{m} * k, 0x3c00);
  std::vector<float> dst(std::size_t{m} * n);
  lin.forward(strm, src.data(), dst.data(), m);
  double best = 0;
  for (int i = 0; i < 12; ++i) {
    auto start = clock_type::now();
    lin.forward(strm, src.data(), dst.data(), m);
    best = std::max(best, 2.0 * m * k * n / seconds_since(start));
  }
  return best;
}

// Best read bandwidth over a buffer far larger than the caches, all threads reading.
double measure_read_bandwidth() {
  std::vector<float> buf((512ull << 20) / sizeof(float), 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 10; ++rep) {
    auto start = clock_type::now();
    float total = 0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (std::size_t i = 0; i < buf.size(); ++i)
      total += buf[i];
    double s = seconds_since(start);
    sink = sink + total;
    best = std::max(best, static_cast<double>(buf.size() * sizeof(float)) / s);
  }
  return best;
}

// Sustained FLOP/s of the attention kernel alone, all threads, on KV pages already in cache
// (the roofline's memory term accounts for streaming them): the `small` preset's group of 4
// query heads per KV head, head width 64, 16-token pages, 512 positions per call (the middle of
// the calibrated contexts; its K and V stay in L2).
double measure_attention_rate() {
  const std::size_t pt = 16, hd = 64, group = 4, n = 512, pages = n / pt;
  const std::size_t run = hd * pt * sizeof(std::uint16_t);
  const int calls = 5000;
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    double seconds = 0;
#pragma omp parallel reduction(max : seconds)
    {
      std::vector<std::uint16_t> mem(pages * 2 * run / sizeof(std::uint16_t), 0x3c00);
      std::vector<std::uint32_t> ids(pages);
      for (std::size_t i = 0; i < pages; ++i)
        ids[i] = static_cast<std::uint32_t>(i);
      triad::detail::kv_runs kv{
          reinterpret_cast<const std::byte*>(mem.data()), ids.data(), 2 * run, 0, run, pt, true};
      std::vector<float> q(group * hd, 0.01f), out(group * hd), scratch(group * n);
      triad::detail::attend(q.data(), group, hd, n, kv, 0.125f, out.data(), scratch.data());
#pragma omp barrier
      auto start = clock_type::now();
      for (int c = 0; c < calls; ++c)
        triad::detail::attend(q.data(), group, hd, n, kv, 0.125f, out.data(), scratch.data());
      seconds = seconds_since(start);
    }
    int threads = 1;
#pragma omp parallel
#pragma omp single
    threads = omp_get_num_threads();
    double flops = 4.0 * n * hd * group * calls * threads;
    best = std::max(best, flops / seconds);
  }
  return best;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"triad-bench-sim: roofline predictions against the cpu backend, measured here"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  triad::bench::add_common_options(app, common, "fewer points");
  CLI11_PARSE(app, argc, argv);

  auto shape = *triad::model_preset("small");
  triad::device_profile here;
  here.name = "this_machine";
  here.peak_flops = measure_matmul_peak();
  here.memory_bandwidth = measure_read_bandwidth();
  here.memory_bytes = 16ull << 30;
  here.step_overhead = 0;
  here.attention_flops = measure_attention_rate();
  // The cpu backend streams each layer's weights and then computes; it does not overlap the two.
  here.overlap = false;
  here.source = "measured by triad-bench-sim: oneDNN bf16 matmul peak, streaming read bandwidth, "
                "the attention kernel alone in cache";

  triad::cpu_backend_options options;
  options.shape = shape;
  options.kv_budget_bytes = 3ull << 30;
  auto made = triad::cpu_backend::create(options);
  if (!made) {
    std::fprintf(stderr, "triad-bench-sim: %s\n", made.error().message.c_str());
    return 1;
  }
  auto& b = **made;
  std::mt19937 rng{3};
  auto tokens = [&](std::size_t n) { return triad::bench::random_tokens(rng, n); };

  boost::json::array table;
  double max_error = 0;
  auto record = [&](const char* phase, unsigned batch, unsigned context, double measured,
                    const triad::step_cost& cost) {
    double err = std::abs(cost.seconds - measured) / measured;
    max_error = std::max(max_error, err);
    table.push_back(boost::json::object{{"phase", phase},
                                        {"batch", batch},
                                        {"context", context},
                                        {"measured_s", measured},
                                        {"predicted_s", cost.seconds},
                                        {"rel_error", err},
                                        {"compute_bound", cost.compute_bound},
                                        {"operational_intensity", cost.operational_intensity}});
    std::printf("%-8s batch %2u context %5u: measured %8.2f ms predicted %8.2f ms error %5.1f%%\n",
                phase, batch, context, measured * 1e3, cost.seconds * 1e3, err * 100);
  };

  // Prefill of one sequence of `context` tokens (the first run warms the primitives up).
  std::vector<unsigned> prefill_lengths{128, 512, 2048};
  triad::seq_id next = 1;
  for (unsigned len : prefill_lengths) {
    std::vector<double> runs;
    for (int r = 0; r < (quick ? 3 : 5) + 1; ++r) {
      triad::step_item item{next++, tokens(len)};
      auto start = clock_type::now();
      if (auto res = b.step({&item, 1}); !res) {
        std::fprintf(stderr, "triad-bench-sim: %s\n", res.error().message.c_str());
        return 1;
      }
      if (r > 0)
        runs.push_back(seconds_since(start));
      b.free(item.seq);
    }
    record("prefill", 1, len, triad::bench::median(runs),
           triad::estimate_step(shape, triad::dtype::bf16, here, {{0, len}}));
  }

  // Decode: `batch` copies of one prefilled context (KV imported, not recomputed).
  std::vector<unsigned> contexts =
      quick ? std::vector<unsigned>{128, 2048} : std::vector<unsigned>{128, 512, 1024, 2048};
  std::vector<unsigned> batches =
      quick ? std::vector<unsigned>{1, 4, 16, 32} : std::vector<unsigned>{1, 2, 4, 8, 16, 32};
  for (unsigned context : contexts) {
    triad::step_item base{next++, tokens(context)};
    if (auto res = b.step({&base, 1}); !res) {
      std::fprintf(stderr, "triad-bench-sim: %s\n", res.error().message.c_str());
      return 1;
    }
    auto bytes = b.export_kv(base.seq);
    b.free(base.seq);
    for (unsigned batch : batches) {
      std::vector<triad::seq_id> seqs;
      for (unsigned i = 0; i < batch; ++i) {
        seqs.push_back(next++);
        if (auto ok = b.import_kv(seqs.back(), *bytes); !ok) {
          std::fprintf(stderr, "triad-bench-sim: %s\n", ok.error().message.c_str());
          return 1;
        }
      }
      std::vector<double> runs;
      const int steps = quick ? 8 : 12;
      for (int st = 0; st <= steps; ++st) {
        std::vector<triad::step_item> items;
        for (auto id : seqs)
          items.push_back({id, tokens(1)});
        auto start = clock_type::now();
        if (auto res = b.step(items); !res) {
          std::fprintf(stderr, "triad-bench-sim: %s\n", res.error().message.c_str());
          return 1;
        }
        if (st > 0)
          runs.push_back(seconds_since(start));
      }
      std::vector<triad::step_work> work(batch, {context + steps / 2, 1});
      record("decode", batch, context, triad::bench::median(runs),
             triad::estimate_step(shape, triad::dtype::bf16, here, work));
      for (auto id : seqs)
        b.free(id);
    }
  }

  triad::bench::report out;
  out.quick = quick;
  out.metrics["model"] = "small";
  out.metrics["profile_peak_tflops"] = here.peak_flops / 1e12;
  out.metrics["profile_read_gb_per_s"] = here.memory_bandwidth / 1e9;
  out.metrics["profile_attention_tflops"] = here.attention_flops / 1e12;
  out.metrics["profile_overlap"] = here.overlap;
  out.metrics["kernel"] = b.kernel();
  out.metrics["calibration"] = std::move(table);
  out.metrics["calibration_max_rel_error"] = max_error;
  out.ratios["calibration_max_rel_error"] = max_error;
  std::printf("max relative error %.1f%%\n", max_error * 100);
  if (!json_path.empty() && !out.write(json_path))
    return 1;
  return 0;
}
