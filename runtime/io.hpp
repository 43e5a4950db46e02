#pragma once

#include <cstddef>

#include <sys/types.h>

namespace triad {

/// Reads exactly `n` bytes from `fd` into `to`, retrying interrupted and short reads. False on
/// an error or on end of file before `n` bytes.
bool read_all(int fd, void* to, std::size_t n) noexcept;

/// Writes all `n` bytes of `from` to `fd`, retrying interrupted and short writes. False when a
/// write fails or writes nothing. A pipe whose reader has gone fails with EPIPE; no SIGPIPE.
bool write_all(int fd, const void* from, std::size_t n) noexcept;

/// One ::write that raises no SIGPIPE when `fd` is a pipe whose reader has gone (an MCP server
/// or a tool process that exited): -1 with errno EPIPE instead of a signal that would end the
/// process. SIGPIPE is blocked on the calling thread for the write and a SIGPIPE the write
/// raised is taken before it is unblocked; the process's signal dispositions are left alone.
ssize_t write_no_sigpipe(int fd, const void* from, std::size_t n) noexcept;

} // namespace triad
