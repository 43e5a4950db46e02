#include "devices/cpu/cpu_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <xxhash.h>

#include "devices/cpu/detail/boundary.hpp"
#include "devices/cpu/detail/kernels.hpp"
#include "devices/cpu/detail/matrix.hpp"
#include "devices/gguf_model.hpp"

namespace triad {

using clock_type = std::chrono::steady_clock;

namespace {

double since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Steps of at least this many tokens measure what a prompt's token costs to compute.
constexpr std::size_t min_measured_rows = 16;

} // namespace

namespace detail {

double measure_checked_copy() {
  // Measured once per process: it describes the machine. 8 MiB, past the caches of most cores,
  // copied then summed as an import does; the best of three runs (the first pays the page
  // faults).
  static const double measured = [] {
    constexpr std::size_t bytes = std::size_t{8} << 20;
    std::vector<std::byte> from(bytes, std::byte{1});
    std::vector<std::byte> to(bytes);
    double best = 0;
    for (int run = 0; run < 3; ++run) {
      const auto start = clock_type::now();
      std::memcpy(to.data(), from.data(), bytes);
      volatile auto sum = XXH3_64bits(to.data(), bytes);
      (void)sum;
      const double s = since(start);
      if (s > 0 && (best == 0 || s < best))
        best = s;
    }
    return best > 0 ? static_cast<double>(bytes) / best : 0;
  }();
  return measured;
}

} // namespace detail

using matrix = detail::cpu_matrix;

struct cpu_backend::impl {
  struct layer {
    std::vector<float> attn_norm;
    std::vector<float> mlp_norm;
    std::vector<float> bqkv;   // empty without biases
    std::vector<float> q_norm; // empty without q/k norms
    std::vector<float> k_norm;
    std::shared_ptr<matrix> wqkv;
    std::shared_ptr<matrix> wo;
    std::shared_ptr<matrix> wgate_up;
    std::shared_ptr<matrix> wdown;
  };

  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<float> embedding;           // [vocab][hidden]; empty when kept quantized
  std::shared_ptr<matrix> embedding_rows; // the embedding kept quantized (rows decode on use)
  std::vector<layer> layers;
  std::vector<float> final_norm;
  std::shared_ptr<matrix> output; // may be embedding_rows (tied)
  std::unique_ptr<detail::rope_table> rope;

  // Step buffers, grown to the largest step seen.
  std::vector<float> x, h, qkv, attn, tmp, gate_up, act;
  std::vector<std::uint16_t> h16;

