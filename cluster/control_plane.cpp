#include "cluster/control_plane.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "cluster/detail/gateway.hpp"
#include "cluster/detail/peer_plan.hpp"
#include "cluster/detail/remote_device.hpp"
#include "cluster/detail/wire.hpp"
#include "runtime/domains.hpp"
#include "runtime/homed_actor.hpp"

// -- TLS: each connection's OpenSSL errors stay its own --
//
// libcaf_openssl 0.17.6 (libcaf_openssl/src/openssl/session.cpp) calls SSL_read, SSL_write,
// SSL_connect and SSL_accept for every connection on the middleman's one thread without
// clearing OpenSSL's per-thread error queue first, and leaves a closed connection's error in it
// (SSL_ERROR_SYSCALL is not drained). OpenSSL's SSL_get_error then reports that error for the
// next connection served on the thread, and CAF closes it too: one peer killed dropped every
// peer's connection (seen here: kill -9 of one decode node lost all three device nodes).
// OpenSSL's rule is that the queue be empty before each of these calls (SSL_get_error(3)); these
// definitions, which take the place of libssl's for the process (the executable's symbols come
// first), clear it and call libssl's own.
namespace {

template<class F>
F next_symbol(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

void clear_tls_errors() {
  static auto clear = next_symbol<void (*)()>("ERR_clear_error");
  if (clear != nullptr)
    clear();
}

} // namespace

extern "C" {
struct ssl_st;
int SSL_read(ssl_st* s, void* buf, int num) {
  static auto real = next_symbol<int (*)(ssl_st*, void*, int)>("SSL_read");
  clear_tls_errors();
  return real(s, buf, num);
}
int SSL_write(ssl_st* s, const void* buf, int num) {
  static auto real = next_symbol<int (*)(ssl_st*, const void*, int)>("SSL_write");
  clear_tls_errors();
  return real(s, buf, num);
}
int SSL_connect(ssl_st* s) {
  static auto real = next_symbol<int (*)(ssl_st*)>("SSL_connect");
  clear_tls_errors();
  return real(s);
}
int SSL_accept(ssl_st* s) {
  static auto real = next_symbol<int (*)(ssl_st*)>("SSL_accept");
  clear_tls_errors();
  return real(s);
}
}

namespace triad {

namespace {

// How long the node's KV store may take to read kept blocks another node asked for.
constexpr std::chrono::seconds kept_read_timeout{10};

using rejoin_atom = caf::atom_constant<caf::atom("clrejoin")>;
using heartbeat_atom = caf::atom_constant<caf::atom("clbeat")>;

// The addresses `peer` ("host:port") names now: each of a name's A/AAAA records ("ip:port"
// strings, bracketless; CAF connects to the host part).
std::vector<std::pair<std::string, std::uint16_t>> resolve(const std::string& peer) {
  std::vector<std::pair<std::string, std::uint16_t>> out;
  auto split = split_host_port(peer); // checked when the config was read
  if (!split)
    return out;
  const auto& [host, port] = *split;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
    return out;
  std::set<std::string> seen;
  for (auto* p = res; p != nullptr; p = p->ai_next) {
    char buf[NI_MAXHOST];
    if (::getnameinfo(p->ai_addr, p->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) ==
            0 &&
        seen.insert(buf).second)
      out.emplace_back(buf, port);
  }
  ::freeaddrinfo(res);
  return out;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "node";
  return buf;
}

// -- a front node's peer: one device node's address --

// Why peers could not be joined, by address: written by the peers' actors, read by
// control_plane::peer_trouble.
struct peer_troubles {
  std::mutex mtx;
  std::map<std::string, std::string> why;
};

struct peer_shared {
  cluster_config config;
  cluster_events events;
  std::shared_ptr<peer_troubles> troubles;
  caf::io::middleman_actor mm; // the middleman (or TLS manager) that connects
  std::atomic<std::size_t>* up = nullptr;
  gauge* up_gauge = nullptr;
  counter* lost_counter = nullptr;
  counter* drained_counter = nullptr;
  // The front's exchange, where its remote devices hold KV for their nodes to fetch, and its
  // fetcher, which brings what they hold for it (both null: kv_wire = "off").
  std::shared_ptr<detail::kv_exchange> exchange;
  caf::actor fetcher;
};

struct peer_state {
  std::shared_ptr<peer_shared> shared;
  std::string host;
  std::uint16_t port = 0;
  bool connecting = false;
  caf::actor gateway; // while up
  std::string node;   // its node's name, once it said hello
  std::uint64_t tag = 0;
  bool draining = false; // it said it drains: when its connection closes, it left
  std::vector<std::pair<std::string, detail::remote_device_actor>> devices; // by full name
  std::vector<device_role> roles;
  std::vector<std::uint64_t> stores; // each device's KV store as its node's last hello said
  std::chrono::steady_clock::time_point last_answer;
  caf::actor joiner; // told when the node joins or is lost (peer_up_atom)
  // Each time the node joins: ticks and answers of an earlier time (before a loss) are ignored.
  std::uint64_t generation = 0;
  static inline const char* name = "triad.peer";
};

using peer_self = caf::stateful_actor<peer_state, homed_actor>;
using probe_atom = caf::atom_constant<caf::atom("clprobe")>;
// To the joiner: a peer's node joined (true) or was lost: `(peer_up_atom, std::string address,
// bool up)`.
using peer_up_atom = caf::atom_constant<caf::atom("clpeerup")>;
// To a peer: its address is no longer looked up, so it stops trying: `(retire_atom)`.
using retire_atom = caf::atom_constant<caf::atom("clretire")>;

// Whether a TCP connection to host:port opens within `timeout` (a non-blocking connect):
// CAF 0.17's middleman connects with a blocking connect on its one thread, so an address that
// drops packets would hold every other peer's connection for minutes.
bool reachable(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    return false;
  bool ok = false;
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      ok = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
           ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return ok;
}

std::string where(const peer_state& st) {
  return st.host + ":" + std::to_string(st.port);
}

// Notes why the peer could not be joined, for peer_trouble(), and tells events.trouble when
// the reason is new for it.
void trouble(peer_self* self, const std::string& why) {
  auto& st = self->state;
  {
    std::lock_guard lock{st.shared->troubles->mtx};
    auto& was = st.shared->troubles->why[where(st)];
    if (was == why)
      return;
    was = why;
  }
  if (st.shared->events.trouble)
    st.shared->events.trouble(where(st), why);
}

// The peer joined (or is no longer a peer): nothing keeps it from being joined.
void no_trouble(peer_self* self) {
  std::lock_guard lock{self->state.shared->troubles->mtx};
  self->state.shared->troubles->why.erase(where(self->state));
}

// Why the middleman could not connect to a peer, in words: a handshake BASP refused names the
// cluster protocol, as two triad builds that cannot talk to each other.
std::string connect_failure(caf::actor_system& sys, const caf::error& e) {
  if (e == caf::sec::incompatible_application_ids)
    return "the handshake failed: it does not speak this node's cluster protocol (" +
           detail::cluster_app_identifier() +
           "): every node of a cluster runs the same triad build";
  if (e == caf::sec::incompatible_versions)
    return "the handshake failed: it runs another BASP version (another CAF): every node of a "
           "cluster runs the same triad build";
  return "could not connect: " + sys.render(e);
}

void lose(peer_self* self, const std::string& why) {
  auto& st = self->state;
  if (!st.gateway)
    return;
  self->demonitor(st.gateway);
  st.gateway = nullptr;
  ++st.generation;
  for (std::size_t i = 0; i < st.devices.size(); ++i) {
    self->send(st.devices[i].second, detail::peer_lost_atom::value, why);
    if (st.shared->events.lost)
      st.shared->events.lost(st.devices[i].first, why);
  }
  --*st.shared->up;
  self->send(st.joiner, peer_up_atom::value, where(st), false);
  if (st.shared->up_gauge != nullptr)
    st.shared->up_gauge->set(static_cast<double>(st.shared->up->load()));
  if (auto* c =
          std::exchange(st.draining, false) ? st.shared->drained_counter : st.shared->lost_counter)
    c->inc();
  self->delayed_send(self, std::chrono::milliseconds{st.shared->config.rejoin_ms},
                     rejoin_atom::value);
}

// Whether `host` is a loopback address (or the name localhost).
bool loopback(std::string_view host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1";
}

void joined(peer_self* self, caf::actor gateway, detail::node_hello& hello) {
  auto& st = self->state;
  // Another node at this address, or the same with other devices (a new config): the old
  // devices are gone for good, the new ones join afresh.
  bool same = st.node == hello.node && st.devices.size() == hello.devices.size();
  for (std::size_t i = 0; same && i < st.devices.size(); ++i)
    same = st.devices[i].first == hello.devices[i].name + "@" + hello.node &&
           st.roles[i] == static_cast<device_role>(hello.devices[i].role);
  if (!same && !st.devices.empty()) {
    for (auto& [name, d] : st.devices) {
      if (st.shared->events.lost)
        st.shared->events.lost(name, "its node " + st.node + " came back without it");
      self->send_exit(d, caf::exit_reason::user_shutdown);
    }
    st.devices.clear();
    st.roles.clear();
  }
  st.node = hello.node;
  st.gateway = gateway;
  st.tag = hello.tag;
  self->monitor(gateway);
  const bool fresh = st.devices.empty();
  // The KV wire joins this front and the node only when both run the same transport; the
  // node's devices fetch what this front holds from a loopback address only on this machine.
  std::shared_ptr<detail::kv_exchange> hold_in;
  caf::actor fetcher;
  if (const auto& ex = st.shared->exchange;
      ex && hello.kv_wire == cluster::to_string(ex->transport())) {
    fetcher = st.shared->fetcher;
    if (!(loopback(ex->host()) && !loopback(st.host)))
      hold_in = ex;
  }
  for (std::uint32_t i = 0; i < hello.devices.size(); ++i) {
    const auto& d = hello.devices[i];
    auto name = d.name + "@" + hello.node;
    auto role = static_cast<device_role>(d.role);
    if (fresh) {
      st.devices.emplace_back(name, detail::spawn_remote_device(self->system(), name, i, gateway,
                                                                hello.tag, hold_in, fetcher));
      st.roles.push_back(role);
    } else if (i < st.devices.size()) {
      self->send(st.devices[i].second, detail::peer_back_atom::value, gateway, hello.tag);
    }
  }
  // A node back under the same devices may have a new store (restarted): its hello says which.
  st.stores.assign(st.devices.size(), 0);
  for (std::size_t i = 0; i < st.devices.size() && i < hello.devices.size(); ++i)
    st.stores[i] = hello.devices[i].kv_store;
  for (std::size_t i = 0; i < st.devices.size(); ++i)
    if (st.shared->events.joined)
      st.shared->events.joined(remote_device{st.devices[i].first, st.roles[i],
                                             caf::actor_cast<device_actor>(st.devices[i].second),
                                             st.stores[i], hello.kv_address, hello.kv_wire});
  ++*st.shared->up;
  self->send(st.joiner, peer_up_atom::value, where(st), true);
  if (st.shared->up_gauge != nullptr)
    st.shared->up_gauge->set(static_cast<double>(st.shared->up->load()));
  st.last_answer = std::chrono::steady_clock::now();
  ++st.generation;
  self->send(self, heartbeat_atom::value, st.generation);
}

// How long joining a peer may take at each step (the probe, the middleman's connect, hello):
// the heartbeat deadline, at least a second.
std::chrono::milliseconds join_bound(const cluster_config& cfg) {
  return std::chrono::milliseconds{std::max(cfg.heartbeat_deadline_ms, 1000u)};
}

void connect(peer_self* self) {
  auto& st = self->state;
  if (st.gateway || st.connecting)
    return;
  st.connecting = true;
  const auto& cfg = st.shared->config;
  auto timeout = join_bound(cfg);
  // Probed first on a thread of its own (see reachable), then connected by the middleman.
  auto host = st.host;
  auto port = st.port;
  auto me = caf::actor_cast<caf::actor>(self);
  self->spawn<caf::detached>([host, port, timeout, me](caf::event_based_actor* probe) {
    caf::anon_send(me, probe_atom::value, reachable(host, port, timeout));
    probe->quit();
  });
}

void connect_probed(peer_self* self) {
  auto& st = self->state;
  const auto& cfg = st.shared->config;
  auto timeout = join_bound(cfg);
  auto retry = [self](const std::string& why) {
    trouble(self, why);
    self->state.connecting = false;
    self->delayed_send(self, std::chrono::milliseconds{self->state.shared->config.rejoin_ms},
                       rejoin_atom::value);
  };
  self->request(st.shared->mm, timeout, caf::connect_atom::value, st.host, st.port)
      .then(
          [self, timeout, retry](caf::node_id&, caf::strong_actor_ptr& ptr,
                                 std::set<std::string>&) {
            auto gateway = caf::actor_cast<caf::actor>(ptr);
            if (!gateway) {
              retry("it published no gateway on that port");
              return;
            }
            const auto& ex = self->state.shared->exchange;
            self->request(gateway, timeout, detail::cluster_hello_atom::value,
                          self->state.shared->events.takes_held,
                          ex ? std::string{cluster::to_string(ex->transport())} : std::string{})
                .then(
                    [self, gateway](detail::node_hello& hello) {
                      self->state.connecting = false;
                      no_trouble(self);
                      joined(self, gateway, hello);
                    },
                    [self, retry](caf::error& e) {
                      retry("it did not answer hello: " + self->system().render(e));
                    });
          },
          [self, retry](caf::error& e) { retry(connect_failure(self->system(), e)); });
}

caf::behavior peer(peer_self* self, std::shared_ptr<peer_shared> shared, std::string host,
                   std::uint16_t port, caf::actor joiner) {
  self->state.shared = std::move(shared);
  self->state.host = std::move(host);
  self->state.port = port;
  self->state.joiner = std::move(joiner);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (auto& [name, d] : self->state.devices)
      self->send_exit(d, msg.reason);
    self->quit(msg.reason);
  });
  self->set_down_handler([self](caf::down_msg& msg) {
    if (self->state.gateway && msg.source == self->state.gateway.address())
      lose(self, "the connection to " + where(self->state) + " closed (" +
                     self->system().render(msg.reason) + ")");
  });
  connect(self);
  return {
      [self](rejoin_atom) { connect(self); },
      [self](retire_atom) {
        // Its remote devices stay (the router holds them, lost): a request parked on one still
        // gets its failure at its resume.
        lose(self, where(self->state) + " is no longer among its peer's addresses");
        no_trouble(self);
        self->quit();
      },
      [self](probe_atom, bool ok) {
        if (ok) {
          connect_probed(self);
          return;
        }
        const auto& cfg = self->state.shared->config;
        trouble(self, "nothing accepted a TCP connection there (refused, or no answer within " +
                          std::to_string(join_bound(cfg).count()) + " ms)");
        self->state.connecting = false;
        self->delayed_send(self, std::chrono::milliseconds{cfg.rejoin_ms}, rejoin_atom::value);
      },
      [self](detail::cluster_draining_atom) {
        // The node drains: nothing new goes there, what is parked there moves off, what runs
        // there finishes; then it closes (counted as drained, not lost).
        auto& st = self->state;
        if (!st.gateway || std::exchange(st.draining, true))
          return;
        for (auto& [name, d] : st.devices) {
          self->send(d, detail::peer_draining_atom::value);
          if (st.shared->events.lost)
            st.shared->events.lost(name, "its node " + st.node + " is draining");
        }
      },
      [self](heartbeat_atom, std::uint64_t generation) {
        auto& st = self->state;
        if (!st.gateway || generation != st.generation)
          return; // a tick of an earlier time
        const auto& cfg = st.shared->config;
        const auto deadline = std::chrono::milliseconds{cfg.heartbeat_deadline_ms};
        if (std::chrono::steady_clock::now() - st.last_answer > deadline) {
          lose(self, "no heartbeat from " + where(st) + " in " +
                         std::to_string(cfg.heartbeat_deadline_ms) + " ms");
          return;
        }
        self->request(st.gateway, deadline, detail::cluster_ping_atom::value)
            .then(
                [self, generation](bool) {
                  if (generation == self->state.generation)
                    self->state.last_answer = std::chrono::steady_clock::now();
                },
                [](caf::error&) {}); // the deadline check above decides
        self->delayed_send(self, std::chrono::milliseconds{cfg.heartbeat_ms}, heartbeat_atom::value,
                           generation);
      },
  };
}

// -- a front node's joiner: looks the peers up, one peer actor per address --

struct joiner_state {
  std::shared_ptr<peer_shared> shared;
  std::map<std::string, caf::actor> peers;         // by "ip:port"
  std::map<std::string, detail::known_peer> known; // the same addresses: from where, up
  static inline const char* name = "triad.joiner";
};

caf::behavior joiner(caf::stateful_actor<joiner_state>* self, std::shared_ptr<peer_shared> shared) {
  self->state.shared = std::move(shared);
  self->send(self, rejoin_atom::value);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (auto& [name, p] : self->state.peers)
      self->send_exit(p, msg.reason);
    self->state.peers.clear();
    self->quit(msg.reason);
  });
  return {
      [self](rejoin_atom) {
        auto& st = self->state;
        std::vector<detail::peer_lookup> lookups;
        std::map<std::string, std::pair<std::string, std::uint16_t>> at; // address -> host, port
        for (const auto& peer_name : st.shared->config.peers) {
          auto& l = lookups.emplace_back(detail::peer_lookup{peer_name, {}});
          for (auto& [host, port] : resolve(peer_name)) {
            auto address = host + ":" + std::to_string(port);
            l.addresses.push_back(address);
            at.emplace(std::move(address), std::pair{host, port});
          }
        }
        auto plan = detail::plan_peers(st.known, lookups);
        for (auto& [address, from] : plan.spawn) {
          const auto& [host, port] = at.at(address);
          st.known[address] = {from, false};
          st.peers.emplace(
              address, self->spawn(peer, st.shared, host, port, caf::actor_cast<caf::actor>(self)));
        }
        for (const auto& address : plan.retire) {
          self->send(st.peers[address], retire_atom::value);
          st.peers.erase(address);
          st.known.erase(address);
        }
        self->delayed_send(self, std::chrono::milliseconds{st.shared->config.rejoin_ms},
                           rejoin_atom::value);
      },
      [self](peer_up_atom, const std::string& address, bool up) {
        if (auto it = self->state.known.find(address); it != self->state.known.end())
          it->second.up = up;
      },
  };
}

