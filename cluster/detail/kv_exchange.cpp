#include "cluster/detail/kv_exchange.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <span>
#include <thread>
#include <unordered_map>

#include <caf/all.hpp>

#include "cluster/config.hpp"
#include "devices/kv_stream.hpp"
#include "devices/prefix_hash.hpp"
#include "runtime/checksum.hpp"

namespace triad::detail {

namespace {

using clock = std::chrono::steady_clock;

// The server's wait for a peer between checks of its stop flag and of expiries.
constexpr std::chrono::milliseconds accept_poll{200};
// How long a connected peer may take to send its request.
constexpr std::chrono::milliseconds request_timeout{5000};
// The fetcher's word after the blocks: every one arrived and passed its checks (the holder
// lets the KV go), or not (the holder keeps it for the next attempt).
constexpr std::uint64_t ack_all = 1;
constexpr std::uint64_t ack_not = 0;
// Attempts of a fetch (each on a fresh wire) before a failure of the wire fails it.
constexpr int fetch_attempts = 3;
// The largest request: a count and that many block ids (and for kept blocks, a token count
// and that many tokens).
constexpr std::size_t max_request_blocks = defaults::cluster::kv_fetch_max_pages;
constexpr std::size_t max_kept_tokens = defaults::cluster::kv_fetch_max_tokens;
// Set in a request's count: it asks for kept blocks of the node's KV store, not held KV.
constexpr std::uint64_t kept_request = std::uint64_t{1} << 63;
// Per page of kept blocks, the words that describe it before its tokens: hash, parent,
// checksum, bytes, token count.
constexpr std::size_t page_words = 5;
// The most bytes of kept blocks one fetch takes (a described size past it is refused).
constexpr std::uint64_t max_kept_bytes = std::uint64_t{16} << 30;
// The id of the answer block that precedes the blocks: it carries how many of them follow.
constexpr std::uint64_t answer_id = 0;
// The store a request for kept blocks names to ask for a held stream's pages instead (a store's
// id is never 0).
constexpr std::uint64_t held_pages_store = 0;
// How long a server waits for a held stream's sender (the prefill device's driver) to finish
// copying its pages before it answers that it has none.
constexpr std::chrono::seconds stream_patience{10};

// Whether a fetch that failed with `code` may succeed on a fresh wire: the wire broke, was late
// or damaged a block (the holder kept the KV); not when the holder no longer has it.
bool worth_another_attempt(errc code) {
  return code == errc::io_error || code == errc::timed_out || code == errc::corrupted;
}

// A held KV's bytes, one buffer (its blocks are ranges of it): a range of the exchange's
// shared memory (given back when the last user lets go), or on the heap.
struct held_storage {
  std::vector<std::byte> heap;
  std::shared_ptr<cluster::kv_shared_memory> memory; // null: on the heap
  std::span<std::byte> range;                        // in `memory`, `size` bytes used
  std::size_t size = 0;

  held_storage() = default;
  held_storage(const held_storage&) = delete;
  held_storage& operator=(const held_storage&) = delete;
  ~held_storage() {
    if (memory)
      memory->release(range);
  }
  std::span<const std::byte> view() const {
    return memory ? std::span<const std::byte>{range.first(size)} : std::span{heap};
  }
};

// A KV held for another node: bytes (an exported blob, cut into blocks), or a stream through
// the node's KV store (its pages are the blocks: kv_held::page_tokens).
struct held_blob {
  std::shared_ptr<held_storage> bytes; // null for a stream
  std::shared_ptr<kv_stream> stream;   // null for bytes
  kv_held ref; // what the importer was given: its blocks' ids, sizes and checksums
  clock::time_point until;
  // Its bytes.
  std::size_t size() const { return stream ? stream->bytes() : bytes->view().size(); }
};

// One page of a held stream as a fetcher gets it: its identity, checksum and bytes.
struct page_view {
  block_hash hash = 0;
  block_hash parent = 0;
  std::uint64_t checksum = 0;
  std::span<const token> tokens;
  std::span<const std::byte> bytes;
};

// Waits (in real time, looking every 100 us: the exchange's threads are not the node clock's)
// up to stream_patience until `stream`'s sender has copied every page: whether it did, not
// broken off and before `stopping` says so.
bool wait_complete(const kv_stream& stream, const std::atomic<bool>& stopping) {
  const auto give_up = clock::now() + stream_patience;
  while (!stream.complete()) {
    if (stream.aborted() || stream.groups().empty() || stopping.load() || clock::now() >= give_up)
      return false;
    std::this_thread::sleep_for(std::chrono::microseconds{100});
  }
  return true;
}

// The pages of `stream` (`page_tokens` tokens each, the last may be partial), complete, when
// they hold `tokens`: nothing else.
std::vector<page_view> pages_of(const kv_stream& stream, std::size_t page_tokens,
                                const std::vector<token>& tokens) {
  if (!stream.complete() || page_tokens == 0 || stream.tokens() != tokens)
    return {};
  const auto sums = stream.checksums();
  std::vector<page_view> pages;
  block_hash parent = root_hash;
  const std::span<const token> all{stream.tokens()};
  for (std::size_t p = 0; p < stream.pages() && p < sums.size(); ++p) {
    const auto at = p * page_tokens;
    if (at >= all.size())
      break;
    const auto own = all.subspan(at, std::min(page_tokens, all.size() - at));
    const auto hash = chain_hash(parent, own);
    pages.push_back({hash, parent, sums[p], own, stream.block(p)});
    parent = hash;
  }
  return pages;
}

// One of the exchange's servers: a wire listening on a port of its own and the thread that
// serves its peers, one at a time.
struct server {
  std::unique_ptr<cluster::kv_wire> wire;
  std::thread thread;
  // The KV it sends now (off the books until acknowledged; null: none), and whether it was
  // released meanwhile (then it is not put back); both guarded by the exchange's mtx.
  const held_blob* sending = nullptr;
  bool sending_released = false;
};

// The host and ports of an exchange's address ("host:port,port,..."): nothing when it is not one.
std::optional<std::pair<std::string, std::vector<std::uint16_t>>>
split_address(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  std::vector<std::uint16_t> ports;
  auto rest = address.substr(colon + 1);
  while (true) {
    const auto comma = rest.find(',');
    const auto one =
        split_host_port(std::string{address.substr(0, colon + 1)}.append(rest.substr(0, comma)));
    if (!one)
      return std::nullopt;
    ports.push_back(one->second);
    if (comma == std::string_view::npos)
      return std::pair{one->first, std::move(ports)};
    rest = rest.substr(comma + 1);
  }
}

counter* counter_of(metrics_registry* m, const char* name, const char* help) {
  if (m == nullptr)
    return nullptr;
  auto c = m->add_counter(name, help);
  return c ? *c : nullptr;
}

void add(counter* c, double v = 1) {
  if (c != nullptr)
    c->inc(v);
}

} // namespace

struct kv_exchange::state {
  cluster::wire_transport transport = cluster::wire_transport::tcp;
  // Its servers (fixed from the start): a fetch of held KV or a read of kept blocks on one
  // does not wait for one on another.
  std::vector<std::unique_ptr<server>> servers;
  std::string address;
  std::string host; // as others reach it
  std::chrono::milliseconds hold_for{0};
  std::uint64_t budget = 0;
  std::uint64_t min_bytes = 0; // smaller KV is not held
  // Over shared memory: where held KV lies, so fetchers on this machine copy it out of their
  // mapping of it (null: KV lies on the heap and goes by cross-memory attach), and how this
  // node's fetches read KV that lies so elsewhere; `sharing_note` says which, or why not.
  std::shared_ptr<cluster::kv_shared_memory> shared;
  std::shared_ptr<cluster::kv_shared_reader> reader;
  std::string sharing_note;
  // Reads kept blocks of the node's KV store for other nodes (null: none served); server
  // threads call it with kept_mtx held shared (two reads at once), so stop_serving_kept(),
  // which takes it alone, waits for the calls under way.
  std::shared_mutex kept_mtx;
  kv_exchange::kept_source kept;
  std::atomic<bool> serving_kept{false};