  // Runs a matmul from `src` (f32), converting to bf16 first where the path multiplies bf16.
  void linear(matrix& w, const float* src, float* dst, std::size_t rows, double& matmul_seconds) {
    const void* in = src;
    if (w.bf16_inputs()) {
      if (h16.size() < rows * w.k())
        h16.resize(rows * w.k());
      detail::to_bf16(src, h16.data(), rows * w.k());
      in = h16.data();
    }
    auto start = clock_type::now();
    w.forward(stream, in, dst, static_cast<unsigned>(rows));
    matmul_seconds += since(start);
  }
};

cpu_backend::cpu_backend(cpu_backend_options options)
    : options_(std::move(options))
    , impl_(std::make_unique<impl>()) {}

cpu_backend::~cpu_backend() = default;

expected<std::unique_ptr<cpu_backend>> cpu_backend::create(cpu_backend_options options) {
  if (auto ok = options.shape.validate(); !ok)
    return ok.error();
  if (options.shape.moe() || options.shape.mla())
    return make_error(errc::unsupported,
                      "cpu backend: model '" + options.shape.name +
                          "' has experts or latent attention, which only sim devices model");
  const auto& cpu = detect_cpu();
  if (!options.compute) {
    auto best =
        choose_cpu_compute(options.type == dtype::f32 ? model_dtype::f32 : model_dtype::bf16, cpu);
    if (!best)
      return best.error();
    options.compute = std::move(*best);
  }
  const cpu_compute_choice& path = *options.compute;
  options.type = path.type();
  if (!can_run(path, cpu))
    return make_error(errc::unsupported, "cpu backend: kernel " +
                                             std::string{to_string(path.kernel)} + " (" +
                                             std::string{to_string(path.isa)} +
                                             ") cannot run on this CPU (" + cpu.describe() + ")");
  if (options.storage == nullptr) {
    auto a = arena::create(0, options.kv_budget_bytes, nullptr);
    if (!a)
      return a.error();
    options.storage = *a;
  }
  return detail::onednn_boundary(
      "cpu backend: building the model", [&]() -> expected<std::unique_ptr<cpu_backend>> {
        std::unique_ptr<cpu_backend> self{new cpu_backend(options)};
        auto cache = paged_kv_cache::create(options.shape, options.type, options.page_tokens,
                                            options.kv_budget_bytes, options.storage);
        if (!cache)
          return cache.error();
        self->cache_ = std::move(*cache);
        const auto& s = options.shape;
        auto source = options.weights_file
                          ? gguf_weight_source(options.weights_file, s, options.type)
                          : random_weight_source(s, options.type);
        auto weights = source->globals();
        if (!weights)
          return weights.error();
        auto& m = *self->impl_;
        // Quantized weights run the widest own kernels allowed here whatever the dtype path
        // (DNNL_MAX_CPU_ISA caps them like every kernel).
        const vector_isa quant_isa = cpu.own;
        // Their long prefills multiply in the dtype's type where the CPU has it natively.
        const bool bf16_prefill = path.type() == dtype::bf16 && cpu.native_bf16;
        // A matmul weight [k][n]: kept quantized when the source gave its rows so, else packed
        // for the path from plain floats.
        auto make = [&](unsigned k, unsigned n, const std::vector<float>& plain,
                        quantized_matrix& runs, const char* what,
                        unsigned layer) -> expected<std::shared_ptr<matrix>> {
          if (runs.empty())
            return std::make_shared<matrix>(m.engine, k, n, path, plain.data());
          auto name = [&] {
            return std::string{"cpu backend: "} + what +
                   (layer == ~0u ? std::string{} : " of layer " + std::to_string(layer)) + ": ";
          };
          if (auto ok = detail::quant_linear::check(k, n, runs); !ok)
            return make_error(ok.error().code, name() + ok.error().message);
          return std::make_shared<matrix>(m.engine, k, std::move(runs), quant_isa, bf16_prefill);
        };
        unsigned qkv = (s.heads + 2 * s.kv_heads) * s.head_dim;
        unsigned attn = s.heads * s.head_dim;
        for (unsigned index = 0; index < s.layers; ++index) {
          auto next = source->layer(index);
          if (!next)
            return next.error();
          auto& lw = *next;
          impl::layer l;
          l.attn_norm = std::move(lw.attn_norm);
          l.mlp_norm = std::move(lw.mlp_norm);
          l.bqkv = std::move(lw.bqkv);
          l.q_norm = std::move(lw.q_norm);
          l.k_norm = std::move(lw.k_norm);
          auto wqkv = make(s.hidden, qkv, lw.wqkv, lw.wqkv_q, "wqkv", index);
          auto wo = make(attn, s.hidden, lw.wo, lw.wo_q, "wo", index);
          auto wgate_up = make(s.hidden, 2 * s.ffn, lw.wgate_up, lw.wgate_up_q, "wgate_up", index);
          auto wdown = make(s.ffn, s.hidden, lw.wdown, lw.wdown_q, "wdown", index);
          for (auto* w : {&wqkv, &wo, &wgate_up, &wdown})
            if (!*w)
              return w->error();
          l.wqkv = std::move(*wqkv);
          l.wo = std::move(*wo);
          l.wgate_up = std::move(*wgate_up);
          l.wdown = std::move(*wdown);
          lw = layer_weights{}; // release the plain copy as soon as it is packed
          m.layers.push_back(std::move(l));
        }
        m.final_norm = std::move(weights->final_norm);
        if (!weights->embedding_q.empty()) {
          auto rows = make(s.hidden, s.vocab, {}, weights->embedding_q, "token embedding", ~0u);
          if (!rows)
            return rows.error();
          m.embedding_rows = std::move(*rows);
        } else {
          m.embedding = std::move(weights->embedding);
        }
        if (weights->output.empty() && weights->output_q.empty() && m.embedding_rows &&
            s.tied_output) {
          m.output = m.embedding_rows; // one copy of the tied rows serves both
        } else {
          auto output =
              make(s.hidden, s.vocab, weights->output, weights->output_q, "output projection", ~0u);
          if (!output)
            return output.error();
          m.output = std::move(*output);
        }
        m.rope = std::make_unique<detail::rope_table>(s.max_context, s.head_dim, s.rope_theta,
                                                      s.rope_freq_factors, s.rope_adjacent);
        self->copy_bytes_per_second_ = detail::measure_checked_copy();
        return self;
      });
}

bool cpu_backend::import_cheaper(std::size_t context, std::size_t tokens) const {
  (void)context; // attention over it makes computing dearer still: left out, a bound
  const double per_token = seconds_per_token_.load(std::memory_order_relaxed);
  if (tokens == 0 || per_token <= 0 || copy_bytes_per_second_ <= 0)
    return true;
  const double bytes =
      static_cast<double>(tokens) * static_cast<double>(options_.shape.kv_bytes_per_token(
                                        cache_->type()));
  return bytes / copy_bytes_per_second_ < static_cast<double>(tokens) * per_token;
}

std::string cpu_backend::kernel() const {
  const auto& m = *impl_;
  std::string out = m.output->kernel();
  // A model file's layers may run other kernels than its output projection (a Q4_K_M file's
  // q4_K layers and q6_K output): name each one once.
  for (const auto& l : m.layers)
    for (const auto* w : {&l.wqkv, &l.wo, &l.wgate_up, &l.wdown})
      if (auto k = (*w)->kernel(); (*w)->quantized() && out.find(k) == std::string::npos)
        out += "; " + k;
  return out;
}

std::uint64_t cpu_backend::weight_bytes() const noexcept {
  const auto& m = *impl_;
  auto floats = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
  std::uint64_t bytes = floats(m.embedding) + floats(m.final_norm) + m.output->weight_bytes();
  if (m.embedding_rows && m.embedding_rows != m.output)
    bytes += m.embedding_rows->weight_bytes();
  for (const auto& l : m.layers) {
    bytes += floats(l.attn_norm) + floats(l.mlp_norm) + floats(l.bqkv) + floats(l.q_norm) +
             floats(l.k_norm);
    for (const auto* w : {&l.wqkv, &l.wo, &l.wgate_up, &l.wdown})
      bytes += (*w)->weight_bytes();
  }
  return bytes;
}

void cpu_backend::join_team() {
  if (team_owner_ == std::this_thread::get_id())
    return;
  team_owner_ = std::this_thread::get_id();
  if (options_.team.empty()) {
    team_size_ = static_cast<std::size_t>(omp_get_max_threads());
    return;
  }
  // The team of this thread (its own OpenMP pool: libgomp keeps one per master thread) gets
  // one thread per core of the set, thread i bound to core i; the pool's threads live on, bound.
  const int n = static_cast<int>(options_.team.size());
  omp_set_num_threads(n);
  team_size_ = options_.team.size();
  if (options_.topo == nullptr)
    return;
  const auto& team = options_.team;
  const auto* topo = options_.topo;
#pragma omp parallel num_threads(n)
  {
    auto i = static_cast<std::size_t>(omp_get_thread_num());
    if (i < team.size())
      (void)topo->bind_this_thread(team[i]);
  }
}

expected<step_output> cpu_backend::step(std::span<const step_item> items) {
  return detail::onednn_boundary("cpu backend: step",
                                 [&]() -> expected<step_output> { return step_unguarded(items); });
}

expected<step_output> cpu_backend::step_unguarded(std::span<const step_item> items) {
  join_team();
  auto start = clock_type::now();
  const auto& s = options_.shape;
  if (auto ok = check_step(items, s, *this); !ok)
    return ok.error();
  std::vector<std::pair<seq_id, std::size_t>> wanted;
  std::size_t rows = 0;
  for (const auto& item : items) {
    auto new_length = cache_->length(item.seq) + item.tokens.size();
    wanted.emplace_back(item.seq, new_length);
    rows += item.tokens.size();
  }
  if (auto ok = cache_->table().reserve(wanted); !ok)
    return ok.error();

  // Row r of the step: which item, sequence and position.
  struct row_info {
    seq_id seq;
    std::size_t pos;
    const std::vector<std::uint32_t>* pages;
  };
  std::vector<row_info> row(rows);
  std::vector<std::size_t> last_row(items.size());
  {
    std::size_t r = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto base = cache_->length(items[i].seq);
      const auto* pages = cache_->pages(items[i].seq);
      for (std::size_t t = 0; t < items[i].tokens.size(); ++t, ++r)
        row[r] = {items[i].seq, base + t, pages};
      last_row[i] = r - 1;
    }
  }

