// triad-bench-sim: calibrates the roofline model (the sim backend's) against the real cpu
// backend on this machine. A profile is measured here (matmul peak from oneDNN, memory
// bandwidth from a streaming read), beside each point's own runs; the roofline then predicts the
// cpu backend's prefill and decode step times for the `small` preset across batch sizes 1-32 and
// contexts 128-2048, and the table of predicted vs measured times, with the error per point, goes
// to the JSON.

#include <algorithm>
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
#include "runtime/main_guard.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The profile's three rates, measured one repetition at a time so that each table point can
// take them right beside its own step runs: this VM's rates moved by up to 25% between runs
// a minute apart (read bandwidth 39-53 GB/s), and a profile measured once at the start
// predicts later points with any such drift in the error. Each point uses the median of its
// repetitions, as its measured step time is the median of its runs.
class profile_probe {
public:
  profile_probe()
      : eng_{dnnl::engine::kind::cpu, 0}
      , strm_{eng_}
      , weights_(std::size_t{k_} * n_, 0.01f)
      , lin_{eng_, k_, n_, triad::dtype::bf16, weights_.data()}
      , src_(std::size_t{m_} * k_, 0x3c00)
      , dst_(std::size_t{m_} * n_)
      , buf_((512ull << 20) / sizeof(float), 1.0f) {
    lin_.forward(strm_, src_.data(), dst_.data(), m_); // primitive set up, pages touched
  }

  /// bf16 matmul FLOP/s of oneDNN on a large shape (1024 x 2048 x 2048), one repetition.
  double matmul_rate() {
    auto start = clock_type::now();
    lin_.forward(strm_, src_.data(), dst_.data(), m_);
    return 2.0 * m_ * k_ * n_ / seconds_since(start);
  }

  /// Read bandwidth over 512 MiB (far beyond the caches), all threads, one pass.
  double read_rate() {
    auto start = clock_type::now();
    float total = 0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (std::size_t i = 0; i < buf_.size(); ++i)
      total += buf_[i];
    double s = seconds_since(start);
    sink_ = sink_ + total;
    return static_cast<double>(buf_.size() * sizeof(float)) / s;
  }

  /// Sustained FLOP/s of the attention kernel alone, all threads, on KV pages already in cache
  /// (the roofline's memory term accounts for streaming them): the `small` preset's group of 4
  /// query heads per KV head, head width 64, 16-token pages, 512 positions per call (the middle
  /// of the calibrated contexts; its K and V stay in L2).
  double attention_rate() {
    const std::size_t pt = 16, hd = 64, group = 4, n = 512, pages = n / pt;
    const std::size_t run = hd * pt * sizeof(std::uint16_t);
    const int calls = 1000;
    double seconds = 0;
    int threads = 1;
#pragma omp parallel reduction(max : seconds)
    {
#pragma omp single
      threads = omp_get_num_threads();
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
    return 4.0 * n * hd * group * calls * threads / seconds;
  }

  /// One repetition of all three, recorded. The first pass over the read buffer after a long
  /// step reads at a half to a third of the speed on this VM (seen after prefills of 512 and
  /// 2048 tokens; the passes after it are at full speed), so one unrecorded pass goes first.
  void sample() {
    attention_.push_back(attention_rate());
    matmul_.push_back(matmul_rate());
    read_rate();
    read_.push_back(read_rate());
  }

  /// The profile from the repetitions since the last call (their medians); starts afresh.
  triad::device_profile take() {
    triad::device_profile p;
    p.name = "this_machine";
    p.peak_flops = triad::bench::median(matmul_);
    const double read = triad::bench::median(read_);
    p.tiers = {{"dram", 16ull << 30, read, read}};
    p.attention_flops = triad::bench::median(attention_);
    p.step_overhead = 0;
    // The cpu backend streams each layer's weights and then computes; it does not overlap
    // the two.
    p.overlap = false;
    p.source = "measured by triad-bench-sim beside each point: oneDNN bf16 matmul, streaming "
               "read bandwidth, the attention kernel alone in cache (medians)";
    matmul_.clear();
    read_.clear();
    attention_.clear();
    return p;
  }

private:
  static constexpr unsigned m_ = 1024, k_ = 2048, n_ = 2048;
  dnnl::engine eng_;
  dnnl::stream strm_;
  std::vector<float> weights_;
  triad::detail::onednn_linear lin_;
  std::vector<std::uint16_t> src_;
  std::vector<float> dst_;
  std::vector<float> buf_;
  volatile float sink_ = 0;
  std::vector<double> matmul_, read_, attention_;
};

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-sim: roofline predictions against the cpu backend, measured here"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  triad::bench::add_common_options(app, common, "fewer points");
  CLI11_PARSE(app, argc, argv);

