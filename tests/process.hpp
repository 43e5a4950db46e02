#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>

namespace triad::test {

/// The output and exit status of a finished child process.
struct process_result {
  std::string out; ///< its stdout
  int status = -1; ///< its exit status, or -1 when it did not exit normally
};

/// Runs a shell command line to completion and captures its stdout (stderr goes to ours).
inline process_result run_command(const std::string& command) {
  process_result result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr)
    return result;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0)
    result.out.append(buf, n);
  int rc = ::pclose(pipe);
  result.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return result;
}

/// The path of a built executable (ctest sets TRIAD_BIN_DIR).
inline std::string binary(const std::string& name) {
  const char* dir = std::getenv("TRIAD_BIN_DIR");
  return std::string{dir != nullptr ? dir : "."} + "/" + name;
}

} // namespace triad::test
