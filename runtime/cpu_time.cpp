#include "runtime/cpu_time.hpp"
#include "runtime/detail/proc_stat.hpp"

#include <ctime>

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>

#include <sys/syscall.h>

namespace triad {

std::optional<std::vector<std::string>>
detail::read_proc_stat(const std::filesystem::path& stat_file, int last, std::string* name) {
  std::ifstream stat{stat_file};
  std::string line;
  if (!std::getline(stat, line))
    return std::nullopt;
  auto open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 > line.size())
    return std::nullopt;
  if (name != nullptr)
    *name = line.substr(open + 1, close - open - 1);
  std::istringstream rest{line.substr(close + 2)};
  std::vector<std::string> out;
  for (std::string field; static_cast<int>(out.size()) + 3 <= last && rest >> field;)
    out.push_back(std::move(field));
  if (static_cast<int>(out.size()) + 3 <= last)
    return std::nullopt;
  return out;
}

namespace {

// User and system time of one thread from a /proc stat file (its clock ticks); none when the
// file is gone (the thread ended) or does not parse.
std::optional<cpu_times> read_thread_stat(const std::filesystem::path& stat_file,
                                          std::string* name = nullptr) {
  static const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  auto fields = detail::read_proc_stat(stat_file, 15, name); // utime 14, stime 15
  if (!fields)
    return std::nullopt;
  return cpu_times{std::stod((*fields)[14 - 3]) * tick, std::stod((*fields)[15 - 3]) * tick};
}

// The threads counted by role: the live ones by tid, and what ended ones used, per role.
struct role_registry {
  using key = std::pair<int, std::string>; // domain, role
  std::mutex mutex;
  std::map<pid_t, key> live;
  std::map<key, cpu_times> ended;

  static role_registry& get() {
    // Never destroyed: a thread the process abandons (a tool worker given up) may end after
    // static destructors have run.
    static auto* r = new role_registry;
    return *r;
  }
};

pid_t this_tid() {
  return static_cast<pid_t>(::syscall(SYS_gettid));
}

} // namespace

cpu_times process_cpu() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return {sec(ru.ru_utime), sec(ru.ru_stime)};
}

double this_thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<thread_cpu_time> process_threads_cpu() {
  std::vector<thread_cpu_time> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator{"/proc/self/task", ec}) {
    thread_cpu_time t;
    if (auto cpu = read_thread_stat(task.path() / "stat", &t.name)) {
      t.cpu = *cpu;
      out.push_back(std::move(t));
    }
  }
  return out;
}

void begin_thread_role(int domain, std::string role) {
  auto& r = role_registry::get();
  std::lock_guard g{r.mutex};
  r.live[this_tid()] = {domain, std::move(role)};
}

void end_thread_role() {
  auto& r = role_registry::get();
  auto last = read_thread_stat("/proc/thread-self/stat");
  std::lock_guard g{r.mutex};
  auto it = r.live.find(this_tid());
  if (it == r.live.end())
    return;
  if (last)
    r.ended[it->second] += *last;
  r.live.erase(it);
}

std::vector<role_cpu_time> roles_cpu() {
  auto& r = role_registry::get();
  std::map<role_registry::key, cpu_times> by_role;
  {
    std::lock_guard g{r.mutex};
    by_role = r.ended; // what the ended threads used, then the live ones beside it
    for (const auto& [tid, k] : r.live) {
      auto& cpu = by_role[k]; // the role shows even before its threads used a tick
      if (auto now = read_thread_stat("/proc/self/task/" + std::to_string(tid) + "/stat"))
        cpu += *now;
    }
  }
  std::vector<role_cpu_time> out;
  for (auto& [k, cpu] : by_role)
    out.push_back({k.first, k.second, cpu});
  return out;
}

void name_this_thread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

} // namespace triad
