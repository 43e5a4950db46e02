#pragma once

#include <string>
#include <vector>

namespace triad {

/// User and system CPU seconds.
struct cpu_times {
  double user = 0; ///< user mode
  double sys = 0;  ///< kernel mode
  /// Both together.
  double total() const { return user + sys; }
  /// The difference, e.g. after - before.
  cpu_times operator-(const cpu_times& o) const { return {user - o.user, sys - o.sys}; }
  /// Adds `o`.
  cpu_times& operator+=(const cpu_times& o) {
    user += o.user, sys += o.sys;
    return *this;
  }
};

/// The CPU time of the whole process so far (getrusage, microsecond resolution).
cpu_times process_cpu();

/// The calling thread's CPU time so far, in seconds (CLOCK_THREAD_CPUTIME_ID: nanosecond
/// resolution, but a system call, about 0.5 us on a VM; read it per job, not per step).
double this_thread_cpu_seconds();

/// One thread of this process: its name (as set with pthread_setname_np, at most 15 bytes) and
/// CPU time so far.
struct thread_cpu_time {
  std::string name; ///< the thread's name
  cpu_times cpu;    ///< user and system seconds (clock-tick resolution: 10 ms)
};

/// Every thread of this process, from /proc/self/task/*/stat. Benchmarks use it to split the
/// process's CPU time by the threads' roles (named by their owners: "drv.*", "tool.*", ...).
std::vector<thread_cpu_time> process_threads_cpu();

/// Names the calling thread (truncated to 15 bytes), so process_threads_cpu can tell it apart.
void name_this_thread(const std::string& name);

/// The CPU a kind of thread of one domain has used: what `/metrics` reports per domain (the
/// orchestration and tool domains' utilisation).
struct role_cpu_time {
  int domain = -1;  ///< the NUMA domain id (-1: none)
  std::string role; ///< "worker" (CAF), "clock", "driver" (a device's), "tool"
  cpu_times cpu;    ///< user and system seconds, threads that ended included
};

/// Counts the calling thread's CPU under `role` of `domain` from now on, until it ends or
/// calls end_thread_role (which it must before it ends, so its last CPU is kept).
void begin_thread_role(int domain, std::string role);

/// Stops counting the calling thread, keeping the CPU it used in its role's total.
void end_thread_role();

/// The CPU of every role of every domain so far (threads registered by begin_thread_role),
/// sorted by domain, then role. Reads /proc/self/task/<tid>/stat of each live thread.
std::vector<role_cpu_time> roles_cpu();

} // namespace triad
