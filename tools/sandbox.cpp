#include "tools/sandbox.hpp"

#include <cerrno>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/io.hpp"

namespace triad {

namespace {

using clock_type = std::chrono::steady_clock;

// Isolation bits the child reports back through the status pipe.
enum isolation_bit : std::uint32_t {
  pid_ns = 1,
  net_ns = 2,
  mount_ns = 4,
  ipc_ns = 8,
  uts_ns = 16,
  user_dropped = 32,
  private_tmp = 64,
};

struct bpf_program_bytes {
  std::vector<sock_filter> code;
  std::string error;
};

// The seccomp filter, compiled once in the parent (libseccomp allocates, which a child of a
// multi-threaded process must not do); the child only loads it with prctl.
const bpf_program_bytes& seccomp_program() {
  static bpf_program_bytes program = [] {
    bpf_program_bytes out;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == nullptr) {
      out.error = "seccomp_init failed";
      return out;
    }
    const int eperm = SCMP_ACT_ERRNO(EPERM);
    for (int sys : {SCMP_SYS(ptrace),
                    SCMP_SYS(mount),
                    SCMP_SYS(umount2),
                    SCMP_SYS(pivot_root),
                    SCMP_SYS(chroot),
                    SCMP_SYS(init_module),
                    SCMP_SYS(finit_module),
                    SCMP_SYS(delete_module),
                    SCMP_SYS(reboot),
                    SCMP_SYS(kexec_load),
                    SCMP_SYS(kexec_file_load),
                    SCMP_SYS(swapon),
                    SCMP_SYS(swapoff),
                    SCMP_SYS(setns),
                    SCMP_SYS(unshare),
                    SCMP_SYS(bpf),
                    SCMP_SYS(perf_event_open),
                    SCMP_SYS(keyctl),
                    SCMP_SYS(add_key),
                    SCMP_SYS(request_key),
                    SCMP_SYS(process_vm_readv),
                    SCMP_SYS(process_vm_writev),
                    SCMP_SYS(open_by_handle_at),
                    SCMP_SYS(iopl),
                    SCMP_SYS(ioperm),
                    SCMP_SYS(acct),
                    SCMP_SYS(quotactl),
                    SCMP_SYS(userfaultfd),
                    SCMP_SYS(settimeofday),
                    SCMP_SYS(clock_settime),
                    SCMP_SYS(clock_adjtime),
                    SCMP_SYS(adjtimex),
                    SCMP_SYS(syslog),
                    SCMP_SYS(io_uring_setup),
                    SCMP_SYS(io_uring_enter),
                    SCMP_SYS(io_uring_register)})
      seccomp_rule_add(ctx, eperm, sys, 0);
    // Sockets other than local ones.
    seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    // New namespaces through clone; clone3 hides its flags, so it answers ENOSYS and libc
    // falls back to clone.
    for (unsigned long flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC,
                               CLONE_NEWUTS, CLONE_NEWCGROUP})
      seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    int fd = memfd_create("triad-seccomp", MFD_CLOEXEC);
    if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0) {
      out.error = "seccomp_export_bpf failed";
    } else {
      off_t size = lseek(fd, 0, SEEK_END);
      out.code.resize(static_cast<std::size_t>(size) / sizeof(sock_filter));
      if (pread(fd, out.code.data(), static_cast<std::size_t>(size), 0) != size)
        out.error = "reading the seccomp program failed";
    }
    if (fd >= 0)
      close(fd);
    seccomp_release(ctx);
    return out;
  }();
  return program;
}

// Closes a descriptor once.
struct fd_guard {
  int fd = -1;
  ~fd_guard() { reset(); }
  void reset() {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }
};

[[noreturn]] void child_fail(int status_fd, int err) {
  std::int32_t code = -err;
  [[maybe_unused]] auto n = ::write(status_fd, &code, sizeof(code));
  ::_exit(127);
}

