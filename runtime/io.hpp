#pragma once

#include <cstddef>

#include <sys/types.h>

namespace triad {

/// Owns a file descriptor: closes it once, when reset or destroyed; moves, never copies.
class unique_fd {
public:
  /// Owns nothing.
  unique_fd() noexcept = default;
  /// Owns `fd` (-1: nothing).
  explicit unique_fd(int fd) noexcept
      : fd_(fd) {}
  /// Takes `other`'s descriptor.
  unique_fd(unique_fd&& other) noexcept
      : fd_(other.release()) {}
  /// Closes its own, takes `other`'s.
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other)
      reset(other.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  /// Closes it.
  ~unique_fd() { reset(); }
  /// The descriptor, or -1.
  int get() const noexcept { return fd_; }
  /// Whether it owns one.
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Closes the one it owns and owns `fd` instead.
  void reset(int fd = -1) noexcept;
  /// Gives the descriptor up without closing it.
  int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

private:
  int fd_ = -1;
};

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
