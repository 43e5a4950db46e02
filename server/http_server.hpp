#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "actors/node_config.hpp"
#include "runtime/error.hpp"

namespace triad {

class node;

/// What the HTTP server needs beyond the node.
struct http_server_options {
  server_config server; ///< address, port, timeouts, header limit, threads
  limits_config limits; ///< body size and concurrent generation bounds
  std::string model_id; ///< the model name clients must send (and /v1/models lists)
  std::string api_key;  ///< the bearer token required on /v1/*; empty: none
};

/// Whether `address` (an IP address as [server].listen holds it) is loopback only: 127.0.0.0/8,
/// ::1, or an IPv4-mapped loopback address. Anything else (including "0.0.0.0" and "::") can be
/// reached from other machines.
bool is_loopback(std::string_view address) noexcept;

/// triad-node's HTTP/1.1 front end (Boost.Beast): the OpenAI-compatible endpoints
/// (`POST /v1/chat/completions`, streaming or not; `GET /v1/models`), `GET /metrics`,
/// `GET /health` and `GET /ready`, with keep-alive, limits on head and body size, a timeout for
/// slow clients, bearer-token auth, and errors in OpenAI's JSON shape. Each generation is a
/// node request; its events are turned into the response on the connection's strand, and a
/// client that goes away cancels its request (freeing its KV).
class http_server {
public:
  /// Binds and starts serving `n` on `options.server.threads` threads. Errors name the address
  /// that could not be bound.
  static expected<std::unique_ptr<http_server>> start(node& n, http_server_options options);
  /// Stops (stop()).
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The port it listens on (the one chosen when the config said 0).
  std::uint16_t port() const noexcept;
  /// Closes the listening socket; connections finish their current request and close, new
  /// requests on them are answered 503. /ready answers 503 from now on.
  void stop_accepting();
  /// Waits until no generation request is being answered, up to `deadline`; true when none is.
  bool wait_idle(std::chrono::milliseconds deadline);
  /// Generation requests being answered now.
  std::size_t active() const noexcept;
  /// Closes every connection and joins the threads.
  void stop();

private:
  struct impl;
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace triad
