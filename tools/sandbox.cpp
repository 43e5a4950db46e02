#include "tools/sandbox.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

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
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/io.hpp"
#include "tools/detail/cgroup.hpp"
#include "tools/detail/namespaces.hpp"
#include "tools/registry.hpp"

namespace triad {

namespace {

using clock_type = std::chrono::steady_clock;

// -- the seccomp filter --

struct bpf_program_bytes {
  std::vector<sock_filter> code;
  std::string error;
};

// Compiled once in the parent (libseccomp allocates, which a child of a multi-threaded process
// must not do); the tool's process only loads it with prctl.
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
                    SCMP_SYS(open_tree),
                    SCMP_SYS(move_mount),
                    SCMP_SYS(fsopen),
                    SCMP_SYS(fsconfig),
                    SCMP_SYS(fsmount),
                    SCMP_SYS(fspick),
                    SCMP_SYS(mount_setattr),
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
                    SCMP_SYS(name_to_handle_at),
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
                    SCMP_SYS(io_uring_register),
                    SCMP_SYS(personality)})
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

// -- messages from the sandbox's processes to the node --

// One record on the report pipe (atomic: shorter than PIPE_BUF).
struct report {
  enum kind_t : std::int32_t {
    failed = 2,    // a step failed: a = step, b = errno
    status = 3,    // the tool's wait status: a
    collected = 4, // a = index in collect, b = size or -1
    no_proc = 5,   // /proc could not be mounted (b = errno): the tool runs without it
  };
  std::int32_t kind = 0;
  std::int32_t a = 0;
  std::int64_t b = 0;
};

// The steps that can fail, named in the error.
enum step : std::int32_t {
  drop_user = 1,
  join_namespaces,
  new_namespaces,
  wait_go,
  private_mounts,
  root_tmpfs,
  bind_read_only,
  make_links,
  make_dev,
  make_dirs,
  mount_tmpfs,
  write_etc,
  pivot,
  remount_root,
  write_files,
  enter_work,
  fork_tool,
  redirect,
  seal,
  exec_tool,
};

const char* step_name(std::int32_t s) {
  switch (s) {
  case drop_user:
    return "becoming the sandbox user";
  case join_namespaces:
    return "joining the call's user and network namespaces";
  case new_namespaces:
    return "making the pid, mount, ipc and uts namespaces";
  case wait_go:
    return "waiting for the cgroup";
  case private_mounts:
    return "making the mounts private";
  case root_tmpfs:
    return "mounting the new root (tmpfs)";
  case bind_read_only:
    return "binding a read-only host path";
  case make_links:
    return "linking /bin, /lib to /usr";
  case make_dev:
    return "making /dev";
  case make_dirs:
    return "making directories of the new root";
  case mount_tmpfs:
    return "mounting /work, /tmp or /dev/shm";
  case write_etc:
    return "writing /etc";
  case pivot:
    return "pivot_root into the new root";
  case remount_root:
    return "making the new root read-only";
  case write_files:
    return "writing the call's files into /work";
  case enter_work:
    return "entering /work";
  case fork_tool:
    return "starting the tool's process";
  case redirect:
    return "redirecting stdin, stdout, stderr";
  case seal:
    return "loading the seccomp filter";
  case exec_tool:
    return "executing the program";
  }
  return "setting up the sandbox";
}

[[noreturn]] void child_fail(int fd, std::int32_t at, int err) {
  report r{report::failed, at, err};
  [[maybe_unused]] auto n = ::write(fd, &r, sizeof r);
  ::_exit(127);
}

void send(int fd, report r) {
  [[maybe_unused]] auto n = ::write(fd, &r, sizeof r);
}

// -- the plan: every path and text the children need, made before fork (they may not
// allocate) --

// Where the new root is built before pivot_root: a tmpfs mounted over /tmp, which is then
// the new root itself; the old root goes to /.old and is detached.
constexpr const char* new_root = "/tmp";

struct bind_plan {
  std::string source;    // host path
  std::string target;    // under new_root
  unsigned long keep;    // flags of the source mount to keep (nosuid, nodev, noexec, ...)
  bool file = false;     // a file (an empty file is made to bind onto), else a directory
  bool writable = false; // bound read-write (an MCP server's workspace), else read-only
};

