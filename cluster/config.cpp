#include "cluster/config.hpp"

#include <arpa/inet.h>

#include <charconv>

namespace triad {

namespace {

constexpr options::enum_name<node_role> node_role_names[] = {
    {"all", node_role::all},
    {"front", node_role::front},
    {"prefill", node_role::prefill},
    {"decode", node_role::decode},
};

bool is_ip_address(const std::string& value) {
  unsigned char addr[16];
  return ::inet_pton(AF_INET, value.c_str(), addr) == 1 ||
         ::inet_pton(AF_INET6, value.c_str(), addr) == 1;
}

// "host:port" (or "[v6]:port") with a port 1..65535; nullptr when fine.
const char* peer_problem(const std::string& value) {
  auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size())
    return "not host:port";
  if (!split_host_port(value))
    return "the port is not 1..65535";
  return nullptr;
}

} // namespace

std::optional<std::pair<std::string, std::uint16_t>> split_host_port(std::string_view value) {
  auto colon = value.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == value.size())
    return std::nullopt;
  unsigned port = 0;
  auto digits = value.substr(colon + 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc{} || end != digits.data() + digits.size() || port == 0 || port > 65535)
    return std::nullopt;
  auto host = value.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return std::pair{std::string{host}, static_cast<std::uint16_t>(port)};
}

constexpr options::enum_name<kv_wire_mode> kv_wire_names[] = {
    {"off", kv_wire_mode::off},
    {"tcp", kv_wire_mode::tcp},
    {"shared_memory", kv_wire_mode::shared_memory},
};

std::string_view to_string(kv_wire_mode value) noexcept {
  return options::name_of(kv_wire_names, value);
}

std::string_view to_string(node_role value) noexcept {
  return options::name_of(node_role_names, value);
}

const options::section<cluster_config>& cluster_section() {
  using c = cluster_config;
  static const options::section<c> section{
      "cluster",
      false,
      {
          options::choice("role", &c::role, node_role_names,
                          "what this node does: all of it, front, prefill or decode devices"),
          options::text<c>("listen", &c::listen, "an IPv4 or IPv6 address",
                           "the address a device node takes front nodes' connections on", true,
                           [](const std::string& v) -> const char* {
                             return is_ip_address(v) ? nullptr : "not an IP address";
                           }),
          options::integer("port", &c::port, {0, 65535},
                           "the control plane's TCP port; 0 = any free port"),
          options::strings<c>("peers", &c::peers, "an array of \"host:port\" strings",
                              "device nodes a front node joins", peer_problem),
          options::text<c>("name", &c::name, "a name, or \"\" for the host name",
                           "this node's name in its peers' device names"),
          options::boolean<c>("tls", &c::tls,
                              "whether control connections run TLS (needs certificate, key, "
                              "cafile)"),
          options::text<c>("certificate", &c::certificate, "a PEM file path",
                           "this node's certificate"),
          options::text<c>("key", &c::key, "a PEM file path", "this node's private key"),
          options::text<c>("cafile", &c::cafile, "a PEM file path",
                           "the CA certificates peers' certificates must chain to"),
          options::integer("heartbeat_ms", &c::heartbeat_ms, {10, 600'000},
                           "how often a front node pings each peer"),
          options::integer("heartbeat_deadline_ms", &c::heartbeat_deadline_ms, {20, 3'600'000},
                           "a peer silent this long is lost"),
          options::integer("rejoin_ms", &c::rejoin_ms, {10, 3'600'000},
                           "how often lost or unreached peers are tried again"),
          options::choice("kv_wire", &c::kv_wire, kv_wire_names,
                          "how moved-out KV reaches another node: off (through the front), "
                          "tcp or shared_memory (UCX, node to node)"),
          options::integer("kv_hold_ms", &c::kv_hold_ms, {100, 3'600'000},
                           "how long a device node holds moved-out KV for its fetcher"),
          options::integer("kv_hold_mib", &c::kv_hold_mib, {1, 1'048'576},
                           "the most KV (MiB) a device node holds for others"),
          options::integer("kv_wire_min_kib", &c::kv_wire_min_kib, {0, 1'048'576},
                           "KV smaller than this (KiB) goes in the control message, not on the "
                           "KV wire (0: all on the wire)"),
      },
      [](options::table& t, c& out) {
        if (out.tls && (out.certificate.empty() || out.key.empty() || out.cafile.empty()))
          t.fail("tls", "true without certificate, key and cafile",
                 "certificate, key and cafile (PEM files) with tls = true");
        if (out.heartbeat_deadline_ms <= out.heartbeat_ms) {
          if (t.has("heartbeat_deadline_ms"))
            t.fail("heartbeat_deadline_ms", "not more than heartbeat_ms",
                   "more than heartbeat_ms (" + std::to_string(out.heartbeat_ms) + ")");
          else
            t.fail("heartbeat_ms", "not less than heartbeat_deadline_ms",
                   "less than heartbeat_deadline_ms (" + std::to_string(out.heartbeat_deadline_ms) +
                       ")");
        }
      }};
  return section;
}

} // namespace triad
