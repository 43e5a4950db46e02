#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace triad::test {

/// The directory of the shared hwloc XML topologies (ctest sets TRIAD_TOPOLOGIES_DIR).
inline std::filesystem::path topologies_dir() {
  const char* dir = std::getenv("TRIAD_TOPOLOGIES_DIR");
  return dir != nullptr ? std::filesystem::path{dir}
                        : std::filesystem::path{"../shared/topologies"};
}

/// The path of one shared topology file.
inline std::string topology_file(const std::string& name) {
  return (topologies_dir() / name).string();
}

} // namespace triad::test
