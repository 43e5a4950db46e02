#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>

#include "cluster/kv_wire.hpp"
#include "devices/device.hpp"
#include "runtime/error.hpp"
#include "runtime/metrics.hpp"

namespace triad::detail {

/// A node's KV exchange: the KV data plane between nodes on the KV wire (UCX). It holds the KV
/// a device of this node moved out (a prefill's hand-off) as checksummed blocks (over shared
/// memory: in a kv_shared_memory, which fetchers copy out in place), and its servers send
/// them to the node that fetches them (the decode node, named by the front
/// in its import order: the control messages carry block ids, the bytes go node to node once).
/// It fetches what other nodes hold for its own devices. Held KV nobody fetched goes after
/// `hold_for`, or gives way to newer KV past `budget` bytes (then the bytes stay in the control
/// message, as without an exchange); KV under `min_bytes` is not held at all. It runs
/// defaults::cluster::kv_servers servers, each a wire on a port of its own and a thread, so a
/// long read of kept blocks or one large transfer does not hold every other fetch up.
class kv_exchange {
public:
  /// Opens its servers' wires on `transport`, each listening on `host` (any free port), and
  /// starts their threads. `advertise` is the host others reach it at ("" = `host`).
  static expected<std::unique_ptr<kv_exchange>>
  start(cluster::wire_transport transport, const std::string& host, const std::string& advertise,
        std::chrono::milliseconds hold_for, std::uint64_t budget, std::uint64_t min_bytes,
        metrics_registry* metrics);
  /// Stops the server threads (a transfer under way ends with them) and the fetches' wire keeper,
  /// and drops what it holds.
  ~kv_exchange();
  kv_exchange(const kv_exchange&) = delete;
  kv_exchange& operator=(const kv_exchange&) = delete;

  /// "host:port,port,..." where its servers' wires listen (defaults::cluster::kv_servers), as
  /// others reach it.
  const std::string& address() const noexcept;
  /// The host of address().
  const std::string& host() const noexcept;
  /// Bytes of KV held now for other nodes to fetch, those being sent included until their
  /// fetchers acknowledge them; what expired dropped first (a draining node waits for them to go).
  std::uint64_t held_bytes();
  /// Takes `bytes` in as blocks of at most block_bytes (each checksummed) and answers their
  /// reference; an empty reference (the bytes left in place) when they do not fit the budget
  /// or are fewer than `min_bytes` (they go in the control message).
  /// Thread-safe.
  kv_held hold(std::vector<std::byte>& bytes);
  /// Takes in a stream through the node's KV store (a prefill device's move-out) and answers
  /// its reference: one block per page (kv_held::page_tokens), fetched with fetch_kept (store
  /// 0) and served from the store's memory once the stream's sender has copied every page. Not
  /// bound by the budget or `min_bytes` (the pages are the store's, which bounds them); held
  /// until fetched, released or `hold_for` passed, then the stream ends (its blocks stay in the
  /// store, sealed). An empty reference once stop_serving_kept ran. Thread-safe.
  kv_held hold_stream(std::shared_ptr<kv_stream> stream);
  /// The bytes of `held`: taken from this exchange when it holds them, else fetched from the
  /// holder over the wire, every block checked against its checksum. The holder keeps them
  /// until the fetch acknowledges them, so a fetch the wire broke (or whose block arrived
  /// damaged) is tried again on a fresh wire, up to three attempts. errc::not_found when the
  /// holder no longer has them (fetched, expired, stopped); io_error/timed_out/corrupted from
  /// the wire's last attempt. Blocking; thread-safe (each fetch from another node opens a wire of
  /// its own).
  expected<std::vector<std::byte>> fetch(const kv_held& held);

  /// Drops `held` when this exchange still holds it: the import it was held for was refused,
  /// or its importer computed the KV instead. Nothing once it was fetched. Thread-safe.
  void release(const kv_held& held);
  /// The transport its wire runs on (a fetcher must use the same).
  cluster::wire_transport transport() const noexcept;
  /// Over shared memory: whether held KV lies in shared memory that fetchers on this machine
  /// copy out in place, or why it goes by cross-memory attach instead; "" over TCP.
  const std::string& sharing() const noexcept;

  /// Reads kept blocks of the node's KV store (the store's id as the asker knows it, the ids,
  /// the tokens they hold) for another node: the pages in order from the first, each with its
  /// checksum (fewer when some were gone; none when the store is another).
  using kept_source = std::function<expected<std::vector<kv_page>>(
      std::uint64_t, const std::vector<std::uint64_t>&, const std::vector<token>&)>;
  /// Serves kept blocks of the node's KV store to other nodes from now on, read by `source`
  /// (on a server's thread; calls are serialized).
  void serve_kept(kept_source source);
  /// Serves them no more, once a read under way has ended, and drops the streams it holds
  /// (hold_stream; their pages being sent too): before the store or the actor system `source`
  /// uses goes.
  void stop_serving_kept();
  /// Whether it serves kept blocks (serve_kept was called).
  bool serves_kept() const noexcept;
  /// The kept blocks `ids` (holding `tokens`: the prompt's first tokens) of store `store` from
  /// the node whose exchange listens at `wire`, over the wire, each checked; tried on a fresh
  /// wire as fetch() is. At most 8192 blocks and 2^18 tokens are asked for (the first).
  /// Store 0 asks for the pages of a stream that node holds (hold_stream; `ids` its reference's
  /// blocks, `tokens` all it holds); one held here is taken, not sent.
  /// errc::not_found when that node has none of them (or another store). Blocking; thread-safe.
  expected<std::vector<kv_page>> fetch_kept(const std::string& wire, std::uint64_t store,
                                            std::vector<std::uint64_t> ids,
                                            std::vector<token> tokens);

  /// Pages `first`..`first + count - 1` of the chain of `tokens` (a prompt) that the store of
  /// the node whose exchange listens at `wire` holds, each checked, in order (fewer when it
  /// holds fewer; errc::not_found when none): asked as kept blocks of store prefix_store, the
  /// ids the page numbers. Blocking; thread-safe.
  expected<std::vector<kv_page>> fetch_prefix(const std::string& wire, std::vector<token> tokens,
                                              std::uint64_t first, std::uint64_t count);
  /// The store a kept_source is asked for when another node looks a prompt's pages up
  /// (fetch_prefix): the ids are then page numbers of the chain of the tokens.
  static constexpr std::uint64_t prefix_store = ~std::uint64_t{0};

  /// The largest block a held KV is cut into.
  static constexpr std::size_t block_bytes = std::size_t{4} << 20;

  struct state;

private:
  explicit kv_exchange(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

/// A fetcher of held KV through `exchange` (kv_fetch_atom), one fetch at a time. Spawn it
/// detached: the wire blocks its thread for the whole transfer.
caf::behavior kv_fetcher(caf::event_based_actor* self, std::shared_ptr<kv_exchange> exchange);

} // namespace triad::detail