struct sandbox_plan {
  // Paths under the new root before pivot_root, made here: the init may not allocate.
  std::string tmp_dir = std::string{new_root} + "/tmp", work_dir = std::string{new_root} + "/work",
              dev_dir = std::string{new_root} + "/dev", shm_dir = dev_dir + "/shm",
              proc_dir = std::string{new_root} + "/proc",
              passwd = std::string{new_root} + "/etc/passwd",
              group = std::string{new_root} + "/etc/group",
              old_dir = std::string{new_root} + "/.old";
  std::vector<std::string> base_dirs; // the new root's own: /etc, /dev, /proc, /tmp, /work
  std::vector<std::string> dirs;      // mount points of the binds, made in order under new_root
  std::vector<bind_plan> binds;       // host paths, read-only (or writable: read_write)
  std::vector<std::pair<std::string, std::string>> links; // (link, points to)
  std::vector<std::pair<std::string, std::string>> devs;  // (host device, target)
  std::string root_options, work_options, tmp_options;
  std::string etc_passwd, etc_group;
  std::vector<std::pair<std::string, const std::string*>> files; // (/work/name, content)
  std::vector<std::string> collect;                              // /work/name
  bool as_root = false;
  // RLIMIT_NPROC for the tool: only as root and without a cgroup. It counts every process of
  // the user nobody, so concurrent calls would share it; pids.max is per call.
  bool limit_nproc = false;
};

// The flags of the mount holding `path` that a read-only bind must keep: in a user namespace
// the kernel refuses to drop a locked flag such as nosuid.
unsigned long mount_flags_of(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0)
    return 0;
  unsigned long out = 0;
  if (v.f_flag & ST_NOSUID)
    out |= MS_NOSUID;
  if (v.f_flag & ST_NODEV)
    out |= MS_NODEV;
  if (v.f_flag & ST_NOEXEC)
    out |= MS_NOEXEC;
  if (v.f_flag & ST_NOATIME)
    out |= MS_NOATIME;
  if (v.f_flag & ST_NODIRATIME)
    out |= MS_NODIRATIME;
  if (v.f_flag & ST_RELATIME)
    out |= MS_RELATIME;
  return out;
}

// Every directory from `path`'s first component down (e.g. "/usr/lib" -> "/usr", "/usr/lib").
void add_parents(std::vector<std::string>& dirs, const std::string& path) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at == path.size() || path[at] == '/') {
      auto dir = std::string{new_root} + path.substr(0, at);
      if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
        dirs.push_back(dir);
    }
  }
}

// A plain file name: not empty, no '/', not "." or "..".
bool plain_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." &&
         name.find('\0') == std::string::npos;
}

