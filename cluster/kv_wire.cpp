#include "cluster/kv_wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include <ucp/api/ucp.h>

#include "runtime/checksum.hpp"
#include "runtime/io.hpp"

namespace triad::cluster {

namespace {

using clock = std::chrono::steady_clock;

// A block travels as two tagged messages from one endpoint: this header (tag `header_tag`),
// then its bytes, contiguous (tag `data_tag`), so UCX can move large blocks by its zero-copy
// rendezvous (cross-memory attach between processes of one machine). Messages of one tag
// from one endpoint match the receives of that tag in order, so header i and bytes i meet.
// A block lying in the sender's shared memory (version `shared_version`) goes as where it lies
// instead: its second message is the offset and the memory's key (place()), the receiver copies
// the bytes out of its mapping, and at the end of each receive it tells the sender how many such
// blocks it is done with (a release word, tag `release_tag`), after which the sender may reuse
// them: a send waits for words adding up to its blocks, so one receive takes at most one send's
// (the sender waits before it sends again). The word also says when the receiver could not map
// the memory (the sender then sends every later block with its bytes) or gave the batch up.
struct block_header {
  std::uint32_t magic = 0x5452444b; // "TRDK"
  std::uint32_t version = 1;        // 1: the bytes follow; shared_version: where they lie
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
};
constexpr std::uint32_t header_magic = block_header{}.magic;
constexpr std::uint64_t header_tag = defaults::cluster::wire_block_tag;
constexpr std::uint64_t data_tag = defaults::cluster::wire_block_tag + 1;
constexpr std::uint64_t release_tag = defaults::cluster::wire_block_tag + 2;
constexpr std::uint64_t release_unmappable = std::uint64_t{1} << 63; // could not map the memory
constexpr std::uint64_t release_abandoned = std::uint64_t{1} << 62;  // gave the batch up
constexpr std::uint64_t release_count = release_abandoned - 1;       // the blocks done with
constexpr std::uint32_t pushed_version = 1;
constexpr std::uint32_t shared_version = 2;
// Blocks smaller than this go with their bytes even from shared memory: UCX sends them eagerly,
// at no more cost than their place, and a place always fits a slot of the block's size.
constexpr std::size_t min_in_place = 64 * 1024;

// The bootstrap exchange: this magic, a worker address's length, what the wire reads
// (reads_shared or 0), then the address's bytes, each way.
constexpr std::uint32_t bootstrap_magic = 0x54524232; // "TRB2"
constexpr std::uint32_t reads_shared = 1;
// The most bytes a peer's UCX worker address may have in the bootstrap exchange.
constexpr std::uint32_t max_worker_address = 64 * 1024;
// How long a request that is ending (a cancelled receive, a closing endpoint) may take before
// the worker is rebuilt instead.
constexpr std::chrono::milliseconds ending_grace{1000};
// A wire that waits progresses its worker back to back this many times with nothing to do,
// then rests `idle_rest` between rounds: a wait must not take a core from the threads it waits
// for (the peer's sender on the same machine, the node's actors and heartbeats).
constexpr unsigned idle_rounds = 256;
constexpr std::chrono::microseconds idle_rest{50};

error ucx_error(std::string_view call, ucs_status_t status) {
  return make_error(errc::system_error,
                    "UCX " + std::string{call} + ": " + ucs_status_string(status));
}

expected<sockaddr_in> parse_address(const std::string& host, std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    return make_error(errc::invalid_argument,
                      "KV wire address '" + host + "' is not an IPv4 address (e.g. 127.0.0.1)");
  return addr;
}

std::int64_t remaining_ms(clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
}

// Waits until `fd` is ready for `events` or `deadline` passes.
bool ready(int fd, short events, clock::time_point deadline) {
  pollfd p{fd, events, 0};
  int n;
  do
    n = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, remaining_ms(deadline))));
  while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
}

} // namespace

std::string_view to_string(wire_transport t) noexcept {
  switch (t) {
  case wire_transport::shared_memory:
    return "shared_memory";
  case wire_transport::tcp:
    return "tcp";
  }
  return "?";
}

// -- state --

