#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

namespace triad::test {

/// A file path of a test's own (`<name>-<pid>.json` in the temporary directory), removed when
/// the test ends however it ends (a failed requirement included), so no run leaves files behind.
struct scratch_file {
  /// The path for `name`; nothing is created.
  explicit scratch_file(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             (name + "-" + std::to_string(::getpid()) + ".json")) {}
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
  ~scratch_file() {
    std::error_code ignored; // already gone when the test removed it
    std::filesystem::remove(path, ignored);
  }
  /// Where the test writes.
  std::filesystem::path path;
};

} // namespace triad::test
