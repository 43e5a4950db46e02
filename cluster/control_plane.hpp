#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/config.hpp"
#include "devices/device.hpp"
#include "devices/kv_tier.hpp"
#include "grammar/cache.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/error.hpp"
#include "runtime/metrics.hpp"

namespace triad {

/// A device of another node, as a front node's router sees it.
struct remote_device {
  std::string name;                     ///< "<its config name>@<its node>"
  device_role role = device_role::both; ///< what it does
  device_actor actor; ///< a device actor here that speaks to it (cluster/detail/remote_device)
  std::uint64_t kv_store = 0; ///< the store its node keeps demoted blocks in (0: none)
  /// Where its node's KV exchange serves that store's pages to other nodes ("" none).
  std::string kv_wire = {};
  /// The transport of its KV wire ("tcp", "shared_memory"; "" none).
  std::string kv_transport = {};
};

/// What the control plane tells the node about its peers' devices.
struct cluster_events {
  /// A device joined, or is back after its node was lost (the same name, a usable actor).
  std::function<void(const remote_device&)> joined;
  /// A device's node was lost (`why`): route nothing there until it joins again.
  std::function<void(const std::string& name, const std::string& why)> lost;
  /// A peer could not be joined (`peer`: its "host:port"; `why`: nothing accepts a connection
  /// there, the handshake failed — another cluster protocol —, it published no gateway or did
  /// not answer hello): told once per peer and reason, again when the reason changes.
  std::function<void(const std::string& peer, const std::string& why)> trouble;
  /// This node has no devices of its own: a prefill node may keep a sequence's KV (kv_held)
  /// for the decode node to fetch over the KV wire, instead of sending it through here. (A
  /// front with devices gets references too when its KV wire runs the node's transport: its
  /// devices fetch through kv_fetcher().)
  bool takes_held = false;
};

/// A device this node publishes (a device node's own).
struct published_device {
  std::string name;                     ///< its config name
  device_role role = device_role::both; ///< what it does
  device_actor actor;                   ///< its device actor
  std::uint64_t kv_store = 0;           ///< the store it reads kept blocks from (0: none)
};

/// The cluster's control plane in one node: an actor system of its own running CAF's
/// middleman (BASP over TCP, TLS through libcaf_openssl when `[cluster] tls`), where a device
/// node's gateway is published and a front node's peers and remote devices live. Stopping it
/// (the destructor) closes every connection: the peers' fronts see this node lost.
class control_plane {
public:
  /// Starts the system and the node's KV exchange (its KV wire listening on `[cluster] listen`,
  /// unless kv_wire is "off"); no control connection yet. Errors name what is wrong: TLS files
  /// that cannot be read, a KV wire that cannot be opened.
  static expected<std::unique_ptr<control_plane>> start(const cluster_config& config,
                                                        metrics_registry* metrics = nullptr);
  control_plane(const control_plane&) = delete;
  control_plane& operator=(const control_plane&) = delete;
  /// Closes every connection and stops the system.
  ~control_plane();

  /// This node's name in its peers' device names (`[cluster] name`, or the host name).
  const std::string& node_name() const noexcept;

  /// A device node: publishes its devices on `[cluster] listen:port` for front nodes; the
  /// grammars of constrained sequences are rebuilt over `vocabulary` and kept in `grammars`.
  /// Returns the port bound.
  expected<std::uint16_t> publish(std::vector<published_device> devices,
                                  std::shared_ptr<grammar::grammar_cache> grammars,
                                  std::shared_ptr<const grammar::token_index> vocabulary);

  /// A front node: joins `[cluster] peers` now and keeps joining (every rejoin_ms: peers not
  /// reached, lost, or new behind a name), pings each every heartbeat_ms and reports a peer
  /// silent past heartbeat_deadline_ms (or whose connection drops) lost. With a KV exchange,
  /// the KV its devices hand to a peer's device, or it keeps for a resume there, crosses over
  /// the KV wire, the control message carrying the reference; KV a peer holds for it (a
  /// prefill's hand-off to its own device, a drain's moved-off KV) comes over the wire too.
  expected<void> join(cluster_events events);

  /// A device node that drains: tells its front nodes (they route nothing new here and move
  /// the sequences parked here for a tool call off), refuses new sequences, and waits up to
  /// `deadline` until its devices hold no sequence and its exchange no KV. True when they do
  /// (at once for a node that publishes nothing).
  bool drain(std::chrono::milliseconds deadline);

  /// A device node that stops: its gateway goes first, so front nodes see its devices lost at
  /// once (and route elsewhere) while the devices finish.
  void close_gateway();

  /// The node's KV exchange address ("host:port,port": its servers' KV wires), "" when it has none
  /// (`kv_wire = "off"`).
  std::string kv_wire_address() const;
  /// Over a shared-memory KV wire: whether its held KV lies in shared memory that fetchers
  /// copy out in place, or why not; "" otherwise.
  std::string kv_wire_sharing() const;
  /// Serves kept blocks of the node's KV store (`tier`: a demotion's, kv_kept) to other
  /// nodes' devices over the KV wire: a device node's gateway then names its exchange in each
  /// kv_kept it answers. Nothing without a KV exchange. Call before the devices start.
  void serve_kept(std::shared_ptr<kv_tier> tier);
  /// Serves them no more (once a read under way ended): before the node's store stops.
  void stop_serving_kept();
  /// What fetches KV other nodes hold for this one's devices (device_options::kv_fetcher): a
  /// pool of fetchers (defaults::cluster::kv_fetchers), each on a thread of its own, the fetches
  /// handed out in turn. Null without a KV exchange.
  caf::actor kv_fetcher() const;
  /// Peers whose devices are joined now.
  std::size_t peers_up() const;
  /// Why each peer not joined now could not be joined, by its "host:port" (cluster_events::
  /// trouble told the same); a peer that joins leaves it.
  std::map<std::string, std::string> peer_trouble() const;

private:
  control_plane() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace triad