  auto& m = *impl_;
  const std::size_t hidden = s.hidden;
  const std::size_t hd = s.head_dim;
  const std::size_t qkv_width = (s.heads + 2 * s.kv_heads) * hd;
  const std::size_t attn_width = s.heads * hd;
  const std::size_t group = s.heads / s.kv_heads;
  const bool kv16 = cache_->type() == dtype::bf16;
  const std::size_t page_tokens = cache_->page_tokens();
  const std::size_t page_bytes = cache_->page_bytes();
  const std::size_t kv_elem = size_of(cache_->type());
  auto grow = [](std::vector<float>& v, std::size_t n) {
    if (v.size() < n)
      v.resize(n);
  };
  grow(m.x, rows * hidden);
  grow(m.h, rows * hidden);
  grow(m.tmp, rows * hidden);
  grow(m.qkv, rows * qkv_width);
  grow(m.attn, rows * attn_width);
  grow(m.gate_up, rows * 2 * s.ffn);
  grow(m.act, rows * s.ffn);
  double matmul_seconds = 0;
  double attention_seconds = 0;

  {
    std::size_t r = 0;
    for (const auto& item : items)
      for (auto t : item.tokens) {
        float* to = &m.x[r++ * hidden];
        if (m.embedding_rows)
          m.embedding_rows->quantized()->decode_row(t, to);
        else
          std::memcpy(to, &m.embedding[static_cast<std::size_t>(t) * hidden],
                      hidden * sizeof(float));
      }
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (unsigned l = 0; l < s.layers; ++l) {
    auto& L = m.layers[l];
    detail::rmsnorm(m.x.data(), L.attn_norm.data(), m.h.data(), rows, hidden, s.rms_eps);
    m.linear(*L.wqkv, m.h.data(), m.qkv.data(), rows, matmul_seconds);
    auto attention_start = clock_type::now();
    // Rotary positions on q and k and K, V into the cache; then (after the loop's barrier)
    // causal attention of every new token over its sequence's positions 0..pos, one job per
    // (token, kv head) covering the query heads that share that kv head.
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (std::size_t r = 0; r < rows; ++r) {
        float* q = &m.qkv[r * qkv_width];
        if (!L.bqkv.empty())
          for (std::size_t i = 0; i < qkv_width; ++i)
            q[i] += L.bqkv[i];
        if (!L.q_norm.empty()) {
          detail::rmsnorm_serial(q, L.q_norm.data(), q, s.heads, hd, s.rms_eps);
          detail::rmsnorm_serial(q + s.heads * hd, L.k_norm.data(), q + s.heads * hd, s.kv_heads,
                                 hd, s.rms_eps);
        }
        for (std::size_t h = 0; h < s.heads + s.kv_heads; ++h)
          m.rope->apply(q + h * hd, row[r].pos);
        for (unsigned g = 0; g < s.kv_heads; ++g) {
          const float* k = q + (s.heads + g) * hd;
          const float* v = q + (s.heads + s.kv_heads + g) * hd;
          auto* page = cache_->base() + (*row[r].pages)[row[r].pos / page_tokens] * page_bytes;
          auto slot = (row[r].pos % page_tokens) * hd * kv_elem;
          detail::store_column(k, page + cache_->run_offset(l, false, g), row[r].pos % page_tokens,
                               page_tokens, hd, kv16);
          detail::store(v, page + cache_->run_offset(l, true, g) + slot, hd, kv16);
        }
      }
      std::vector<float> scratch;
#pragma omp for schedule(dynamic)
      for (std::size_t job = 0; job < rows * s.kv_heads; ++job) {
        std::size_t r = job / s.kv_heads;
        unsigned g = static_cast<unsigned>(job % s.kv_heads);
        std::size_t n = row[r].pos + 1;
        if (scratch.size() < group * n)
          scratch.resize(group * n);
        detail::kv_runs kv{cache_->base(),
                           row[r].pages->data(),
                           cache_->page_bytes(),
                           cache_->run_offset(l, false, g),
                           cache_->run_offset(l, true, g),
                           page_tokens,
                           kv16};
        detail::attend(&m.qkv[r * qkv_width + g * group * hd], group, hd, n, kv, scale,
                       &m.attn[r * attn_width + g * group * hd], scratch.data());
      }
    }
    attention_seconds += since(attention_start);
    m.linear(*L.wo, m.attn.data(), m.tmp.data(), rows, matmul_seconds);
    detail::add_inplace(m.x.data(), m.tmp.data(), rows * hidden);
    detail::rmsnorm(m.x.data(), L.mlp_norm.data(), m.h.data(), rows, hidden, s.rms_eps);
    m.linear(*L.wgate_up, m.h.data(), m.gate_up.data(), rows, matmul_seconds);
    detail::silu_mul(m.gate_up.data(), m.act.data(), rows, s.ffn);
    m.linear(*L.wdown, m.act.data(), m.tmp.data(), rows, matmul_seconds);
    detail::add_inplace(m.x.data(), m.tmp.data(), rows * hidden);
  }
  for (std::size_t i = 0; i < items.size(); ++i)
    cache_->table().set_length(items[i].seq, cache_->length(items[i].seq) + items[i].tokens.size());

