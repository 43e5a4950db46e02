#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <sys/resource.h>
#include <unistd.h>

#include "runtime/cpu_time.hpp"
#include "runtime/detail/proc_stat.hpp"
#include "runtime/metrics.hpp"

namespace triad {

namespace {

// Entries of a /proc directory (open descriptors, threads).
double count_entries(const char* dir) {
  std::error_code ec;
  double n = 0;
  for (auto it = std::filesystem::directory_iterator{dir, ec};
       !ec && it != std::filesystem::directory_iterator{}; it.increment(ec))
    ++n;
  return n;
}

// The process's start in seconds since the epoch: its start time in clock ticks after boot
// (/proc/self/stat field 22) plus the boot time (/proc/stat btime).
double start_time_seconds() {
  auto fields = detail::read_proc_stat("/proc/self/stat", 22); // starttime is field 22
  if (!fields)
    return 0;
  std::ifstream sys{"/proc/stat"};
  double boot = 0;
  for (std::string key; sys >> key;)
    if (key == "btime") {
      sys >> boot;
      break;
    }
  return boot + std::stod((*fields)[22 - 3]) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The process's metrics as the Prometheus client libraries export them, and the CPU of each
// domain's threads by role, read at each scrape.
struct process_collector {
  counter* cpu = nullptr;
  gauge *resident = nullptr, *virtual_bytes = nullptr, *open_fds = nullptr, *max_fds = nullptr,
        *threads = nullptr;
  metrics_registry* registry = nullptr;

  void operator()() const {
    cpu->advance_to(process_cpu().total());
    std::ifstream statm{"/proc/self/statm"};
    double pages_virtual = 0, pages_resident = 0;
    statm >> pages_virtual >> pages_resident;
    const auto page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    virtual_bytes->set(pages_virtual * page);
    resident->set(pages_resident * page);
    open_fds->set(count_entries("/proc/self/fd"));
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0)
      max_fds->set(static_cast<double>(lim.rlim_cur));
    threads->set(count_entries("/proc/self/task"));
    for (const auto& r : roles_cpu()) {
      auto c = registry->add_counter(
          "triad_thread_cpu_seconds_total",
          "CPU seconds (user and system) of the process's threads, by domain and role: CAF "
          "workers (worker) and clock, device drivers (driver), tool workers (tool).",
          {{"domain", "domain" + std::to_string(r.domain)}, {"role", r.role}});
      if (c)
        (*c)->advance_to(r.cpu.total());
    }
  }
};

} // namespace

expected<void> add_process_metrics(metrics_registry& registry) {
  process_collector c;
  c.registry = &registry;
  auto cpu = registry.add_counter("process_cpu_seconds_total",
                                  "Total user and system CPU time spent in seconds.");
  auto resident =
      registry.add_gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  auto virt = registry.add_gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
  auto open_fds = registry.add_gauge("process_open_fds", "Number of open file descriptors.");
  auto max_fds = registry.add_gauge("process_max_fds", "Maximum number of open file descriptors.");
  auto threads = registry.add_gauge("process_threads", "Number of OS threads in the process.");
  auto start = registry.add_gauge("process_start_time_seconds",
                                  "Start time of the process since unix epoch in seconds.");
  for (const auto* e : {&resident, &virt, &open_fds, &max_fds, &threads, &start})
    if (!*e)
      return e->error();
  if (!cpu)
    return cpu.error();
  c.cpu = *cpu;
  c.resident = *resident;
  c.virtual_bytes = *virt;
  c.open_fds = *open_fds;
  c.max_fds = *max_fds;
  c.threads = *threads;
  (*start)->set(start_time_seconds());
  registry.add_collector(c);
  return {};
}

} // namespace triad
