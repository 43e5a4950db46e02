#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "devices/model.hpp"
#include "devices/prefix_hash.hpp"
#include "devices/tokenizer.hpp"
#include "runtime/error.hpp"

namespace triad {

/// A sequence on a device: one request's growing token history and its KV pages.
using seq_id = std::uint64_t;

/// One entry of a step: tokens appended to a sequence (a prefill chunk, or one token for a
/// decode). A sequence the device does not know yet is created at length 0.
struct step_item {
  seq_id seq = 0;            ///< the sequence
  std::vector<token> tokens; ///< at least one; appended at the sequence's current length
};

/// Memory tiers a step reports its residency in (step_output::tier_resident).
inline constexpr std::size_t max_memory_tiers = 4;

/// What a step produced.
struct step_output {
  /// Per item, the next-token logits after its last token (vocab floats each).
  std::vector<std::vector<float>> logits;
  std::uint64_t tokens = 0; ///< tokens computed in the step
  double seconds = 0;       ///< wall time of the step on the driver thread (sim: modelled)
  /// Where the step lies in the OI/CF plane, where the backend models it (sim; 0: not
  /// modelled): FLOPs per byte of memory traffic, and bytes it needs resident.
  double operational_intensity = 0;
  double capacity_footprint = 0; ///< weights, activations and the step's KV, bytes
  /// Where the backend models memory tiers (sim): bytes each tier holds after the step, in the
  /// profile's order (weights, activations, KV of the step and of sequences outside it, placed
  /// fastest first); the first max_memory_tiers tiers, 0 beyond them or when not modelled.
  std::array<double, max_memory_tiers> tier_resident{};
};

/// Usage of a device's paged KV cache.
struct kv_usage {
  std::size_t pages_total = 0;  ///< pages the memory budget holds
  std::size_t pages_used = 0;   ///< pages held by sequences
  std::size_t pages_cached = 0; ///< pages held only by the prefix cache (evicted when needed)
  std::size_t page_tokens = 0;  ///< tokens per page
  std::size_t page_bytes = 0;   ///< bytes per page (all layers, K and V)
  std::size_t sequences = 0;    ///< live sequences
  /// Pages whose KV the fastest memory tier holds beside the weights, where the backend models
  /// tiers (sim profiles of two or more); 0: every page is alike.
  std::size_t pages_fast = 0;
};

/// A byte range of a KV page: one layer group's K and V (the cpu page layout is layer-major, so
/// a run of whole layers is one range). A KV stream (kv_stream.hpp) sends a page range by range.
struct page_range {
  std::size_t offset = 0; ///< from the page's start; a multiple of 64
  std::size_t bytes = 0;  ///< its length
};

/// One full KV page outside a device: what identifies it (its chain hash, its parent's, its
/// tokens) and its bytes in the backend's page format (`backend::page_payload_bytes`). A page
/// evicted from a device's prefix cache leaves as one, to the KV store's host tier; a page the
/// store holds comes back as one.
struct kv_page {
  block_hash hash = 0;             ///< chain hash of the tokens up to and including its own
  block_hash parent = 0;           ///< chain hash of the pages before it (root_hash: first page)
  std::vector<token> tokens;       ///< its page_tokens tokens
  std::vector<std::uint8_t> bytes; ///< its KV (every layer's K and V), page_payload_bytes long
  /// block_checksum of `bytes` where they were copied out (0: none given); a page appended
  /// with one is checked against it first (a page copied from another device's memory).
  std::uint64_t checksum = 0;
};

/// Inspector of kv_page.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_page& x) {
  return f(caf::meta::type_name("kv_page"), x.hash, x.parent, x.tokens, x.bytes, x.checksum);
}

/// Checks a step's items against a model, as every backend must before computing: at least one
/// item, no empty item, no sequence twice, tokens inside the vocabulary, no sequence beyond
/// max_context (given each sequence's current length from `backend.length`).
expected<void> check_step(std::span<const step_item> items, const model_shape& shape,
                          const class backend& backend);

/// What a device backend implements. Calls come from one thread (the device's driver thread);
/// implementations need not be thread-safe.
class backend {
public:
  virtual ~backend() = default;

  /// The model it runs.
  virtual const model_shape& shape() const noexcept = 0;
  /// Which kernel does the matmuls, e.g. "brg:avx512_core_amx_bf16" or "sim:h100".
  virtual std::string kernel() const = 0;
  /// Bytes of model weights it holds in memory (packed or quantized as it multiplies them);
  /// 0 when it holds none (a modelled device).
  virtual std::uint64_t weight_bytes() const noexcept { return 0; }

  /// Runs one batched forward step over a mix of prefill chunks and decodes. All pages the
  /// step needs are reserved first: when they do not fit, nothing changes and the error is
  /// errc::exhausted (the caller preempts or waits).
  virtual expected<step_output> step(std::span<const step_item> items) = 0;

