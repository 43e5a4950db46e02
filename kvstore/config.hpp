#pragma once

#include <cstdint>
#include <string>

#include "kvstore/defaults.hpp"
#include "runtime/options.hpp"

/// The KV store's config section: `[kvstore]`.
namespace triad {

/// `[kvstore]`: the tiers below the devices' own memory. A node's devices hand the pages their
/// prefix caches evict to the store's host tier (and the host tier its least recently used
/// blocks to the disk tier, when there is one); prompts find their pages there.
struct kvstore_config {
  /// `host_mib`: host memory for KV blocks, in MiB, 0..1048576, split evenly between the host
  /// pools (one in each NUMA domain holding a device the store connects, and the orchestration
  /// domain's); 0 = no
  /// store (evicted pages are lost, as without a store).
  std::uint64_t host_mib = defaults::kvstore::host_mib;
  /// `disk_dir`: directory of the disk tier; "" = no disk tier. Block files are checksummed;
  /// those found at start are served again, damaged ones removed.
  std::string disk_dir;
  /// `disk_mib`: bound of the disk tier, in MiB, 1..16777216.
  std::uint64_t disk_mib = defaults::kvstore::disk_mib;
  bool operator==(const kvstore_config&) const = default;
};

/// The `[kvstore]` section's keys.
const options::section<kvstore_config>& kvstore_section();

} // namespace triad
