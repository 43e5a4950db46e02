#include "tools/detail/cgroup.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace triad::detail {

namespace {

// Writes `value` to the control file `path`; errno-style text on failure.
bool write_file(const std::string& path, const std::string& value, std::string* why = nullptr) {
  std::ofstream out{path};
  if (out)
    out << value;
  if (out)
    out.flush();
  if (!out && why != nullptr)
    *why = path + ": " + std::strerror(errno);
  return static_cast<bool>(out);
}

std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The value after `key ` on a line of a flat-keyed control file (memory.events, oom_control).
std::uint64_t keyed(const std::string& text, const std::string& key) {
  std::istringstream in{text};
  std::string k;
  std::uint64_t v = 0;
  while (in >> k >> v)
    if (k == key)
      return v;
  return 0;
}

// Where the node's cgroups are, read once: the cgroup2 directory (empty: none) and the v1
// memory, pids and cpu directories (empty: not mounted).
struct places {
  std::string v2;
  std::string v1_memory;
  std::string v1_pids;
  std::string v1_cpu;
};

places find_places() {
  places p;
  // /proc/self/cgroup: "0::/path" (v2), "N:memory:/path", "N:pids:/path" (v1).
  std::string v2_path, memory_path, pids_path, cpu_path;
  {
    std::ifstream in{"/proc/self/cgroup"};
    std::string line;
    while (std::getline(in, line)) {
      auto a = line.find(':');
      auto b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos)
        continue;
      auto controllers = line.substr(a + 1, b - a - 1);
      auto path = line.substr(b + 1);
      if (line.compare(0, a, "0") == 0 && controllers.empty())
        v2_path = path;
      std::istringstream names{controllers};
      std::string name;
      while (std::getline(names, name, ',')) {
        if (name == "memory")
          memory_path = path;
        if (name == "pids")
          pids_path = path;
        if (name == "cpu")
          cpu_path = path;
      }
    }
  }
  // /proc/self/mountinfo: "... mount_point ... - fstype source super_options".
  std::ifstream in{"/proc/self/mountinfo"};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f{line};
    std::string id, parent, dev, root, point, rest;
    f >> id >> parent >> dev >> root >> point;
    auto dash = line.find(" - ");
    if (dash == std::string::npos || root != "/")
      continue;
    std::istringstream tail{line.substr(dash + 3)};
    std::string type, source, options;
    tail >> type >> source >> options;
    if (type == "cgroup2" && !v2_path.empty() && p.v2.empty())
      p.v2 = point + (v2_path == "/" ? "" : v2_path);
    if (type == "cgroup") {
      std::istringstream opts{options};
      std::string o;
      while (std::getline(opts, o, ',')) {
        if (o == "memory" && !memory_path.empty())
          p.v1_memory = point + (memory_path == "/" ? "" : memory_path);
        if (o == "pids" && !pids_path.empty())
          p.v1_pids = point + (pids_path == "/" ? "" : pids_path);
        if (o == "cpu" && !cpu_path.empty())
          p.v1_cpu = point + (cpu_path == "/" ? "" : cpu_path);
      }
    }
  }
  return p;
}

const places& where() {
  static const places p = find_places();
  return p;
}

std::atomic<bool> last_create_ok{true};

// Emptied v1 cgroups kept for the next calls: making and removing a memory cgroup costs a few
// hundred microseconds a call (v2 cgroups are made fresh, since memory.peak cannot be reset on
// every kernel). Removed when the process exits. Each is reused only by the effective uid that
// made it (a process that changed its uid since, a forked test, makes its own).
struct v1_pool {
  struct entry {
    std::vector<std::string> dirs;
    cgroup_limits limits;
    uid_t owner;
  };
  std::mutex m;
  std::vector<entry> idle;
  static constexpr std::size_t max_idle = 16;
  ~v1_pool() {
    for (auto& e : idle)
      for (auto it = e.dirs.rbegin(); it != e.dirs.rend(); ++it)
        ::rmdir(it->c_str());
  }
};

v1_pool& pool() {
  static v1_pool p;
  return p;
}

// cpu.cfs_quota_us for `cpus` CPUs over a 100 ms period (-1: no cap).
std::string v1_quota(double cpus) {
  return cpus > 0 ? std::to_string(static_cast<std::int64_t>(cpus * 100000)) : "-1";
}

std::string fresh_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "triad-call-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

} // namespace

bool call_cgroup::supported() noexcept {
  return last_create_ok.load(std::memory_order_relaxed);
}

