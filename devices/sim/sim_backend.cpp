#include "devices/sim/sim_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "runtime/node_clock.hpp"

namespace triad {

namespace {

// A modelled wait of `seconds` as the node clock's duration.
node_clock::duration modelled(double seconds) {
  return std::chrono::duration_cast<node_clock::duration>(std::chrono::duration<double>(seconds));
}

struct sim_export_header {
  char magic[8];
  std::uint64_t length;
  std::uint64_t page_tokens;
  std::int64_t last_token;
};

constexpr char sim_magic[8] = {'T', 'R', 'I', 'A', 'D', 'S', 'I', 'M'};

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace

expected<std::unique_ptr<sim_backend>> sim_backend::create(sim_backend_options options) {
  if (auto ok = options.shape.validate(); !ok)
    return ok.error();
  if (options.page_tokens == 0)
    return make_error(errc::invalid_argument, "sim: page_tokens 0; allowed: 1 or more");
  if (options.time_scale < 0)
    return make_error(errc::invalid_argument, "sim: time_scale < 0; allowed: 0 (no wait) or more");
  if (auto ok = check_tiers(options.profile); !ok)
    return ok.error();
  std::unique_ptr<sim_backend> self{new sim_backend(options)};
  auto weights = static_cast<std::uint64_t>(
      estimate_step(options.shape, options.type, options.profile, {}).capacity_footprint);
  const auto memory = options.profile.memory_bytes();
  if (weights >= memory)
    return make_error(errc::exhausted, "sim: model '" + options.shape.name + "' needs " +
                                           std::to_string(weights) + " bytes of weights; " +
                                           options.profile.name + " has " + std::to_string(memory) +
                                           " in all its tiers");
  // Every tier holds KV: what the fastest cannot hold waits in the slower ones, and a step
  // that reads it there takes their bandwidth's time.
  std::uint64_t budget = options.kv_budget_bytes != 0 ? options.kv_budget_bytes : memory - weights;
  self->page_bytes_ = options.page_tokens * options.shape.kv_bytes_per_token(options.type);
  // Page ids are 32-bit: a tiny model on a large device holds at most that many pages.
  auto pages_total = std::min<std::uint64_t>(budget / self->page_bytes_,
                                             std::numeric_limits<std::uint32_t>::max() - 1);
  if (pages_total == 0)
    return make_error(errc::invalid_argument, "sim: a KV budget of " + std::to_string(budget) +
                                                  " bytes holds no page of " +
                                                  std::to_string(self->page_bytes_) + " bytes");
  self->table_.emplace(pages_total, options.page_tokens);
  // The fastest tier's room for KV beside the weights: a step whose KV stays there reads it at
  // that tier's bandwidth (kv_usage::pages_fast); none with one tier, or weights that fill it.
  const auto& tiers = options.profile.tiers;
  if (tiers.size() > 1 && tiers.front().bytes > weights)
    self->pages_fast_ = static_cast<std::size_t>(
        std::min<std::uint64_t>((tiers.front().bytes - weights) / self->page_bytes_, pages_total));
  auto* sim = self.get();
  self->table_->on_evict([sim](std::uint32_t, kv_page out) {
    if (sim->evicted_ == nullptr)
      return;
    out.bytes.resize(out.tokens.size() * sizeof(std::int32_t));
    std::memcpy(out.bytes.data(), out.tokens.data(), out.bytes.size());
    sim->evicted_->push_back(std::move(out));
  });
  return self;
}

expected<step_output> sim_backend::step(std::span<const step_item> items) {
  const auto& s = options_.shape;
  if (auto ok = check_step(items, s, *this); !ok)
    return ok.error();
  std::vector<step_work> work;
  std::vector<std::pair<seq_id, std::size_t>> wanted;
  std::size_t step_pages = 0; // pages the step's sequences hold now
  for (const auto& item : items) {
    auto have = length(item.seq);
    work.push_back({have, item.tokens.size()});
    wanted.emplace_back(item.seq, have + item.tokens.size());
    if (const auto* held = table_->pages(item.seq))
      step_pages += held->size();
  }
  // The KV held outside the step (other sequences') takes room after the step's own data (in
  // the slower tiers when the fast one is full) and is not read. The prefix cache's pages are
  // not counted: they give way (the page table evicts them when the step's pages need room),
  // so a cache that filled the device cannot make every step fail (which preempting sequences,
  // whose pages then join the cache, would never cure).
  const auto usage = kv();
  const auto held = usage.pages_used;
  const double idle = static_cast<double>(held > step_pages ? held - step_pages : 0) *
                      static_cast<double>(page_bytes_);
  last_cost_ = estimate_step(s, options_.type, options_.profile, work, idle);
  if (!last_cost_.fits)
    return make_error(errc::exhausted, "sim " + options_.profile.name + ": step needs " +
                                           std::to_string(last_cost_.capacity_footprint) +
                                           " bytes resident beside " +
                                           std::to_string(static_cast<std::uint64_t>(idle)) +
                                           " held, device has " +
                                           std::to_string(options_.profile.memory_bytes()));
  if (auto ok = table_->reserve(wanted); !ok)
    return make_error(errc::exhausted, "sim " + options_.profile.name + ": " + ok.error().message);
  step_output out;
  for (const auto& item : items) {
    auto len = table_->length(item.seq) + item.tokens.size();
    write_tokens(item.seq, len - item.tokens.size(), item.tokens);
    table_->set_length(item.seq, len);
    last_token_[item.seq] = item.tokens.back();
    // Simulated logits: noise plus one clear peak, a pure function of (last token, position).
    std::uint64_t h =
        mix(static_cast<std::uint64_t>(item.tokens.back()) * 0x9e3779b97f4a7c15ull ^ mix(len));
    std::vector<float> logits(s.vocab);
    for (unsigned v = 0; v < s.vocab; ++v)
      logits[v] = static_cast<float>(mix(h + v) >> 40) / static_cast<float>(1 << 24) - 0.5f;
    logits[32 + h % 95] += 8.0f; // a printable byte
    out.logits.push_back(std::move(logits));
    out.tokens += item.tokens.size();
  }
  out.seconds = last_cost_.seconds;
  out.operational_intensity = last_cost_.operational_intensity;
  out.capacity_footprint = last_cost_.capacity_footprint;
  for (std::size_t t = 0; t < std::min(max_memory_tiers, last_cost_.tier_resident.size()); ++t)
    out.tier_resident[t] = last_cost_.tier_resident[t];
  if (options_.time_scale > 0)
    node_clock::sleep_for(modelled(out.seconds / options_.time_scale));
  return out;
}

expected<std::vector<std::byte>> sim_backend::export_kv(seq_id seq) const {
  if (table_->pages(seq) == nullptr)
    return make_error(errc::not_found, "sim: no sequence " + std::to_string(seq));
  sim_export_header h{};
  std::memcpy(h.magic, sim_magic, sizeof(sim_magic));
  h.length = table_->length(seq);
  h.page_tokens = options_.page_tokens;
  h.last_token = last_token_.at(seq);
  // Then its tokens, as its pages hold them (an importer's pages hold them too, so a page it
  // publishes and later streams out carries its own tokens).
  std::vector<std::byte> out(sizeof(h) + h.length * sizeof(std::int32_t));
  std::memcpy(out.data(), &h, sizeof(h));
  const auto pt = options_.page_tokens;
  const auto& held = *table_->pages(seq);
  auto* to = out.data() + sizeof(h);
  for (std::size_t pos = 0; pos < h.length; ++pos, to += sizeof(std::int32_t)) {
    const auto at = static_cast<std::size_t>(held[pos / pt]) * pt + pos % pt;
    const std::int32_t t = at < page_tokens_mem_.size() ? page_tokens_mem_[at] : 0;
    std::memcpy(to, &t, sizeof(t));
  }
  return out;
}

expected<void> sim_backend::import_kv(seq_id seq, std::span<const std::byte> bytes) {
  sim_export_header h;
  if (bytes.size() < sizeof(h))
    return make_error(errc::invalid_argument, "sim import: " + std::to_string(bytes.size()) +
                                                  " bytes; a sim export has at least " +
                                                  std::to_string(sizeof(h)));
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (bytes.size() != sizeof(h) + h.length * sizeof(std::int32_t))
    return make_error(errc::invalid_argument,
                      "sim import: " + std::to_string(bytes.size()) + " bytes for " +
                          std::to_string(h.length) + " tokens; a sim export has " +
                          std::to_string(sizeof(h) + h.length * sizeof(std::int32_t)));
  if (std::memcmp(h.magic, sim_magic, sizeof(sim_magic)) != 0 ||
      h.page_tokens != options_.page_tokens)
    return make_error(errc::invalid_argument, "sim import: not a sim export of this page size");
  free(seq);
  if (auto ok = table_->create(seq, h.length); !ok)
    return make_error(errc::exhausted, "sim import: no room for " + std::to_string(h.length) +
                                           " tokens: " + ok.error().message);
  std::vector<token> toks(h.length);
  std::memcpy(toks.data(), bytes.data() + sizeof(h), h.length * sizeof(std::int32_t));
  write_tokens(seq, 0, toks);
  // The KV crosses the device's link (simulated): its bytes at the profile's link bandwidth.
  if (options_.time_scale > 0 && options_.profile.link_bandwidth > 0) {
    double bytes = static_cast<double>(h.length) *
                   static_cast<double>(options_.shape.kv_bytes_per_token(options_.type));
    node_clock::sleep_for(modelled(bytes / options_.profile.link_bandwidth / options_.time_scale));
  }
  last_token_[seq] = static_cast<token>(h.last_token);
  return {};
}

expected<void> sim_backend::append_pages(seq_id seq, std::span<const kv_page> pages) {
  const auto pt = options_.page_tokens;
  auto length = table_->length(seq);
  auto added = check_appended_pages(seq, length, pages, pt, page_payload_bytes(), "sim append");
  if (!added)
    return added.error();
  for (const auto& p : pages) // a sim page's bytes are its tokens (then zeros)
    if (std::memcmp(p.bytes.data(), p.tokens.data(), p.tokens.size() * sizeof(std::int32_t)) != 0)
      return make_error(errc::invalid_argument, "sim append: a page whose bytes are not its " +
                                                    std::to_string(p.tokens.size()) + " tokens");
  if (pages.empty())
    return {};
  auto new_length = length + *added;
  std::pair<seq_id, std::size_t> want{seq, new_length};
  if (auto ok = table_->reserve({&want, 1}); !ok)
    return make_error(errc::exhausted, "sim append: no room for " + std::to_string(pages.size()) +
                                           " pages: " + ok.error().message);
  table_->set_length(seq, new_length);
  for (std::size_t p = 0, at = length; p < pages.size(); at += pages[p].tokens.size(), ++p)
    write_tokens(seq, at, pages[p].tokens);
  last_token_[seq] = pages.back().tokens.back();
  if (options_.time_scale > 0 && options_.profile.link_bandwidth > 0) {
    double bytes = static_cast<double>(*added) *
                   static_cast<double>(options_.shape.kv_bytes_per_token(options_.type));
    node_clock::sleep_for(modelled(bytes / options_.profile.link_bandwidth / options_.time_scale));
  }
  return {};
}

expected<std::vector<kv_page>> sim_backend::export_pages(seq_id seq, std::span<const token> tokens,
                                                         std::size_t from_page) const {
  if (table_->pages(seq) == nullptr)
    return make_error(errc::not_found, "sim: no sequence " + std::to_string(seq));
  std::vector<kv_page> out;
  for (auto& [page, identity] : table_->pages_of(seq, tokens, from_page)) {
    identity.bytes.assign(page_payload_bytes(), 0);
    std::memcpy(identity.bytes.data(), identity.tokens.data(),
                identity.tokens.size() * sizeof(std::int32_t));
    out.push_back(std::move(identity));
  }
  return out;
}

std::int32_t* sim_backend::page_tokens_of(std::uint32_t page) {
  const auto pt = options_.page_tokens;
  const auto need = (static_cast<std::size_t>(page) + 1) * pt;
  if (page_tokens_mem_.size() < need)
    page_tokens_mem_.resize(std::max(need, 2 * page_tokens_mem_.size()), 0);
  return page_tokens_mem_.data() + static_cast<std::size_t>(page) * pt;
}

void sim_backend::write_tokens(seq_id seq, std::size_t at, std::span<const token> tokens) {
  const auto* held = table_->pages(seq);
  const auto pt = options_.page_tokens;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto pos = at + i;
    if (held == nullptr || pos / pt >= held->size())
      return;
    page_tokens_of((*held)[pos / pt])[pos % pt] = tokens[i];
  }
}

std::vector<page_range> sim_backend::stream_groups() const {
  // Groups past the first start at the page's end: a multiple of 64 bytes, or one group.
  const unsigned groups =
      page_payload_bytes() % 64 != 0 ? 1u : std::min(8u, std::max(1u, options_.shape.layers));
  std::vector<page_range> out{{0, page_payload_bytes()}};
  for (unsigned g = 1; g < groups; ++g)
    out.push_back({page_payload_bytes(), 0});
  return out;
}

std::vector<std::span<std::byte>> sim_backend::page_memory(seq_id seq) {
  std::vector<std::span<std::byte>> out;
  if (const auto* held = table_->pages(seq)) {
    if (!held->empty())
      page_tokens_of(*std::max_element(held->begin(), held->end())); // grown once, first
    for (auto page : *held)
      out.emplace_back(reinterpret_cast<std::byte*>(page_tokens_of(page)), page_payload_bytes());
  }
  return out;
}

expected<void> sim_backend::reserve_kv(seq_id seq, std::size_t length) {
  if (auto ok = table_->create(seq, length); !ok)
    return make_error(ok.error().code, "sim: " + ok.error().message);
  last_token_[seq] = 0; // the step past the KV brings the next token
  return {};
}

double sim_backend::stream_group_seconds(std::size_t pages) const {
  if (options_.time_scale <= 0 || options_.profile.link_bandwidth <= 0)
    return 0;
  const double bytes = static_cast<double>(pages) * static_cast<double>(page_bytes_) /
                       static_cast<double>(stream_groups().size());
  // At most an hour a group: a tiny time_scale must not overflow a clock's duration.
  return std::min(3600.0, bytes / options_.profile.link_bandwidth / options_.time_scale);
}

bool sim_backend::import_cheaper(std::size_t context, std::size_t tokens) const {
  if (options_.profile.link_bandwidth <= 0 || tokens == 0)
    return true;
  const double import_s = static_cast<double>(tokens) *
                          static_cast<double>(options_.shape.kv_bytes_per_token(options_.type)) /
                          options_.profile.link_bandwidth;
  // What computing them adds to the step that computes the prompt's rest anyway (at least
  // one token): the step with them against the step without them.
  const auto step = [&](std::uint64_t ctx, std::uint64_t n) {
    return estimate_step(options_.shape, options_.type, options_.profile, {{ctx, n}}).seconds;
  };
  const double compute_s = step(context, tokens + 1) - step(context + tokens, 1);
  return import_s < compute_s;
}

void sim_backend::free(seq_id seq) {
  table_->free(seq);
  last_token_.erase(seq);
}

std::size_t sim_backend::attach_prefix(seq_id seq, std::span<const token> tokens) {
  auto covered = table_->attach_prefix(seq, tokens);
  if (covered != 0)
    last_token_[seq] = tokens[covered - 1];
  return covered;
}

void sim_backend::publish(seq_id seq, std::span<const token> tokens) {
  table_->publish(seq, tokens);
}

std::size_t sim_backend::length(seq_id seq) const noexcept {
  return table_->length(seq);
}

kv_usage sim_backend::kv() const noexcept {
  return {table_->total_pages(),
          table_->used_pages(),
          table_->cached_pages(),
          options_.page_tokens,
          page_bytes_,
          table_->sequences(),
          pages_fast_};
}

} // namespace triad
