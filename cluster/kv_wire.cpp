#include "cluster/kv_wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <ucp/api/ucp.h>

#include "runtime/checksum.hpp"
#include "runtime/io.hpp"

namespace triad::cluster {

namespace {

using clock = std::chrono::steady_clock;

// What precedes a block's bytes in its message.
struct block_header {
  std::uint32_t magic = 0x5452444b; // "TRDK"
  std::uint32_t version = 1;
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
};
constexpr std::uint32_t header_magic = block_header{}.magic;

// The most bytes a peer's UCX worker address may have in the bootstrap exchange.
constexpr std::uint32_t max_worker_address = 64 * 1024;

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

int remaining_ms(clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Waits until `fd` is ready for `events` or `deadline` passes.
bool ready(int fd, short events, clock::time_point deadline) {
  pollfd p{fd, events, 0};
  int n;
  do
    n = ::poll(&p, 1, remaining_ms(deadline));
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
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h peer = nullptr;
  // The bootstrap listener (listen()): a TCP socket on which one peer exchanges worker
  // addresses with this wire.
  unique_fd listening;
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

  // Closes the endpoint, bounded: what was sent is flushed first (up to two seconds) while the
  // peer is alive, then the endpoint is closed by force, which completes at once and ends any
  // request still on it (UCX's graceful close would wait for the peer without bound).
  void close_peer() {
    if (peer == nullptr)
      return;
    void* flush = nullptr;
    if (!peer_failed) {
      ucp_request_param_t p{};
      flush = ucp_ep_flush_nbx(peer, &p);
      if (wait_until(flush, clock::now() + std::chrono::seconds{2}) != UCS_INPROGRESS)
        flush = nullptr; // done and freed
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* close = ucp_ep_close_nbx(peer, &p);
    peer = nullptr;
    finish(close);
    finish(flush);
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    static_cast<state*>(arg)->peer_failed = status;
  }

  // Progresses the worker until `req` (a request, null: done at once, or an error pointer) is
  // done or `deadline` passes; its status. Done requests are freed; at UCS_INPROGRESS it is
  // still under way and the caller ends it (a cancel or a forced close) and finish()es it.
  ucs_status_t wait_until(void* req, clock::time_point deadline) {
    if (req == nullptr)
      return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
      return UCS_PTR_STATUS(req);
    ucs_status_t status;
    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS && clock::now() < deadline)
      ucp_worker_progress(worker);
    if (status != UCS_INPROGRESS)
      ucp_request_free(req);
    return status;
  }

  // Progresses the worker until a request that is ending (cancelled, or its endpoint closed by
  // force) has ended, and frees it; nothing for null or error pointers.
  void finish(void* req) {
    if (req == nullptr || !UCS_PTR_IS_PTR(req))
      return;
    while (ucp_request_check_status(req) == UCS_INPROGRESS)
      ucp_worker_progress(worker);
    ucp_request_free(req);
  }

  // Exchanges worker addresses with the peer at the other end of `sock` (each side sends its
  // length and bytes, then reads the other's) and opens the endpoint to the peer's worker.
  expected<void> join(int sock, clock::time_point deadline) {
    ucp_address_t* own = nullptr;
    std::size_t own_len = 0;
    if (auto st = ucp_worker_get_address(worker, &own, &own_len); st != UCS_OK)
      return ucx_error("ucp_worker_get_address", st);
    const auto len = htonl(static_cast<std::uint32_t>(own_len));
    timeval tv{remaining_ms(deadline) / 1000, (remaining_ms(deadline) % 1000) * 1000};
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    const bool sent = write_all(sock, &len, sizeof(len)) && write_all(sock, own, own_len);
    ucp_worker_release_address(worker, own);
    std::uint32_t peer_len = 0;
    if (!sent || !read_all(sock, &peer_len, sizeof(peer_len)))
      return make_error(errc::io_error,
                        "KV wire: " + peer_name +
                            " did not exchange worker addresses: " + std::strerror(errno));
    peer_len = ntohl(peer_len);
    if (peer_len == 0 || peer_len > max_worker_address)
      return make_error(errc::parse_error, "KV wire: " + peer_name + " sent a worker address of " +
                                               std::to_string(peer_len) + " bytes (at most " +
                                               std::to_string(max_worker_address) + ")");
    std::vector<std::byte> address(peer_len);
    if (!read_all(sock, address.data(), address.size()))
      return make_error(errc::io_error,
                        "KV wire: " + peer_name + " closed during the address exchange");
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
    void* flush = ucp_ep_flush_nbx(peer, &p);
    auto st = wait_until(flush, deadline);
    if (st == UCS_INPROGRESS)
      st = UCS_ERR_TIMED_OUT;
    else
      flush = nullptr; // done and freed
    if (st == UCS_OK && peer_failed)
      st = *peer_failed;
    if (st != UCS_OK) {
      peer_failed = st;
      close_peer(); // by force: it ends the flush
      finish(flush);
      return make_error(errc::io_error,
                        "KV wire: " + peer_name +
                            " did not answer on its transports: " + ucs_status_string(st));
    }
    return {};
  }

  // A listening wire's peer: accepts one bootstrap connection (waiting until `deadline`) and
  // joins it. Nothing to do with a peer already there.
  expected<void> accept_peer(clock::time_point deadline) {
    if (peer != nullptr)
      return {};
    if (!listening)
      return make_error(errc::invalid_argument,
                        "KV wire: no peer (connect first, or listen for one)");
    if (!ready(listening.get(), POLLIN, deadline))
      return make_error(errc::timed_out, "KV wire: no peer connected in time");
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    unique_fd sock{::accept(listening.get(), reinterpret_cast<sockaddr*>(&from), &len)};
    if (!sock)
      return make_error(errc::io_error,
                        std::string{"KV wire: accepting a peer failed: "} + std::strerror(errno));
    char host[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &from.sin_addr, host, sizeof(host));
    peer_name = std::string{host} + ":" + std::to_string(ntohs(from.sin_port));
    return join(sock.get(), deadline);
  }
};

// -- kv_wire --

kv_wire::kv_wire(std::unique_ptr<state> s)
    : state_(std::move(s)) {}

kv_wire::~kv_wire() = default;

wire_transport kv_wire::transport() const noexcept {
  return state_->transport;
}

expected<std::unique_ptr<kv_wire>> kv_wire::open(wire_transport transport) {
  auto s = std::make_unique<state>();
  s->transport = transport;
  ucp_config_t* config = nullptr;
  if (auto st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK)
    return ucx_error("ucp_config_read", st);
  // `self` for a wire's own loopback. Peers find each other through a TCP bootstrap socket
  // (listen, connect) that carries the workers' addresses, so no connection manager decides
  // the transports: shared memory stays shared memory.
  const char* tls = transport == wire_transport::tcp ? "tcp,self" : "sm,self";
  auto st = ucp_config_modify(config, "TLS", tls);
  if (st == UCS_OK) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    st = ucp_init(&params, config, &s->context);
  }
  ucp_config_release(config);
  if (st != UCS_OK)
    return ucx_error(std::string{"ucp_init (transports "} + tls + ")", st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (st = ucp_worker_create(s->context, &wp, &s->worker); st != UCS_OK)
    return ucx_error("ucp_worker_create", st);
  return std::unique_ptr<kv_wire>{new kv_wire{std::move(s)}};
}

expected<std::uint16_t> kv_wire::listen(const std::string& host, std::uint16_t port) {
  auto& s = *state_;
  if (s.listening)
    return make_error(errc::invalid_argument, "the KV wire listens already");
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
  return static_cast<std::uint16_t>(ntohs(bound.sin_port));
}

expected<void> kv_wire::connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout) {
  auto& s = *state_;
  if (s.peer != nullptr)
    return make_error(errc::invalid_argument, "the KV wire has a peer already");
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
    return make_error(errc::io_error,
                      "KV wire: no peer answered at " + s.peer_name + ": " + std::strerror(err));
  ::fcntl(sock.get(), F_SETFL, ::fcntl(sock.get(), F_GETFL) & ~O_NONBLOCK);
  return s.join(sock.get(), deadline);
}

expected<void> kv_wire::send(std::span<const wire_block> blocks,
                             std::chrono::milliseconds timeout) {
  auto& s = *state_;
  const auto deadline = clock::now() + timeout;
  if (s.peer == nullptr && !s.listening)
    return make_error(errc::invalid_argument, "KV wire: send without a peer (connect first)");
  if (auto joined = s.accept_peer(deadline); !joined)
    return joined.error();
  // Headers and scatter lists live until every send has completed.
  std::vector<block_header> headers(blocks.size());
  std::vector<ucp_dt_iov_t> iov(2 * blocks.size());
  std::vector<void*> requests(blocks.size(), nullptr);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  p.datatype = ucp_dt_make_iov();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    headers[i].id = blocks[i].id;
    headers[i].bytes = blocks[i].bytes.size();
    headers[i].checksum = blocks[i].checksum;
    iov[2 * i] = {&headers[i], sizeof(block_header)};
    iov[2 * i + 1] = {const_cast<std::byte*>(blocks[i].bytes.data()), blocks[i].bytes.size()};
    requests[i] = ucp_tag_send_nbx(s.peer, &iov[2 * i], 2, defaults::cluster::wire_block_tag, &p);
  }
  std::optional<error> failed;
  std::vector<void*> pending;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto st = s.wait_until(requests[i], deadline);
    if (st == UCS_INPROGRESS)
      pending.push_back(requests[i]);
    if (st != UCS_OK && !failed)
      failed = make_error(st == UCS_INPROGRESS ? errc::timed_out : errc::io_error,
                          "KV wire: sending block " + std::to_string(blocks[i].id) + " to " +
                              s.peer_name + " failed: " +
                              (st == UCS_INPROGRESS
                                   ? "not done within " + std::to_string(timeout.count()) +
                                         " ms; the peer is dropped"
                                   : std::string{ucs_status_string(st)}));
  }
  if (!pending.empty()) {
    // Sends cannot be cancelled one by one: closing the endpoint by force ends them.
    s.peer_failed = UCS_ERR_TIMED_OUT;
    s.close_peer();
    for (void* req : pending)
      s.finish(req);
  }
  if (failed)
    return *failed;
  if (s.peer_failed)
    return make_error(errc::io_error, "KV wire: the peer " + s.peer_name +
                                          " failed: " + ucs_status_string(*s.peer_failed));
  return {};
}