class cluster_system_config : public caf::actor_system_config {
public:
  explicit cluster_system_config(const cluster_config& c) {
    load<caf::io::middleman>();
    if (c.tls) {
      load<caf::openssl::manager>();
      openssl_certificate = c.certificate;
      openssl_key = c.key;
      openssl_cafile = c.cafile;
    }
    detail::speak_cluster_protocol(*this);
    set("scheduler.max-threads", defaults::cluster::network_threads);
    set("logger.verbosity", caf::atom("quiet"));
  }
};

} // namespace

struct control_plane::impl {
  cluster_config config;
  std::string name;
  std::unique_ptr<cluster_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor gateway;
  caf::actor joiner;
  std::atomic<std::size_t> up{0};
  std::shared_ptr<peer_troubles> troubles = std::make_shared<peer_troubles>();
  metrics_registry* metrics = nullptr;
  // Every cluster node's; none with kv_wire = "off".
  std::shared_ptr<detail::kv_exchange> exchange;
  // Fetches what other nodes hold for this one (its devices' imports, its remote devices'
  // exported KV, kept blocks): a pool of kv_fetchers fetches at once, each on a thread of
  // its own; null without an exchange.
  caf::actor fetcher;

  // Starts the node's KV exchange and its fetcher (at start; nothing with kv_wire = "off").
  expected<void> start_exchange();
};