  using held_map = std::map<std::uint64_t, held_blob>;
  std::mutex mtx; // guards what follows
  held_map held;  // by first block id (ids grow: oldest first)
  std::uint64_t held_bytes = 0;
  std::uint64_t held_stream_bytes = 0; // of held_bytes, streams' (the store's pages)
  std::uint64_t next_id = 0;
  // Whether streams are taken (hold_stream) and served: until stop_serving_kept, which drops
  // those held (their pages are the store's, which goes after it). Set under mtx.
  std::atomic<bool> takes_streams{true};
  std::atomic<bool> stopping_streams{false}; // !takes_streams, for waits

  // Told when a server ends a transfer (its KV delivered, or back on the books), or at stop.
  std::condition_variable sent_cv;

  std::atomic<bool> stop{false};
  // Which of a holder's servers this node's next fetch asks first (in turn, so fetches spread).
  std::atomic<std::size_t> next_server{0};

  // The fetches' wires. Setting a UCX wire up (context, worker) and tearing it down cost
  // milliseconds, more than a fetch of a few MiB, so the keeper thread opens the next fetch's
  // wire ahead and closes and destroys used ones, both off the fetch's path.
  std::mutex wires_mtx; // guards what follows
  std::condition_variable wires_cv;
  std::unique_ptr<cluster::kv_wire> spare;
  std::vector<std::unique_ptr<cluster::kv_wire>> used;
  bool want_spare = false; // a fetch took the spare, or found none
  bool keeper_stop = false;
  std::thread keeper; // started at the first fetch from another node

  counter* held_total = nullptr;
  counter* expired_total = nullptr;
  counter* sent_bytes = nullptr;
  counter* fetches = nullptr;
  counter* fetched_bytes = nullptr;
  counter* in_place_bytes = nullptr;
  counter* on_heap = nullptr;
  counter* kept_fetches = nullptr;
  counter* prefix_fetches = nullptr;
  counter* fetch_failures = nullptr;
  counter* fetch_retries = nullptr;
  gauge* held_gauge = nullptr;

  // Whether a server sends the KV of `ids` now (with mtx held).
  bool sent_elsewhere(const std::vector<std::uint64_t>& ids) const {
    return !ids.empty() && std::any_of(servers.begin(), servers.end(), [&](const auto& sv) {
      return sv->sending != nullptr && sv->sending->ref.blocks == ids;
    });
  }

  // Bytes of the KV being sent (with mtx held).
  std::uint64_t sending_bytes() const {
    std::uint64_t n = 0;
    for (const auto& sv : servers)
      n += sv->sending != nullptr ? sv->sending->size() : 0;
    return n;
  }

  // Puts `blob` on the books (with mtx held).
  void insert(held_blob blob) {
    held_bytes += blob.size();
    held_stream_bytes += blob.stream ? blob.size() : 0;
    const auto first = blob.ref.blocks.front();
    held.emplace(first, std::move(blob));
  }

  // Puts a KV taken in (its sizes known) on the books for hold_for with fresh block ids, one
  // per block, and answers its reference (with mtx held).
  kv_held book(held_blob blob) {
    auto& h = blob.ref;
    for (std::size_t i = 0; i < h.sizes.size(); ++i)
      h.blocks.push_back(next_id++);
    blob.until = clock::now() + hold_for;
    auto ref = h;
    insert(std::move(blob));
    add(held_total);
    publish();
    return ref;
  }

  // Takes one held KV off the books (with mtx held).
  held_blob remove(held_map::iterator it) {
    held_bytes -= it->second.size();
    held_stream_bytes -= it->second.stream ? it->second.size() : 0;
    return std::move(held.extract(it).mapped());
  }

  // Drops one held KV nobody fetched (with mtx held).
  void drop(held_map::iterator it) {
    add(expired_total);
    remove(it);
  }

  // The held-bytes gauge, after a change (with mtx held).
  void publish() {
    if (held_gauge != nullptr)
      held_gauge->set(static_cast<double>(held_bytes + sending_bytes()));
  }

  // Puts a taken KV back on the books (with mtx held): its fetcher did not acknowledge it, so
  // it may ask again. Past the budget (newer KV came meanwhile) it is dropped instead.
  void restore(held_blob blob) {
    if (!blob.stream && held_bytes - held_stream_bytes + blob.size() > budget) {
      add(expired_total);
      return;
    }
    insert(std::move(blob));
  }

  // Drops the oldest held KV (not the streams: their pages are the store's, bounded by its
  // budget) until `size` more fits the budget (with mtx held).
  void make_room(std::uint64_t size) {
    for (auto it = held.begin();
         held_bytes - held_stream_bytes + size > budget && it != held.end();)
      if (auto at = it++; !at->second.stream)
        drop(at);
  }

