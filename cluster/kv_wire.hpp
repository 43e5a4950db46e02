#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/defaults.hpp"
#include "cluster/kv_shared.hpp"
#include "runtime/error.hpp"

namespace triad::cluster {

// -- transports --

/// Which UCX transports a wire may use: shared memory between processes of one machine (UCX's
/// `sm`: sysv and posix segments, cross-memory attach for large blocks), or TCP (between
/// machines without RDMA, or to measure it on one).
enum class wire_transport : std::uint8_t { shared_memory, tcp };

/// "shared_memory" or "tcp".
std::string_view to_string(wire_transport t) noexcept;

// -- blocks on the wire --

/// A block of KV to send: the KV store's block id, its bytes, and the checksum its owner
/// computed (block_checksum, runtime/checksum.hpp), which the receiver checks.
struct wire_block {
  std::uint64_t id = 0;             ///< the KV store's block id
  std::span<const std::byte> bytes; ///< the block's bytes (they stay the caller's)
  std::uint64_t checksum = 0;       ///< block_checksum of the bytes at their origin
};

/// A block received into the caller's memory: its id and how many bytes of the slot it
/// filled; only ever returned for bytes that passed their checksum.
struct received_block {
  std::uint64_t id = 0;       ///< the sender's block id
  std::size_t bytes = 0;      ///< bytes written at the start of the slot
  std::uint64_t checksum = 0; ///< the sender's checksum, which the bytes matched
  bool in_place = false;      ///< copied by this wire out of the sender's shared memory
};

/// What a wire over shared memory shares with its peer beyond messages: blocks lying in
/// `memory` go as where they lie, and the peer (when it reads shared memory) copies them out
/// of its mapping of it; `reader` is this wire's way to read what a peer sends so. Either may
/// be null; over TCP neither is used.
struct wire_sharing {
  std::shared_ptr<const kv_shared_memory> memory; ///< where blocks it sends may lie
  std::shared_ptr<kv_shared_reader> reader;       ///< reads blocks a peer sends where they lie
};

// -- the wire --

/// One end of a KV data plane between two processes: a UCX context and worker (RAII) and at
/// most one peer, reached by connect() or accepted by listen(). A block travels as a small
/// header message (id, length, checksum) and its bytes, sent from and received into the
/// callers' memory (large blocks by UCX's zero-copy rendezvous); over shared memory, a block
/// lying in the sender's kv_shared_memory goes as where it lies instead, to a peer that reads
/// it (wire_sharing), which copies it out itself. The receiver checks every block's checksum
/// and never hands out bytes that fail it. A batch that fails (timeout, peer
/// failure) drops the peer and rebuilds the worker, so nothing of it arrives later: a
/// listening wire then accepts a new peer, a connected one connects again. Not thread-safe:
/// one thread drives a wire (it progresses UCX on that thread, busy-polling while it waits).
class kv_wire {
public:
  /// Opens a wire that uses `transport` (sharing memory with its peers as `sharing` says,
  /// over shared memory); errors name the UCX call and status.
  static expected<std::unique_ptr<kv_wire>> open(wire_transport transport,
                                                 wire_sharing sharing = {});

  /// Closes the peer's endpoint, the listener and the worker.
  ~kv_wire();
  kv_wire(const kv_wire&) = delete;
  kv_wire& operator=(const kv_wire&) = delete;

  /// Listens on `host`:`port` (0: a free port) for one peer; answers the port bound. The peer
  /// is accepted while receive() or send() waits: over that TCP connection the two workers
  /// exchange their UCX addresses, and the blocks then go over the wire's transport.
  expected<std::uint16_t> listen(const std::string& host, std::uint16_t port);

  /// Connects to the wire listening on `host`:`port` and exchanges worker addresses with it;
  /// errc::io_error naming the address when nothing listens there (at once) or the exchange
  /// fails, errc::timed_out when it does not finish within `timeout`.
  expected<void>
  connect(const std::string& host, std::uint16_t port,
          std::chrono::milliseconds timeout = defaults::cluster::wire_connect_timeout);

  /// Sends `blocks` to the peer, all under way at once, and waits until every one has left
  /// (the bytes may be reused then; a block sent as where it lies has left once the peer is done
  /// with it: copied, or refused). A peer that could not map the shared memory says so, and the
  /// wire sends every later block with its bytes. errc::invalid_argument without a peer;
  /// errc::timed_out or errc::io_error (the peer failed) drop the peer.
  expected<void> send(std::span<const wire_block> blocks,
                      std::chrono::milliseconds timeout = defaults::cluster::wire_transfer_timeout);

  /// Receives as many blocks as `slots`, in the order sent, block i into slots[i] (at least
  /// its size). Per block: the block, or errc::corrupted (its checksum did not match: the
  /// bytes must not be used), errc::exhausted (larger than its slot) or errc::io_error (sent as
  /// where it lies in memory this wire could not map). The whole fails, and drops the peer, on
  /// a transport error, when the peer fails (over TCP) or when `timeout` passes first. One
  /// receive takes the blocks of at most one send that sent some as where they lie (that send
  /// returns once the receives that took them end).
  expected<std::vector<expected<received_block>>>
  receive(std::span<const std::span<std::byte>> slots,
          std::chrono::milliseconds timeout = defaults::cluster::wire_transfer_timeout);

  /// A listening wire without a peer: waits up to `timeout` for one to connect and exchanges
  /// worker addresses with it (errc::timed_out when none came); a peer that connected gets at
  /// least wire_connect_timeout to wire up. With a peer: nothing to do.
  expected<void> accept(std::chrono::milliseconds timeout);
  /// Ends the connection to the peer after its batches (sends flushed first): a listening wire
  /// accepts the next peer, a connected one may connect elsewhere.
  void drop_peer();
  /// The transport it was opened with.
  wire_transport transport() const noexcept;

  struct state;

private:
  explicit kv_wire(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

} // namespace triad::cluster