namespace {

// The address others reach this node's KV wire at: `listen`, or for a wildcard the first IPv4
// address of an interface that is up and not loopback.
std::string advertised(const std::string& listen) {
  if (listen != "0.0.0.0" && listen != "::")
    return listen;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return listen;
  std::string out = listen;
  for (auto* a = list; a != nullptr; a = a->ifa_next)
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET &&
        (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_LOOPBACK) == 0) {
      char host[INET_ADDRSTRLEN] = "";
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, host,
                  sizeof host);
      out = host;
      break;
    }
  ::freeifaddrs(list);
  return out;
}

} // namespace

expected<void> control_plane::impl::start_exchange() {
  if (config.kv_wire == kv_wire_mode::off)
    return {};
  auto ex = detail::kv_exchange::start(
      config.kv_wire == kv_wire_mode::tcp ? cluster::wire_transport::tcp
                                          : cluster::wire_transport::shared_memory,
      config.listen == "::" ? "0.0.0.0" : config.listen, advertised(config.listen),
      std::chrono::milliseconds{config.kv_hold_ms}, std::uint64_t{config.kv_hold_mib} << 20,
      std::uint64_t{config.kv_wire_min_kib} << 10, metrics);
  if (!ex)
    return make_error(ex.error().code, "[cluster] kv_wire: " + ex.error().message);
  exchange = std::move(*ex);
  // Fetches run on threads of their own (each blocks its thread for the transfer), a few at
  // once: a pool hands them out in turn.
  fetcher = caf::actor_pool::make(
      sys->dummy_execution_unit(), defaults::cluster::kv_fetchers,
      [s = sys.get(), ex = exchange] { return s->spawn<caf::detached>(detail::kv_fetcher, ex); },
      caf::actor_pool::round_robin());
  detail::restore_thread_logger();
  return {};
}

