#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "devices/backend.hpp"
#include "devices/model.hpp"
#include "devices/page_table.hpp"
#include "runtime/memory.hpp"

namespace triad {

/// A paged KV cache of one device: fixed-size pages of `page_tokens` tokens holding K and V of
/// every layer, handed to sequences on demand. Page layout: [layer][K|V][kv_head][slot][dim].
class paged_kv_cache {
public:
  /// A cache of as many pages as `budget_bytes` holds, from `storage` (an arena of the
  /// device's domain); errors when not even one page fits.
  static expected<std::unique_ptr<paged_kv_cache>> create(const model_shape& shape, dtype type,
                                                          std::size_t page_tokens,
                                                          std::uint64_t budget_bytes,
                                                          std::shared_ptr<arena> storage);

  /// The page bookkeeping (sequences, prefix cache); reserve, attach_prefix and publish go
  /// through it.
  page_table& table() noexcept { return table_; }
  /// The page bookkeeping, read-only.
  const page_table& table() const noexcept { return table_; }
  /// Tokens held for a sequence, 0 when unknown.
  std::size_t length(seq_id seq) const noexcept { return table_.length(seq); }
  /// Drops a sequence's references to its pages (published ones stay cached).
  void free(seq_id seq) { table_.free(seq); }
  /// The page ids of a sequence in order (nullptr when unknown), for kernels that walk pages
  /// without a lookup per page.
  const std::vector<std::uint32_t>* pages(seq_id seq) const noexcept { return table_.pages(seq); }
  /// Start of page 0; page p starts at base() + p * page_bytes().
  std::byte* base() const noexcept { return base_; }
  /// Bytes of one page.
  std::size_t page_bytes() const noexcept { return page_bytes_; }
  /// Offset inside a page of the run of (layer, K|V, kv_head).
  std::size_t run_offset(unsigned layer, bool value, unsigned kv_head) const noexcept {
    return ((static_cast<std::size_t>(layer) * 2 + (value ? 1 : 0)) * shape_.kv_heads + kv_head) *
           run_bytes_;
  }

  /// Sequence bytes: a header (magic, shape, length) then its pages, checksummed.
  expected<std::vector<std::byte>> export_seq(seq_id seq) const;
  /// Rebuilds a sequence from export_seq's bytes; errors name the mismatch.
  expected<void> import_seq(seq_id seq, std::span<const std::byte> bytes);

  /// While `sink` is set, cached full pages evicted for space are copied into it first (see
  /// backend::capture_evictions).
  void capture_evictions(std::vector<kv_page>* sink) noexcept { evicted_ = sink; }
  /// Appends whole pages to a sequence at a page boundary (see backend::append_pages): their
  /// bytes are page_bytes() each, in this cache's page layout.
  expected<void> append_pages(seq_id seq, std::span<const kv_page> pages);
  /// Copies out the pages of a sequence (see backend::export_pages).
  expected<std::vector<kv_page>> export_pages(seq_id seq, std::span<const token> tokens,
                                              std::size_t from_page = 0) const;

  /// The layer groups a page is streamed in (backend::stream_groups): up to 8 runs of whole
  /// layers (the page layout is layer-major), each a multiple of 64 bytes; one group for the
  /// whole page when a layer's bytes are not.
  std::vector<page_range> layer_groups() const;
  /// The memory of a sequence's pages, in order; empty when unknown.
  std::vector<std::span<std::byte>> page_memory(seq_id seq) const;
  /// Creates `seq` (unknown) with pages for `length` tokens, to be written through page_memory;
  /// errc::exhausted when they do not fit, errc::invalid_argument when `seq` exists.
  expected<void> reserve_seq(seq_id seq, std::size_t length);

  /// Usage counters.
  kv_usage usage() const noexcept;
  /// Tokens per page.
  std::size_t page_tokens() const noexcept { return page_tokens_; }
  /// Element type of K and V.
  dtype type() const noexcept { return type_; }

private:
  paged_kv_cache(std::size_t pages, std::size_t page_tokens)
      : table_(pages, page_tokens) {}
  std::byte* page_base(std::uint32_t page) const noexcept { return base_ + page * page_bytes_; }

  model_shape shape_;
  dtype type_ = dtype::bf16;
  std::size_t page_tokens_ = 0;
  std::size_t page_bytes_ = 0;
  std::size_t run_bytes_ = 0; // one (layer, K|V, head) run of a page
  arena_buffer storage_;
  std::byte* base_ = nullptr;
  page_table table_;
  std::vector<kv_page>* evicted_ = nullptr; // where evicted pages go while capturing
};

} // namespace triad
