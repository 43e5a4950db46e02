#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "cluster/control_plane.hpp"
#include "cluster/detail/wire.hpp"
#include "tests/printers.hpp"

using namespace triad;

namespace {

// A front node's control plane that joins `peer` and records what it is told of peers it
// cannot join.
struct front {
  std::unique_ptr<control_plane> plane;
  std::mutex mtx;
  std::map<std::string, std::vector<std::string>> told; // by peer: each reason, in order

  explicit front(const std::string& peer) {
    cluster_config c;
    c.role = node_role::front;
    c.listen = "127.0.0.1";
    c.peers = {peer};
    c.rejoin_ms = 100;
    c.heartbeat_deadline_ms = 1000;
    c.kv_wire = kv_wire_mode::off;
    auto p = control_plane::start(c);
    BOOST_REQUIRE_MESSAGE(p.has_value(), why(p));
    plane = std::move(*p);
    cluster_events events;
    events.trouble = [this](const std::string& at, const std::string& why) {
      std::lock_guard lock{mtx};
      told[at].push_back(why);
    };
    BOOST_REQUIRE(plane->join(std::move(events)).has_value());
  }

  // What peer_trouble() says of `peer` once it says something (or "" after 20 s).
  std::string trouble_of(const std::string& peer) {
    for (int i = 0; i < 200; ++i) {
      if (auto all = plane->peer_trouble(); all.contains(peer))
        return all[peer];
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
    return {};
  }

  // The reasons events.trouble told for `peer`.
  std::vector<std::string> told_of(const std::string& peer) {
    std::lock_guard lock{mtx};
    return told[peer];
  }
};

// A free TCP port on 127.0.0.1 that nothing listens on (bound, then closed).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

} // namespace

BOOST_AUTO_TEST_SUITE(control_plane_peers)

BOOST_AUTO_TEST_CASE(a_peer_of_another_cluster_protocol_is_refused_naming_the_protocol) {
  // A node of another triad build: CAF's middleman under another application identifier.
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.app-identifiers", std::vector<std::string>{"triad-cluster/1"});
  caf::actor_system other{cfg};
  auto gateway = other.spawn([] { return caf::behavior{[](int) {}}; });
  auto port = other.middleman().publish(gateway, 0, "127.0.0.1");
  BOOST_REQUIRE(static_cast<bool>(port));
  const auto peer = "127.0.0.1:" + std::to_string(*port);

  front f{peer};
  const auto why = f.trouble_of(peer);
  BOOST_TEST_MESSAGE("peer_trouble: " << why);
  BOOST_TEST(why.find("cluster protocol") != std::string::npos);
  BOOST_TEST(why.find(detail::cluster_app_identifier()) != std::string::npos);
  BOOST_TEST(f.plane->peers_up() == 0u);
  // Told once although every rejoin (each 100 ms) fails the same way.
  std::this_thread::sleep_for(std::chrono::milliseconds{600});
  BOOST_TEST(f.told_of(peer) == std::vector<std::string>{why});
  other.middleman().unpublish(gateway, *port);
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_peer_nothing_listens_at_is_named_unreachable) {
  const auto peer = "127.0.0.1:" + std::to_string(free_port());
  front f{peer};
  const auto why = f.trouble_of(peer);
  BOOST_TEST_MESSAGE("peer_trouble: " << why);
  BOOST_TEST(why.find("nothing accepted a TCP connection") != std::string::npos);
  BOOST_TEST(f.told_of(peer).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_peer_that_does_not_answer_hello_is_named) {
  // The same application identifier, but what is published there does not answer hello.
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  detail::speak_cluster_protocol(cfg);
  caf::actor_system other{cfg};
  auto stranger = other.spawn([] { return caf::behavior{[](int) {}}; });
  auto port = other.middleman().publish(stranger, 0, "127.0.0.1");
  BOOST_REQUIRE(static_cast<bool>(port));
  const auto peer = "127.0.0.1:" + std::to_string(*port);

  front f{peer};
  const auto why = f.trouble_of(peer);
  BOOST_TEST_MESSAGE("peer_trouble: " << why);
  BOOST_TEST(why.find("did not answer hello") != std::string::npos);
  other.middleman().unpublish(stranger, *port);
  caf::anon_send_exit(stranger, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
