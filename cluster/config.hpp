#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/defaults.hpp"
#include "runtime/options.hpp"

/// The cluster's config section: `[cluster]`. Header and one source with nothing but
/// runtime/options under them, so the node composes it into its file.
namespace triad {

/// What a node does in a cluster.
enum class node_role : std::uint8_t {
  all,     ///< one process: HTTP, orchestration, tools and the `[[devices]]`
  front,   ///< HTTP, sessions, requests, the router and tools; its devices are the peers'
  prefill, ///< the `[[devices]]` of role prefill (and both), published to front nodes
  decode,  ///< the `[[devices]]` of role decode (and both), published to front nodes
};

/// "all", "front", "prefill" or "decode".
std::string_view to_string(node_role value) noexcept;

/// How a device node moves KV to another node (`[cluster] kv_wire`).
enum class kv_wire_mode : std::uint8_t {
  off,           ///< in the control messages, through the front node (CAF's BASP)
  tcp,           ///< node to node on UCX over TCP; the control message carries block ids
  shared_memory, ///< node to node on UCX's shared memory (nodes of one machine only)
};

/// "off", "tcp" or "shared_memory".
std::string_view to_string(kv_wire_mode value) noexcept;

/// `[cluster]`: the node's part in a cluster and how its nodes reach each other (CAF's BASP
/// over TCP, TLS through libcaf_openssl, for control; UCX for KV bytes).
struct cluster_config {
  node_role role = node_role::all; ///< `role` (triad-node --role overrides it)
  /// `listen`: the address a device node takes front nodes' connections on (an IP address).
  std::string listen{defaults::cluster::listen};
  std::uint16_t port = defaults::cluster::port; ///< `port`: 0..65535 (0: any free port)
  /// `peers`: device nodes a front node joins, "host:port"; a host name resolving to several
  /// addresses (a Kubernetes headless Service) joins each, looked up again every `rejoin_ms`.
  std::vector<std::string> peers;
  /// `name`: this node's name in its peers' device names ("decode0@name"); "" = the host name.
  std::string name;
  /// `tls`: the control connections run TLS (libcaf_openssl); needs certificate, key, cafile.
  bool tls = false;
  std::string certificate; ///< `certificate`: this node's certificate (PEM file)
  std::string key;         ///< `key`: its private key (PEM file)
  std::string cafile;      ///< `cafile`: the CA certificates peers' certificates must chain to
  /// `heartbeat_ms`: how often a front node asks each peer whether it is alive.
  std::uint32_t heartbeat_ms = defaults::cluster::heartbeat_ms;
  /// `heartbeat_deadline_ms`: a peer silent this long is lost: its devices leave routing and
  /// their requests resume elsewhere or fail.
  std::uint32_t heartbeat_deadline_ms = defaults::cluster::heartbeat_deadline_ms;
  /// `rejoin_ms`: how often a front node tries peers it lost or has not reached, and looks
  /// their names up again.
  std::uint32_t rejoin_ms = defaults::cluster::rejoin_ms;
  /// `kv_wire`: how a prefill node's moved-out KV reaches the decode node (for a front without
  /// devices of its own): held on the prefill node and fetched over UCX, or through the front.
  kv_wire_mode kv_wire = kv_wire_mode::tcp;
  /// `kv_hold_ms`: how long a device node holds moved-out KV for the node that fetches it.
  std::uint32_t kv_hold_ms = defaults::cluster::kv_hold_ms;
  /// `kv_hold_mib`: the most KV a device node holds for others; the oldest gives way.
  std::uint32_t kv_hold_mib = defaults::cluster::kv_hold_mib;
  /// `kv_wire_min_kib`: KV smaller than this goes in the control message (0: all on the wire).
  std::uint32_t kv_wire_min_kib = defaults::cluster::kv_wire_min_kib;
  bool operator==(const cluster_config&) const = default;
};

/// "host:port" (or "[v6]:port") split into the host (brackets removed) and a port 1..65535;
/// nullopt when it is not that. The one reader of `peers` entries and KV wire addresses.
std::optional<std::pair<std::string, std::uint16_t>> split_host_port(std::string_view value);

/// The `[cluster]` section's keys.
const options::section<cluster_config>& cluster_section();

} // namespace triad