  // Drops the oldest held bytes (not a stream) (with mtx held): whether there were any.
  bool drop_oldest_bytes() {
    auto it =
        std::find_if(held.begin(), held.end(), [](const auto& e) { return !e.second.stream; });
    if (it == held.end())
      return false;
    drop(it);
    return true;
  }

  // Drops held KV past its time (with mtx held).
  void expire(clock::time_point now) {
    for (auto it = held.begin(); it != held.end();)
      if (auto at = it++; at->second.until <= now)
        drop(at);
    publish();
  }

  // Takes the blob `blocks` name out of what is held (with mtx held); null when it is not, or
  // is not of the kind asked for (`pages`: a stream's).
  std::optional<held_blob> take(const std::vector<std::uint64_t>& blocks, bool pages = false) {
    if (blocks.empty())
      return std::nullopt;
    auto it = held.find(blocks.front());
    if (it == held.end() || it->second.ref.blocks != blocks ||
        (it->second.stream != nullptr) != pages)
      return std::nullopt;
    auto blob = remove(it);
    publish();
    return blob;
  }

  // A server: one peer at a time asks it for the blocks of one held KV (or kept blocks) and
  // gets them.
  void serve(server& sv) {
    std::vector<std::byte> request((max_request_blocks + 3 + max_kept_tokens) *
                                   sizeof(std::uint64_t));
    while (!stop.load()) {
      {
        std::lock_guard lock{mtx};
        expire(clock::now());
      }
      if (!sv.wire->accept(accept_poll))
        continue;
      const std::span<std::byte> slot{request};
      auto got = sv.wire->receive({&slot, 1}, request_timeout);
      if (!got) // the wire dropped the peer
        continue;
      std::vector<std::uint64_t> ids;
      if (const auto& r = got->front(); r && r->bytes >= sizeof(std::uint64_t)) {
        std::uint64_t n = 0;
        std::memcpy(&n, request.data(), sizeof n);
        if ((n & kept_request) != 0) {
          serve_kept(sv, request, r->bytes, n & ~kept_request);
          continue;
        }
        if (n <= max_request_blocks && r->bytes == (n + 1) * sizeof(std::uint64_t)) {
          ids.resize(n);
          std::memcpy(ids.data(), request.data() + sizeof n, n * sizeof(std::uint64_t));
        }
      }
      std::optional<held_blob> blob;
      {
        std::unique_lock lock{mtx};
        blob = take(ids);
        // A fetch tried again may come here while another server still has this KV off the
        // books (the failed attempt's, not yet put back): it waits for that one to end.
        if (!blob && sent_elsewhere(ids)) {
          sent_cv.wait_for(lock, defaults::cluster::wire_transfer_timeout,
                           [&] { return stop.load() || !sent_elsewhere(ids); });
          blob = take(ids);
        }
        sv.sending = blob ? &*blob : nullptr;
        sv.sending_released = false;
        publish();
      }
      std::uint64_t found = blob ? blob->ref.blocks.size() : 0;
      const std::span<const std::byte> answer{reinterpret_cast<const std::byte*>(&found),
                                              sizeof found};
      std::vector<cluster::wire_block> out{{answer_id, answer, block_checksum(answer)}};
      std::uint64_t offset = 0;
      for (std::size_t i = 0; blob && i < blob->ref.blocks.size(); ++i) {
        const auto& r = blob->ref;
        out.push_back(
            {r.blocks[i], blob->bytes->view().subspan(offset, r.sizes[i]), r.checksums[i]});
        offset += r.sizes[i];
      }
      // Only a delivered KV leaves the books: a fetch the wire broke is asked for again.
      const bool delivered = deliver(sv, out);
      if (blob && delivered)
        add(sent_bytes, static_cast<double>(blob->bytes->view().size()));
      std::lock_guard lock{mtx};
      sv.sending = nullptr;
      if (blob && !delivered && !sv.sending_released)
        restore(std::move(*blob));
      publish();
      sent_cv.notify_all();
    }
  }

  // Sends the peer the kept blocks its request (`bytes` of `request`, `count` block ids, then
  // the tokens they hold) asks for, read from the node's store: how many pages came (fewer
  // when some were gone; none without a store), each page's hash, parent, checksum, size and
  // tokens, then their bytes; then waits for the peer's word and lets it go. The blocks stay in
  // the store (their request's unpin, or their pin's time, ends them).
  void serve_kept(server& sv, const std::vector<std::byte>& request, std::size_t bytes,
                  std::uint64_t count) {
    constexpr auto word = sizeof(std::uint64_t);
    std::vector<std::uint64_t> ids;
    std::vector<token> tokens;
    std::uint64_t store = 0;
    if (count <= max_request_blocks && bytes >= (count + 3) * word) {
      std::uint64_t ntok = 0;
      std::memcpy(&store, request.data() + (count + 1) * word, word);
      std::memcpy(&ntok, request.data() + (count + 2) * word, word);
      if (ntok <= max_kept_tokens && bytes == (count + 3 + ntok) * word) {
        ids.resize(count);
        std::memcpy(ids.data(), request.data() + word, count * word);
        for (std::uint64_t i = 0; i < ntok; ++i) {
          std::uint64_t t = 0;
          std::memcpy(&t, request.data() + (count + 3 + i) * word, word);
          tokens.push_back(static_cast<token>(t));
        }
      }
    }
    if (store == held_pages_store) {
      serve_held_pages(sv, ids, tokens);
      return;
    }
    std::vector<kv_page> pages;
    if (!ids.empty()) {
      std::shared_lock lock{kept_mtx};
      if (kept)
        if (auto got = kept(store, ids, tokens); got && got->size() <= ids.size())
          pages = std::move(*got);
    }
    std::vector<page_view> views;
    for (auto& p : pages) {
      const auto page_bytes = std::as_bytes(std::span{p.bytes});
      if (p.checksum == 0)
        p.checksum = block_checksum(page_bytes);
      views.push_back({p.hash, p.parent, p.checksum, p.tokens, page_bytes});
    }
    send_pages(sv, ids, views);
  }

