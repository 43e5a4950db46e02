#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the kvstore area, in one place (like CAF's `defaults::`); config sections take
/// their initial values from here.
namespace triad::defaults {

/// Defaults of the KV store.
namespace kvstore {
/// Tokens per block (the device's KV page size).
inline constexpr std::size_t block_tokens = 16;
/// Time-to-live of a pin when the caller gives none (a typical tool call's length, generous).
inline constexpr std::chrono::milliseconds pin_ttl{30'000};
/// Pins are checked for expiry at the first pin deadline, at least this far apart (a pin
/// expires within this much of its deadline).
inline constexpr std::chrono::milliseconds expiry_period{50};
/// Idle block actors kept per domain for blocks moving in (beyond that they exit).
inline constexpr std::size_t idle_actors_per_domain = 4096;
/// Copies into one domain sent to its mover in one message. The mover starts on a batch while
/// the store prepares the next, and the store finishes one while the mover copies the next;
/// a batch of a whole long transfer would do each side's work while the other waits.
inline constexpr std::size_t move_batch_blocks = 32;
/// The first batch of a store's turn into a domain: small, so its mover starts copying while
/// the store still prepares the rest; each next batch of the turn doubles, up to
/// `move_batch_blocks`.
inline constexpr std::size_t first_move_batch_blocks = 4;
/// Movers (copy engines) per domain at most; a domain gets one per worker thread up to this.
inline constexpr std::size_t movers_per_domain = 16;
/// Operations waiting for space (moves under way) before more are refused busy.
inline constexpr std::size_t max_waiting = 256;
/// How long a device may take to lend a page of its memory that a block stands for (its
/// driver copies it out between steps); past it the read fails and the caller computes.
inline constexpr std::chrono::seconds lend_patience{10};
/// `[kvstore] host_mib`: the node's host tier, in MiB: where pages its devices evict go (0: no
/// store; evicted pages are lost). Its memory is an arena, touched only as blocks fill it.
inline constexpr std::uint64_t host_mib = 256;
/// `[kvstore] disk_mib`: the bound of the disk tier, in MiB (when `disk_dir` names one).
inline constexpr std::uint64_t disk_mib = 1024;
/// Pages of prompts routed to one device and not yet computed there that the directory
/// remembers (kv_directory::note_routed); beyond, the least recently routed half is forgotten.
inline constexpr std::size_t routed_pages_per_device = 65536;
} // namespace kvstore

} // namespace triad::defaults
