#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// A child process whose stdout and stderr go to a log file, for what drives other processes
/// (benchmarks and tests of a cluster of nodes): killed (SIGKILL) and reaped when destroyed,
/// unless it ended or was killed before.
class child_process {
public:
  /// Starts `argv` (argv[0] a path) with its output in `log` (truncated).
  static expected<child_process> start(std::vector<std::string> argv, std::filesystem::path log);
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  /// Kills and reaps it, unless it ended.
  ~child_process();

  /// Its process id (-1 once reaped).
  pid_t pid() const noexcept { return pid_; }
  /// Sends `sig` and reaps it (a signal that does not end it blocks until it ends).
  void kill(int sig);
  /// Whether it still runs (reaps it when it ended).
  bool running();
  /// Its output so far.
  std::string log() const;
  /// Group 1 of the first match of `pattern` in its output (the whole match without a group),
  /// waited for up to `limit`; an error with its output when it ends first or the time passes.
  expected<std::string> wait_for(const std::string& pattern, std::chrono::milliseconds limit);

private:
  child_process(pid_t pid, std::filesystem::path log)
      : pid_(pid)
      , log_(std::move(log)) {}
  pid_t pid_ = -1;
  std::filesystem::path log_;
};

} // namespace triad