expected<sandbox_plan> make_plan(const sandbox_request& req) {
  sandbox_plan p;
  const std::string root{new_root};
  // The id maps are the namespace pair's (detail/namespaces.cpp): as root, root and nobody map
  // to themselves; otherwise the node's ids to nobody.
  p.as_root = ::geteuid() == 0;
  const auto& l = req.limits;
  p.root_options = "size=1m,mode=0755";
  p.work_options = "size=" + std::to_string(l.work_bytes) +
                   ",mode=0755,uid=" + std::to_string(defaults::sandbox::uid) +
                   ",gid=" + std::to_string(defaults::sandbox::uid);
  p.tmp_options = "size=" + std::to_string(l.tmp_bytes) + ",mode=1777";
  // Host paths, read-only; /bin, /lib, /lib64 and /sbin as links where the host merged them
  // into /usr, else bound like the rest.
  std::vector<std::string> read_only = req.read_only;
  for (const char* top : {"/bin", "/lib", "/lib64", "/sbin"}) {
    char target[256];
    auto n = ::readlink(top, target, sizeof target - 1);
    if (n > 0) {
      target[n] = '\0';
      p.links.emplace_back(root + top, target);
    } else if (::access(top, F_OK) == 0 &&
               std::find(read_only.begin(), read_only.end(), top) == read_only.end()) {
      read_only.push_back(top);
    }
  }
  for (const auto& path : read_only) {
    struct stat st {};
    if (path.empty() || path[0] != '/' || path.find("/..") != std::string::npos ||
        ::stat(path.c_str(), &st) != 0)
      return make_error(errc::invalid_argument,
                        "sandbox: read-only path '" + path +
                            "' must be an absolute path of an existing directory or file");
    if (S_ISDIR(st.st_mode))
      add_parents(p.dirs, path);
    else
      add_parents(p.dirs, path.substr(0, path.rfind('/')));
    p.binds.push_back({path, root + path, mount_flags_of(path), !S_ISDIR(st.st_mode)});
  }
  for (const auto& path : req.read_write) {
    struct stat st {};
    if (path.empty() || path[0] != '/' || path.find("/..") != std::string::npos ||
        ::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return make_error(errc::invalid_argument,
                        "sandbox: writable path '" + path +
                            "' must be an absolute path of an existing directory");
    add_parents(p.dirs, path);
    p.binds.push_back({path, root + path, mount_flags_of(path), false, true});
  }
  // The dynamic loader's cache (no secret), so programs find their libraries quickly.
  if (::access("/etc/ld.so.cache", R_OK) == 0)
    p.binds.push_back(
        {"/etc/ld.so.cache", root + "/etc/ld.so.cache", mount_flags_of("/etc/ld.so.cache"), true});
  for (const char* dir : {"/etc", "/dev", "/proc", "/tmp", "/work", "/.old"})
    p.base_dirs.push_back(root + dir);
  for (const char* dev : {"null", "zero", "full", "random", "urandom"})
    if (::access((std::string{"/dev/"} + dev).c_str(), F_OK) == 0)
      p.devs.emplace_back(std::string{"/dev/"} + dev, root + "/dev/" + dev);
  p.links.emplace_back(root + "/dev/fd", "/proc/self/fd");
  p.links.emplace_back(root + "/dev/stdin", "/proc/self/fd/0");
  p.links.emplace_back(root + "/dev/stdout", "/proc/self/fd/1");
  p.links.emplace_back(root + "/dev/stderr", "/proc/self/fd/2");
  const std::string uid = std::to_string(defaults::sandbox::uid);
  p.etc_passwd = "root:x:0:0:root:/:/usr/sbin/nologin\nnobody:x:" + uid + ":" + uid +
                 ":nobody:/work:/bin/sh\n";
  p.etc_group = "root:x:0:\nnogroup:x:" + uid + ":\n";
  std::uint64_t total = 0;
  for (const auto& f : req.files) {
    if (!plain_name(f.name))
      return make_error(errc::invalid_argument,
                        "sandbox: file name '" + f.name + "' must be a plain name (no '/')");
    total += f.content.size();
    p.files.emplace_back("/work/" + f.name, &f.content);
  }
  if (total > l.work_bytes)
    return make_error(errc::invalid_argument, "sandbox: the call's files (" +
                                                  std::to_string(total) +
                                                  " bytes) do not fit its /work (" +
                                                  std::to_string(l.work_bytes) + " bytes)");
  for (const auto& name : req.collect) {
    if (!plain_name(name))
      return make_error(errc::invalid_argument,
                        "sandbox: collect name '" + name + "' must be a plain name (no '/')");
    p.collect.push_back("/work/" + name);
  }
  return p;
}

// -- the processes --

// Writes `value` in decimal at `out` with a terminating NUL (at most 11 characters).
void write_number(char* out, int value) {
  char digits[12];
  int len = 0;
  do {
    digits[len++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && len < 11);
  while (len > 0)
    *out++ = digits[--len];
  *out = '\0';
}

// Writes `text` to a new file `path` (mode 0644); false on failure.
bool write_whole(const char* path, const std::string& text, int mode = 0644) {
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return false;
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return ::close(fd) == 0;
}

struct child_args {
  const sandbox_request* req;
  const sandbox_plan* plan;
  int* bind_fds; // one per plan->binds, filled by the init (its own copy)
  char* const* argv;
  char* const* envp;
  int in_fd, out_fd, err_fd, report_fd, go_fd;
  const sock_fprog* filter;
  const sigset_t* signal_mask; // the node thread's, blocked while the init is started
};

// The tool's process (pid 2 in its namespace, vforked): limits, stdio, no privileges, the
// filter, exec. System calls only: it shares the init's memory until the exec.
[[noreturn]] void tool_main(const child_args& a) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr); // the program starts with no signal blocked
  auto set = [](int which, std::uint64_t value) {
    rlimit r{value, value};
    ::setrlimit(which, &r);
  };
  const auto& l = a.req->limits;
  rlimit cpu{l.cpu_seconds, l.cpu_seconds + 1}; // SIGXCPU at the soft limit, SIGKILL after
  ::setrlimit(RLIMIT_CPU, &cpu);
  set(RLIMIT_AS, l.address_space_bytes);
  set(RLIMIT_FSIZE, l.file_size_bytes);
  set(RLIMIT_NOFILE, l.open_files);
  set(RLIMIT_CORE, 0);
  if (a.plan->limit_nproc)
    set(RLIMIT_NPROC, l.processes);
  if (::dup2(a.in_fd, 0) < 0 || ::dup2(a.out_fd, 1) < 0 || ::dup2(a.err_fd, 2) < 0)
    child_fail(a.report_fd, redirect, errno);
  // Every descriptor but stdio and the report pipe (close-on-exec): two close_range calls
  // instead of a close per possible descriptor.
  const unsigned report = static_cast<unsigned>(a.report_fd);
  if (report > 3)
    ::syscall(SYS_close_range, 3u, report - 1, 0u);
  ::syscall(SYS_close_range, std::max(report + 1, 3u), ~0u, 0u);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      (a.filter != nullptr && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, a.filter) != 0))
    child_fail(a.report_fd, seal, errno);
  // The uid is not 0 inside the namespace: exec drops every capability the process had there.
  ::execve(a.argv[0], a.argv, a.envp);
  child_fail(a.report_fd, exec_tool, errno);
}