expected<std::unique_ptr<control_plane>> control_plane::start(const cluster_config& config,
                                                              metrics_registry* metrics) {
  if (config.tls)
    for (const auto* file : {&config.certificate, &config.key, &config.cafile})
      if (::access(file->c_str(), R_OK) != 0)
        return make_error(errc::not_found, "[cluster] tls: cannot read '" + *file + "'");
  std::unique_ptr<control_plane> cp{new control_plane};
  cp->impl_ = std::make_unique<impl>();
  auto& m = *cp->impl_;
  m.config = config;
  m.name = config.name.empty() ? host_name() + ":" + std::to_string(config.port) : config.name;
  m.metrics = metrics;
  try {
    m.cfg = std::make_unique<cluster_system_config>(config);
    m.sys = std::make_unique<caf::actor_system>(*m.cfg);
    detail::restore_thread_logger();
  } catch (const std::exception& e) {
    return make_error(errc::system_error, std::string{"[cluster]: "} + e.what());
  }
  if (auto ok = m.start_exchange(); !ok)
    return ok.error();
  return cp;
}

control_plane::~control_plane() {
  if (!impl_ || !impl_->sys)
    return;
  auto& m = *impl_;
  if (m.exchange)
    m.exchange->stop_serving_kept(); // its reads use this system
  if (m.joiner)
    caf::anon_send_exit(m.joiner, caf::exit_reason::user_shutdown);
  if (m.gateway)
    caf::anon_send_exit(m.gateway, caf::exit_reason::user_shutdown);
  if (m.fetcher) // after the fetch under way, if any
    caf::anon_send_exit(m.fetcher, caf::exit_reason::user_shutdown);
  m.joiner = nullptr;
  m.gateway = nullptr;
  m.fetcher = nullptr;
  m.sys.reset(); // waits for its actors, closes the middleman's connections
}

