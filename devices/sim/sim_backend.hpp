#pragma once

#include <memory>
#include <optional>
#include <unordered_map>

#include "devices/backend.hpp"
#include "devices/page_table.hpp"
#include "devices/sim/profile.hpp"

namespace triad {

/// Options of a simulated device; every field documented where declared.
struct sim_backend_options {
  model_shape shape;            ///< the model whose shape drives the roofline
  dtype type = dtype::bf16;     ///< bytes per weight and KV element
  device_profile profile;       ///< the accelerator's figures
  std::size_t page_tokens = 16; ///< tokens per KV page (accounting only)
  /// Memory for KV pages; 0 = the profile's memory tiers together minus the weights.
  std::uint64_t kv_budget_bytes = 0;
  /// Real seconds per modelled second are 1 / time_scale; 0 = do not wait at all.
  double time_scale = 1.0;
};

/// A roofline model of an accelerator we do not have (SIMULATED): each step takes the time the
/// profile's compute and memory bandwidth allow, KV capacity is enforced page by page, and
/// logits are a deterministic function of the last token and position, not a model's output.
/// The orchestration code runs against it as against a real device.
class sim_backend final : public backend {
public:
  /// A simulated device; errors when the weights alone exceed the profile's memory.
  static expected<std::unique_ptr<sim_backend>> create(sim_backend_options options);

  const model_shape& shape() const noexcept override { return options_.shape; }
  std::string kernel() const override { return "sim:" + options_.profile.name; }
  expected<step_output> step(std::span<const step_item> items) override;
  expected<std::vector<std::byte>> export_kv(seq_id seq) const override;
  /// Takes the KV as its own; the import lasts as long as the KV's modelled bytes take over the
  /// profile's link (when it has one and time_scale > 0).
  expected<void> import_kv(seq_id seq, std::span<const std::byte> bytes) override;
  void free(seq_id seq) override;
  std::size_t attach_prefix(seq_id seq, std::span<const token> tokens) override;
  void publish(seq_id seq, std::span<const token> tokens) override;
  std::size_t length(seq_id seq) const noexcept override;
  kv_usage kv() const noexcept override;
  /// SIMULATED: a sim page's bytes are its tokens (4 bytes each, little-endian), not the
  /// kv_bytes_per_token x page_tokens bytes of KV it stands for; appending pages takes their
  /// modelled bytes' time over the profile's link, as an import does.
  std::size_t page_payload_bytes() const noexcept override {
    return options_.page_tokens * sizeof(std::int32_t);
  }
  void capture_evictions(std::vector<kv_page>* sink) override { evicted_ = sink; }
  expected<void> append_pages(seq_id seq, std::span<const kv_page> pages) override;
  expected<std::vector<kv_page>> export_pages(seq_id seq, std::span<const token> tokens,
                                              std::size_t from_page = 0) const override;
  /// SIMULATED: up to 8 layer groups; the first carries the page's bytes (its tokens), the
  /// others none, and each takes its share of the modelled KV bytes' time over the link
  /// (stream_group_seconds).
  std::vector<page_range> stream_groups() const override;
  std::vector<std::span<std::byte>> page_memory(seq_id seq) override;
  expected<void> reserve_kv(seq_id seq, std::size_t length) override;
  double stream_group_seconds(std::size_t pages) const override;
  /// SIMULATED: the tokens' KV bytes over the profile's link against what computing them adds
  /// to the roofline estimate of the step that computes the prompt's rest (true without a
  /// modelled link).
  bool import_cheaper(std::size_t context, std::size_t tokens) const override;

  /// The roofline estimate of the most recent step.
  const step_cost& last_cost() const noexcept { return last_cost_; }

private:
  explicit sim_backend(sim_backend_options options)
      : options_(std::move(options)) {}

  sim_backend_options options_;
  std::size_t page_bytes_ = 0;
  std::size_t pages_fast_ = 0;      // kv_usage::pages_fast
  std::optional<page_table> table_; // pages are accounted, not stored
  std::unordered_map<seq_id, token> last_token_;
  step_cost last_cost_;
  std::vector<kv_page>* evicted_ = nullptr; // where evicted pages go while capturing
  // What a sim page holds for a stream: its tokens, written as they are computed or appended
  // (page_tokens per page, by page id).
  std::vector<std::int32_t> page_tokens_mem_;

  void write_tokens(seq_id seq, std::size_t at, std::span<const token> tokens);
  // The tokens of page `page` (grown to hold it: pages are written as they are used).
  std::int32_t* page_tokens_of(std::uint32_t page);
};

} // namespace triad
