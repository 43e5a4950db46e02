#pragma once

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/options.hpp"
#include "server/defaults.hpp"

/// The server's config section, `[server]`. Header-only, with nothing but runtime/options
/// under it, so the node (actors/node_config.hpp) composes it into the file although the server
/// library sits above the node's.
namespace triad {

/// `[server]`: triad-node's HTTP endpoint.
struct server_config {
  std::string listen{defaults::server::listen}; ///< `listen`: an IPv4 or IPv6 address
  std::uint16_t port = defaults::server::port;  ///< `port`: 0..65535 (0: any free port)
  /// `api_key_env`: the environment variable holding the bearer token clients must send
  /// (`Authorization: Bearer <token>`); empty: no authentication. The token itself never sits
  /// in the config file.
  std::string api_key_env;
  /// `allow_scripts`: whether requests may carry the `triad.script` extension (forced output
  /// for benchmarks and tests); off by default, a refused script is a 400 naming this key.
  bool allow_scripts = false;
  std::size_t max_header_bytes = defaults::server::max_header_bytes;     ///< `max_header_bytes`
  std::uint32_t header_timeout_ms = defaults::server::header_timeout_ms; ///< `header_timeout_ms`
  std::uint32_t idle_timeout_ms = defaults::server::idle_timeout_ms;     ///< `idle_timeout_ms`
  std::uint32_t drain_timeout_ms = defaults::server::drain_timeout_ms;   ///< `drain_timeout_ms`
  std::size_t threads = defaults::server::threads; ///< `threads`: HTTP threads, 1..256
  bool operator==(const server_config&) const = default;
};

/// The `[server]` section's keys.
inline const options::section<server_config>& server_section() {
  using c = server_config;
  static const options::section<c> section{
      "server",
      false,
      {
          // A value of the wrong type and one that is no address say what is allowed in
          // their own words (as before the sections).
          options::custom<c>(
              "listen", "an IPv4 or IPv6 address", "the address triad-node listens on",
              [](options::table& t, c& out) {
                std::string value;
                const auto s = t.string("listen", "an IPv4 or IPv6 address", value);
                if (s != options::state::valid)
                  return s;
                unsigned char addr[16];
                if (::inet_pton(AF_INET, value.c_str(), addr) != 1 &&
                    ::inet_pton(AF_INET6, value.c_str(), addr) != 1) {
                  t.fail("listen", "not an IP address",
                         "an IPv4 or IPv6 address, e.g. \"127.0.0.1\" or \"::\"");
                  return options::state::invalid;
                }
                out.listen = std::move(value);
                return s;
              },
              [](const c& v) -> std::optional<std::string> { return options::quote(v.listen); }),
          options::integer("port", &c::port, {0, 65535}, "the port; 0 = any free port"),
          options::text<c>("api_key_env", &c::api_key_env, "an environment variable name",
                           "the variable holding the bearer token; empty = no authentication"),
          options::boolean<c>("allow_scripts", &c::allow_scripts,
                              "whether requests may carry the triad.script extension"),
          options::integer("max_header_bytes", &c::max_header_bytes, {1024, 1 << 20},
                           "largest request header"),
          options::integer("header_timeout_ms", &c::header_timeout_ms, {1, 3'600'000},
                           "time a client has to send a request's header"),
          options::integer("idle_timeout_ms", &c::idle_timeout_ms, {1, 3'600'000},
                           "time an idle keep-alive connection is kept"),
          options::integer("drain_timeout_ms", &c::drain_timeout_ms, {1, 3'600'000},
                           "time streams get to finish when the node stops"),
          options::integer("threads", &c::threads, {1, 256}, "HTTP threads"),
      },
      {},
  };
  return section;
}

} // namespace triad
