#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace triad::defaults::cluster {

/// How long connecting to a peer's KV wire may take before it is an error.
inline constexpr std::chrono::milliseconds wire_connect_timeout{5000};
/// How long one send or receive of a batch of blocks may take before it is an error.
inline constexpr std::chrono::milliseconds wire_transfer_timeout{30000};
/// The UCX tag of a KV block's header message (ASCII "triadkv"); its bytes go under the next tag.
inline constexpr std::uint64_t wire_block_tag = 0x0074726961646b76ull;

} // namespace triad::defaults::cluster

namespace triad::defaults::cluster {

/// The address device nodes listen on for front nodes: loopback only, unless configured.
inline constexpr const char* listen = "127.0.0.1";
/// The control plane's TCP port.
inline constexpr std::uint16_t port = 7400;
/// How often a front node pings each peer.
inline constexpr std::uint32_t heartbeat_ms = 500;
/// A peer silent this long is lost.
inline constexpr std::uint32_t heartbeat_deadline_ms = 3000;
/// How often lost or unreached peers are tried again.
inline constexpr std::uint32_t rejoin_ms = 2000;
/// How long a device node holds moved-out KV for the node that fetches it.
inline constexpr std::uint32_t kv_hold_ms = 30000;
/// The most KV (MiB) a device node holds for others to fetch.
inline constexpr std::uint32_t kv_hold_mib = 4096;
/// KV smaller than this (KiB) goes in the control message: setting a KV wire up for a fetch
/// (UCX endpoints both ways, wired up) took 2-6 ms on loopback, more than a small KV's bytes
/// take through the control plane.
inline constexpr std::uint32_t kv_wire_min_kib = 64;
/// How long a device's answer (admission, export, stats) may take across nodes before the
/// request is answered with an error; a KV export of a long context is the slowest.
inline constexpr std::chrono::milliseconds remote_answer_timeout{60000};
/// Fetches of KV held on other nodes a node runs at once (each on a thread of its own, which
/// it blocks for the transfer), handed out in turn.
inline constexpr std::size_t kv_fetchers = 2;
/// Servers of a node's KV exchange (each a UCX wire on a port of its own and a thread that
/// serves one peer at a time): fetches of KV it holds (or of kept blocks) at once, fetchers
/// taking them in turn. Their ports are the exchange's address: "host:port,port".
inline constexpr std::size_t kv_servers = 2;
/// The most pages (kept blocks, a held stream's) and prompt tokens one fetch asks another
/// node's KV exchange for; a device node streams no hand-off past them (it goes as bytes).
inline constexpr std::size_t kv_fetch_max_pages = 8192;
inline constexpr std::size_t kv_fetch_max_tokens = std::size_t{1} << 18; ///< see kv_fetch_max_pages
/// Worker threads of the cluster's own actor system (its network actors: the gateway, the
/// remote devices and peers); CAF's middleman runs its multiplexer on a thread of its own.
inline constexpr std::size_t network_threads = 2;

} // namespace triad::defaults::cluster
