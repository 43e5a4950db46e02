#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the server area, in one place (like CAF's `defaults::`); config sections take
/// their initial values from here.
namespace triad::defaults {

namespace server {
/// Whitespace bytes a response_format's JSON may have at each place JSON allows them: one lets
/// a model write `{"a": 1, "b": 2}` as it was trained to, and bounds padding.
inline constexpr std::size_t json_whitespace = 1;
/// Most choices (`n`) one request may ask for: each is a request of its own on the node.
inline constexpr std::size_t max_choices = 16;
/// `[server].listen`: the address triad-node listens on (loopback: not exposed by accident).
inline constexpr std::string_view listen = "127.0.0.1";
/// `[server].port`: its TCP port.
inline constexpr std::uint16_t port = 8080;
/// `[server].max_header_bytes`: the largest request head (request line and headers) accepted.
inline constexpr std::size_t max_header_bytes = 16 * 1024;
/// `[server].header_timeout_ms`: time a client has to send a whole request head (and, later,
/// its body) before the connection is closed (slow-header clients).
inline constexpr std::uint32_t header_timeout_ms = 10'000;
/// `[server].idle_timeout_ms`: a keep-alive connection with no request for this long is closed.
inline constexpr std::uint32_t idle_timeout_ms = 60'000;
/// `[server].drain_timeout_ms`: on SIGTERM, how long in-flight requests may run before the
/// node stops anyway.
inline constexpr std::uint32_t drain_timeout_ms = 30'000;
/// `[server].threads`: threads running the HTTP connections.
inline constexpr std::size_t threads = 2;
/// How often a connection whose client sent more while its answer is generated (a pipelined
/// request, which stays in the socket for later) looks again whether the client is still there
/// (not a config key).
inline constexpr std::chrono::milliseconds pipelined_recheck{50};
} // namespace server

} // namespace triad::defaults