expected<call_cgroup> call_cgroup::create(const cgroup_limits& limits) {
  auto made = make(limits);
  last_create_ok.store(made.has_value(), std::memory_order_relaxed);
  return made;
}

expected<call_cgroup> call_cgroup::make(const cgroup_limits& limits) {
  const auto& p = where();
  std::string why;
  call_cgroup g;
  g.limits_ = limits;
  {
    std::unique_lock<std::mutex> lock{pool().m};
    while (!pool().idle.empty() && pool().idle.back().owner != ::geteuid())
      pool().idle.pop_back(); // another uid's: left to it
    if (!pool().idle.empty()) {
      auto e = std::move(pool().idle.back());
      pool().idle.pop_back();
      lock.unlock();
      g.version_ = 1;
      g.dirs_ = std::move(e.dirs);
      bool ok = true;
      if (e.limits.memory_bytes != limits.memory_bytes) {
        ok = write_file(g.dirs_[0] + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes),
                        &why);
        if (exists(g.dirs_[0] + "/memory.memsw.limit_in_bytes"))
          write_file(g.dirs_[0] + "/memory.memsw.limit_in_bytes",
                     std::to_string(limits.memory_bytes));
      }
      if (ok && e.limits.pids != limits.pids)
        ok = write_file(g.dirs_[1] + "/pids.max", std::to_string(limits.pids), &why);
      g.cpu_ = g.dirs_.size() > 2 && limits.cpus > 0;
      if (ok && g.dirs_.size() > 2 && e.limits.cpus != limits.cpus)
        ok = write_file(g.dirs_[2] + "/cpu.cfs_quota_us", v1_quota(limits.cpus), &why);
      g.oom_base_ = keyed(read_file(g.dirs_[0] + "/memory.oom_control"), "oom_kill");
      if (ok)
        return g;
      return make_error(errc::system_error, "cgroup v1: " + why);
    }
  }
  // cgroup v2: a child of the node's cgroup, which must hand memory and pids to children.
  if (!p.v2.empty()) {
    auto controllers = read_file(p.v2 + "/cgroup.subtree_control");
    bool memory = controllers.find("memory") != std::string::npos;
    bool pids = controllers.find("pids") != std::string::npos;
    if (!memory || !pids) {
      write_file(p.v2 + "/cgroup.subtree_control", "+memory +pids +cpu");
      controllers = read_file(p.v2 + "/cgroup.subtree_control");
      memory = controllers.find("memory") != std::string::npos;
      pids = controllers.find("pids") != std::string::npos;
    }
    if (memory && pids) {
      auto dir = p.v2 + "/" + fresh_name();
      if (::mkdir(dir.c_str(), 0755) == 0) {
        g.version_ = 2;
        g.dirs_ = {dir};
        g.cpu_ = controllers.find("cpu") != std::string::npos && limits.cpus > 0;
        bool ok = write_file(dir + "/memory.max", std::to_string(limits.memory_bytes), &why) &&
                  write_file(dir + "/pids.max", std::to_string(limits.pids), &why);
        if (exists(dir + "/memory.swap.max"))
          write_file(dir + "/memory.swap.max", "0");
        if (g.cpu_)
          ok = ok && write_file(dir + "/cpu.max",
                                std::to_string(static_cast<std::uint64_t>(limits.cpus * 100000)) +
                                    " 100000",
                                &why);
        if (ok)
          return g;
        return make_error(errc::system_error, "cgroup v2: " + why);
      }
      why = "cgroup v2: cannot make " + dir + ": " + std::strerror(errno);
    } else {
      why = "cgroup v2: " + p.v2 + " does not hand the memory and pids controllers to children";
    }
  }
  // cgroup v1: the memory and pids hierarchies.
  if (!p.v1_memory.empty() && !p.v1_pids.empty()) {
    auto name = fresh_name();
    auto memory_dir = p.v1_memory + "/" + name;
    auto pids_dir = p.v1_pids + "/" + name;
    if (::mkdir(memory_dir.c_str(), 0755) == 0) {
      if (::mkdir(pids_dir.c_str(), 0755) == 0) {
        g.version_ = 1;
        g.dirs_ = {memory_dir, pids_dir};
        bool ok = write_file(memory_dir + "/memory.limit_in_bytes",
                             std::to_string(limits.memory_bytes), &why) &&
                  write_file(pids_dir + "/pids.max", std::to_string(limits.pids), &why);
        if (exists(memory_dir + "/memory.memsw.limit_in_bytes"))
          write_file(memory_dir + "/memory.memsw.limit_in_bytes",
                     std::to_string(limits.memory_bytes));
        // The CPU cap where the v1 cpu hierarchy is there and writable (else none: no error).
        if (auto cpu_dir = p.v1_cpu + "/" + name;
            ok && !p.v1_cpu.empty() && ::mkdir(cpu_dir.c_str(), 0755) == 0) {
          g.dirs_.push_back(cpu_dir);
          g.cpu_ = limits.cpus > 0;
          ok = write_file(cpu_dir + "/cpu.cfs_period_us", "100000", &why) &&
               write_file(cpu_dir + "/cpu.cfs_quota_us", v1_quota(limits.cpus), &why);
        }
        if (ok)
          return g;
        return make_error(errc::system_error, "cgroup v1: " + why);
      }
      why += (why.empty() ? "" : "; ") + std::string{"cgroup v1: cannot make "} + pids_dir + ": " +
             std::strerror(errno);
      ::rmdir(memory_dir.c_str());
    } else {
      why += (why.empty() ? "" : "; ") + std::string{"cgroup v1: cannot make "} + memory_dir +
             ": " + std::strerror(errno);
    }
  } else if (why.empty()) {
    why = "no cgroup v2 nor v1 memory and pids hierarchies are mounted";
  }
  return make_error(errc::unsupported, why);
}