  // Sends the peer `pages` as the blocks `ids` name (in order): how many, each page's hash,
  // parent, checksum, size and tokens, then their bytes from where they lie; then waits for its
  // word and lets it go. Whether it acknowledged every page (none sent: false).
  bool send_pages(server& sv, const std::vector<std::uint64_t>& ids,
                  std::span<const page_view> pages) {
    std::uint64_t found = pages.size();
    std::vector<std::uint64_t> meta;
    for (const auto& p : pages) {
      meta.insert(meta.end(), {p.hash, p.parent, p.checksum, p.bytes.size(), p.tokens.size()});
      for (auto t : p.tokens)
        meta.push_back(static_cast<std::uint64_t>(t));
    }
    const std::span<const std::byte> answer{reinterpret_cast<const std::byte*>(&found),
                                            sizeof found};
    const auto described = std::as_bytes(std::span{meta});
    std::vector<cluster::wire_block> out{{answer_id, answer, block_checksum(answer)}};
    if (found > 0)
      out.push_back({answer_id, described, block_checksum(described)});
    std::uint64_t sent = 0;
    for (std::size_t i = 0; i < pages.size(); ++i) {
      out.push_back({ids[i], pages[i].bytes, pages[i].checksum});
      sent += pages[i].bytes.size();
    }
    const bool delivered = deliver(sv, out);
    if (delivered)
      add(sent_bytes, static_cast<double>(sent));
    return delivered && found > 0;
  }

  // Sends the peer the pages of the held stream `ids` names (holding `tokens`), as kept blocks
  // go (serve_kept), from the store's memory where they lie; the stream leaves the books while
  // it is sent and goes once the peer acknowledged every page (its blocks then stay in the
  // store, sealed, as any cached page), else is put back for another attempt.
  void serve_held_pages(server& sv, const std::vector<std::uint64_t>& ids,
                        const std::vector<token>& tokens) {
    std::shared_lock serving{kept_mtx}; // the store's memory stays while the pages are read
    std::optional<held_blob> blob;
    {
      std::unique_lock lock{mtx};
      blob = takes_streams ? take(ids, true) : std::nullopt;
      if (!blob && takes_streams && sent_elsewhere(ids)) { // an earlier attempt's, as serve's
        sent_cv.wait_for(lock, defaults::cluster::wire_transfer_timeout, [&] {
          return stop.load() || !takes_streams.load() || !sent_elsewhere(ids);
        });
        blob = takes_streams ? take(ids, true) : std::nullopt;
      }
      sv.sending = blob ? &*blob : nullptr;
      sv.sending_released = false;
      publish();
    }
    const bool complete = blob && wait_complete(*blob->stream, stopping_streams);
    const auto pages = complete ? pages_of(*blob->stream, blob->ref.page_tokens, tokens)
                                : std::vector<page_view>{};
    const bool delivered = send_pages(sv, ids, pages);
    std::lock_guard lock{mtx};
    sv.sending = nullptr;
    // A stream that did not complete is of no use to anyone: it goes. One asked for with other
    // tokens stays for its importer.
    if (blob && complete && !delivered && !sv.sending_released && takes_streams)
      restore(std::move(*blob));
    blob.reset(); // a delivered stream ends here: its blocks are sealed into the store
    publish();
    sent_cv.notify_all();
  }

  // The pages of the stream this node holds as `ids` (holding `tokens`), copied out for a
  // device of this node (none when it holds no such stream, or it did not complete).
  std::vector<kv_page> take_held_pages(const std::vector<std::uint64_t>& ids,
                                       const std::vector<token>& tokens) {
    std::shared_lock serving{kept_mtx};
    std::optional<held_blob> blob;
    {
      std::lock_guard lock{mtx};
      if (takes_streams)
        blob = take(ids, true);
      publish();
    }
    std::vector<kv_page> pages;
    if (!blob || !wait_complete(*blob->stream, stopping_streams))
      return pages;
    for (const auto& p : pages_of(*blob->stream, blob->ref.page_tokens, tokens)) {
      kv_page page{p.hash, p.parent, {p.tokens.begin(), p.tokens.end()}, {}, p.checksum};
      const auto* b = reinterpret_cast<const std::uint8_t*>(p.bytes.data());
      page.bytes.assign(b, b + p.bytes.size());
      pages.push_back(std::move(page));
    }
    return pages;
  }

  // Sends `out` to the server's peer, waits for its word that every block arrived and checked,
  // and lets the peer go: whether it was delivered. The word comes before the close (a close
  // right after the last send could overtake blocks still in the peer's socket, TCP); the
  // fetcher checks every block first, which for a large KV takes a while.
  bool deliver(server& sv, std::span<const cluster::wire_block> out) {
    bool delivered = false;
    if (sv.wire->send(out)) {
      std::uint64_t ack = ack_not;
      const std::span<std::byte> ack_slot{reinterpret_cast<std::byte*>(&ack), sizeof ack};
      auto got_ack = sv.wire->receive({&ack_slot, 1}, defaults::cluster::wire_transfer_timeout);
      delivered = got_ack && got_ack->front() && ack == ack_all;
    }
    sv.wire->drop_peer();
    return delivered;
  }

  // Attempts of `once` (a fetch on a fresh wire, given which of the holder's servers to ask:
  // each attempt the next, from one in turn) while the wire fails or damages a block (the
  // holder keeps what it has not seen acknowledged, so a later attempt finds it). No attempt
  // starts once a transfer's timeout has passed since the first.
  template<class Once>
  auto with_attempts(Once once, int attempts = fetch_attempts) -> decltype(once(std::size_t{0})) {
    const auto give_up = clock::now() + defaults::cluster::wire_transfer_timeout;
    const std::size_t first = next_server.fetch_add(1);
    for (int attempt = 1;; ++attempt) {
      auto got = once(first + static_cast<std::size_t>(attempt - 1));
      if (got || attempt >= attempts || !worth_another_attempt(got.error().code) ||
          clock::now() >= give_up)
        return got;
      add(fetch_retries);
    }
  }

  // Fetches `h` from its holder: attempts on fresh wires while the wire fails or damages a block
  // (the holder keeps what it has not seen acknowledged, so a later attempt finds it).
  // No attempt starts once a transfer's timeout has passed since the first.
  expected<std::vector<std::byte>> fetch_remote(const kv_held& h) {
    return with_attempts([&](std::size_t turn) { return fetch_once(h, turn); });
  }