const std::string& control_plane::node_name() const noexcept {
  return impl_->name;
}

bool control_plane::drain(std::chrono::milliseconds deadline) {
  if (!impl_ || !impl_->gateway)
    return true;
  caf::scoped_actor self{*impl_->sys};
  bool drained = false;
  self->request(impl_->gateway, deadline, detail::cluster_drain_atom::value)
      .receive([&](bool ok) { drained = ok; }, [](caf::error&) {}); // not in time
  return drained;
}

void control_plane::close_gateway() {
  if (impl_ && impl_->gateway) {
    caf::anon_send_exit(impl_->gateway, caf::exit_reason::user_shutdown);
    impl_->gateway = nullptr;
  }
}

caf::actor control_plane::kv_fetcher() const {
  return impl_->fetcher;
}

std::string control_plane::kv_wire_address() const {
  return impl_->exchange ? impl_->exchange->address() : std::string{};
}

void control_plane::stop_serving_kept() {
  if (impl_ && impl_->exchange)
    impl_->exchange->stop_serving_kept();
}

void control_plane::serve_kept(std::shared_ptr<kv_tier> tier) {
  auto& m = *impl_;
  if (!m.exchange || !tier)
    return;
  // On a server thread of the exchange's: asks the store (its actors in the node's system) and
  // waits for its answer in a scoped actor of this system, bounded. The control plane stops serving
  // them before its system goes (~control_plane), the node before its store goes (node::stop).
  m.exchange->serve_kept([tier, sys = m.sys.get()](
                             std::uint64_t store, const std::vector<std::uint64_t>& ids,
                             const std::vector<token>& tokens) -> expected<std::vector<kv_page>> {
    const bool prefix = store == detail::kv_exchange::prefix_store; // ids: page numbers
    if (!prefix && store != tier->store_id()) // another store's ids (this node restarted): none
      return std::vector<kv_page>{};
    std::optional<std::vector<kv_page>> pages;
    {
      caf::scoped_actor self{*sys};
      if (prefix)
        tier->fetch(tokens, ids.front(), ids.size(), 0, caf::actor{self}, 0);
      else
        tier->fetch_kept(ids, tokens, 0, caf::actor{self}, 0);
      self->receive(
          [&](kv_fetched_atom, seq_id, std::vector<kv_page>& got) { pages = std::move(got); },
          caf::after(kept_read_timeout) >> [] {});
    }
    // A scoped actor points the thread's logger at its system for good, and a system waits for
    // every such reference when it goes: the exchange's thread lets go of it here.
    detail::restore_thread_logger();
    if (!pages)
      return make_error(errc::timed_out, "the KV store did not read kept blocks " +
                                             std::to_string(ids.front()) + ".. in time");
    return std::move(*pages);
  });
}