struct kv_wire::state {
  wire_transport transport = wire_transport::shared_memory;
  wire_sharing sharing;    // both null over TCP
  bool peer_reads = false; // the peer copies blocks out of shared memory itself
  // A peer could not map the shared memory (another IPC namespace, no access to the holder's
  // segments): every later block goes with its bytes, to any peer.
  bool unmappable = false;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h peer = nullptr;
  // The bootstrap listener (listen()): a TCP socket on which one peer exchanges worker
  // addresses with this wire.
  unique_fd listening;
  std::string listen_name; // "host:port" it listens on, for errors
  // Set by the endpoint's error handler: the peer went away or could not be reached.
  std::optional<ucs_status_t> peer_failed;
  std::string peer_name; // "host:port", for errors

  ~state() {
    close_peer();
    if (worker != nullptr)
      ucp_worker_destroy(worker);
    if (context != nullptr)
      ucp_cleanup(context);
  }

  expected<void> create_worker() {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // One thread at a time, not always the one that made it: a wire is handed between threads
    // (opened ahead by one, used by another), under a lock.
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    if (auto st = ucp_worker_create(context, &wp, &worker); st != UCS_OK) {
      worker = nullptr;
      return ucx_error("ucp_worker_create", st);
    }
    return {};
  }

  // Progresses the worker until `req` (a request, null: done at once, or an error pointer) is
  // done or `deadline` passes; its status. A done request is freed; at UCS_INPROGRESS it is
  // still under way (reset() ends it). `until_peer_fails`: ends early when the peer fails (its
  // status then, the request ended by reset()).
  ucs_status_t wait_until(void* req, clock::time_point deadline, bool until_peer_fails = false) {
    if (req == nullptr)
      return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
      return UCS_PTR_STATUS(req);
    ucs_status_t status;
    unsigned idle = 0;
    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS && clock::now() < deadline &&
           !(until_peer_fails && peer_failed))
      progress(idle);
    if (status != UCS_INPROGRESS)
      ucp_request_free(req);
    else if (until_peer_fails && peer_failed)
      return *peer_failed;
    return status;
  }

  // wait_until, ending early when the peer fails.
  ucs_status_t wait_for_peer(void* req, clock::time_point deadline) {
    return wait_until(req, deadline, true);
  }

  // Where `bytes` lie in the shared memory, when the peer reads it and they lie there.
  std::optional<std::size_t> shared_offset(std::span<const std::byte> bytes) const {
    if (!peer_reads || unmappable || !sharing.memory || bytes.size() < min_in_place)
      return std::nullopt;
    return sharing.memory->offset_of(bytes);
  }

  // The second message of a block sent as where it lies: its offset, then the memory's key.
  std::vector<std::byte> place(std::uint64_t offset) const {
    const auto key = sharing.memory->key();
    std::vector<std::byte> out(sizeof offset + key.size());
    std::memcpy(out.data(), &offset, sizeof offset);
    std::memcpy(out.data() + sizeof offset, key.data(), key.size());
    return out;
  }

  // One round of the worker's progress while waiting; `idle` counts the rounds in a row that
  // found nothing to do, and past idle_rounds each such round rests first.
  void progress(unsigned& idle) {
    if (ucp_worker_progress(worker) != 0) {
      idle = 0;
      return;
    }
    if (++idle >= idle_rounds)
      std::this_thread::sleep_for(idle_rest);
  }

  // Closes the endpoint, bounded. A live peer's sends are flushed first; over TCP the endpoint
  // is then closed by force (completes at once: UCX's graceful close would wait for the peer
  // without bound); UCX's shared-memory endpoints, which cannot use the forced close (it needs
  // peer error handling on both sides), close in flush mode. Whatever does not end within the
  // grace is ended by the worker's destruction (reset() or the destructor).
  void close_peer() {
    if (peer == nullptr)
      return;
    if (!peer_failed) {
      ucp_request_param_t p{};
      wait_until(ucp_ep_flush_nbx(peer, &p), clock::now() + ending_grace);
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = transport == wire_transport::tcp ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    wait_until(ucp_ep_close_nbx(peer, &p), clock::now() + ending_grace);
    peer = nullptr;
    peer_failed.reset();
  }

  // After a failed batch: drops the peer and rebuilds the worker, which ends every request
  // still under way and every message still queued (the only way UCX guarantees that nothing
  // writes into the callers' memory later, and that no block of this batch lands in the next
  // one). A listening wire then accepts a new peer; a connected one must connect again.
  void reset() {
    close_peer();
    ucp_worker_destroy(worker);
    worker = nullptr;
    (void)create_worker(); // on failure every later call reports the missing worker
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    static_cast<state*>(arg)->peer_failed = status;
  }

  expected<void> usable() const {
    if (worker == nullptr)
      return make_error(errc::system_error, "KV wire: its UCX worker could not be rebuilt");
    return {};
  }

  // Exchanges worker addresses with the peer at the other end of `sock` (each side sends the
  // bootstrap magic, its address's length and bytes, then reads the other's) and opens the
  // endpoint to the peer's worker.
  expected<void> join(int sock, clock::time_point deadline) {
    const auto left = remaining_ms(deadline);
    if (left <= 0)
      return make_error(errc::timed_out,
                        "KV wire: no time left to exchange addresses with " + peer_name);
    timeval tv{static_cast<time_t>(left / 1000), static_cast<suseconds_t>(left % 1000 * 1000)};
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ucp_address_t* own = nullptr;
    std::size_t own_len = 0;
    if (auto st = ucp_worker_get_address(worker, &own, &own_len); st != UCS_OK)
      return ucx_error("ucp_worker_get_address", st);
    const std::uint32_t prefix[3] = {htonl(bootstrap_magic),
                                     htonl(static_cast<std::uint32_t>(own_len)),
                                     htonl(sharing.reader ? reads_shared : 0)};
    const bool sent = write_all(sock, prefix, sizeof(prefix)) && write_all(sock, own, own_len);
    ucp_worker_release_address(worker, own);
    auto broken = [&](std::string_view what) {
      const bool late = errno == EAGAIN || errno == EWOULDBLOCK;
      return make_error(late ? errc::timed_out : errc::io_error, "KV wire: " + peer_name + " " +
                                                                     std::string{what} +
                                                                     (late ? " in time" : ""));
    };
    std::uint32_t peer_prefix[3] = {};
    errno = 0;
    if (!sent)
      return broken("did not take this wire's address");
    if (!read_all(sock, peer_prefix, sizeof(peer_prefix)))
      return broken("did not send its worker address");
    const auto peer_len = ntohl(peer_prefix[1]);
    if (ntohl(peer_prefix[0]) != bootstrap_magic)
      return make_error(errc::parse_error,
                        "KV wire: " + peer_name + " is not a KV wire (bad bootstrap magic)");
    if (peer_len == 0 || peer_len > max_worker_address)
      return make_error(errc::parse_error, "KV wire: " + peer_name + " sent a worker address of " +
                                               std::to_string(peer_len) + " bytes (at most " +
                                               std::to_string(max_worker_address) + ")");
    peer_reads = (ntohl(peer_prefix[2]) & reads_shared) != 0;
    std::vector<std::byte> address(peer_len);
    if (!read_all(sock, address.data(), address.size()))
      return broken("did not send all of its worker address");
    peer_failed.reset();
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    // UCX's shared-memory transports cannot report a peer's failure (UCX refuses them with
    // peer error handling); there a dead peer shows as a timeout of the transfer instead.
    ep.err_mode =
        transport == wire_transport::tcp ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &state::on_peer_error;
    ep.err_handler.arg = this;
    if (auto st = ucp_ep_create(worker, &ep, &peer); st != UCS_OK) {
      peer = nullptr;
      return make_error(errc::io_error,
                        "KV wire: no endpoint to " + peer_name + ": " + ucs_status_string(st));
    }
    // A flush completes once the endpoint is wired up (or fails with it).
    ucp_request_param_t p{};
    auto st = wait_until(ucp_ep_flush_nbx(peer, &p), deadline);
    if (st == UCS_OK && peer_failed)
      st = *peer_failed;
    if (st != UCS_OK) {
      const bool late = st == UCS_INPROGRESS;
      peer_failed = late ? UCS_ERR_TIMED_OUT : st;
      reset();
      return make_error(late ? errc::timed_out : errc::io_error,
                        "KV wire: " + peer_name + " did not answer on its transports: " +
                            (late ? "not in time" : ucs_status_string(st)));
    }
    return {};
  }

  // Without a peer, a listening wire accepts one bootstrap connection (waiting until
  // `deadline`) and joins it; a wire that neither listens nor has a peer is an error.
  expected<void> accept_peer(clock::time_point deadline) {
    if (auto ok = usable(); !ok)
      return ok;
    if (peer != nullptr)
      return {};
    if (!listening)
      return make_error(errc::invalid_argument,
                        "KV wire: no peer (connect first, or listen for one)");
    if (!ready(listening.get(), POLLIN, deadline))
      return make_error(errc::timed_out,
                        "KV wire: no peer connected to " + listen_name + " in time");
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    unique_fd sock{
        ::accept4(listening.get(), reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC)};
    if (!sock)
      return make_error(errc::io_error, "KV wire: accepting a peer on " + listen_name +
                                            " failed: " + std::strerror(errno));
    char host[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &from.sin_addr, host, sizeof(host));
    peer_name = std::string{host} + ":" + std::to_string(ntohs(from.sin_port));
    // A peer that connected gets a connect's time to wire up, however short the wait for it
    // was: a join cut off by a short wait (the exchange polls every 200 ms) resets the worker
    // while the peer is still wiring up to it, and the peer then finds its transports gone
    // (seen: "Endpoint timeout" at its first send; "Connection refused" and UCX 1.13's
    // assertion in tcp_ep.c, which ends the process).
    return join(sock.get(),
                std::max(deadline, clock::now() + defaults::cluster::wire_connect_timeout));
  }
};