  auto shape = *triad::model_preset("small");
  profile_probe probe;
  // Every point's profile, for the JSON: the range they spanned shows this machine's drift.
  std::vector<double> peaks, reads, attentions;
  auto profile = [&] {
    auto p = probe.take();
    peaks.push_back(p.peak_flops);
    reads.push_back(p.memory_bandwidth());
    attentions.push_back(p.attention_flops);
    return p;
  };

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
                    const triad::device_profile& here, const triad::step_cost& cost) {
    double err = std::abs(cost.seconds - measured) / measured;
    max_error = std::max(max_error, err);
    table.push_back(boost::json::object{{"phase", phase},
                                        {"batch", batch},
                                        {"context", context},
                                        {"measured_s", measured},
                                        {"predicted_s", cost.seconds},
                                        {"rel_error", err},
                                        {"compute_bound", cost.compute_bound},
                                        {"profile_peak_tflops", here.peak_flops / 1e12},
                                        {"profile_read_gb_per_s", here.memory_bandwidth() / 1e9},
                                        {"profile_attention_tflops", here.attention_flops / 1e12},
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
      if (r > 0)
        probe.sample();
      auto start = clock_type::now();
      if (auto res = b.step({&item, 1}); !res) {
        std::fprintf(stderr, "triad-bench-sim: %s\n", res.error().message.c_str());
        return 1;
      }
      if (r > 0)
        runs.push_back(seconds_since(start));
      b.free(item.seq);
    }
    auto here = profile();
    record("prefill", 1, len, triad::bench::median(runs), here,
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
        if (st > 0)
          probe.sample();
        auto start = clock_type::now();
        if (auto res = b.step(items); !res) {
          std::fprintf(stderr, "triad-bench-sim: %s\n", res.error().message.c_str());
          return 1;
        }
        if (st > 0)
          runs.push_back(seconds_since(start));
      }
      std::vector<triad::step_work> work(batch, {context + steps / 2, 1});
      auto here = profile();
      record("decode", batch, context, triad::bench::median(runs), here,
             triad::estimate_step(shape, triad::dtype::bf16, here, work));
      for (auto id : seqs)
        b.free(id);
    }
  }

  triad::bench::report out;
  out.quick = quick;
  out.metrics["model"] = "small";
  auto span = [](const std::vector<double>& xs, double unit) {
    auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
    return boost::json::array{*lo / unit, *hi / unit};
  };
  // The profiles' medians over the points, and the range each rate spanned.
  out.metrics["profile_peak_tflops"] = triad::bench::median(peaks) / 1e12;
  out.metrics["profile_read_gb_per_s"] = triad::bench::median(reads) / 1e9;
  out.metrics["profile_attention_tflops"] = triad::bench::median(attentions) / 1e12;
  out.metrics["profile_peak_tflops_range"] = span(peaks, 1e12);
  out.metrics["profile_read_gb_per_s_range"] = span(reads, 1e9);
  out.metrics["profile_attention_tflops_range"] = span(attentions, 1e12);
  out.metrics["profile_overlap"] = false;
  out.metrics["kernel"] = b.kernel();
  out.metrics["calibration"] = std::move(table);
  out.metrics["calibration_max_rel_error"] = max_error;
  out.ratios["calibration_max_rel_error"] = max_error;
  std::printf("max relative error %.1f%%\n", max_error * 100);
  if (!json_path.empty() && !out.write(json_path))
    return 1;
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-sim", argc, argv, run);
}
