#include "devices/kv_stream.hpp"

#include <thread>

#include <immintrin.h>

#include "runtime/node_clock.hpp"

namespace triad {

kv_stream::kv_stream(std::vector<std::span<std::byte>> blocks, end_fn on_end, std::int64_t flip_bit)
    : blocks_(std::move(blocks))
    , on_end_(std::move(on_end))
    , flip_bit_(flip_bit) {}

kv_stream::~kv_stream() {
  if (!on_end_)
    return;
  on_end_(rejected_.load(std::memory_order_acquire) ? std::vector<std::uint64_t>{} : checksums(),
          std::move(tokens_));
}

std::vector<std::uint64_t> kv_stream::checksums() const {
  std::vector<std::uint64_t> checksums;
  if (!complete() || blocks_.empty())
    return checksums;
  const auto size = blocks_.front().size();
  const auto g = groups_.size();
  checksums.reserve(pages_);
  for (std::size_t p = 0; p < pages_; ++p) {
    checksum_sums whole;
    for (std::size_t k = 0; k < g; ++k)
      whole.add(sums_[p * g + k]);
    checksums.push_back(checksum_finish(whole, size));
  }
  return checksums;
}

expected<void> kv_stream::begin(std::vector<token> tokens, std::size_t pages,
                                std::vector<page_range> groups, std::size_t page_tokens) {
  if (pages == 0 || pages > blocks_.size())
    return make_error(errc::exhausted, "kv stream: " + std::to_string(pages) + " pages, " +
                                           std::to_string(blocks_.size()) + " blocks leased");
  const auto size = blocks_.front().size();
  std::size_t at = 0;
  for (const auto& r : groups) {
    if (r.offset != at || r.offset % 64 != 0)
      return make_error(errc::invalid_argument,
                        "kv stream: layer group at byte " + std::to_string(r.offset) +
                            " does not follow the one before at a multiple of 64");
    at += r.bytes;
  }
  if (at != size)
    return make_error(errc::invalid_argument, "kv stream: layer groups cover " +
                                                  std::to_string(at) + " bytes of a " +
                                                  std::to_string(size) + "-byte page");
  tokens_ = std::move(tokens);
  pages_ = pages;
  page_tokens_ = page_tokens;
  groups_ = std::move(groups);
  sums_.assign(pages_ * groups_.size(), checksum_sums{});
  return {};
}

void kv_stream::send_group(std::size_t g, std::span<const std::span<std::byte>> pages) {
  // Published page by page: the receiver copies each piece right behind the sender.
  const auto& r = groups_[g];
  for (std::size_t p = 0; p < pages_; ++p) {
    // Streaming stores: the receiver reads the piece from memory, not this core's cache (with
    // cached stores this pass ran at 11 GB/s against 14-21, each line read for ownership first).
    checksum_range(blocks_[p].data() + r.offset, pages[p].subspan(r.offset, r.bytes), r.offset,
                   sums_[p * groups_.size() + g], true);
    if (g == 0 && p == 0 && flip_bit_ >= 0) { // damaged in the store's memory, after the check
      auto bit = static_cast<std::size_t>(flip_bit_) % (8 * r.bytes);
      blocks_[0][r.offset + bit / 8] ^= std::byte{1} << (bit % 8);
    }
    published_.store(g * pages_ + p + 1, std::memory_order_release);
  }
}

void kv_stream::abort() noexcept {
  aborted_.store(true, std::memory_order_release);
}

bool kv_stream::complete() const noexcept {
  return !groups_.empty() &&
         published_.load(std::memory_order_acquire) == groups_.size() * pages_ &&
         !aborted_.load(std::memory_order_acquire);
}

bool kv_stream::wait_for(std::size_t g, std::chrono::steady_clock::time_point deadline) const {
  return wait_for_pieces((g + 1) * pages_, deadline);
}

bool kv_stream::wait_for_pieces(std::size_t n,
                                std::chrono::steady_clock::time_point deadline) const {
  // The sender copies one piece in microseconds: spin a while, then give the cpu away between
  // looks (on a machine whose cores are all busy, the sender may need this one).
  for (std::uint64_t spins = 0;; ++spins) {
    if (published_.load(std::memory_order_acquire) >= n)
      return true;
    if (aborted_.load(std::memory_order_acquire))
      return false;
    if (spins < 4096) {
      _mm_pause();
      continue;
    }
    if (spins % 64 == 0 && node_clock::now() >= deadline)
      return false;
    if (node_clock::is_virtual()) { // the sender waits on the clock: let it jump
      const node_clock::time_point due{
          node_clock::duration{next_due_.load(std::memory_order_acquire)}};
      if (due > node_clock::now())
        node_clock::sleep_until(std::min(due, deadline));
      else
        node_clock::sleep_for(std::chrono::microseconds{20});
    } else
      std::this_thread::yield();
  }
}

expected<void> kv_stream::receive_group(std::size_t g, std::span<const std::span<std::byte>> pages,
                                        std::chrono::steady_clock::time_point deadline) const {
  const auto& r = groups_[g];
  for (std::size_t p = 0; p < pages_; ++p) {
    if (!wait_for_pieces(g * pages_ + p + 1, deadline))
      return make_error(errc::timed_out, "kv stream: the sender stopped (or was too slow) before "
                                         "layer group " +
                                             std::to_string(g) + " of page " + std::to_string(p));
    checksum_sums got;
    checksum_range(pages[p].data() + r.offset, blocks_[p].subspan(r.offset, r.bytes), r.offset, got,
                   true);
    if (!(got == sums_[p * groups_.size() + g])) {
      reject();
      return make_error(errc::corrupted, "kv stream: page " + std::to_string(p) + ", layer group " +
                                             std::to_string(g) + " does not match what was sent");
    }
  }
  return {};
}

expected<void> send_kv(backend& be, seq_id seq, std::vector<token> tokens, kv_stream& stream,
                       const std::function<void()>& announce) {
  auto groups = be.stream_groups();
  auto pages = be.page_memory(seq);
  if (groups.empty() || pages.empty())
    return make_error(errc::unsupported, "kv stream: the backend cannot stream its pages");
  const auto pt = be.kv().page_tokens;
  const auto length = std::min(tokens.size(), be.length(seq));
  tokens.resize(length);
  const auto n = (length + pt - 1) / pt;
  if (n > pages.size())
    return make_error(errc::invalid_argument, "kv stream: sequence " + std::to_string(seq) +
                                                  " holds fewer pages than its tokens need");
  const auto count = groups.size();
  if (auto ok = stream.begin(std::move(tokens), n, std::move(groups), pt); !ok)
    return ok;
  announce();
  const auto start = node_clock::now();
  const std::chrono::duration<double> per_group{be.stream_group_seconds(n)};
  for (std::size_t g = 0; g < count; ++g) {
    if (per_group.count() > 0) { // a modelled link: a group is out once its time has passed
      const auto due =
          start + std::chrono::duration_cast<node_clock::duration>((g + 1) * per_group);
      stream.announce_due(due);
      node_clock::sleep_until(due);
    }
    stream.send_group(g, std::span<const std::span<std::byte>>{pages.data(), n});
  }
  return {};
}

expected<void> receive_kv(backend& be, seq_id seq, const kv_stream& stream,
                          std::chrono::milliseconds patience) {
  const auto groups = be.stream_groups();
  if (groups.size() != stream.groups().size())
    return make_error(errc::invalid_argument,
                      "kv stream: the sender's pages split into other layer groups");
  for (std::size_t g = 0; g < stream.groups().size(); ++g) {
    const auto& mine = groups[g];
    if (mine.offset != stream.groups()[g].offset || mine.bytes != stream.groups()[g].bytes)
      return make_error(errc::invalid_argument, "kv stream: the sender's page layout differs");
  }
  if (auto ok = be.reserve_kv(seq, stream.tokens().size()); !ok)
    return ok;
  auto pages = be.page_memory(seq);
  const auto start = node_clock::now();
  const std::chrono::duration<double> per_group{be.stream_group_seconds(stream.pages())};
  // Patience past the links' modelled time (the sender's groups and this side's).
  const auto deadline = start + patience +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            2.0 * static_cast<double>(stream.groups().size()) * per_group);
  auto ready = start; // a modelled link: a group comes in its time after the one before
  for (std::size_t g = 0; g < stream.groups().size(); ++g) {
    if (auto ok = stream.receive_group(g, pages, deadline); !ok) {
      be.free(seq);
      return ok;
    }
    if (per_group.count() > 0) {
      ready = std::max(ready, node_clock::now()) +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(per_group);
      node_clock::sleep_until(ready);
    }
  }
  return {};
}

} // namespace triad