// -- kv_wire --

kv_wire::kv_wire(std::unique_ptr<state> s)
    : state_(std::move(s)) {}

kv_wire::~kv_wire() = default;

wire_transport kv_wire::transport() const noexcept {
  return state_->transport;
}

expected<std::unique_ptr<kv_wire>> kv_wire::open(wire_transport transport, wire_sharing sharing) {
  auto s = std::make_unique<state>();
  s->transport = transport;
  if (transport == wire_transport::shared_memory)
    s->sharing = std::move(sharing);
  ucp_config_t* config = nullptr;
  if (auto st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK)
    return ucx_error("ucp_config_read", st);
  // `self` for a wire's own loopback. Peers find each other through a TCP bootstrap socket
  // (listen, connect) that carries the workers' addresses, so no connection manager decides
  // the transports: shared memory stays shared memory.
  const char* tls = transport == wire_transport::tcp ? "tcp,self" : "sm,self";
  auto st = ucp_config_modify(config, "TLS", tls);
  // Over shared memory the sender writes large blocks into the receiver's memory (cross-memory
  // attach, put): the sender's core copies while the receiver's checks the blocks already
  // there. With UCX's default (the receiver reads) one core does both in turn.
  if (st == UCS_OK && transport == wire_transport::shared_memory)
    st = ucp_config_modify(config, "RNDV_SCHEME", "put_zcopy");
  if (st == UCS_OK) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    st = ucp_init(&params, config, &s->context);
  }
  ucp_config_release(config);
  if (st != UCS_OK)
    return ucx_error(std::string{"ucp_init (transports "} + tls + ")", st);
  if (auto ok = s->create_worker(); !ok)
    return ok.error();
  return std::unique_ptr<kv_wire>{new kv_wire{std::move(s)}};
}

