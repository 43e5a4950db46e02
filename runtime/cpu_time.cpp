#include "runtime/cpu_time.hpp"

#include <ctime>

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace triad {

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
  static const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::vector<thread_cpu_time> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator{"/proc/self/task", ec}) {
    std::ifstream stat{task.path() / "stat"};
    std::string line;
    std::getline(stat, line);
    auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 > line.size())
      continue;
    thread_cpu_time t;
    t.name = line.substr(open + 1, close - open - 1);
    // Fields after the name: the state is field 3, utime field 14, stime field 15.
    std::istringstream rest{line.substr(close + 2)};
    std::string field;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14)
        t.cpu.user = std::stod(field) * tick;
      if (i == 15)
        t.cpu.sys = std::stod(field) * tick;
    }
    out.push_back(std::move(t));
  }
  return out;
}

void name_this_thread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

} // namespace triad
