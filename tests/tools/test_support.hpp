#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "runtime/node_clock.hpp"
#include "tools/registry.hpp"

namespace triad::test {

/// A TCP socket listening on 127.0.0.1 at a free port, closed when it goes: what a sandboxed
/// process must not reach.
struct loopback_listener {
  int fd = -1;
  std::uint16_t port = 0;
  loopback_listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    BOOST_REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~loopback_listener() { ::close(fd); }
  loopback_listener(const loopback_listener&) = delete;
  loopback_listener& operator=(const loopback_listener&) = delete;
};

/// A registry with the tool "nap", that sleeps for `ms` milliseconds of the node's clock on its
/// calling thread (in virtual time the clock may jump over it) and answers "rested" (lets executor
/// tests control how long a call holds a slot), and the tool "flood", that answers `bytes` bytes of
/// text (outputs larger than a model's context).
inline std::shared_ptr<tool_registry> sleeper_registry() {
  namespace json = boost::json;
  auto r = std::make_shared<tool_registry>();
  auto ok =
      r->add({"nap", "sleep a while",
              json::parse(R"({"type": "object", "required": ["ms"],
                      "properties": {"ms": {"type": "integer", "minimum": 0}}})")
                  .as_object()},
             [](const json::object& args) -> expected<tool_output> {
               node_clock::sleep_for(std::chrono::milliseconds{args.at("ms").to_number<int>()});
               return tool_output{"rested", {{"ms", args.at("ms")}}};
             });
  BOOST_REQUIRE(ok.has_value());
  ok = r->add({"flood", "answer with many bytes",
               json::parse(R"({"type": "object", "required": ["bytes"],
                 "properties": {"bytes": {"type": "integer", "minimum": 0}}})")
                   .as_object()},
              [](const json::object& args) -> expected<tool_output> {
                return tool_output{std::string(args.at("bytes").to_number<std::size_t>(), 'x'), {}};
              });
  BOOST_REQUIRE(ok.has_value());
  return r;
}

} // namespace triad::test