  // Logits of each item's last token only.
  const std::size_t n_items = items.size();
  for (std::size_t i = 0; i < n_items; ++i)
    detail::rmsnorm(&m.x[last_row[i] * hidden], m.final_norm.data(), &m.h[i * hidden], 1, hidden,
                    s.rms_eps);
  std::vector<float> logits(n_items * s.vocab);
  m.linear(*m.output, m.h.data(), logits.data(), n_items, matmul_seconds);
  step_output out;
  out.logits.resize(n_items);
  for (std::size_t i = 0; i < n_items; ++i)
    out.logits[i].assign(logits.begin() + static_cast<std::ptrdiff_t>(i * s.vocab),
                         logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * s.vocab));
  out.tokens = rows;
  out.seconds = since(start);
  profile_ = {out.seconds, matmul_seconds, attention_seconds, rows};
  std::size_t prompt_rows = 0; // rows of prefill chunks (items of more than one token)
  for (const auto& item : items)
    prompt_rows += item.tokens.size() > 1 ? item.tokens.size() : 0;
  if (prompt_rows >= min_measured_rows) { // mostly a prefill: what a prompt's token costs here
    const double now = out.seconds / static_cast<double>(rows);
    const double was = seconds_per_token_.load(std::memory_order_relaxed);
    seconds_per_token_.store(was <= 0 ? now : 0.75 * was + 0.25 * now, std::memory_order_relaxed);
  }
  return out;
}

expected<std::vector<std::byte>> cpu_backend::export_kv(seq_id seq) const {
  return detail::onednn_boundary("cpu backend: exporting KV",
                                 [&] { return cache_->export_seq(seq); });
}

expected<void> cpu_backend::import_kv(seq_id seq, std::span<const std::byte> bytes) {
  return detail::onednn_boundary("cpu backend: importing KV",
                                 [&] { return cache_->import_seq(seq, bytes); });
}

} // namespace triad