  /// The sequence's KV pages as bytes (for a transfer to another device or a tier).
  virtual expected<std::vector<std::byte>> export_kv(seq_id seq) const = 0;
  /// Recreates a sequence from export_kv's bytes; errors on a shape mismatch or damage.
  virtual expected<void> import_kv(seq_id seq, std::span<const std::byte> bytes) = 0;
  /// Drops a sequence and returns its pages (published ones stay in the prefix cache); unknown
  /// ids are ignored.
  virtual void free(seq_id seq) = 0;
  /// Creates `seq` (not known yet) on the longest cached prefix of `tokens` (whole pages, at
  /// least one token left to compute) and returns the tokens it covers; 0 on a miss.
  virtual std::size_t attach_prefix(seq_id seq, std::span<const token> tokens) = 0;
  /// Offers the full pages of `seq`, whose first tokens are `tokens`, to the prefix cache.
  virtual void publish(seq_id seq, std::span<const token> tokens) = 0;
  /// Tokens held for a sequence (0 when unknown).
  virtual std::size_t length(seq_id seq) const noexcept = 0;
  /// KV cache usage.
  virtual kv_usage kv() const noexcept = 0;

  /// Bytes of one KV page as it leaves or enters the device (kv_page::bytes); 0 when pages
  /// cannot leave it (no tier below the device then).
  virtual std::size_t page_payload_bytes() const noexcept { return 0; }
  /// While `sink` is set, every cached full page the prefix cache evicts is copied into it
  /// before its memory is reused, instead of being lost; nullptr: evicted pages are dropped.
  virtual void capture_evictions(std::vector<kv_page>* sink) { (void)sink; }
  /// Appends pages (in chain order, the first continuing the sequence; every one full but the
  /// last, which may hold fewer tokens) to `seq`, created when unknown; its length must be a
  /// multiple of the page size. All or nothing: errc::exhausted when the pages do not fit,
  /// errc::invalid_argument on a page of the wrong size or content.
  virtual expected<void> append_pages(seq_id seq, std::span<const kv_page> pages) {
    (void)seq;
    (void)pages;
    return make_error(errc::unsupported, "this backend's KV pages cannot leave or enter it");
  }
  /// The layer groups a page is streamed in (kv_stream), in order, covering the page; empty
  /// when this backend's pages cannot be streamed (no memory of their own to copy from).
  virtual std::vector<page_range> stream_groups() const { return {}; }
  /// The memory of `seq`'s pages, in order (empty when unknown or not addressable): a stream
  /// copies from and into it directly.
  virtual std::vector<std::span<std::byte>> page_memory(seq_id seq) {
    (void)seq;
    return {};
  }
  /// Modelled seconds one layer group of `pages` pages takes over the device's link, in or out
  /// (a stream waits that long per group on each side, so the overlap of the two hops comes
  /// out of the two links); 0: no modelled time (a real backend's copies take their own).
  virtual double stream_group_seconds(std::size_t pages) const {
    (void)pages;
    return 0;
  }
  /// Whether reading the KV of `tokens` tokens that follow `context` cached ones from other
  /// memory (the KV store's host tier, another device's pages) takes less time than computing
  /// them here; a prompt's pages held elsewhere are fetched only then. Thread-safe: it reads
  /// only what construction fixed (the device actor asks while the driver runs). Default: true
  /// (on a cpu, copying a token's KV costs microseconds less than the layers that made it).
  virtual bool import_cheaper(std::size_t context, std::size_t tokens) const {
    (void)context;
    (void)tokens;
    return true;
  }
  /// Creates `seq` (not known) holding `length` tokens whose KV the caller then writes into
  /// page_memory (a stream). errc::exhausted when the pages do not fit.
  virtual expected<void> reserve_kv(seq_id seq, std::size_t length) {
    (void)seq;
    (void)length;
    return make_error(errc::unsupported, "this backend's KV pages cannot be written directly");
  }
  /// The pages of `seq` holding its first min(length, tokens.size()) tokens (`tokens`: its
  /// tokens from the start), from page `from_page` on, copied out with their identity; the
  /// last may be partial.
  virtual expected<std::vector<kv_page>> export_pages(seq_id seq, std::span<const token> tokens,
                                                      std::size_t from_page = 0) const {
    (void)seq;
    (void)tokens;
    (void)from_page;
    return make_error(errc::unsupported, "this backend's KV pages cannot leave or enter it");
  }
};

} // namespace triad

namespace triad {

/// A backend standing in for one that failed to build: it runs the same model shape, and every
/// step, export and import answers with the build error (so a request routed to it fails or
/// moves on, as the device failure policy says), while the node serves on its other devices.
/// `page_tokens` is the node's page size (its KV usage reports no pages of that size).
std::unique_ptr<backend> make_failed_backend(model_shape shape, std::size_t page_tokens, error why);

} // namespace triad