expected<std::uint16_t> kv_wire::listen(const std::string& host, std::uint16_t port) {
  auto& s = *state_;
  if (s.listening)
    return make_error(errc::invalid_argument, "the KV wire listens already, on " + s.listen_name);
  auto addr = parse_address(host, port);
  if (!addr)
    return addr.error();
  const std::string where = host + ":" + std::to_string(port);
  unique_fd sock{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  const int on = 1;
  if (!sock || ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      ::bind(sock.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0 ||
      ::listen(sock.get(), 1) != 0)
    return make_error(errc::io_error,
                      "KV wire: cannot listen on " + where + ": " + std::strerror(errno));
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0)
    return make_error(errc::io_error, "KV wire: " + where + ": " + std::strerror(errno));
  s.listening = std::move(sock);
  const auto bound_port = static_cast<std::uint16_t>(ntohs(bound.sin_port));
  s.listen_name = host + ":" + std::to_string(bound_port);
  return bound_port;
}

expected<void> kv_wire::connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout) {
  auto& s = *state_;
  if (auto ok = s.usable(); !ok)
    return ok;
  if (s.peer != nullptr)
    return make_error(errc::invalid_argument, "the KV wire has a peer already: " + s.peer_name);
  auto addr = parse_address(host, port);
  if (!addr)
    return addr.error();
  s.peer_name = host + ":" + std::to_string(port);
  const auto deadline = clock::now() + timeout;
  unique_fd sock{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (!sock)
    return make_error(errc::system_error, std::string{"socket: "} + std::strerror(errno));
  int rc = ::connect(sock.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    err = ETIMEDOUT;
    if (ready(sock.get(), POLLOUT, deadline)) {
      socklen_t len = sizeof(err);
      ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  if (err != 0)
    return make_error(err == ETIMEDOUT ? errc::timed_out : errc::io_error,
                      "KV wire: no peer answered at " + s.peer_name + ": " + std::strerror(err));
  ::fcntl(sock.get(), F_SETFL, ::fcntl(sock.get(), F_GETFL) & ~O_NONBLOCK);
  return s.join(sock.get(), deadline);
}

expected<void> kv_wire::accept(std::chrono::milliseconds timeout) {
  return state_->accept_peer(clock::now() + timeout);
}

void kv_wire::drop_peer() {
  state_->close_peer();
}

expected<void> kv_wire::send(std::span<const wire_block> blocks,
                             std::chrono::milliseconds timeout) {
  auto& s = *state_;
  const auto deadline = clock::now() + timeout;
  if (s.peer == nullptr && !s.listening)
    return make_error(errc::invalid_argument, "KV wire: send without a peer (connect first)");
  if (auto joined = s.accept_peer(deadline); !joined)
    return joined.error();
  // Headers and places live until every send has completed; header i goes before bytes i
  // (or the place they lie at).
  std::vector<block_header> headers(blocks.size());
  std::vector<std::vector<std::byte>> places(blocks.size());
  std::vector<void*> requests;
  requests.reserve(2 * blocks.size());
  std::size_t shared = 0;
  ucp_request_param_t p{};
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    headers[i].id = blocks[i].id;
    headers[i].bytes = blocks[i].bytes.size();
    headers[i].checksum = blocks[i].checksum;
    std::span<const std::byte> second = blocks[i].bytes;
    if (auto at = s.shared_offset(blocks[i].bytes)) {
      headers[i].version = shared_version;
      places[i] = s.place(*at);
      second = places[i];
      ++shared;
    }
    requests.push_back(ucp_tag_send_nbx(s.peer, &headers[i], sizeof(block_header), header_tag, &p));
    requests.push_back(ucp_tag_send_nbx(s.peer, second.data(), second.size(), data_tag, &p));
  }
  std::optional<error> failed;
  for (std::size_t k = 0; k < requests.size() && !failed; ++k) {
    auto st = s.wait_until(requests[k], deadline);
    if (st == UCS_OK && s.peer_failed)
      st = *s.peer_failed;
    if (st != UCS_OK)
      failed = make_error(st == UCS_INPROGRESS ? errc::timed_out : errc::io_error,
                          "KV wire: sending block " + std::to_string(blocks[k / 2].id) + " to " +
                              s.peer_name + " failed: " +
                              (st == UCS_INPROGRESS
                                   ? "not done within " + std::to_string(timeout.count()) + " ms"
                                   : std::string{ucs_status_string(st)}) +
                              "; the peer is dropped");
  }
  // Blocks sent as where they lie have left once the peer's release words add up to them.
  for (std::uint64_t done = 0; !failed && done < shared;) {
    std::uint64_t word = 0;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    auto st = s.wait_for_peer(
        ucp_tag_recv_nbx(s.worker, &word, sizeof word, release_tag, ~std::uint64_t{0}, &rp),
        deadline);
    if ((word & release_unmappable) != 0)
      s.unmappable = true;
    done += word & release_count;
    if (st != UCS_OK || (word & release_abandoned) != 0 || done > shared)
      failed = make_error(
          st == UCS_INPROGRESS ? errc::timed_out : errc::io_error,
          "KV wire: " + s.peer_name + " did not say it was done with the " +
              std::to_string(shared) + " blocks sent in shared memory" +
              (st == UCS_INPROGRESS ? " within " + std::to_string(timeout.count()) + " ms"
               : st != UCS_OK       ? std::string{": "} + ucs_status_string(st)
               : (word & release_abandoned) != 0 ? " (it gave the batch up)"
                                                 : " (it said " + std::to_string(done) + ")") +
              "; the peer is dropped");
  }
  if (failed) {
    s.reset(); // ends the sends still under way (UCX cannot cancel them one by one)
    return *failed;
  }
  return {};
}

expected<std::vector<expected<received_block>>>
kv_wire::receive(std::span<const std::span<std::byte>> slots, std::chrono::milliseconds timeout) {
  auto& s = *state_;
  const auto deadline = clock::now() + timeout;
  if (auto joined = s.accept_peer(deadline); !joined)
    return joined.error();
  const std::size_t n = slots.size();
  std::vector<block_header> headers(n);
  std::vector<void*> requests(2 * n, nullptr);
  std::vector<ucp_tag_recv_info_t> info(2 * n);
  // Always a request (never completed at once), so each message's length comes from
  // ucp_tag_recv_request_test in one way.
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  for (std::size_t i = 0; i < n; ++i) {
    requests[2 * i] = ucp_tag_recv_nbx(s.worker, &headers[i], sizeof(block_header), header_tag,
                                       ~std::uint64_t{0}, &p);
    requests[2 * i + 1] = ucp_tag_recv_nbx(s.worker, slots[i].data(), slots[i].size(), data_tag,
                                           ~std::uint64_t{0}, &p);
  }
  // Waits for message k; UCS_INPROGRESS at the deadline or when the peer failed.
  auto arrive = [&](std::size_t k) -> ucs_status_t {
    void* req = requests[k];
    if (UCS_PTR_IS_ERR(req))
      return UCS_PTR_STATUS(req);
    ucs_status_t status;
    unsigned idle = 0;
    while ((status = ucp_tag_recv_request_test(req, &info[k])) == UCS_INPROGRESS &&
           clock::now() < deadline && !s.peer_failed)
      s.progress(idle);
    if (status != UCS_INPROGRESS)
      ucp_request_free(req);
    requests[k] = nullptr;
    return status;
  };
  // In order: each block is checked as soon as it has arrived, while it is still in the
  // caches and later blocks are under way. Any failure of the batch resets the wire (reset()),
  // which ends the receives still posted.
  std::vector<expected<received_block>> out;
  out.reserve(n);
  std::uint64_t shared = 0; // blocks sent as where they lie
  bool unmappable = false;  // one of them lay in memory this wire could not map
  // Tells the sender this receive is done with its blocks sent as where they lie (with
  // `flags`); waits until the word has left.
  auto release = [&s, &shared, &unmappable](std::uint64_t flags,
                                            clock::time_point until) -> ucs_status_t {
    // Waited for: a send not done by then is ended by the reset() that follows.
    const std::uint64_t word = shared | flags | (unmappable ? release_unmappable : 0);
    ucp_request_param_t sp{};
    return s.wait_for_peer(ucp_tag_send_nbx(s.peer, &word, sizeof word, release_tag, &sp), until);
  };
  // A block sent as where it lies: its place arrived in `slot` (`length` bytes); the bytes
  // are copied from the sender's shared memory into the slot.
  auto read_shared = [&s, &unmappable](const block_header& h, std::span<std::byte> slot,
                                       std::size_t length) -> expected<received_block> {
    std::uint64_t offset = 0;
    if (!s.sharing.reader || length <= sizeof offset || length > slot.size())
      return make_error(errc::corrupted, "KV wire: block " + std::to_string(h.id) +
                                             " came as a place in shared memory this wire " +
                                             (s.sharing.reader ? "cannot parse" : "does not read"));
    std::memcpy(&offset, slot.data(), sizeof offset);
    const std::vector<std::byte> key(slot.begin() + sizeof offset, slot.begin() + length);
    auto copied = s.sharing.reader->read(key, offset, slot.first(h.bytes), h.checksum);
    if (!copied && copied.error().code != errc::corrupted)
      unmappable = true;
    if (!copied)
      return make_error(copied.error().code == errc::corrupted ? errc::corrupted : errc::io_error,
                        "KV wire: block " + std::to_string(h.id) + " from " + s.peer_name +
                            "'s shared memory: " + copied.error().message + "; not used");
    return received_block{h.id, static_cast<std::size_t>(h.bytes), h.checksum, true};
  };
  for (std::size_t i = 0; i < n; ++i) {
    const auto header_status = arrive(2 * i);
    const auto data_status = header_status == UCS_OK ? arrive(2 * i + 1) : header_status;
    if (header_status == UCS_INPROGRESS || data_status == UCS_INPROGRESS ||
        (data_status != UCS_OK && data_status != UCS_ERR_MESSAGE_TRUNCATED)) {
      const bool late =
          !s.peer_failed && (header_status == UCS_INPROGRESS || data_status == UCS_INPROGRESS);
      auto e = make_error(late ? errc::timed_out : errc::io_error,
                          "KV wire: " + std::to_string(n - i) + " of " + std::to_string(n) +
                              " blocks from " + s.peer_name + " did not arrive: " +
                              (late ? "not within " + std::to_string(timeout.count()) + " ms"
                               : s.peer_failed ? std::string{ucs_status_string(*s.peer_failed)}
                                               : std::string{ucs_status_string(data_status)}) +
                              "; the peer is dropped");
      // A sender waiting to hear about blocks it sent as where they lie hears that this
      // receive gave them up (briefly: the peer may be gone), not only its timeout.
      if (shared > 0)
        (void)release(release_abandoned, clock::now() + std::chrono::milliseconds{200});
      s.reset();
      return e;
    }
    const auto& h = headers[i];
    const bool where = h.version == shared_version;
    shared += where ? 1 : 0;
    if (info[2 * i].length != sizeof(block_header) || h.magic != header_magic ||
        (h.version != pushed_version && !where)) {
      out.push_back(make_error(errc::corrupted, "KV wire: slot " + std::to_string(i) +
                                                    " received a header that is not a KV "
                                                    "block's (" +
                                                    std::to_string(info[2 * i].length) +
                                                    " bytes)"));
      continue;
    }
    if (data_status == UCS_ERR_MESSAGE_TRUNCATED || h.bytes > slots[i].size()) {
      out.push_back(make_error(errc::exhausted, "KV wire: block " + std::to_string(h.id) + " (" +
                                                    std::to_string(h.bytes) +
                                                    " bytes) is larger than its slot " +
                                                    std::to_string(i) + " (" +
                                                    std::to_string(slots[i].size()) + " bytes)"));
      continue;
    }
    if (where) { // copied out of the sender's shared memory, checked in the same pass
      out.push_back(read_shared(h, slots[i], info[2 * i + 1].length));
      continue;
    }
    if (info[2 * i + 1].length != h.bytes) {
      out.push_back(
          make_error(errc::corrupted, "KV wire: block " + std::to_string(h.id) + " announced " +
                                          std::to_string(h.bytes) + " bytes and " +
                                          std::to_string(info[2 * i + 1].length) + " arrived"));
      continue;
    }
    const auto bytes = slots[i].first(static_cast<std::size_t>(h.bytes));
    if (const auto sum = block_checksum(bytes); sum != h.checksum) {
      out.push_back(make_error(errc::corrupted, "KV wire: block " + std::to_string(h.id) +
                                                    " failed its checksum (sent " +
                                                    std::to_string(h.checksum) + ", received " +
                                                    std::to_string(sum) + "); not used"));
      continue;
    }
    out.push_back(received_block{h.id, bytes.size(), h.checksum});
  }
  // The sender waits to hear that this wire is done with the blocks sent as where they lie
  // (copied, or refused): it may reuse them then.
  if (shared > 0) {
    auto st = release(0, deadline);
    if (st != UCS_OK) {
      auto e = make_error(st == UCS_INPROGRESS ? errc::timed_out : errc::io_error,
                          "KV wire: telling " + s.peer_name + " its blocks were copied failed: " +
                              ucs_status_string(st) + "; the peer is dropped");
      s.reset();
      return e;
    }
  }
  return out;
}

} // namespace triad::cluster
