#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace triad::detail {

/// The fields of a /proc stat file (a process's or a thread's) from field 3 (the state) to
/// `last` (1-based, as proc(5) numbers them): element i is field i + 3. None when the file is
/// gone or has fewer fields; `name`, if given, receives field 2 (the command, without parens).
std::optional<std::vector<std::string>> read_proc_stat(const std::filesystem::path& stat_file,
                                                       int last, std::string* name = nullptr);

} // namespace triad::detail
