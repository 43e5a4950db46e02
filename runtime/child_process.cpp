#include "runtime/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

namespace triad {

expected<child_process> child_process::start(std::vector<std::string> argv,
                                             std::filesystem::path log) {
  if (argv.empty())
    return make_error(errc::invalid_argument, "child_process: no program");
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_error, "cannot write " + log.string());
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return make_error(errc::system_error, "fork failed for " + argv[0]);
  }
  if (pid == 0) {
    if (::dup2(fd, STDOUT_FILENO) < 0 || ::dup2(fd, STDERR_FILENO) < 0)
      ::_exit(127);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fd);
  return child_process{pid, std::move(log)};
}

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1))
    , log_(std::move(other.log_)) {}

child_process& child_process::operator=(child_process&& other) noexcept {
  if (this != &other) {
    kill(SIGKILL);
    pid_ = std::exchange(other.pid_, -1);
    log_ = std::move(other.log_);
  }
  return *this;
}

child_process::~child_process() {
  kill(SIGKILL);
}

void child_process::kill(int sig) {
  if (pid_ <= 0)
    return;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool child_process::running() {
  if (pid_ <= 0)
    return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

std::string child_process::log() const {
  std::ifstream in{log_};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

expected<std::string> child_process::wait_for(const std::string& pattern,
                                              std::chrono::milliseconds limit) {
  const std::regex re{pattern};
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto text = log();
    std::smatch m;
    if (std::regex_search(text, m, re))
      return m.size() > 1 ? m[1].str() : m[0].str();
    if (!running())
      return make_error(errc::stopped, log_.filename().string() + ": ended before printing /" +
                                           pattern + "/: " + text);
    if (std::chrono::steady_clock::now() > until)
      return make_error(errc::timed_out, log_.filename().string() + ": did not print /" + pattern +
                                             "/ in " + std::to_string(limit.count()) +
                                             " ms: " + text);
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
}

} // namespace triad