// Runs in the forked child: only system calls from here on (the parent has threads).
[[noreturn]] void child_main(const sandbox_request& req, char* const* argv, char* const* envp,
                             int in_fd, int out_fd, int err_fd, int status_fd,
                             const int (&parent_ends)[4], const sock_fprog* filter) {
  // The parent's ends of the pipes: close-on-exec alone would leave them open in the
  // namespace's waiting process, and the tool would never see stdin end.
  for (int fd : parent_ends)
    ::close(fd);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::uint32_t applied = 0;
  struct {
    int flag;
    std::uint32_t bit;
  } spaces[] = {{CLONE_NEWPID, pid_ns},
                {CLONE_NEWNET, net_ns},
                {CLONE_NEWNS, mount_ns},
                {CLONE_NEWIPC, ipc_ns},
                {CLONE_NEWUTS, uts_ns}};
  for (auto& s : spaces)
    if (::unshare(s.flag) == 0)
      applied |= s.bit;
  if (applied & pid_ns) {
    // The first child in the new pid namespace is its init; this process waits for it and
    // passes its end on, so the parent sees the tool's exit status or signal.
    pid_t init = ::fork();
    if (init < 0)
      child_fail(status_fd, errno);
    if (init > 0) {
      ::close(status_fd);
      ::close(in_fd);
      ::close(out_fd);
      ::close(err_fd);
      int st = 0;
      while (::waitpid(init, &st, 0) < 0 && errno == EINTR) {
      }
      if (WIFSIGNALED(st)) {
        ::signal(WTERMSIG(st), SIG_DFL);
        ::kill(::getpid(), WTERMSIG(st));
      }
      ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128);
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  }
  // The work directory is reached through a descriptor taken before /tmp is replaced, then
  // bound at /tmp/work inside the private /tmp, so ".." from it never reaches the host.
  int work = ::open(req.workdir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (work < 0)
    child_fail(status_fd, errno);
  bool in_place = false;
  if (applied & mount_ns) {
    ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
    bool tmp_ok = true;
    for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"})
      if (::access(dir, F_OK) == 0 &&
          ::mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777") != 0)
        tmp_ok = false;
    if (tmp_ok) {
      char source[64] = "/proc/self/fd/";
      char digits[16];
      int len = 0;
      for (int v = work; v > 0 || len == 0; v /= 10)
        digits[len++] = static_cast<char>('0' + v % 10);
      int at = 14;
      while (len > 0)
        source[at++] = digits[--len];
      source[at] = '\0';
      if (::mkdir("/tmp/work", 0777) == 0 &&
          ::mount(source, "/tmp/work", nullptr, MS_BIND, nullptr) == 0 &&
          ::chdir("/tmp/work") == 0) {
        applied |= private_tmp;
        in_place = true;
      }
    }
    if (applied & pid_ns)
      ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  }
  if (!in_place && ::fchdir(work) != 0)
    child_fail(status_fd, errno);
  ::close(work);
  rlimit lim{};
  auto set = [](int which, std::uint64_t value) {
    rlimit r{value, value};
    ::setrlimit(which, &r);
  };
  // CPU: SIGXCPU at the soft limit, SIGKILL one second later.
  lim.rlim_cur = req.limits.cpu_seconds;
  lim.rlim_max = req.limits.cpu_seconds + 1;
  ::setrlimit(RLIMIT_CPU, &lim);
  set(RLIMIT_AS, req.limits.address_space_bytes);
  set(RLIMIT_FSIZE, req.limits.file_size_bytes);
  set(RLIMIT_NOFILE, req.limits.open_files);
  set(RLIMIT_NPROC, req.limits.processes);
  set(RLIMIT_CORE, 0);
  if (::geteuid() == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(defaults::sandbox::uid) != 0 ||
        ::setuid(defaults::sandbox::uid) != 0)
      child_fail(status_fd, errno);
    applied |= user_dropped;
  }
  [[maybe_unused]] auto n = ::write(status_fd, &applied, sizeof(applied));
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0)
    child_fail(status_fd, errno);
  for (int fd = 3; fd < 1024; ++fd)
    if (fd != status_fd)
      ::close(fd);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      (filter != nullptr && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, filter) != 0))
    child_fail(status_fd, errno);
  ::execve(argv[0], argv, envp);
  child_fail(status_fd, errno);
}

