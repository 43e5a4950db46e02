#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>

#include "devices/backend.hpp"
#include "runtime/checksum.hpp"
#include "runtime/error.hpp"
#include "runtime/node_clock.hpp"

namespace triad {

/// A sequence's KV on its way from one device to another through blocks of the KV store's host
/// tier, one layer group at a time: the sending device's driver copies group g of every page
/// into the blocks (with the checksum's sums of each piece, in the same pass) and publishes it;
/// the receiving device's driver copies each published group into its own pages, checked
/// against the sender's sums, while the sender copies the later groups. When the last holder
/// lets go, the store is told (`on_end`): sealed blocks, with each block's whole checksum from
/// the summed pieces, stay in the host tier as any cached page (found by later prompts, from
/// any device); a stream that did not complete gives its blocks back.
class kv_stream {
public:
  /// Called once, by the destructor: the blocks' checksums (empty when the stream did not
  /// complete) and the tokens they hold.
  using end_fn =
      std::function<void(std::vector<std::uint64_t> checksums, std::vector<token> tokens)>;

  /// A stream through `blocks` (each one page's bytes, in the store's memory, held for the
  /// stream); `flip_bit` >= 0 damages that bit of the first group in block 0 after the sender's
  /// check (fault injection: the receiver must find it).
  kv_stream(std::vector<std::span<std::byte>> blocks, end_fn on_end, std::int64_t flip_bit = -1);
  ~kv_stream();
  kv_stream(const kv_stream&) = delete;
  kv_stream& operator=(const kv_stream&) = delete;

  // -- the sender, on its driver thread --

  /// Says what goes before the first group: the tokens whose KV the pages hold (one page per
  /// page_tokens of them, the last may be partial) and the layer groups, in order, covering
  /// each page. Errors when they do not fit the blocks; then nothing is sent.
  /// `page_tokens`: tokens per full page (0: unknown; a stream that crosses nodes needs it).
  expected<void> begin(std::vector<token> tokens, std::size_t pages, std::vector<page_range> groups,
                       std::size_t page_tokens = 0);
  /// Copies group `g` (the next one) of `pages` (the sender's page memory, `begin`'s count)
  /// into the blocks, publishing each page's piece as it is in.
  void send_group(std::size_t g, std::span<const std::span<std::byte>> pages);
  /// Ends the stream before it completed: the receiver stops waiting and recomputes.
  void abort() noexcept;

  // -- the receiver --

  /// The tokens whose KV it carries (valid once the receiver got the stream: begin came first).
  const std::vector<token>& tokens() const noexcept { return tokens_; }
  /// The layer groups, in order.
  const std::vector<page_range>& groups() const noexcept { return groups_; }
  /// Pages it carries.
  std::size_t pages() const noexcept { return pages_; }
  /// Tokens per full page (0: its sender did not say).
  std::size_t page_tokens() const noexcept { return page_tokens_; }
  /// Bytes of KV it carries: its pages' blocks.
  std::size_t bytes() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < pages_ && i < blocks_.size(); ++i)
      n += blocks_[i].size();
    return n;
  }
  /// Waits until group `g` is published (spinning, then yielding the cpu; in virtual time
  /// sleeping on the node clock until the sender's next group is due): false when the stream
  /// was aborted or `deadline` (a node_clock time) passed first.
  bool wait_for(std::size_t g, std::chrono::steady_clock::time_point deadline) const;
  /// The sender says when its next group will be out (a modelled link's time).
  void announce_due(node_clock::time_point t) noexcept {
    next_due_.store(t.time_since_epoch().count(), std::memory_order_release);
  }
  /// Copies group `g` from the blocks into `pages` (the receiver's page memory), each page's
  /// piece as soon as the sender published it, checked against the sender's sums in the same
  /// pass: errc::corrupted when they differ, errc::timed_out when the sender stopped or
  /// `deadline` passed first.
  expected<void> receive_group(std::size_t g, std::span<const std::span<std::byte>> pages,
                               std::chrono::steady_clock::time_point deadline =
                                   std::chrono::steady_clock::time_point::max()) const;
  /// Whether every group was published.
  bool complete() const noexcept;
  /// Whether its sender broke it off (abort): it never completes.
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }
  /// Each page's block_checksum, from the sender's sums (empty until complete).
  std::vector<std::uint64_t> checksums() const;
  /// Page `p`'s block in the store's memory (its bytes are final once complete).
  std::span<const std::byte> block(std::size_t p) const noexcept { return blocks_[p]; }
  /// Says the blocks' bytes failed a receiver's check: they are given back, not kept.
  void reject() const noexcept { rejected_.store(true, std::memory_order_release); }

private:
  std::vector<std::span<std::byte>> blocks_;
  end_fn on_end_;
  std::int64_t flip_bit_;
  std::vector<token> tokens_;
  std::size_t pages_ = 0;
  std::size_t page_tokens_ = 0;
  std::vector<page_range> groups_;
  bool wait_for_pieces(std::size_t n, std::chrono::steady_clock::time_point deadline) const;

  std::vector<checksum_sums> sums_;       // the sender's, per (page, group): page * groups + group
  std::atomic<std::size_t> published_{0}; // pieces in, group by group: g * pages + page + 1
  // When the sender's next group is due on a modelled link (node_clock ticks since its epoch;
  // 0: none announced): a receiver in virtual time sleeps until then instead of polling.
  std::atomic<node_clock::rep> next_due_{0};
  std::atomic<bool> aborted_{false};
  mutable std::atomic<bool> rejected_{false};
};

/// Sends `seq`'s KV (its first `tokens.size()` tokens, `tokens` its tokens) from `be` through
/// `stream`, one layer group after another; errors (nothing sent, `stream` untouched) when the
/// backend cannot stream or the pages do not fit the blocks. `announce` runs after begin and
/// before the first group: the receiver may start then.
expected<void> send_kv(backend& be, seq_id seq, std::vector<token> tokens, kv_stream& stream,
                       const std::function<void()>& announce);

/// Creates `seq` on `be` from `stream`'s KV, group by group as the sender publishes them,
/// each checked. On an error the sequence is gone again: errc::exhausted when its pages do not
/// fit (retry later), otherwise the stream cannot be used (the caller recomputes the tokens).
expected<void> receive_kv(backend& be, seq_id seq, const kv_stream& stream,
                          std::chrono::milliseconds patience = std::chrono::seconds{30});

} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<triad::kv_stream>)