std::string control_plane::kv_wire_sharing() const {
  return impl_->exchange ? impl_->exchange->sharing() : std::string{};
}

std::size_t control_plane::peers_up() const {
  return impl_->up.load();
}

std::map<std::string, std::string> control_plane::peer_trouble() const {
  std::lock_guard lock{impl_->troubles->mtx};
  return impl_->troubles->why;
}

expected<std::uint16_t>
control_plane::publish(std::vector<published_device> devices,
                       std::shared_ptr<grammar::grammar_cache> grammars,
                       std::shared_ptr<const grammar::token_index> vocabulary) {
  auto& m = *impl_;
  detail::gateway_options o;
  o.node = m.name;
  o.grammars = std::move(grammars);
  o.vocabulary = std::move(vocabulary);
  const auto count = devices.size();
  for (auto& d : devices)
    o.devices.push_back({std::move(d.name), d.role, std::move(d.actor), d.kv_store});
  o.exchange = m.exchange;
  m.gateway = detail::spawn_gateway(*m.sys, std::move(o));
  detail::restore_thread_logger();
  auto port = m.config.tls
                  ? caf::openssl::publish(m.gateway, m.config.port, m.config.listen.c_str(), true)
                  : caf::io::publish(m.gateway, m.config.port, m.config.listen.c_str(), true);
  if (!port)
    return make_error(errc::system_error, "[cluster] cannot listen on " + m.config.listen + ":" +
                                              std::to_string(m.config.port) + ": " +
                                              m.sys->render(port.error()));
  if (m.metrics != nullptr)
    if (auto g = m.metrics->add_gauge("triad_cluster_published_devices",
                                      "Devices this node publishes to front nodes");
        g)
      (*g)->set(static_cast<double>(count));
  return *port;
}