  // One attempt to fetch kept blocks `ids` (holding `tokens`) from the store of the node at
  // `wire`, over a wire of its own: the pages that came, each checked.
  expected<std::vector<kv_page>> fetch_kept_once(const std::string& wire, std::uint64_t store,
                                                 const std::vector<std::uint64_t>& ids,
                                                 const std::vector<token>& tokens,
                                                 std::size_t turn) {
    std::vector<std::uint64_t> request{ids.size() | kept_request};
    request.insert(request.end(), ids.begin(), ids.end());
    request.push_back(store);
    request.push_back(tokens.size());
    for (auto t : tokens)
      request.push_back(static_cast<std::uint64_t>(t));
    auto session = ask(wire, request, turn);
    if (!session)
      return session.error();
    auto& client = session->wire;
    std::uint64_t found = 0;
    const std::span<std::byte> answer{reinterpret_cast<std::byte*>(&found), sizeof found};
    auto got = client->receive({&answer, 1});
    if (!got)
      return got.error();
    if (!got->front())
      return got->front().error();
    if (found == 0 || found > ids.size()) {
      session->acknowledge(ack_not);
      return make_error(found == 0 ? errc::not_found : errc::corrupted,
                        "KV exchange: " + wire + " has none of kept blocks " +
                            std::to_string(ids.front()) + ".. (" + std::to_string(found) +
                            " pages answered)");
    }
    // What each page is: its hash, parent, checksum, size and tokens.
    std::vector<std::uint64_t> meta(found * page_words + tokens.size());
    const std::span<std::byte> described = std::as_writable_bytes(std::span{meta});
    auto header = client->receive({&described, 1});
    if (!header)
      return header.error();
    if (!header->front())
      return header->front().error();
    std::vector<kv_page> pages(found);
    std::vector<std::span<std::byte>> slots;
    const std::size_t words = header->front()->bytes / sizeof(std::uint64_t);
    std::size_t at = 0;
    std::uint64_t total = 0; // bytes the pages say they have: bounded before any is allocated
    for (std::size_t i = 0; at + page_words <= words && i < found; ++i) {
      total += std::min<std::uint64_t>(meta[at + 3], max_kept_bytes + 1);
      at += page_words + std::min<std::uint64_t>(meta[at + 4], words);
    }
    at = 0;
    for (auto& p : pages) {
      if (total > max_kept_bytes || at + page_words > words ||
          meta[at + 4] > words - at - page_words) {
        session->acknowledge(ack_not);
        return make_error(errc::corrupted,
                          "KV exchange: " + wire + " described its kept pages wrongly");
      }
      p.hash = meta[at];
      p.parent = meta[at + 1];
      p.checksum = meta[at + 2];
      p.bytes.resize(meta[at + 3]);
      for (std::uint64_t k = 0; k < meta[at + 4]; ++k)
        p.tokens.push_back(static_cast<token>(meta[at + page_words + k]));
      at += page_words + meta[at + 4];
      slots.push_back(std::as_writable_bytes(std::span{p.bytes}));
    }
    auto blocks = client->receive(slots);
    if (!blocks)
      return blocks.error();
    for (std::size_t i = 0; i < pages.size(); ++i) {
      const auto& b = (*blocks)[i];
      std::optional<error> refused;
      if (!b)
        refused = b.error();
      else if (b->id != ids[i] || b->bytes != pages[i].bytes.size() ||
               b->checksum != pages[i].checksum)
        refused = make_error(errc::corrupted, "KV exchange: kept block " + std::to_string(i) +
                                                  " from " + wire + " is not the one described");
      if (refused) {
        session->acknowledge(ack_not);
        return *refused;
      }
    }
    session->acknowledge(ack_all);
    return pages;
  }

  // Pages `ids` (holding `tokens`) of store `store` (or a held stream's, or a prompt's looked up)
  // from the node at `wire`, tried on fresh wires while the wire fails; counted.
  expected<std::vector<kv_page>> fetch_pages(const std::string& wire, std::uint64_t store,
                                             const std::vector<std::uint64_t>& ids,
                                             const std::vector<token>& tokens,
                                             int attempts = fetch_attempts) {
    add(fetches);
    auto got = with_attempts(
        [&](std::size_t turn) { return fetch_kept_once(wire, store, ids, tokens, turn); },
        attempts);
    if (got) {
      std::size_t bytes = 0;
      for (const auto& p : *got)
        bytes += p.bytes.size();
      add(fetched_bytes, static_cast<double>(bytes));
    } else {
      add(fetch_failures);
    }
    return got;
  }

  // The keeper: opens a spare wire when a fetch took one (or found none), closes and destroys
  // used ones.
  void keep_wires() {
    std::unique_lock lock{wires_mtx};
    while (true) {
      wires_cv.wait(lock, [this] { return keeper_stop || !used.empty() || want_spare; });
      if (keeper_stop)
        return;
      auto done = std::move(used);
      used.clear();
      const bool open = std::exchange(want_spare, false);
      lock.unlock();
      done.clear(); // each closes its peer (flushing what it sent) and its worker
      std::unique_ptr<cluster::kv_wire> fresh;
      if (open) // when UCX cannot set one up, the next fetch opens its own and reports why
        if (auto w = cluster::kv_wire::open(transport, {nullptr, reader}); w)
          fresh = std::move(*w);
      lock.lock();
      if (!spare)
        spare = std::move(fresh);
      if (fresh) { // a spare came meanwhile: this one goes, outside the lock
        lock.unlock();
        fresh.reset();
        lock.lock();
      }
    }
  }

  // A wire for one fetch: the spare, or one opened now; the keeper opens the next.
  expected<std::unique_ptr<cluster::kv_wire>> take_wire() {
    {
      std::lock_guard lock{wires_mtx};
      if (!keeper.joinable())
        keeper = std::thread{[this] { keep_wires(); }};
      want_spare = true;
      wires_cv.notify_one();
      if (spare)
        return std::move(spare);
    }
    return cluster::kv_wire::open(transport, {nullptr, reader});
  }

  // Hands a used wire to the keeper.
  void retire(std::unique_ptr<cluster::kv_wire> w) {
    std::lock_guard lock{wires_mtx};
    used.push_back(std::move(w));
    wires_cv.notify_one();
  }

  // Stops the keeper; what it kept goes with the state.
  void stop_keeper() {
    {
      std::lock_guard lock{wires_mtx};
      keeper_stop = true;
      wires_cv.notify_one();
    }
    if (keeper.joinable())
      keeper.join();
  }

  // One fetch's connection to the holder at `wire`: a wire of its own, handed to the keeper
  // (closed and destroyed off the fetch's path) when it goes.
  struct fetch_session {
    state* s = nullptr;
    std::unique_ptr<cluster::kv_wire> wire;
    fetch_session(state* st, std::unique_ptr<cluster::kv_wire> w)
        : s(st)
        , wire(std::move(w)) {}
    fetch_session(fetch_session&& other) noexcept
        : s(other.s)
        , wire(std::move(other.wire)) {}
    fetch_session& operator=(fetch_session&&) = delete;
    ~fetch_session() {
      if (wire)
        s->retire(std::move(wire));
    }
    // The fetcher's last word (ack_all or ack_not), after which the holder closes. Its own
    // failure changes nothing here: the bytes were checked (or refused) already.
    void acknowledge(std::uint64_t ack) {
      const std::span<const std::byte> a{reinterpret_cast<const std::byte*>(&ack), sizeof ack};
      const cluster::wire_block b{answer_id, a, block_checksum(a)};
      (void)wire->send({&b, 1});
    }
  };

