#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
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
  std::mutex mtx;
  std::map<std::string, std::vector<std::string>> told; // by peer: each reason, in order
  std::unique_ptr<control_plane> plane; // last: it goes first, its peers telling `told` no more

  explicit front(const std::string& peer) {
    cluster_config c;
    c.role = node_role::front;
    c.listen = "127.0.0.1";
    c.peers = {peer};
    c.rejoin_ms = 100;
    c.heartbeat_deadline_ms = 5000; // a connect's bound: a loaded machine does not time it out
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

// A node that is not this build's gateway: an actor system of its own, configured by
// `configure`, whose middleman publishes a mute actor on 127.0.0.1 (any port); both go with it.
struct foreign_node {
  std::unique_ptr<caf::actor_system_config> cfg = std::make_unique<caf::actor_system_config>();
  std::unique_ptr<caf::actor_system> sys;
  caf::actor mute;
  std::uint16_t port = 0;
  std::string address; // "127.0.0.1:port"

  explicit foreign_node(const std::function<void(caf::actor_system_config&)>& configure) {
    cfg->load<caf::io::middleman>();
    configure(*cfg);
    sys = std::make_unique<caf::actor_system>(*cfg);
    mute = sys->spawn([] { return caf::behavior{[](int) {}}; });
    auto p = sys->middleman().publish(mute, 0, "127.0.0.1");
    if (!p) { // the destructor will not run: the system must not wait for the actor
      caf::anon_send_exit(mute, caf::exit_reason::user_shutdown);
      BOOST_FAIL("publish: " << sys->render(p.error()));
    }
    port = *p;
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~foreign_node() {
    if (port != 0)
      (void)sys->middleman().unpublish(mute, port);
    caf::anon_send_exit(mute, caf::exit_reason::user_shutdown);
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(control_plane_peers)

BOOST_AUTO_TEST_CASE(a_peer_of_another_cluster_protocol_is_refused_naming_the_protocol) {
  // A node of another triad build: CAF's middleman under another application identifier.
  foreign_node other{[](caf::actor_system_config& cfg) {
    cfg.set("middleman.app-identifiers", std::vector<std::string>{"triad-cluster/1"});
  }};
  front f{other.address};
  const auto why = f.trouble_of(other.address);
  BOOST_TEST_MESSAGE("peer_trouble: " << why);
  BOOST_TEST(why.find("cluster protocol") != std::string::npos);
  BOOST_TEST(why.find(detail::cluster_app_identifier()) != std::string::npos);
  BOOST_TEST(f.plane->peers_up() == 0u);
  // Told once although every rejoin (each 100 ms) fails the same way.
  std::this_thread::sleep_for(std::chrono::milliseconds{600});
  const auto told = f.told_of(other.address);
  BOOST_TEST(std::count(told.begin(), told.end(), why) == 1);
}

BOOST_AUTO_TEST_CASE(a_peer_nothing_listens_at_is_named_unreachable) {
  const auto peer = "127.0.0.1:" + std::to_string(free_port());
  front f{peer};
  const auto why = f.trouble_of(peer);
  BOOST_TEST_MESSAGE("peer_trouble: " << why);
  BOOST_TEST(why.find("nothing accepted a TCP connection") != std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds{600});
  const auto told = f.told_of(peer);
  BOOST_TEST(std::count(told.begin(), told.end(), why) == 1);
}

BOOST_AUTO_TEST_CASE(a_peer_that_does_not_answer_hello_is_named) {
  // The same cluster protocol, but what is published there does not answer hello.
  foreign_node other{[](caf::actor_system_config& cfg) { detail::speak_cluster_protocol(cfg); }};
  front f{other.address};
  const auto why = f.trouble_of(other.address);
  BOOST_TEST_MESSAGE("peer_trouble: " << why);
  BOOST_TEST(why.find("did not answer hello") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
