#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "runtime/error.hpp"

namespace triad::detail {

/// Limits of one call's cgroup.
struct cgroup_limits {
  std::uint64_t memory_bytes = 0; ///< memory.max (v2) / memory.limit_in_bytes (v1); swap off
  unsigned pids = 0;              ///< pids.max
  double cpus = 0; ///< CPUs (v2 cpu.max, v1 cpu.cfs_quota_us) where a cpu controller is; 0: none
};

/// A cgroup made for one sandboxed call, removed (its processes killed first) when it goes:
/// cgroup v2 where the node's own cgroup lets it make children with the memory and pids
/// controllers, else the v1 memory and pids hierarchies where they are writable (and the v1 cpu
/// one for the CPU cap, where it is). Where neither
/// is, create() says why and the sandbox runs on rlimits alone. Emptied v1 cgroups are kept for
/// later calls (at most 16, removed at exit).
class call_cgroup {
public:
  /// Makes the cgroup and sets its limits; an error naming why no cgroup can be made here.
  static expected<call_cgroup> create(const cgroup_limits& limits);
  /// Whether create() succeeded the last time it was called (true before the first call).
  static bool supported() noexcept;

  call_cgroup(call_cgroup&& other) noexcept;
  call_cgroup& operator=(call_cgroup&&) = delete;
  call_cgroup(const call_cgroup&) = delete;
  /// Kills what is left in it and removes it.
  ~call_cgroup();

  /// Moves process `pid` (and so all it later starts) into the cgroup.
  expected<void> attach(pid_t pid);
  /// The most memory the call held at once (0: unknown).
  std::uint64_t peak_bytes() const;
  /// Whether the kernel's OOM killer ended a process of the call (its memory limit).
  bool oom_killed() const;
  /// SIGKILL to every process in it.
  void kill_all();
  /// "cgroup_v2" or "cgroup_v1".
  std::string name() const;
  /// Whether it caps the CPU time of the call (v2 cpu.max, v1 cpu.cfs_quota_us).
  bool caps_cpu() const noexcept { return cpu_; }
  /// What it caps, e.g. "memory 1073741824 B, pids 64, cpu 1".
  std::string describe() const;

private:
  call_cgroup() = default;
  static expected<call_cgroup> make(const cgroup_limits& limits);
  int version_ = 0;
  std::vector<std::string> dirs_; ///< v2: one; v1: the memory, the pids, maybe the cpu one
  cgroup_limits limits_;
  bool cpu_ = false;
  std::uint64_t oom_base_ = 0; ///< v1: OOM kills counted before this call (pooled cgroups)
};

} // namespace triad::detail