call_cgroup::call_cgroup(call_cgroup&& other) noexcept
    : version_(other.version_)
    , dirs_(std::move(other.dirs_))
    , limits_(other.limits_)
    , cpu_(other.cpu_)
    , oom_base_(other.oom_base_) {
  other.dirs_.clear();
  other.version_ = 0;
}

call_cgroup::~call_cgroup() {
  if (dirs_.empty())
    return;
  // An emptied v1 cgroup goes back to the pool, its peak reset.
  if (version_ == 1) {
    kill_all();
    bool empty = true;
    for (const auto& dir : dirs_)
      empty = empty && read_file(dir + "/cgroup.procs").empty();
    if (empty && write_file(dirs_[0] + "/memory.max_usage_in_bytes", "0")) {
      std::lock_guard<std::mutex> lock{pool().m};
      if (pool().idle.size() < v1_pool::max_idle) {
        pool().idle.push_back({std::move(dirs_), limits_, ::geteuid()});
        dirs_.clear();
        return;
      }
    }
  }
  // The processes must be gone before the directory can go: kill, then wait for the kernel to
  // reap them (a few ms), then remove.
  for (int attempt = 0; attempt < 200; ++attempt) {
    kill_all();
    bool removed = true;
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it)
      if (exists(*it) && ::rmdir(it->c_str()) != 0)
        removed = false;
    if (removed)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
}

expected<void> call_cgroup::attach(pid_t pid) {
  std::string why;
  for (const auto& dir : dirs_)
    if (!write_file(dir + "/cgroup.procs", std::to_string(pid), &why))
      return make_error(errc::system_error,
                        "cgroup: cannot move process " + std::to_string(pid) + " in: " + why);
  return {};
}

std::uint64_t call_cgroup::peak_bytes() const {
  if (dirs_.empty())
    return 0;
  auto text = read_file(dirs_[0] + (version_ == 2 ? "/memory.peak" : "/memory.max_usage_in_bytes"));
  return text.empty() ? 0 : std::strtoull(text.c_str(), nullptr, 10);
}

bool call_cgroup::oom_killed() const {
  if (dirs_.empty())
    return false;
  if (version_ == 2)
    return keyed(read_file(dirs_[0] + "/memory.events"), "oom_kill") > 0;
  return keyed(read_file(dirs_[0] + "/memory.oom_control"), "oom_kill") > oom_base_;
}

void call_cgroup::kill_all() {
  if (dirs_.empty())
    return;
  if (version_ == 2 && write_file(dirs_[0] + "/cgroup.kill", "1"))
    return;
  for (const auto& dir : dirs_) {
    std::ifstream in{dir + "/cgroup.procs"};
    pid_t pid = 0;
    while (in >> pid)
      ::kill(pid, SIGKILL);
  }
}

std::string call_cgroup::name() const {
  return version_ == 2 ? "cgroup_v2" : "cgroup_v1";
}

std::string call_cgroup::describe() const {
  return "memory " + std::to_string(limits_.memory_bytes) + " B, pids " +
         std::to_string(limits_.pids) +
         (cpu_ ? ", cpu " + std::to_string(limits_.cpus) : std::string{});
}

} // namespace triad::detail
