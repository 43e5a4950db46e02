#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// Defaults of the tools area.
namespace defaults::sandbox {
/// Wall-clock limit of one tool process.
inline constexpr std::chrono::milliseconds wall{10'000};
/// CPU seconds (RLIMIT_CPU; SIGXCPU at the soft limit).
inline constexpr unsigned cpu_seconds = 10;
/// Address space (RLIMIT_AS).
inline constexpr std::uint64_t address_space_bytes = 1ull << 30;
/// Largest file the process may write (RLIMIT_FSIZE).
inline constexpr std::uint64_t file_size_bytes = 16ull << 20;
/// Open files (RLIMIT_NOFILE).
inline constexpr unsigned open_files = 64;
/// Processes of the sandbox user (RLIMIT_NPROC).
inline constexpr unsigned processes = 32;
/// Bytes of stdout kept; the rest is read and dropped, and the result says so.
inline constexpr std::size_t stdout_cap = 1 << 20;
/// Bytes of stderr kept.
inline constexpr std::size_t stderr_cap = 256 << 10;
/// The unprivileged user tool processes run as when the node runs as root (nobody).
inline constexpr unsigned uid = 65534;
} // namespace defaults::sandbox

/// Limits of one sandboxed process; every field documented where declared.
struct sandbox_limits {
  std::chrono::milliseconds wall = defaults::sandbox::wall; ///< then the whole tree is killed
  unsigned cpu_seconds = defaults::sandbox::cpu_seconds;    ///< RLIMIT_CPU
  std::uint64_t address_space_bytes = defaults::sandbox::address_space_bytes; ///< RLIMIT_AS
  std::uint64_t file_size_bytes = defaults::sandbox::file_size_bytes;         ///< RLIMIT_FSIZE
  unsigned open_files = defaults::sandbox::open_files;                        ///< RLIMIT_NOFILE
  unsigned processes = defaults::sandbox::processes;      ///< RLIMIT_NPROC of the sandbox user
  std::size_t stdout_cap = defaults::sandbox::stdout_cap; ///< bytes of stdout kept
  std::size_t stderr_cap = defaults::sandbox::stderr_cap; ///< bytes of stderr kept
};

/// One process to run in the sandbox.
struct sandbox_request {
  std::vector<std::string> argv; ///< program (absolute path) and arguments
  std::vector<std::string> env;  ///< the whole environment, "KEY=value"
  std::string stdin_data;        ///< written to its stdin, then closed
  /// Private working directory (must exist); inside the sandbox it appears as /tmp/work in a
  /// private /tmp (where the mount namespace is available), else under its own path.
  std::filesystem::path workdir;
  sandbox_limits limits; ///< resource limits
};

/// What happened to a sandboxed process.
struct sandbox_result {
  int exit_code = -1;               ///< exit status, or -1 when killed by a signal
  int signal = 0;                   ///< the signal that ended it, 0 when it exited
  std::string out;                  ///< stdout, up to the cap
  std::string err;                  ///< stderr, up to the cap
  bool out_truncated = false;       ///< stdout went past its cap
  bool err_truncated = false;       ///< stderr went past its cap
  double cpu_seconds = 0;           ///< user + system time of the process tree
  std::uint64_t peak_rss_bytes = 0; ///< largest resident set in the tree
  double wall_seconds = 0;          ///< from start to reaped
  /// Which limit fired: "wall", "cpu", "file_size", "memory" (inferred: RLIMIT_AS fails
  /// allocations without a signal, so a failed process whose resident set reached half the limit
  /// or whose stderr reports an allocation failure counts), or empty.
  std::string limit;
  std::vector<std::string> isolation; ///< what was applied: "pid_ns", "net_ns", "mount_ns", ...
  std::vector<std::string> warnings;  ///< isolation that could not be applied, and why
};

/// Runs a process isolated from the node: new pid, net, mount, ipc and uts namespaces where the
/// kernel allows (each reported in `isolation`, each refusal in `warnings`), an unprivileged
/// user, private /tmp, rlimits, a seccomp filter (no non-local sockets, ptrace, mount, module,
/// reboot, namespace or keyring calls), its own process group, and a wall-clock timeout that
/// kills the whole tree. Errors only when the process cannot be started at all.
expected<sandbox_result> run_sandboxed(const sandbox_request& request);

} // namespace triad