expected<void> control_plane::join(cluster_events events) {
  auto& m = *impl_;
  // The front's exchange holds what it sends its peers (its own devices' hand-offs, KV it keeps
  // for a resume); its fetcher brings what they hold for it (a drain's moved-off KV).
  auto shared = std::make_shared<peer_shared>();
  shared->exchange = m.exchange;
  shared->fetcher = m.fetcher;
  shared->config = m.config;
  shared->events = std::move(events);
  shared->troubles = m.troubles;
  shared->mm =
      m.config.tls ? m.sys->openssl_manager().actor_handle() : m.sys->middleman().actor_handle();
  shared->up = &m.up;
  if (m.metrics != nullptr) {
    if (auto g = m.metrics->add_gauge("triad_cluster_peers_up",
                                      "Device nodes whose devices this front node routes to now");
        g)
      shared->up_gauge = *g;
    if (auto c = m.metrics->add_counter("triad_cluster_peers_lost_total",
                                        "Times a device node was lost (connection closed or no "
                                        "heartbeat within the deadline)");
        c)
      shared->lost_counter = *c;
    if (auto c = m.metrics->add_counter("triad_cluster_peers_drained_total",
                                        "Times a device node drained (its sequences finished "
                                        "or moved off) and left");
        c)
      shared->drained_counter = *c;
  }
  // Its own thread: looking names up blocks.
  m.joiner = m.sys->spawn<caf::detached>(joiner, std::move(shared));
  detail::restore_thread_logger();
  return {};
}

} // namespace triad
