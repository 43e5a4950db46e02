#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// Every default of the tools area, in one place (like CAF's `defaults::`); config sections take
/// their initial values from here.
namespace triad::defaults {

namespace tools {
/// Cores reserved for tool processes across the tool domains.
inline constexpr unsigned cores = 1;
/// Tool calls waiting per tool domain before new calls are refused with "busy".
inline constexpr std::size_t queue_capacity = 64;
} // namespace tools

/// Defaults of the built-in tools.
namespace builtin_tools {
/// Bytes file_read returns at most.
inline constexpr std::size_t file_read_max_bytes = 256 << 10;
/// Address space of a compiler process: clang reserves far more than it touches.
inline constexpr std::uint64_t compile_address_space_bytes = 4ull << 30;
} // namespace builtin_tools

/// Defaults of the tool executor.
namespace tool_executor {
/// Tool processes running at once per executor (per tool domain).
inline constexpr std::size_t concurrency = 2;
/// Calls waiting for a slot before new ones are refused.
inline constexpr std::size_t queue_capacity = 64;
/// An executor with calls under a deadline sweeps for expired ones at the first deadline (one
/// timer for all of them instead of one per call): a new call's deadline re-arms it only when
/// this much earlier, and a sweep is at least this far ahead (a deadline is met within it).
inline constexpr std::chrono::milliseconds deadline_check{10};
/// How long a worker may go on with a call past its deadline before it is given up as stuck
/// and replaced by a fresh one (a sandboxed call's processes are killed at the deadline, so its
/// worker is back within milliseconds; an in-process tool cannot be interrupted).
inline constexpr std::chrono::milliseconds stuck_grace{2000};
/// Workers given up and still stuck, at most, per executor: beyond it a stuck worker is waited
/// for, so stuck calls cannot pile up threads without bound.
inline constexpr std::size_t max_abandoned = 16;
} // namespace tool_executor

/// Defaults of MCP clients.
namespace mcp {
/// Time for a server to start and answer `initialize`.
inline constexpr std::chrono::milliseconds start_timeout{20'000};
/// Time for one `tools/call` or `tools/list`.
inline constexpr std::chrono::milliseconds call_timeout{15'000};
/// First wait before restarting a server that died; doubles up to max_backoff.
inline constexpr std::chrono::milliseconds min_backoff{250};
/// Longest wait between restarts.
inline constexpr std::chrono::milliseconds max_backoff{30'000};
} // namespace mcp

/// The tools sandbox.
namespace sandbox {
/// Wall-clock limit of one tool call.
inline constexpr std::chrono::milliseconds wall{10'000};
/// CPU seconds per process (RLIMIT_CPU; SIGXCPU at the soft limit).
inline constexpr unsigned cpu_seconds = 10;
/// Address space per process (RLIMIT_AS).
inline constexpr std::uint64_t address_space_bytes = 1ull << 30;
/// Memory of the whole call (cgroup memory.max, swap off): what all its processes hold at once.
inline constexpr std::uint64_t memory_bytes = 1ull << 30;
/// Processes and threads of the whole call (cgroup pids.max).
inline constexpr unsigned pids = 64;
/// CPUs the whole call may use (cgroup v2 cpu.max, v1 cpu.cfs_quota_us).
inline constexpr double cpus = 1.0;
/// Size of the call's /work (a tmpfs: the only place it can write besides /tmp).
inline constexpr std::uint64_t work_bytes = 64ull << 20;
/// Size of the call's /tmp and /dev/shm (tmpfs each).
inline constexpr std::uint64_t tmp_bytes = 16ull << 20;
/// Largest file the process may write (RLIMIT_FSIZE).
inline constexpr std::uint64_t file_size_bytes = 16ull << 20;
/// Open files (RLIMIT_NOFILE).
inline constexpr unsigned open_files = 64;
/// Processes of the sandbox user (RLIMIT_NPROC), where no cgroup caps the call's pids and the
/// node runs as root (the limit counts all of nobody's processes, across calls).
inline constexpr unsigned processes = 32;
/// Bytes of stdout kept; the rest is read and dropped, and the result says so.
inline constexpr std::size_t stdout_cap = 1 << 20;
/// Bytes of stderr kept.
inline constexpr std::size_t stderr_cap = 256 << 10;
/// The unprivileged user tool processes run as: nobody, inside the sandbox's user namespace
/// (and outside it too when the node runs as root).
inline constexpr unsigned uid = 65534;
} // namespace sandbox

/// Defaults of tool invocations.
namespace tool_invocation {
/// How long an invocation waits for its executor before it reports the call as failed. The
/// sandbox's own wall limit (10 s by default) ends the process well before this.
inline constexpr std::chrono::milliseconds deadline{60'000};
/// Idle invocation actors kept per tool domain for the next calls (beyond that they exit).
inline constexpr std::size_t idle_per_domain = 256;
} // namespace tool_invocation

/// Defaults of vector search.
namespace vector_search {
/// Embedding width.
inline constexpr std::size_t dim = 256;
/// Lines per chunk of a corpus file, and lines shared by neighbouring chunks.
inline constexpr std::size_t chunk_lines = 24;
/// Lines neighbouring chunks share.
inline constexpr std::size_t chunk_overlap = 4;
/// HNSW graph degree. With ef_search 800 and a re-rank pool of 400, recall@10 against exact
/// search was 0.976 on 100k generated chunks (triad-bench-tools); ef 400 / pool 200 gave 0.925
/// there (0.996 on 20k), and degree 16 / ef 128 / pool 64 gave 0.81 on 20k.
inline constexpr std::size_t hnsw_m = 32;
/// HNSW candidate list while building.
inline constexpr std::size_t ef_construction = 200;
/// HNSW candidate list while searching.
inline constexpr std::size_t ef_search = 800;
/// Candidates the ANN search hands to the exact re-ranking.
inline constexpr std::size_t rerank_pool = 400;
} // namespace vector_search

} // namespace triad::defaults
