#include "runtime/io.hpp"

#include <cerrno>

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
    auto w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

} // namespace triad