  // Connects to one of the servers of the holder at `wire` (`turn` modulo their number) and
  // sends it `request`.
  expected<fetch_session> ask(const std::string& wire, const std::vector<std::uint64_t>& request,
                              std::size_t turn) {
    const auto split = split_address(wire);
    if (!split)
      return make_error(errc::invalid_argument, "KV exchange: '" + wire +
                                                    "' is not host:port[,port...] (ports "
                                                    "1..65535)");
    const auto& [host, ports] = *split;
    const auto port = ports[turn % ports.size()];
    // A wire of its own per fetch: UCX over TCP does not wire up again reliably between two
    // workers that were connected before (seen: "Endpoint timeout" at the second connect).
    auto w = take_wire();
    if (!w)
      return w.error();
    fetch_session session{this, std::move(*w)};
    // Each of the holder's servers serves one peer at a time: a connect can time out behind
    // others (seen on a loaded machine); with_attempts tries again, on its next server.
    if (auto c = session.wire->connect(host, port); !c) // named as the holder's exchange
      return make_error(c.error().code, "KV exchange " + wire + ": " + c.error().message);
    const std::span<const std::byte> req{reinterpret_cast<const std::byte*>(request.data()),
                                         request.size() * sizeof(std::uint64_t)};
    const cluster::wire_block block{answer_id, req, block_checksum(req)};
    if (auto sent = session.wire->send({&block, 1}); !sent)
      return sent.error();
    return session;
  }

  // One attempt to fetch `h` from its holder, over a wire of its own (retired, peer and all,
  // when it returns).
  expected<std::vector<std::byte>> fetch_once(const kv_held& h, std::size_t turn) {
    std::vector<std::uint64_t> request{h.blocks.size()};
    request.insert(request.end(), h.blocks.begin(), h.blocks.end());
    auto session = ask(h.wire, request, turn);
    if (!session)
      return session.error();
    auto& client = session->wire;
    auto acknowledge = [&session](std::uint64_t ack) { session->acknowledge(ack); };
    std::uint64_t found = 0;
    const std::span<std::byte> answer{reinterpret_cast<std::byte*>(&found), sizeof found};
    auto got = client->receive({&answer, 1});
    if (!got)
      return got.error();
    if (!got->front())
      return got->front().error();
    if (found != h.blocks.size()) {
      acknowledge(ack_not);
      return make_error(errc::not_found, "KV exchange: " + h.wire + " no longer holds blocks " +
                                             std::to_string(h.blocks.front()) +
                                             ".. (fetched, "
                                             "expired or given way)");
    }
    std::vector<std::byte> bytes(h.bytes());
    std::vector<std::span<std::byte>> slots;
    std::uint64_t offset = 0;
    for (auto size : h.sizes) {
      slots.push_back(std::span<std::byte>{bytes}.subspan(offset, size));
      offset += size;
    }
    auto blocks = client->receive(slots);
    if (!blocks)
      return blocks.error(); // the wire dropped the holder: it keeps the KV
    // Every block is checked before the acknowledgement: refused (ack_not), the holder keeps
    // the KV, and a later attempt (fetch_remote) takes it again.
    if (auto refused = check(h, *blocks)) {
      acknowledge(ack_not);
      return *refused;
    }
    acknowledge(ack_all);
    std::size_t in_place = 0;
    for (const auto& b : *blocks)
      in_place += b->in_place ? b->bytes : 0;
    add(in_place_bytes, static_cast<double>(in_place));
    return bytes;
  }

  // Why the blocks that arrived for `h` cannot be used; nothing when they can.
  static std::optional<error> check(const kv_held& h,
                                    const std::vector<expected<cluster::received_block>>& blocks) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const auto& b = blocks[i];
      if (!b)
        return b.error();
      if (b->id != h.blocks[i] || b->bytes != h.sizes[i])
        return make_error(errc::corrupted, "KV exchange: block " + std::to_string(i) + " from " +
                                               h.wire + " is block " + std::to_string(b->id) +
                                               " of " + std::to_string(b->bytes) +
                                               " bytes, not the one asked for");
    }
    // The holder sent its own checksums, which the wire checked the bytes against; they must
    // be the ones the reference carries (taken when the KV was held).
    for (std::size_t i = 0; i < h.checksums.size(); ++i)
      if (blocks[i]->checksum != h.checksums[i])
        return make_error(errc::corrupted, "KV exchange: block " + std::to_string(h.blocks[i]) +
                                               " from " + h.wire +
                                               " does not match its reference's checksum");
    return std::nullopt;
  }
};

kv_exchange::kv_exchange(std::unique_ptr<state> s)
    : state_(std::move(s)) {}

kv_exchange::~kv_exchange() {
  state_->stop_keeper();
  {
    std::lock_guard lock{state_->mtx};
    state_->stop = true;
  }
  state_->sent_cv.notify_all();
  for (auto& sv : state_->servers)
    if (sv->thread.joinable())
      sv->thread.join();
}

