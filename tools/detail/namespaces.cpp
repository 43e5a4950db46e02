#include "tools/detail/namespaces.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/sandbox.hpp"

namespace triad::detail {

namespace {

// Free pairs kept for later calls; more than this (after a burst) are closed.
constexpr std::size_t max_kept = 64;

// A kept pair and who made it: only that process, with that effective uid, takes it again (a
// forked child, or a process that changed its uid since, makes its own).
struct kept {
  namespace_owner owner;
  unique_fd user, net;
};

struct pool {
  pool() { free.reserve(max_kept); } // giving a pair back never allocates
  std::mutex mutex;
  std::vector<kept> free;
  std::atomic<std::size_t> made{0};
};

pool& the_pool() {
  static pool p;
  return p;
}

// The pair's id maps. The sandbox user is nobody inside. The node as root maps nobody to nobody
// and root to root (the call's init sets its root up as root there, then drops to nobody);
// otherwise its own ids to nobody, which is all an unprivileged process may map.
std::pair<std::string, std::string> id_maps() {
  const std::string nobody = std::to_string(defaults::sandbox::uid);
  if (::geteuid() == 0) {
    std::string map = "0 0 1\n" + nobody + " " + nobody + " 1\n";
    return {map, map};
  }
  return {nobody + " " + std::to_string(::geteuid()) + " 1\n",
          nobody + " " + std::to_string(::getegid()) + " 1\n"};
}

// Writes `text` to /proc/`pid`/`file`.
expected<void> write_proc(pid_t pid, const char* file, const std::string& text) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  unique_fd f{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  if (!f || !write_all(f.get(), text.data(), text.size()))
    return make_error(errc::system_error, "sandbox: writing " + path + ": " + std::strerror(errno));
  return {};
}

// Makes a pair: a child cloned into a new user and network namespace waits while its id maps
// are written and its namespaces opened, then is killed; the open descriptors keep both alive.
// (It is killed rather than told through a pipe: every process the node forks meanwhile, from
// any thread, would inherit the pipe's end and keep the child waiting.)
expected<std::pair<unique_fd, unique_fd>> make_pair() {
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNET | SIGCHLD,
                                           nullptr, nullptr, nullptr, nullptr));
  if (pid < 0)
    return make_error(errc::unsupported,
                      std::string{"sandbox: cannot make a user and a network namespace (clone: "} +
                          std::strerror(errno) + "); the program was not run");
  if (pid == 0) {
    for (;;)
      ::pause(); // until killed
  }
  auto reap = [&] {
    ::kill(pid, SIGKILL);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  };
  const auto [uid_map, gid_map] = id_maps();
  expected<void> mapped =
      ::geteuid() == 0 ? expected<void>{} : write_proc(pid, "setgroups", "deny");
  if (mapped)
    mapped = write_proc(pid, "uid_map", uid_map);
  if (mapped)
    mapped = write_proc(pid, "gid_map", gid_map);
  if (!mapped) {
    reap();
    return mapped.error();
  }
  const std::string ns = "/proc/" + std::to_string(pid) + "/ns/";
  unique_fd user{::open((ns + "user").c_str(), O_RDONLY | O_CLOEXEC)};
  unique_fd net{::open((ns + "net").c_str(), O_RDONLY | O_CLOEXEC)};
  const int err = errno;
  reap();
  if (!user || !net)
    return make_error(errc::system_error,
                      "sandbox: opening the namespaces in " + ns + ": " + std::strerror(err));
  the_pool().made.fetch_add(1, std::memory_order_relaxed);
  return std::pair{std::move(user), std::move(net)};
}

} // namespace

expected<namespace_lease> namespace_lease::acquire() {
  auto& p = the_pool();
  {
    std::lock_guard lock{p.mutex};
    while (!p.free.empty()) {
      auto pair = std::move(p.free.back());
      p.free.pop_back();
      if (pair.owner == namespace_owner::current())
        return namespace_lease{std::move(pair.user), std::move(pair.net), pair.owner};
    }
  }
  auto made = make_pair();
  if (!made)
    return made.error();
  return namespace_lease{std::move(made->first), std::move(made->second),
                         namespace_owner::current()};
}

namespace_lease::namespace_lease(namespace_lease&& other) noexcept
    : user_(std::move(other.user_))
    , net_(std::move(other.net_))
    , owner_(other.owner_) {}

namespace_lease& namespace_lease::operator=(namespace_lease&& other) noexcept {
  if (this != &other) {
    give_back();
    user_ = std::move(other.user_);
    net_ = std::move(other.net_);
    owner_ = other.owner_;
  }
  return *this;
}

namespace_lease::~namespace_lease() {
  give_back();
}

void namespace_lease::give_back() noexcept {
  if (!user_ || !net_)
    return;
  auto& p = the_pool();
  std::lock_guard lock{p.mutex};
  if (p.free.size() < max_kept)
    p.free.push_back({owner_, std::move(user_), std::move(net_)});
  user_.reset();
  net_.reset();
}

std::size_t namespace_lease::made() noexcept {
  return the_pool().made.load(std::memory_order_relaxed);
}

} // namespace triad::detail