expected<std::vector<expected<received_block>>>
kv_wire::receive(std::span<const std::span<std::byte>> slots, std::chrono::milliseconds timeout) {
  auto& s = *state_;
  const auto deadline = clock::now() + timeout;
  if (auto joined = s.accept_peer(deadline); !joined)
    return joined.error();
  std::vector<block_header> headers(slots.size());
  std::vector<ucp_dt_iov_t> iov(2 * slots.size());
  std::vector<void*> requests(slots.size(), nullptr);
  std::vector<ucp_tag_recv_info_t> info(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    iov[2 * i] = {&headers[i], sizeof(block_header)};
    iov[2 * i + 1] = {slots[i].data(), slots[i].size()};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO;
    p.datatype = ucp_dt_make_iov();
    p.recv_info.tag_info = &info[i]; // filled when it completes at once
    requests[i] = ucp_tag_recv_nbx(s.worker, &iov[2 * i], 2, defaults::cluster::wire_block_tag,
                                   ~std::uint64_t{0}, &p);
  }
  // Cancels and frees the receives from `from` on (a failure ends the whole: nothing may
  // still write into slots, headers or scatter lists after this returns).
  auto abandon = [&](std::size_t from) {
    for (std::size_t k = from; k < requests.size(); ++k)
      if (UCS_PTR_IS_PTR(requests[k])) {
        ucp_request_cancel(s.worker, requests[k]);
        while (ucp_request_check_status(requests[k]) == UCS_INPROGRESS)
          ucp_worker_progress(s.worker);
        ucp_request_free(requests[k]);
      }
  };
  // In order: each block is checked as soon as it has arrived, while it is still in the
  // caches and later blocks are under way.
  std::vector<expected<received_block>> out;
  out.reserve(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    void* req = requests[i];
    ucs_status_t status = UCS_OK; // completed at once when null: info[i] is filled
    if (UCS_PTR_IS_ERR(req)) {
      status = UCS_PTR_STATUS(req);
    } else if (req != nullptr) {
      while ((status = ucp_tag_recv_request_test(req, &info[i])) == UCS_INPROGRESS &&
             clock::now() < deadline)
        ucp_worker_progress(s.worker);
      if (status == UCS_INPROGRESS) {
        abandon(i);
        return make_error(errc::timed_out, "KV wire: " + std::to_string(slots.size() - i) + " of " +
                                               std::to_string(slots.size()) +
                                               " blocks did not arrive within " +
                                               std::to_string(timeout.count()) + " ms");
      }
      ucp_request_free(req);
    }
    const auto& h = headers[i];
    if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      out.push_back(make_error(errc::exhausted, "KV wire: a block is larger than its slot " +
                                                    std::to_string(i) + " (" +
                                                    std::to_string(slots[i].size()) + " bytes)"));
      continue;
    }
    if (status != UCS_OK) {
      abandon(i + 1);
      return make_error(errc::io_error,
                        std::string{"KV wire: receiving failed: "} + ucs_status_string(status));
    }
    if (info[i].length < sizeof(block_header) || h.magic != header_magic || h.version != 1 ||
        h.bytes != info[i].length - sizeof(block_header)) {
      out.push_back(make_error(errc::corrupted, "KV wire: slot " + std::to_string(i) +
                                                    " received a message that is not a KV block (" +
                                                    std::to_string(info[i].length) + " bytes)"));
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
    out.push_back(received_block{h.id, bytes.size()});
  }
  return out;
}

} // namespace triad::cluster