expected<std::unique_ptr<kv_exchange>>
kv_exchange::start(cluster::wire_transport transport, const std::string& host,
                   const std::string& advertise, std::chrono::milliseconds hold_for,
                   std::uint64_t budget, std::uint64_t min_bytes, metrics_registry* metrics) {
  auto s = std::make_unique<state>();
  s->transport = transport;
  s->hold_for = hold_for;
  s->budget = budget;
  s->min_bytes = min_bytes;
  if (transport == cluster::wire_transport::shared_memory) {
    // Without shared memory (UCX could not place it where others map it) held KV lies on the
    // heap and goes by cross-memory attach; without a reader this node's fetches take it so.
    // A quarter more than the budget: the KV being sent (one per server) is off the books but
    // still in its range, and ranges are rounded up and fragment; past it, KV goes on the
    // heap. Pages come as written (sysv).
    auto memory = cluster::kv_shared_memory::open(budget + budget / 4);
    auto reader = cluster::kv_shared_reader::open();
    if (memory)
      s->shared = std::move(*memory);
    if (reader)
      s->reader = std::move(*reader);
    s->sharing_note =
        memory
            ? "held KV in shared memory (" + std::to_string((budget + budget / 4) >> 20) +
                  " MiB reserved, pages taken as written) that fetchers on this machine copy "
                  "out in place"
            : "held KV on the heap, sent by cross-memory attach (" + memory.error().message + ")";
    s->sharing_note += reader ? "; this node's fetches copy such KV out in place"
                              : "; this node's fetches take KV by cross-memory attach (" +
                                    reader.error().message + ")";
  }
  s->host = advertise.empty() ? host : advertise;
  s->address = s->host + ":";
  for (std::size_t i = 0; i < defaults::cluster::kv_servers; ++i) {
    auto w = cluster::kv_wire::open(transport, {s->shared, nullptr});
    if (!w)
      return w.error();
    auto sv = std::make_unique<server>();
    sv->wire = std::move(*w);
    auto port = sv->wire->listen(host, 0);
    if (!port)
      return port.error();
    s->address += (i == 0 ? "" : ",") + std::to_string(*port);
    s->servers.push_back(std::move(sv));
  }
  // Ids start at random, so a restarted node at the same address never answers for the KV of
  // its previous life.
  std::random_device rd;
  s->next_id = ((std::uint64_t{rd()} << 32 | rd()) >> 1) + 1;
  s->held_total = counter_of(metrics, "triad_cluster_kv_held_total",
                             "Moved-out KV this node held for another node to fetch");
  s->expired_total = counter_of(metrics, "triad_cluster_kv_expired_total",
                                "Held KV dropped unfetched (its time passed, or newer KV needed "
                                "the budget)");
  s->sent_bytes = counter_of(metrics, "triad_cluster_kv_wire_sent_bytes_total",
                             "KV bytes this node sent over the KV wire (UCX)");
  s->fetches = counter_of(metrics, "triad_cluster_kv_wire_fetches_total",
                          "KV this node fetched from another node over the KV wire (UCX)");
  s->fetched_bytes = counter_of(metrics, "triad_cluster_kv_wire_fetched_bytes_total",
                                "KV bytes this node fetched over the KV wire (UCX)");
  s->in_place_bytes = counter_of(metrics, "triad_cluster_kv_wire_in_place_bytes_total",
                                 "Of the KV bytes this node fetched, those it copied itself out "
                                 "of the holder's shared memory (same machine)");
  s->kept_fetches = counter_of(metrics, "triad_cluster_kv_wire_kept_fetches_total",
                               "Kept blocks of another node's KV store (a demotion's) this node "
                               "fetched over the KV wire for a resume here");
  s->prefix_fetches = counter_of(metrics, "triad_cluster_kv_wire_prefix_fetches_total",
                                 "Fetches of a prompt's pages from another node's KV store over "
                                 "the KV wire (the router's hint that its device was sent them)");
  s->on_heap = counter_of(metrics, "triad_cluster_kv_held_on_heap_total",
                          "Held KV kept on the heap, not in the shared memory (no range free for "
                          "it): fetchers on this machine get it by cross-memory attach");
  s->fetch_failures = counter_of(metrics, "triad_cluster_kv_wire_fetch_failures_total",
                                 "Fetches of held KV that failed (the tokens were computed "
                                 "instead)");
  s->fetch_retries = counter_of(metrics, "triad_cluster_kv_wire_fetch_retries_total",
                                "Fetch attempts of held KV that the wire broke and that were "
                                "tried again on a fresh wire");
  if (metrics != nullptr)
    if (auto g = metrics->add_gauge("triad_cluster_kv_held_bytes",
                                    "KV bytes this node holds for other nodes to fetch");
        g)
      s->held_gauge = *g;
  std::unique_ptr<kv_exchange> ex{new kv_exchange{std::move(s)}};
  auto* st = ex->state_.get();
  for (auto& sv : st->servers)
    sv->thread = std::thread{[st, at = sv.get()] { st->serve(*at); }};
  return ex;
}

const std::string& kv_exchange::address() const noexcept {
  return state_->address;
}

const std::string& kv_exchange::host() const noexcept {
  return state_->host;
}

std::uint64_t kv_exchange::held_bytes() {
  auto& s = *state_;
  std::lock_guard lock{s.mtx};
  s.expire(clock::now());
  return s.held_bytes + s.sending_bytes();
}

kv_held kv_exchange::hold(std::vector<std::byte>& bytes) {
  auto& s = *state_;
  if (bytes.empty() || bytes.size() > s.budget || bytes.size() < s.min_bytes)
    return {};
  held_blob blob;
  auto& h = blob.ref;
  h.wire = s.address;
  auto storage = std::make_shared<held_storage>();
  const auto size = bytes.size();
  storage->size = size;
  // In the shared memory (copied there, each block checksummed in the same pass), the oldest
  // held KV giving way first as the budget says, then for a range; else on the heap as given.
  std::optional<std::span<std::byte>> range;
  if (s.shared) {
    std::lock_guard lock{s.mtx};
    s.expire(clock::now());
    s.make_room(size);
    while (!(range = s.shared->allocate(size)) && s.drop_oldest_bytes()) {
    }
    s.publish();
    if (!range)
      add(s.on_heap);
  }
  if (range) {
    storage->memory = s.shared;
    storage->range = *range;
  }
  const std::span<const std::byte> src{bytes};
  for (std::size_t at = 0; at < size; at += block_bytes) {
    const auto n = std::min(block_bytes, size - at);
    h.sizes.push_back(n);
    checksum_sums sums;
    checksum_range(range ? range->data() + at : nullptr, src.subspan(at, n), 0, sums, true);
    h.checksums.push_back(checksum_finish(sums, n));
  }
  if (!range)
    storage->heap = std::move(bytes);
  std::vector<std::byte>{}.swap(bytes);
  blob.bytes = std::move(storage);
  std::lock_guard lock{s.mtx};
  s.expire(clock::now());
  s.make_room(size);
  return s.book(std::move(blob));
}

kv_held kv_exchange::hold_stream(std::shared_ptr<kv_stream> stream) {
  auto& s = *state_;
  if (!stream || stream->pages() == 0 || stream->page_tokens() == 0)
    return {};
  held_blob blob;
  auto& h = blob.ref;
  h.wire = s.address;
  const auto pages = stream->pages();
  h.page_tokens = static_cast<std::uint32_t>(stream->page_tokens());
  for (std::size_t p = 0; p < pages; ++p)
    h.sizes.push_back(stream->block(p).size());
  blob.stream = std::move(stream);
  std::lock_guard lock{s.mtx};
  if (!s.takes_streams)
    return {};
  s.expire(clock::now());
  return s.book(std::move(blob));
}