// The namespace's init (pid 1 of new pid, mount, ipc and uts namespaces inside the call's user
// and network namespaces; a child of the node): builds the new root, becomes the sandbox user,
// waits for its cgroup, starts the tool, reaps everything, and reports the tool's status and
// the sizes of the files to collect. When it exits, the kernel kills whatever is left in the
// pid namespace.
[[noreturn]] void init_main(const child_args& a) {
  ::sigprocmask(SIG_SETMASK, a.signal_mask, nullptr);
  // Every descriptor of the node's but the call's own (stdio of its own aside): another call's
  // pipe end held here would keep that call's tool from seeing the end of its input.
  int keep[] = {a.in_fd, a.out_fd, a.err_fd, a.report_fd, a.go_fd};
  for (std::size_t i = 1; i < std::size(keep); ++i)
    for (std::size_t j = i; j > 0 && keep[j - 1] > keep[j]; --j)
      std::swap(keep[j - 1], keep[j]);
  unsigned from = 3;
  for (int fd : keep) {
    if (fd < 3)
      continue;
    if (static_cast<unsigned>(fd) > from)
      ::syscall(SYS_close_range, from, static_cast<unsigned>(fd) - 1, 0u);
    from = std::max(from, static_cast<unsigned>(fd) + 1);
  }
  ::syscall(SYS_close_range, from, ~0u, 0u);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const auto& p = *a.plan;
  const int fd = a.report_fd;
  char go = 0;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    child_fail(fd, private_mounts, errno);
  // The host paths to bind, held before the new root covers /tmp (a source under the host's
  // /tmp would be hidden by then): bound from /proc/self/fd/N below.
  int* sources = a.bind_fds;
  for (std::size_t i = 0; i < p.binds.size(); ++i)
    if ((sources[i] = ::open(p.binds[i].source.c_str(), O_PATH | O_CLOEXEC)) < 0)
      child_fail(fd, bind_read_only, errno);
  if (::mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, p.root_options.c_str()) != 0)
    child_fail(fd, root_tmpfs, errno);
  for (const auto& d : p.base_dirs)
    if (::mkdir(d.c_str(), 0755) != 0)
      child_fail(fd, make_dirs, errno);
  // /tmp and /work first: a host path bound below one of them (an MCP server's workspace under
  // the host's /tmp) lands inside the tmpfs instead of under it.
  if (::mount("tmpfs", p.tmp_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, p.tmp_options.c_str()) !=
          0 ||
      ::mount("tmpfs", p.work_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, p.work_options.c_str()) !=
          0)
    child_fail(fd, mount_tmpfs, errno);
  for (const auto& d : p.dirs)
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST)
      child_fail(fd, make_dirs, errno);
  for (std::size_t i = 0; i < p.binds.size(); ++i) {
    const auto& b = p.binds[i];
    char source[32] = "/proc/self/fd/";
    write_number(source + 14, sources[i]);
    if (b.file) {
      int f = ::open(b.target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
      if (f < 0)
        child_fail(fd, bind_read_only, errno);
      ::close(f);
    }
    if (::mount(source, b.target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, b.target.c_str(), nullptr,
                MS_REMOUNT | MS_BIND | (b.writable ? 0 : MS_RDONLY) | MS_NOSUID | MS_NODEV | b.keep,
                nullptr) != 0)
      child_fail(fd, bind_read_only, errno);
    ::close(sources[i]);
  }
  const std::string& dev = p.dev_dir;
  if (::mount("tmpfs", dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") != 0)
    child_fail(fd, make_dev, errno);
  for (const auto& [host, target] : p.devs) {
    int f = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (f < 0)
      child_fail(fd, make_dev, errno);
    ::close(f);
    if (::mount(host.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0)
      child_fail(fd, make_dev, errno);
  }
  for (const auto& [link, to] : p.links)
    if (::symlink(to.c_str(), link.c_str()) != 0)
      child_fail(fd, make_links, errno);
  const std::string& shm = p.shm_dir;
  const std::string& proc = p.proc_dir;
  if (::mkdir(shm.c_str(), 01777) != 0 ||
      ::mount("tmpfs", shm.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, p.tmp_options.c_str()) != 0)
    child_fail(fd, mount_tmpfs, errno);
  // /dev holds its nodes, links and /dev/shm: nothing more is written there.
  if (::mount(nullptr, dev.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              "size=64k,mode=0755") != 0)
    child_fail(fd, make_dev, errno);
  if (::mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    send(fd, {report::no_proc, 0, errno});
  if (!write_whole(p.passwd.c_str(), p.etc_passwd) || !write_whole(p.group.c_str(), p.etc_group))
    child_fail(fd, write_etc, errno);
  if (::syscall(SYS_pivot_root, new_root, p.old_dir.c_str()) != 0 || ::chdir("/") != 0 ||
      ::umount2("/.old", MNT_DETACH) != 0 || ::rmdir("/.old") != 0)
    child_fail(fd, pivot, errno);
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    child_fail(fd, remount_root, errno);
  for (const auto& [path, content] : p.files)
    if (!write_whole(path.c_str(), *content, 0644))
      child_fail(fd, write_files, errno);
  if (::chdir("/work") != 0)
    child_fail(fd, enter_work, errno);
  ::sethostname("sandbox", 7);
  // The sandbox user from here on (the node as root mapped its own ids for the setup above).
  const gid_t id = defaults::sandbox::uid;
  // Raw system calls: glibc's wrappers change every thread's ids and take a lock for that, which
  // another of the node's threads may have held when this process was copied (it then never
  // comes free here). This process has one thread.
  if ((p.as_root && ::syscall(SYS_setgroups, 0, nullptr) != 0) ||
      ::syscall(SYS_setresgid, id, id, id) != 0 || ::syscall(SYS_setresuid, id, id, id) != 0)
    child_fail(fd, drop_user, errno);

  // 'c': in the call's cgroup (or none to be had), so the tool starts inside it.
  if (::read(a.go_fd, &go, 1) != 1 || go != 'c')
    child_fail(fd, wait_go, errno);
  ::close(a.go_fd);
  // vfork: no copy of the node's page tables; the tool's process only makes system calls until
  // it executes the program (its rlimits, descriptors and filter are its own).
  pid_t tool = ::vfork();
  if (tool < 0)
    child_fail(fd, fork_tool, errno);
  if (tool == 0)
    tool_main(a);
  ::close(a.in_fd);
  ::close(a.out_fd);
  ::close(a.err_fd);
  int tool_status = 0;
  for (;;) {
    int st = 0;
    pid_t got = ::waitpid(-1, &st, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      break; // no children left
    if (got == tool) {
      tool_status = st;
      break; // the rest dies with this process
    }
  }
  for (std::size_t i = 0; i < p.collect.size(); ++i) {
    struct stat st {};
    send(fd, {report::collected, static_cast<std::int32_t>(i),
              ::stat(p.collect[i].c_str(), &st) == 0 ? st.st_size : -1});
  }
  send(fd, {report::status, tool_status, 0});
  ::_exit(0);
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

// What the launcher hands back to the node (they share memory): the init's pid, or the step
// that failed and its errno.
struct launch {
  const child_args* args;
  int user_fd, net_fd;
  pid_t init = -1;
  std::int32_t failed = 0;
  int err = 0;
};

// The launcher: shares the node's memory and holds the calling thread until it exits
// (posix_spawn's way: nothing of the node is copied for it). It joins the call's user and
// network namespaces and clones the init, as the node's own child (CLONE_PARENT), into new pid,
// mount, ipc and uts namespaces owned by that user namespace (one copy of the node's page
// tables; the tool's process is vforked from the init).
int launcher_main(void* arg) {
  auto& l = *static_cast<launch*>(arg);
  if (::setns(l.user_fd, CLONE_NEWUSER) != 0 || ::setns(l.net_fd, CLONE_NEWNET) != 0) {
    l.failed = join_namespaces;
    l.err = errno;
    ::_exit(0);
  }
  pid_t pid = static_cast<pid_t>(::syscall(
      SYS_clone, CLONE_PARENT | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD,
      nullptr, nullptr, nullptr, nullptr));
  if (pid == 0)
    init_main(*l.args);
  if (pid < 0) {
    l.failed = new_namespaces;
    l.err = errno;
  }
  l.init = pid;
  ::_exit(0);
}

// Starts the init through a launcher (above); its pid, or the step that failed and its errno.
// Every signal is blocked on the calling thread meanwhile (the launcher runs on its memory and
// must take no handler); the init restores the thread's mask. The launcher's stack is a part of
// this function's frame, inside the calling thread's own stack, which the thread does not touch
// while the launcher runs: the init, a copy of it, then runs on a stack its thread's bounds hold
// (AddressSanitizer's vfork and no-return handling read them; on a separate mapping it wrote
// the shadow of everything between it and the thread's stack).
launch start_init(child_args& args, const detail::namespace_lease& lease) {
  launch l{&args, lease.user_fd(), lease.net_fd()};
  alignas(64) std::array<std::byte, 64 * 1024> stack; // left uninitialised
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  args.signal_mask = &old;
  pid_t launcher =
      ::clone(launcher_main, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &l);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (launcher < 0) {
    l.failed = new_namespaces;
    l.err = clone_errno;
  } else {
    int st = 0;
    while (::waitpid(launcher, &st, 0) < 0 && errno == EINTR) {
    }
  }
  return l;
}

} // namespace

// -- sandbox_process --

struct sandbox_process::impl {
  detail::namespace_lease namespaces; // given back last, after the init is reaped
  pid_t pid = -1;
  unique_fd in, out, err, report;
  std::optional<detail::call_cgroup> group;
  std::vector<std::string> isolation, warnings;
  clock_type::time_point started;
  bool reaped = false;
  int status = 0;
  rusage usage{};

  ~impl() {
    if (pid > 0 && !reaped) {
      ::kill(pid, SIGKILL);
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

expected<sandbox_process> sandbox_process::start(const sandbox_request& req) {
  if (req.argv.empty() || req.argv[0].empty() || req.argv[0][0] != '/')
    return make_error(errc::invalid_argument,
                      "sandbox: argv[0] must be an absolute program path, got '" +
                          (req.argv.empty() ? std::string{} : req.argv[0]) + "'");
  auto plan = make_plan(req);
  if (!plan)
    return plan.error();
  auto self = std::make_unique<impl>();
  const auto& program = seccomp_program();
  sock_fprog filter{};
  if (program.error.empty()) {
    filter.len = static_cast<unsigned short>(program.code.size());
    filter.filter = const_cast<sock_filter*>(program.code.data());
  } else {
    self->warnings.push_back("seccomp not applied: " + program.error);
  }
  // Whether a cgroup can be had is known once (the first call makes one); RLIMIT_NPROC is the
  // fallback where none can.
  plan->limit_nproc = plan->as_root && !detail::call_cgroup::supported();
  // argv and envp prepared before the clone: the children may not allocate.
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in[2], out[2], err[2] = {-1, -1}, rep[2], go[2];
  bool piped = ::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0 &&
               ::pipe2(rep, O_CLOEXEC) == 0 && ::pipe2(go, O_CLOEXEC) == 0;
  // A discarded stderr is the host's /dev/null, opened here (the tool's own /dev/null is the
  // same node).
  if (piped && req.discard_stderr)
    piped = (err[1] = ::open("/dev/null", O_WRONLY | O_CLOEXEC)) >= 0;
  else if (piped)
    piped = ::pipe2(err, O_CLOEXEC) == 0;
  if (!piped)
    return make_error(errc::system_error, std::string{"sandbox: pipe: "} + std::strerror(errno));
  unique_fd in_w{in[1]}, out_r{out[0]}, err_r{err[0]}, rep_r{rep[0]}, go_w{go[1]};
  unique_fd in_r{in[0]}, out_w{out[1]}, err_w{err[1]}, rep_w{rep[1]}, go_r{go[0]};
  std::vector<int> bind_fds(plan->binds.size(), -1);
  child_args args{&req,
                  &*plan,
                  bind_fds.data(),
                  argv.data(),
                  envp.data(),
                  in[0],
                  out[1],
                  err[1],
                  rep[1],
                  go[0],
                  program.error.empty() ? &filter : nullptr,
                  nullptr};
  self->started = clock_type::now();
  // The call's user and network namespaces (kept from earlier calls), then its init in them.
  auto lease = detail::namespace_lease::acquire();
  if (!lease)
    return lease.error();
  self->namespaces = std::move(*lease);
  const launch launched = start_init(args, self->namespaces);
  if (launched.init < 0)
    return make_error(errc::unsupported, std::string{"sandbox: cannot start the sandbox ("} +
                                             step_name(launched.failed) + ": " +
                                             std::strerror(launched.err) +
                                             "); the program was not run");
  const pid_t pid = launched.init;
  self->pid = pid;
  in_r.reset();
  out_w.reset();
  err_w.reset();
  rep_w.reset();
  go_r.reset();

  // The init builds its root meanwhile: make the call's cgroup (memory, processes and CPU of the
  // whole tree), move the init in, then let it start the program.
  std::string setup_error;
  {
    if (auto g = detail::call_cgroup::create(
            {req.limits.memory_bytes, req.limits.pids, req.limits.cpus})) {
      self->group.emplace(std::move(*g));
      if (auto attached = self->group->attach(pid); !attached)
        setup_error = attached.error().message;
    } else {
      self->warnings.push_back("no cgroup for the call (" + g.error().message +
                               "): its processes are bounded by rlimits only, not in total");
    }
  }
  if (setup_error.empty() && ::write(go_w.get(), "c", 1) != 1)
    setup_error = std::string{"telling the sandbox to go on: "} + std::strerror(errno);
  go_w.reset();
  if (!setup_error.empty()) {
    // The init may have ended first, at a step it reports: that is the cause to name.
    ::kill(pid, SIGKILL);
    report r{};
    while (::read(rep_r.get(), &r, sizeof r) == sizeof r)
      if (r.kind == report::failed) {
        setup_error = std::string{step_name(r.a)} + ": " + std::strerror(static_cast<int>(r.b));
        break;
      }
    return make_error(errc::unsupported,
                      "sandbox: cannot seal the process off (" + setup_error + "); it was not run");
  }
  self->isolation = {"user_ns", "pid_ns",     "net_ns",         "mount_ns",   "ipc_ns",
                     "uts_ns",  "pivot_root", "read_only_root", "tmpfs_work", "unprivileged_user"};
  if (program.error.empty())
    self->isolation.push_back("seccomp");
  if (self->group)
    self->isolation.push_back(self->group->name());
  if (self->group && self->group->caps_cpu())
    self->isolation.push_back("cpu_cap");
  self->isolation.push_back("rlimits");
  self->in = std::exchange(in_w, unique_fd{});
  self->out = std::exchange(out_r, unique_fd{});
  self->err = std::exchange(err_r, unique_fd{});
  self->report = std::exchange(rep_r, unique_fd{});
  sandbox_process proc;
  proc.impl_ = std::move(self);
  return proc;
}

sandbox_process::sandbox_process() = default;
sandbox_process::sandbox_process(sandbox_process&&) noexcept = default;
sandbox_process& sandbox_process::operator=(sandbox_process&&) noexcept = default;
sandbox_process::~sandbox_process() = default;

pid_t sandbox_process::pid() const noexcept {
  return impl_ ? impl_->pid : -1;
}
int sandbox_process::stdin_fd() const noexcept {
  return impl_ ? impl_->in.get() : -1;
}
int sandbox_process::stdout_fd() const noexcept {
  return impl_ ? impl_->out.get() : -1;
}
int sandbox_process::stderr_fd() const noexcept {
  return impl_ ? impl_->err.get() : -1;
}
void sandbox_process::close_stdin() noexcept {
  if (impl_)
    impl_->in.reset();
}
const std::vector<std::string>& sandbox_process::isolation() const noexcept {
  static const std::vector<std::string> none;
  return impl_ ? impl_->isolation : none;
}
const std::vector<std::string>& sandbox_process::warnings() const noexcept {
  static const std::vector<std::string> none;
  return impl_ ? impl_->warnings : none;
}

void sandbox_process::kill() noexcept {
  if (!impl_ || impl_->reaped)
    return;
  if (impl_->group)
    impl_->group->kill_all();
  ::kill(-impl_->pid, SIGKILL);
  ::kill(impl_->pid, SIGKILL);
}

int sandbox_process::wait() noexcept {
  if (!impl_)
    return 0;
  if (!impl_->reaped) {
    while (::wait4(impl_->pid, &impl_->status, 0, &impl_->usage) < 0 && errno == EINTR) {
    }
    impl_->reaped = true;
    ::kill(-impl_->pid, SIGKILL); // anything of its group still alive
  }
  return impl_->status;
}

expected<sandbox_result> run_sandboxed(const sandbox_request& req) {
  auto started = sandbox_process::start(req);
  if (!started)
    return started.error();
  auto& proc = *started;
  auto& self = *proc.impl_;
  const pid_t pid = self.pid;
  const auto start = self.started;
  auto& group = self.group;
  auto& in_w = self.in;
  auto& out_r = self.out;
  auto& err_r = self.err;
  auto& rep_r = self.report;
  sandbox_result result;
  result.isolation = self.isolation;
  result.warnings = self.warnings;

  // Feed stdin, drain stdout/stderr under the caps, read the reports, enforce the wall clock.
  ::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  std::size_t written = 0;
  if (req.stdin_data.empty())
    in_w.reset();
  // The wall clock: the call's own limit, or the tool call's deadline when that comes sooner.
  auto deadline = std::min(start + req.limits.wall, current_call_deadline());
  bool killed = false;
  std::optional<int> tool_status;
  std::int32_t failed_step = 0;
  int failed_errno = 0;
  result.collected.resize(req.collect.size());
  for (std::size_t i = 0; i < req.collect.size(); ++i)
    result.collected[i] = {req.collect[i], -1};
  char buf[65536];
  while (out_r.get() >= 0 || err_r.get() >= 0 || rep_r.get() >= 0) {
    pollfd fds[4];
    int n = 0;
    if (out_r.get() >= 0)
      fds[n++] = {out_r.get(), POLLIN, 0};
    if (err_r.get() >= 0)
      fds[n++] = {err_r.get(), POLLIN, 0};
    if (rep_r.get() >= 0)
      fds[n++] = {rep_r.get(), POLLIN, 0};
    if (in_w.get() >= 0)
      fds[n++] = {in_w.get(), POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    int timeout = killed ? 1000 : static_cast<int>(std::max<std::int64_t>(0, left.count()));
    int ready = ::poll(fds, static_cast<nfds_t>(n), timeout);
    if (ready < 0 && errno != EINTR)
      break;
    if (ready == 0) {
      if (killed)
        break;
      // The init's death takes the namespace with it; the cgroup and the process group catch
      // the rest.
      if (group)
        group->kill_all();
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      killed = true;
      result.limit = "wall";
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0)
        continue;
      if (fds[i].fd == in_w.get()) {
        auto w = write_no_sigpipe(in_w.get(), req.stdin_data.data() + written,
                                  req.stdin_data.size() - written);
        if (w > 0)
          written += static_cast<std::size_t>(w);
        if ((w < 0 && errno != EAGAIN) || written == req.stdin_data.size())
          in_w.reset();
        continue;
      }
      if (fds[i].fd == rep_r.get()) {
        report r{};
        if (::read(rep_r.get(), &r, sizeof r) != sizeof r) {
          rep_r.reset();
          continue;
        }
        if (r.kind == report::status)
          tool_status = r.a;
        else if (r.kind == report::failed && failed_step == 0)
          failed_step = r.a, failed_errno = static_cast<int>(r.b);
        else if (r.kind == report::collected && r.a >= 0 &&
                 static_cast<std::size_t>(r.a) < result.collected.size())
          result.collected[static_cast<std::size_t>(r.a)].second = r.b;
        else if (r.kind == report::no_proc)
          result.warnings.push_back(std::string{"no /proc in the sandbox: "} +
                                    std::strerror(static_cast<int>(r.b)));
        continue;
      }
      bool is_out = fds[i].fd == out_r.get();
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
  const int st = proc.wait();
  const rusage& usage = self.usage;
  result.wall_seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  result.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  result.peak_rss_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
  if (group && group->peak_bytes() > 0)
    result.peak_rss_bytes = group->peak_bytes();
  if (failed_step != 0) {
    if (failed_step == exec_tool)
      return make_error(errc::system_error, "sandbox: cannot start '" + req.argv[0] +
                                                "': " + std::strerror(failed_errno));
    return make_error(errc::unsupported, "sandbox: cannot seal the process off (" +
                                             std::string{step_name(failed_step)} + ": " +
                                             std::strerror(failed_errno) + "); it was not run");
  }
  // The tool's own status when its init reported it; else the init was killed (the wall
  // clock) before it could.
  int tool = tool_status.value_or(0);
  if (tool_status && WIFEXITED(tool)) {
    result.exit_code = WEXITSTATUS(tool);
  } else if (tool_status && WIFSIGNALED(tool)) {
    result.signal = WTERMSIG(tool);
  } else {
    result.signal = WIFSIGNALED(st) ? WTERMSIG(st) : SIGKILL;
  }
  if (result.signal != 0) {
    if (result.limit.empty() && result.signal == SIGXCPU)
      result.limit = "cpu";
    if (result.limit.empty() && result.signal == SIGXFSZ)
      result.limit = "file_size";
    if (result.limit.empty() && result.signal == SIGKILL &&
        result.cpu_seconds >= req.limits.cpu_seconds)
      result.limit = "cpu";
  }
  if (result.limit.empty() && group && group->oom_killed())
    result.limit = "memory";
  if (result.limit.empty() && (result.exit_code != 0 || result.signal != 0) &&
      hit_address_space_limit(result, req.limits.address_space_bytes))
    result.limit = "memory";
  return result;
}

expected<sandbox_result> probe_sandbox() {
  sandbox_request req;
  req.argv = {"/bin/true"};
  auto r = run_sandboxed(req);
  if (r && (r->exit_code != 0 || r->signal != 0))
    return make_error(errc::unsupported, "sandbox: /bin/true failed in it (exit " +
                                             std::to_string(r->exit_code) + ", signal " +
                                             std::to_string(r->signal) + "): " + r->err);
  return r;
}

} // namespace triad
