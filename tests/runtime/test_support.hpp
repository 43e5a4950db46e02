#pragma once

#include <cstdlib>
#include <vector>

#include <filesystem>
#include <sched.h>
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

/// The cpus the calling thread may run on (its affinity mask), ascending.
inline std::vector<int> this_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set))
      cpus.push_back(i);
  return cpus;
}

} // namespace triad::test
