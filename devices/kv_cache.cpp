#include "devices/kv_cache.hpp"

#include <cstring>

#include <xxhash.h>

namespace triad {

namespace {

// Header of an exported sequence; all fields little-endian as on the machines triad targets.
struct export_header {
  char magic[8];
  std::uint32_t layers;
  std::uint32_t kv_heads;
  std::uint32_t head_dim;
  std::uint32_t dtype_bytes;
  std::uint64_t page_tokens;
  std::uint64_t length;
  std::uint64_t checksum; // XXH3-64 of the page bytes
};

constexpr char export_magic[8] = {'T', 'R', 'I', 'A', 'D', 'K', 'V', '1'};

} // namespace

expected<std::unique_ptr<paged_kv_cache>>
paged_kv_cache::create(const model_shape& shape, dtype type, std::size_t page_tokens,
                       std::uint64_t budget_bytes, std::shared_ptr<arena> storage) {
  if (page_tokens == 0)
    return make_error(errc::invalid_argument, "kv cache: page_tokens 0; allowed: 1 or more");
  auto run_bytes = page_tokens * shape.head_dim * size_of(type);
  auto page_bytes = 2ull * shape.layers * shape.kv_heads * run_bytes;
  auto total_pages = budget_bytes / page_bytes;
  if (total_pages == 0)
    return make_error(errc::invalid_argument,
                      "kv cache: a budget of " + std::to_string(budget_bytes) +
                          " bytes holds no page of " + std::to_string(page_bytes) + " bytes (" +
                          std::to_string(page_tokens) + " tokens of model '" + shape.name + "')");
  std::unique_ptr<paged_kv_cache> self{new paged_kv_cache(total_pages, page_tokens)};
  self->shape_ = shape;
  self->type_ = type;
  self->page_tokens_ = page_tokens;
  self->run_bytes_ = run_bytes;
  self->page_bytes_ = page_bytes;
  auto buf = storage->allocate(total_pages * page_bytes);
  if (!buf)
    return buf.error();
  self->storage_ = std::move(*buf);
  self->base_ = self->storage_.data();
  auto* cache = self.get();
  self->table_.on_evict([cache](std::uint32_t page, kv_page out) {
    if (cache->evicted_ == nullptr)
      return;
    const auto* from = reinterpret_cast<const std::uint8_t*>(cache->page_base(page));
    out.bytes.assign(from, from + cache->page_bytes_);
    cache->evicted_->push_back(std::move(out));
  });
  return self;
}

expected<std::vector<std::byte>> paged_kv_cache::export_seq(seq_id seq) const {
  const auto* held = table_.pages(seq);
  if (held == nullptr)
    return make_error(errc::not_found, "kv cache: no sequence " + std::to_string(seq));
  auto length = table_.length(seq);
  auto pages = table_.pages_for(length);
  std::vector<std::byte> out(sizeof(export_header) + pages * page_bytes_);
  auto* body = out.data() + sizeof(export_header);
  for (std::size_t p = 0; p < pages; ++p)
    std::memcpy(body + p * page_bytes_, page_base((*held)[p]), page_bytes_);
  export_header h{};
  std::memcpy(h.magic, export_magic, sizeof(export_magic));
  h.layers = shape_.layers;
  h.kv_heads = shape_.kv_heads;
  h.head_dim = shape_.head_dim;
  h.dtype_bytes = static_cast<std::uint32_t>(size_of(type_));
  h.page_tokens = page_tokens_;
  h.length = length;
  h.checksum = XXH3_64bits(body, pages * page_bytes_);
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

expected<void> paged_kv_cache::import_seq(seq_id seq, std::span<const std::byte> bytes) {
  export_header h;
  if (bytes.size() < sizeof(h))
    return make_error(errc::invalid_argument, "kv import: " + std::to_string(bytes.size()) +
                                                  " bytes are shorter than the header");
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, export_magic, sizeof(export_magic)) != 0)
    return make_error(errc::invalid_argument, "kv import: not a triad KV export (bad magic)");
  if (h.layers != shape_.layers || h.kv_heads != shape_.kv_heads || h.head_dim != shape_.head_dim ||
      h.dtype_bytes != size_of(type_) || h.page_tokens != page_tokens_)
    return make_error(errc::invalid_argument,
                      "kv import: shape mismatch: bytes hold layers=" + std::to_string(h.layers) +
                          " kv_heads=" + std::to_string(h.kv_heads) +
                          " head_dim=" + std::to_string(h.head_dim) +
                          " dtype_bytes=" + std::to_string(h.dtype_bytes) +
                          " page_tokens=" + std::to_string(h.page_tokens) + ", this cache holds " +
                          std::to_string(shape_.layers) + "/" + std::to_string(shape_.kv_heads) +
                          "/" + std::to_string(shape_.head_dim) + "/" +
                          std::to_string(size_of(type_)) + "/" + std::to_string(page_tokens_));
  auto pages = table_.pages_for(h.length);
  if (bytes.size() != sizeof(h) + pages * page_bytes_)
    return make_error(errc::invalid_argument, "kv import: " + std::to_string(bytes.size()) +
                                                  " bytes, expected " +
                                                  std::to_string(sizeof(h) + pages * page_bytes_));
  const auto* body = bytes.data() + sizeof(h);
  if (XXH3_64bits(body, pages * page_bytes_) != h.checksum)
    return make_error(errc::io_error, "kv import: checksum mismatch (damaged transfer)");
  table_.free(seq);
  std::pair<seq_id, std::size_t> want{seq, static_cast<std::size_t>(h.length)};
  if (auto ok = table_.reserve({&want, 1}); !ok)
    return ok;
  const auto& held = *table_.pages(seq);
  for (std::size_t p = 0; p < pages; ++p)
    std::memcpy(page_base(held[p]), body + p * page_bytes_, page_bytes_);
  table_.set_length(seq, h.length);
  return {};
}

