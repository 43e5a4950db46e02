#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "runtime/error.hpp"

namespace triad::load {

/// Options of the mock server behind `triad-load --self-test`.
struct mock_options {
  std::size_t threads = 1;                     ///< server I/O threads
  std::chrono::microseconds token_interval{0}; ///< between streamed tokens (0: all at once)
  std::uint32_t max_tokens = 64;               ///< tokens per answer at most
};

/// A minimal OpenAI-compatible streaming server on 127.0.0.1 (any free port), for measuring
/// the load client itself: answers `POST .../chat/completions` with `max_tokens` one-byte
/// tokens (streamed as SSE chunks `token_interval` apart, with usage and [DONE], or as one JSON
/// body), and `GET .../models`. It parses only what it needs and does no work per token, so
/// what a run measures is the client.
class mock_server {
public:
  /// Binds to 127.0.0.1:0 and starts serving.
  static expected<std::unique_ptr<mock_server>> start(mock_options options);
  /// Stops and joins its threads.
  ~mock_server();
  mock_server(const mock_server&) = delete;
  mock_server& operator=(const mock_server&) = delete;

  /// The port it got.
  std::uint16_t port() const noexcept;
  /// Streams open now.
  std::size_t open_streams() const noexcept;
  /// The most streams open at once so far.
  std::size_t peak_streams() const noexcept;
  /// Requests answered so far, counted as each answer's last bytes are handed to the socket
  /// (so a client that has an answer finds it counted).
  std::uint64_t answered() const noexcept;
  /// Connections accepted so far.
  std::uint64_t accepted() const noexcept;
  /// Waits until `n` connections in all have been accepted, up to `timeout`; whether they
  /// were (an open loop starts its clock once its warm connections are taken).
  bool await_accepted(std::uint64_t n, std::chrono::milliseconds timeout) const;

  /// Its state (defined in mock_server.cpp, where its connections use it).
  struct impl;

private:
  explicit mock_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace triad::load
