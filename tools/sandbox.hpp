#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "runtime/error.hpp"
#include "tools/defaults.hpp"

namespace triad {

/// Limits of one sandboxed call; every field documented where declared.
struct sandbox_limits {
  std::chrono::milliseconds wall = defaults::sandbox::wall; ///< then the whole tree is killed
  unsigned cpu_seconds = defaults::sandbox::cpu_seconds;    ///< RLIMIT_CPU per process
  std::uint64_t address_space_bytes = defaults::sandbox::address_space_bytes; ///< RLIMIT_AS
  std::uint64_t memory_bytes = defaults::sandbox::memory_bytes; ///< cgroup memory.max of the call
  unsigned pids = defaults::sandbox::pids;                      ///< cgroup pids.max of the call
  double cpus = defaults::sandbox::cpus; ///< CPUs of the call (cgroup cpu.max / cfs quota)
  std::uint64_t work_bytes = defaults::sandbox::work_bytes;           ///< size of /work (tmpfs)
  std::uint64_t tmp_bytes = defaults::sandbox::tmp_bytes;             ///< size of /tmp, /dev/shm
  std::uint64_t file_size_bytes = defaults::sandbox::file_size_bytes; ///< RLIMIT_FSIZE
  unsigned open_files = defaults::sandbox::open_files;                ///< RLIMIT_NOFILE
  unsigned processes = defaults::sandbox::processes; ///< RLIMIT_NPROC (no cgroup, node as root)
  std::size_t stdout_cap = defaults::sandbox::stdout_cap; ///< bytes of stdout kept
  std::size_t stderr_cap = defaults::sandbox::stderr_cap; ///< bytes of stderr kept
};

/// A file the call finds in its /work when it starts.
struct sandbox_file {
  std::string name;    ///< a plain name (no '/'), e.g. "input.cpp"
  std::string content; ///< its bytes
};

/// One process to run in the sandbox.
struct sandbox_request {
  std::vector<std::string> argv;    ///< program (absolute path inside the sandbox) and arguments
  std::vector<std::string> env;     ///< the whole environment, "KEY=value"
  std::string stdin_data;           ///< written to its stdin, then closed
  std::vector<sandbox_file> files;  ///< written into /work before it starts
  std::vector<std::string> collect; ///< plain names in /work whose sizes come back
  /// Host directories bound read-only at the same path (the rest of the host is not there);
  /// /bin, /lib, /lib64 and /sbin follow /usr where the host merged them into it.
  std::vector<std::string> read_only = {"/usr"};
  /// Host directories bound writable (nosuid, nodev) at the same path: none for tools; an MCP
  /// server's workspace.
  std::vector<std::string> read_write;
  bool discard_stderr = false; ///< stderr to /dev/null (a long-lived server nobody reads)
  sandbox_limits limits;       ///< resource limits
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
  std::uint64_t peak_rss_bytes = 0; ///< the call's peak memory (cgroup), else the largest RSS
  double wall_seconds = 0;          ///< from start to reaped
  /// Which limit fired: "wall", "cpu", "file_size", "memory" (the cgroup's OOM killer, or
  /// inferred for RLIMIT_AS, which fails allocations without a signal: a failed process whose
  /// resident set reached half the limit or whose stderr reports an allocation failure), or
  /// empty.
  std::string limit;
  /// Sizes of the `collect` files after the run, in request order (-1: not there).
  std::vector<std::pair<std::string, std::int64_t>> collected;
  std::vector<std::string> isolation; ///< what was applied: "user_ns", "pivot_root", ...
  std::vector<std::string> warnings;  ///< what could not be applied, and why
};

/// A process sealed off from the host as run_sandboxed seals one, started and left running (an
/// MCP server): the caller writes its stdin and reads its stdout (and stderr) through the
/// descriptors, which stay the process's until it goes. No wall clock of its own; it ends when
/// its program exits, or with kill(), or when the object goes (killed and reaped).
class sandbox_process {
public:
  /// Seals and starts `request`'s program (stdin_data, files before it starts, and
  /// discard_stderr apply; collect and limits.wall do not). An error when it cannot be started
  /// or sealed.
  static expected<sandbox_process> start(const sandbox_request& request);

  /// An empty handle.
  sandbox_process();
  sandbox_process(sandbox_process&&) noexcept;
  sandbox_process& operator=(sandbox_process&&) noexcept;
  /// Kills and reaps the process, if it still runs.
  ~sandbox_process();

  /// The pid (in the node's namespace) of the sandbox's init: killing it ends everything
  /// inside.
  pid_t pid() const noexcept;
  /// Writing end of its stdin (-1 once closed).
  int stdin_fd() const noexcept;
  /// Reading end of its stdout.
  int stdout_fd() const noexcept;
  /// Reading end of its stderr (-1 when discarded).
  int stderr_fd() const noexcept;
  /// Closes its stdin (end of input).
  void close_stdin() noexcept;
  /// What was applied, as sandbox_result::isolation says.
  const std::vector<std::string>& isolation() const noexcept;
  /// What could not be applied (no cgroup, no seccomp).
  const std::vector<std::string>& warnings() const noexcept;
  /// SIGKILL to the sandbox (its init, its cgroup, its process group).
  void kill() noexcept;
  /// Waits for it to end; its init's wait status.
  int wait() noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  friend expected<sandbox_result> run_sandboxed(const sandbox_request& request);
};

/// Runs a process sealed off from the host with the kernel's own mechanisms (the practice of
/// bubblewrap and nsjail): new user, pid, net, mount, ipc and uts namespaces; a new root
/// (pivot_root onto a read-only tmpfs) holding only `read_only` host paths (read-only, nosuid,
/// nodev), a few device nodes, a fresh /proc, and size-capped tmpfs /work, /tmp and /dev/shm,
/// so no host path is visible or writable; the user nobody with no capabilities; a cgroup per
/// call capping the memory, processes and CPU of the whole tree (cgroup v2, or the v1 memory and
/// pids controllers; where neither is delegated, rlimits only and a warning); rlimits; a
/// seccomp filter (no sockets but local ones, no ptrace, mount, module, reboot, namespace or
/// keyring calls); and a wall-clock timeout (limits.wall, or the running tool call's deadline,
/// current_call_deadline(), when sooner) that kills the whole tree. An error when the process
/// cannot be started or sealed (it never runs unsealed).
expected<sandbox_result> run_sandboxed(const sandbox_request& request);

/// What the sandbox applies on this machine: `/bin/true` run sealed, once. Its isolation and
/// warnings (no cgroup: rlimits only; no seccomp), or the error that keeps any process from
/// being sealed here. A node that hosts tools checks it at start and says it.
expected<sandbox_result> probe_sandbox();

} // namespace triad
