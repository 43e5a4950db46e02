#pragma once

#include <cstddef>

#include <sys/types.h>
#include <unistd.h>

#include "runtime/error.hpp"
#include "runtime/io.hpp"

namespace triad::detail {

/// Who made a namespace pair: the process and its effective uid (only they can use it again).
struct namespace_owner {
  pid_t pid = 0;  ///< getpid() when it was made
  uid_t euid = 0; ///< geteuid() when it was made
  /// This process now.
  static namespace_owner current() noexcept { return {::getpid(), ::geteuid()}; }
  bool operator==(const namespace_owner&) const = default;
};

/// A user namespace and the network namespace it owns, lent to one sandboxed call at a time.
/// Making a network namespace is the dearest step of starting a sandbox (about 0.4 ms here,
/// where fork and exec of /bin/true take 1 ms), so pairs are made once and kept: a call joins
/// its pair and makes its own pid, mount, ipc and uts namespaces inside it. Nothing of one call
/// outlives it in the pair: its processes die with its pid namespace before the pair is lent
/// again, the pair's network has no interface up, and only the lease's holder ever has
/// capabilities in it (the tool runs as nobody with none).
class namespace_lease {
public:
  /// A free pair, or a new one; an error naming why user or network namespaces cannot be made.
  static expected<namespace_lease> acquire();

  /// Holds nothing.
  namespace_lease() noexcept = default;
  namespace_lease(namespace_lease&& other) noexcept;
  namespace_lease& operator=(namespace_lease&& other) noexcept;
  namespace_lease(const namespace_lease&) = delete;
  namespace_lease& operator=(const namespace_lease&) = delete;
  /// Gives the pair back for the next call (the caller has reaped everything that ran in it).
  ~namespace_lease();

  /// The user namespace (an nsfs descriptor for setns).
  int user_fd() const noexcept { return user_.get(); }
  /// The network namespace (an nsfs descriptor for setns).
  int net_fd() const noexcept { return net_.get(); }
  /// Pairs made so far by this process (for tests: reuse keeps it flat).
  static std::size_t made() noexcept;

private:
  namespace_lease(unique_fd user, unique_fd net, namespace_owner owner) noexcept
      : user_(std::move(user))
      , net_(std::move(net))
      , owner_(owner) {}
  void give_back() noexcept;
  unique_fd user_, net_;
  namespace_owner owner_;
};

} // namespace triad::detail