void kv_exchange::release(const kv_held& held) {
  auto& s = *state_;
  if (held.wire != s.address)
    return;
  std::lock_guard lock{s.mtx};
  if (s.take(held.blocks, held.page_tokens != 0))
    return;
  for (auto& sv : s.servers)
    if (sv->sending != nullptr && sv->sending->ref.blocks == held.blocks)
      sv->sending_released = true; // being sent now: not put back if that fails
}

cluster::wire_transport kv_exchange::transport() const noexcept {
  return state_->transport;
}

void kv_exchange::serve_kept(kept_source source) {
  auto& s = *state_;
  std::lock_guard lock{s.kept_mtx};
  s.kept = std::move(source);
  s.serving_kept = static_cast<bool>(s.kept);
}

void kv_exchange::stop_serving_kept() {
  auto& s = *state_;
  {
    // No stream is taken or served from now on, and a server waiting for one stops waiting.
    std::lock_guard lock{s.mtx};
    s.takes_streams = false;
    s.stopping_streams = true;
  }
  s.sent_cv.notify_all();
  serve_kept({});                       // waits for a read under way
  std::unique_lock serving{s.kept_mtx}; // and for a held stream's pages being sent
  std::vector<held_blob> streams;       // they go outside the lock: each tells the store
  {
    std::lock_guard lock{s.mtx};
    for (auto it = s.held.begin(); it != s.held.end();)
      if (auto at = it++; at->second.stream)
        streams.push_back(s.remove(at));
    s.publish();
  }
}

bool kv_exchange::serves_kept() const noexcept {
  return state_->serving_kept.load();
}

expected<std::vector<kv_page>> kv_exchange::fetch_kept(const std::string& wire, std::uint64_t store,
                                                       std::vector<std::uint64_t> ids,
                                                       std::vector<token> tokens) {
  auto& s = *state_;
  if (ids.empty())
    return make_error(errc::invalid_argument, "KV exchange: no kept blocks asked for");
  // Past the bounds of a request, the first blocks are asked for (the rest is computed).
  ids.resize(std::min(ids.size(), max_request_blocks));
  tokens.resize(std::min(tokens.size(), max_kept_tokens));
  if (store == held_pages_store && wire == s.address) { // a stream held here: taken, not sent
    auto pages = s.take_held_pages(ids, tokens);
    if (pages.empty())
      return make_error(errc::not_found, "KV exchange: this node no longer holds the pages " +
                                             std::to_string(ids.front()) + "..");
    return pages;
  }
  add(s.kept_fetches);
  return s.fetch_pages(wire, store, ids, tokens);
}

expected<std::vector<kv_page>> kv_exchange::fetch_prefix(const std::string& wire,
                                                         std::vector<token> tokens,
                                                         std::uint64_t first, std::uint64_t count) {
  auto& s = *state_;
  count = std::min<std::uint64_t>(count, max_request_blocks);
  if (count == 0 || tokens.empty() || tokens.size() > max_kept_tokens)
    return make_error(errc::invalid_argument,
                      "KV exchange: no prompt pages asked for, or a prompt past " +
                          std::to_string(max_kept_tokens) + " tokens");
  std::vector<std::uint64_t> ids(count);
  for (std::uint64_t i = 0; i < count; ++i)
    ids[i] = first + i;
  tokens.resize(std::min(tokens.size(), max_kept_tokens));
  add(s.prefix_fetches);
  // One attempt: the pages only spare computing them, and the asker waits meanwhile.
  return s.fetch_pages(wire, prefix_store, ids, tokens, 1);
}

const std::string& kv_exchange::sharing() const noexcept {
  return state_->sharing_note;
}

expected<std::vector<std::byte>> kv_exchange::fetch(const kv_held& held) {
  auto& s = *state_;
  if (held.empty())
    return make_error(errc::invalid_argument, "KV exchange: a reference without blocks");
  if (held.wire == s.address) { // held here: taken, not sent
    std::optional<held_blob> blob;
    {
      std::lock_guard lock{s.mtx};
      blob = s.take(held.blocks);
    }
    if (!blob)
      return make_error(errc::not_found, "KV exchange: this node no longer holds blocks " +
                                             std::to_string(held.blocks.front()) + "..");
    if (blob->bytes.use_count() == 1 && !blob->bytes->memory) // nobody sends it: the buffer
      return std::move(blob->bytes->heap);
    const auto view = blob->bytes->view();
    return std::vector<std::byte>(view.begin(), view.end());
  }
  add(s.fetches);
  auto got = s.fetch_remote(held);
  if (got)
    add(s.fetched_bytes, static_cast<double>(got->size()));
  else
    add(s.fetch_failures);
  return got;
}

caf::behavior kv_fetcher(caf::event_based_actor*, std::shared_ptr<kv_exchange> exchange) {
  return {[exchange](kv_fetch_atom, kv_blob& blob) -> caf::result<kv_blob> {
            auto bytes = exchange->fetch(blob.held);
            if (!bytes)
              return caf::make_error(caf::sec::runtime_error, bytes.error().message);
            blob.bytes = std::move(*bytes);
            blob.held = {};
            return std::move(blob);
          },
          [exchange](kv_fetch_kept_atom, const std::string& wire, std::uint64_t store,
                     std::vector<std::uint64_t>& ids,
                     std::vector<token>& tokens) -> caf::result<std::vector<kv_page>> {
            try {
              auto pages = exchange->fetch_kept(wire, store, std::move(ids), std::move(tokens));
              if (!pages)
                return caf::make_error(caf::sec::runtime_error, pages.error().message);
              return std::move(*pages);
            } catch (const std::bad_alloc&) { // the described pages did not fit in memory
              return caf::make_error(caf::sec::runtime_error, "no memory for the kept blocks");
            }
          },
          [exchange](kv_fetch_prefix_atom, const std::string& wire, std::vector<token>& tokens,
                     std::uint64_t first,
                     std::uint64_t count) -> caf::result<std::vector<kv_page>> {
            try {
              auto pages = exchange->fetch_prefix(wire, std::move(tokens), first, count);
              if (!pages)
                return caf::make_error(caf::sec::runtime_error, pages.error().message);
              return std::move(*pages);
            } catch (const std::bad_alloc&) {
              return caf::make_error(caf::sec::runtime_error, "no memory for the prompt's pages");
            }
          }};
}

} // namespace triad::detail
