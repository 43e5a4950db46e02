#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "devices/backend.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/weights.hpp"
#include "gguf/file.hpp"
#include "devices/kv_cache.hpp"
#include "runtime/memory.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// Options of a cpu backend; every field documented where declared.
struct cpu_backend_options {
  model_shape shape; ///< the model (a preset or a custom shape)
  /// Weights, matmul inputs and KV pages, when `compute` is empty; else compute's dtype.
  dtype type = dtype::bf16;
  /// The matmul path and its ISA, which this CPU must run (can_run). Empty: the best path this
  /// CPU runs for `type` (choose_cpu_compute).
  std::optional<cpu_compute_choice> compute;
  /// The compute team: one entry per thread, the PUs (OS indices) it binds to (one core each).
  /// Empty: the team is the calling thread's default (every cpu of the process), unbound.
  /// The thread that calls step() is the team's first thread.
  std::vector<std::vector<unsigned>> team;
  /// Topology that binds the team's threads (this machine only); null: sized, not bound.
  const topology* topo = nullptr;
  std::size_t page_tokens = 16;                 ///< tokens per KV page
  std::uint64_t kv_budget_bytes = 256ull << 20; ///< memory for KV pages
  std::shared_ptr<arena> storage; ///< arena of the device's domain; null = a private one
  /// The GGUF file `shape` was read from (`open_gguf_model`), whose weights it computes; null:
  /// the shape's deterministic random weights.
  std::shared_ptr<const gguf_file> weights_file;
};

/// Timing of the last step, split so benchmarks can compare against the matmuls alone.
struct cpu_step_profile {
  double seconds = 0;           ///< whole step
  double matmul_seconds = 0;    ///< inside oneDNN matmuls
  double attention_seconds = 0; ///< rotary positions, KV writes and attention
  std::uint64_t tokens = 0;     ///< tokens computed
};

namespace detail {
/// Bytes per second of a checked copy on this machine (memcpy of 8 MiB, then XXH3 of it), as a
/// KV import does, measured once per process; 0 when the clock could not tell.
double measure_checked_copy();
} // namespace detail

/// A real Llama-architecture decoder on this machine's cores: embedding, RMSNorm, rotary
/// positions, grouped-query attention over the paged KV cache, SwiGLU MLP, output projection.
/// Matmuls run in oneDNN (AMX / AVX-512 bf16 where present) or, for bf16 weights on CPUs without
/// native bf16, in triad's own AVX2 / AVX-512 kernels; the rest is vectorised C++.
class cpu_backend final : public backend {
public:
  /// Reads the model's weights (from `weights_file`, else the random ones), packs them for the
  /// kernel and sizes the KV cache. Never throws: oneDNN errors and allocation failures come back as errors.
  static expected<std::unique_ptr<cpu_backend>> create(cpu_backend_options options);
  ~cpu_backend() override;

  const model_shape& shape() const noexcept override { return options_.shape; }
  std::string kernel() const override;
  std::uint64_t weight_bytes() const noexcept override;
  expected<step_output> step(std::span<const step_item> items) override;
  expected<std::vector<std::byte>> export_kv(seq_id seq) const override;
  expected<void> import_kv(seq_id seq, std::span<const std::byte> bytes) override;
  void free(seq_id seq) override { cache_->free(seq); }
  std::size_t attach_prefix(seq_id seq, std::span<const token> tokens) override {
    return cache_->table().attach_prefix(seq, tokens);
  }
  void publish(seq_id seq, std::span<const token> tokens) override {
    cache_->table().publish(seq, tokens);
  }
  std::size_t length(seq_id seq) const noexcept override { return cache_->length(seq); }
  kv_usage kv() const noexcept override { return cache_->usage(); }
  std::size_t page_payload_bytes() const noexcept override { return cache_->page_bytes(); }
  void capture_evictions(std::vector<kv_page>* sink) override { cache_->capture_evictions(sink); }
  expected<void> append_pages(seq_id seq, std::span<const kv_page> pages) override {
    return cache_->append_pages(seq, pages);
  }
  expected<std::vector<kv_page>> export_pages(seq_id seq, std::span<const token> tokens,
                                              std::size_t from_page = 0) const override {
    return cache_->export_pages(seq, tokens, from_page);
  }
  /// From measured costs: the KV of `tokens` tokens copied and checksummed at the bandwidth
  /// measured once per process, against computing them at the seconds per token of this
  /// backend's recent prefill steps (the context's attention left out: a bound that favours
  /// computing). Before any prefill step was measured: true.
  bool import_cheaper(std::size_t context, std::size_t tokens) const override;
  /// The two measured costs import_cheaper weighs.
  struct import_costs {
    double copy_bytes_per_second = 0;  ///< a checked copy (memcpy, then XXH3 of the copy)
    double compute_seconds_per_token = 0; ///< recent prefill steps; 0 before any
  };
  /// The costs measured so far; thread-safe.
  import_costs measured_import_costs() const noexcept {
    return {copy_bytes_per_second_, seconds_per_token_.load(std::memory_order_relaxed)};
  }

  std::vector<page_range> stream_groups() const override { return cache_->layer_groups(); }
  std::vector<std::span<std::byte>> page_memory(seq_id seq) override {
    return cache_->page_memory(seq);
  }
  expected<void> reserve_kv(seq_id seq, std::size_t length) override {
    return cache_->reserve_seq(seq, length);
  }

  /// Timing of the most recent step.
  const cpu_step_profile& last_profile() const noexcept { return profile_; }
  /// The dtype it computes in.
  dtype type() const noexcept { return options_.compute->type(); }
  /// The matmul path it runs.
  cpu_kernel kernel_path() const noexcept { return options_.compute->kernel; }
  /// Threads of its compute team (0 until the first step sized it).
  std::size_t team_size() const noexcept { return team_size_; }

private:
  struct impl;
  explicit cpu_backend(cpu_backend_options options);

  // Sizes (and binds) the calling thread's OpenMP team the first time a thread steps.
  void join_team();
  expected<step_output> step_unguarded(std::span<const step_item> items);

  cpu_backend_options options_;
  std::size_t team_size_ = 0;
  std::thread::id team_owner_;
  std::unique_ptr<paged_kv_cache> cache_;
  std::unique_ptr<impl> impl_;
  cpu_step_profile profile_;
  double copy_bytes_per_second_ = 0;           // measured at construction
  std::atomic<double> seconds_per_token_{0.0}; // prefill steps, smoothed; written by step()
};

} // namespace triad
