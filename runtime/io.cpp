#include "runtime/io.hpp"

#include <cerrno>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace triad {

bool read_all(int fd, void* to, std::size_t n) noexcept {
  auto* p = static_cast<char*>(to);
  while (n > 0) {
    auto r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* from, std::size_t n) noexcept {
  auto* p = static_cast<const char*>(from);
  while (n > 0) {
    auto w = write_no_sigpipe(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

ssize_t write_no_sigpipe(int fd, const void* from, std::size_t n) noexcept {
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE) == 1; // not ours to take
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  auto w = ::write(fd, from, n);
  int saved = errno;
  if (w < 0 && saved == EPIPE && !was_pending) {
    timespec none{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &none) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = saved;
  return w;
}

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = fd;
}

} // namespace triad
