#include "kvstore/config.hpp"

namespace triad {

const options::section<kvstore_config>& kvstore_section() {
  using c = kvstore_config;
  static const options::section<c> section{
      "kvstore",
      false,
      {
          options::integer(
              "host_mib", &c::host_mib, {0, 1'048'576},
              "host memory for KV blocks the devices evict, in MiB, split between the host pools "
              "of the domains holding devices and the orchestration domain; 0 = no "
              "store"),
          options::text<c>("disk_dir", &c::disk_dir, "a directory path, or \"\" for none",
                           "directory of the disk tier (checksummed block files); \"\" = none"),
          options::integer("disk_mib", &c::disk_mib, {1, 16'777'216},
                           "bound of the disk tier, in MiB"),
      },
      {}};
  return section;
}

} // namespace triad