// RLIMIT_AS makes allocations fail rather than sending a signal, so the hit is inferred: a
// process that failed after its resident set reached half the limit, or whose stderr carries
// an allocator's out-of-memory message, ran out of address space.
bool hit_address_space_limit(const sandbox_result& r, std::uint64_t limit) {
  if (limit > 0 && r.peak_rss_bytes >= limit / 2)
    return true;
  for (std::string_view marker : {"memory exhausted", "Cannot allocate memory", "bad_alloc",
                                  "MemoryError", "out of memory", "Out of memory"})
    if (r.err.find(marker) != std::string::npos)
      return true;
  return false;
}

} // namespace

expected<sandbox_result> run_sandboxed(const sandbox_request& req) {
  if (req.argv.empty() || req.argv[0].empty() || req.argv[0][0] != '/')
    return make_error(errc::invalid_argument,
                      "sandbox: argv[0] must be an absolute program path, got '" +
                          (req.argv.empty() ? std::string{} : req.argv[0]) + "'");
  std::error_code ec;
  if (!std::filesystem::is_directory(req.workdir, ec))
    return make_error(errc::not_found,
                      "sandbox: work directory '" + req.workdir.string() + "' does not exist");
  if (::geteuid() == 0 &&
      ::chown(req.workdir.c_str(), defaults::sandbox::uid, defaults::sandbox::uid) != 0)
    return make_error(errc::system_error, "sandbox: cannot hand the work directory to the "
                                          "sandbox user: " +
                                              std::string{std::strerror(errno)});
  const auto& program = seccomp_program();
  sandbox_result result;
  sock_fprog filter{};
  if (program.error.empty()) {
    filter.len = static_cast<unsigned short>(program.code.size());
    filter.filter = const_cast<sock_filter*>(program.code.data());
    result.isolation.push_back("seccomp");
  } else {
    result.warnings.push_back("seccomp not applied: " + program.error);
  }
  // argv and envp prepared before fork: the child may not allocate.
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in[2], out[2], err[2], status[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(status, O_CLOEXEC) != 0)
    return make_error(errc::system_error, std::string{"sandbox: pipe: "} + std::strerror(errno));
  fd_guard in_w{in[1]}, out_r{out[0]}, err_r{err[0]}, status_r{status[0]};
  fd_guard in_r{in[0]}, out_w{out[1]}, err_w{err[1]}, status_w{status[1]};
  auto start = clock_type::now();
  pid_t pid = ::fork();
  if (pid < 0)
    return make_error(errc::system_error, std::string{"sandbox: fork: "} + std::strerror(errno));
  if (pid == 0) {
    const int parent_ends[4] = {in[1], out[0], err[0], status[0]};
    child_main(req, argv.data(), envp.data(), in[0], out[1], err[1], status[1], parent_ends,
               program.error.empty() ? &filter : nullptr);
  }
  in_r.reset();
  out_w.reset();
  err_w.reset();
  status_w.reset();

  // Isolation report, then EOF (exec succeeded) or an errno (it failed).
  std::uint32_t applied = 0;
  std::int32_t exec_error = 0;
  if (::read(status_r.fd, &applied, sizeof(applied)) == sizeof(applied) &&
      static_cast<std::int32_t>(applied) < 0) {
    exec_error = static_cast<std::int32_t>(applied);
    applied = 0;
  } else if (::read(status_r.fd, &exec_error, sizeof(exec_error)) != sizeof(exec_error)) {
    exec_error = 0;
  }
  struct {
    std::uint32_t bit;
    const char* name;
  } names[] = {{pid_ns, "pid_ns"},          {net_ns, "net_ns"}, {mount_ns, "mount_ns"},
               {ipc_ns, "ipc_ns"},          {uts_ns, "uts_ns"}, {user_dropped, "unprivileged_user"},
               {private_tmp, "private_tmp"}};
  for (auto& n : names) {
    if (applied & n.bit)
      result.isolation.push_back(n.name);
    else if (exec_error == 0)
      result.warnings.push_back(std::string{n.name} + " not applied (the kernel or privileges "
                                                      "refused it)");
  }
  result.isolation.push_back("rlimits");

  // Feed stdin, drain stdout/stderr under the caps, enforce the wall clock.
  ::fcntl(in_w.fd, F_SETFL, O_NONBLOCK);
  std::size_t written = 0;
  if (req.stdin_data.empty())
    in_w.reset();
  auto deadline = start + req.limits.wall;
  bool killed = false;
  char buf[65536];
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    pollfd fds[3];
    int n = 0;
    if (out_r.fd >= 0)
      fds[n++] = {out_r.fd, POLLIN, 0};
    if (err_r.fd >= 0)
      fds[n++] = {err_r.fd, POLLIN, 0};
    if (in_w.fd >= 0)
      fds[n++] = {in_w.fd, POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    int timeout = killed ? 1000 : static_cast<int>(std::max<std::int64_t>(0, left.count()));
    int ready = ::poll(fds, static_cast<nfds_t>(n), timeout);
    if (ready < 0 && errno != EINTR)
      break;
    if (ready == 0) {
      if (killed)
        break; // descendants outside the namespace still hold the pipes: give up on them
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      killed = true;
      result.limit = "wall";
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0)
        continue;
      if (fds[i].fd == in_w.fd) {
        auto w = write_no_sigpipe(in_w.fd, req.stdin_data.data() + written,
                                  req.stdin_data.size() - written);
        if (w > 0)
          written += static_cast<std::size_t>(w);
        if (w < 0 && errno != EAGAIN)
          in_w.reset();
        if (written == req.stdin_data.size())
          in_w.reset();
        continue;
      }
      bool is_out = fds[i].fd == out_r.fd;
      auto r = ::read(fds[i].fd, buf, sizeof(buf));
      if (r <= 0) {
        (is_out ? out_r : err_r).reset();
        continue;
      }
      auto& text = is_out ? result.out : result.err;
      auto cap = is_out ? req.limits.stdout_cap : req.limits.stderr_cap;
      auto keep =
          std::min<std::size_t>(static_cast<std::size_t>(r), cap - std::min(cap, text.size()));
      text.append(buf, keep);
      if (keep < static_cast<std::size_t>(r))
        (is_out ? result.out_truncated : result.err_truncated) = true;
    }
  }
  in_w.reset();
  int st = 0;
  rusage usage{};
  while (::wait4(pid, &st, 0, &usage) < 0 && errno == EINTR) {
  }
  ::kill(-pid, SIGKILL); // anything of its group still alive outside the namespace
  result.wall_seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  result.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  result.peak_rss_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
  if (exec_error != 0)
    return make_error(errc::system_error,
                      "sandbox: cannot start '" + req.argv[0] + "': " + std::strerror(-exec_error));
  if (WIFEXITED(st)) {
    result.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    result.signal = WTERMSIG(st);
    if (result.limit.empty() && result.signal == SIGXCPU)
      result.limit = "cpu";
    if (result.limit.empty() && result.signal == SIGXFSZ)
      result.limit = "file_size";
    if (result.limit.empty() && result.signal == SIGKILL &&
        result.cpu_seconds >= req.limits.cpu_seconds)
      result.limit = "cpu";
  }
  if (result.limit.empty() && (result.exit_code != 0 || result.signal != 0) &&
      hit_address_space_limit(result, req.limits.address_space_bytes))
    result.limit = "memory";
  return result;
}

} // namespace triad