expected<void> paged_kv_cache::append_pages(seq_id seq, std::span<const kv_page> pages) {
  auto length = table_.length(seq);
  auto new_length = length;
  if (auto ok = check_appended_pages(seq, length, pages, page_tokens_, page_bytes_, "kv append");
      !ok)
    return ok.error();
  else
    new_length += *ok;
  std::pair<seq_id, std::size_t> want{seq, new_length};
  if (auto ok = table_.reserve({&want, 1}); !ok)
    return ok;
  const auto& held = *table_.pages(seq);
  auto first = length / page_tokens_;
  for (std::size_t p = 0; p < pages.size(); ++p)
    std::memcpy(page_base(held[first + p]), pages[p].bytes.data(), page_bytes_);
  table_.set_length(seq, new_length);
  return {};
}

expected<std::vector<kv_page>> paged_kv_cache::export_pages(seq_id seq,
                                                            std::span<const token> tokens,
                                                            std::size_t from_page) const {
  if (table_.pages(seq) == nullptr)
    return make_error(errc::not_found, "kv cache: no sequence " + std::to_string(seq));
  std::vector<kv_page> out;
  for (auto& [page, identity] : table_.pages_of(seq, tokens, from_page)) {
    const auto* from = reinterpret_cast<const std::uint8_t*>(page_base(page));
    identity.bytes.assign(from, from + page_bytes_);
    out.push_back(std::move(identity));
  }
  return out;
}

std::vector<page_range> paged_kv_cache::layer_groups() const {
  constexpr unsigned max_groups = 8;
  const std::size_t layer_bytes = page_bytes_ / std::max(1u, shape_.layers);
  if (shape_.layers == 0 || layer_bytes % 64 != 0)
    return {{0, page_bytes_}};
  const unsigned groups = std::min(max_groups, shape_.layers);
  std::vector<page_range> out;
  std::size_t at = 0;
  for (unsigned g = 0; g < groups; ++g) {
    // Layers spread evenly: the first `layers % groups` groups take one more.
    const unsigned layers = shape_.layers / groups + (g < shape_.layers % groups ? 1 : 0);
    out.push_back({at, layers * layer_bytes});
    at += layers * layer_bytes;
  }
  return out;
}

std::vector<std::span<std::byte>> paged_kv_cache::page_memory(seq_id seq) const {
  std::vector<std::span<std::byte>> out;
  if (const auto* held = table_.pages(seq))
    for (auto page : *held)
      out.emplace_back(page_base(page), page_bytes_);
  return out;
}

expected<void> paged_kv_cache::reserve_seq(seq_id seq, std::size_t length) {
  return table_.create(seq, length);
}

kv_usage paged_kv_cache::usage() const noexcept {
  kv_usage u;
  u.pages_total = table_.total_pages();
  u.pages_used = table_.used_pages();
  u.pages_cached = table_.cached_pages();
  u.page_tokens = page_tokens_;
  u.page_bytes = page_bytes_;
  u.sequences = table_.sequences();
  return u;
}

} // namespace triad
