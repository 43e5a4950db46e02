#include "bench/report.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <boost/json/serialize.hpp>

namespace triad::bench {

bool report::write(const std::string& path) const {
  boost::json::object out;
  out["metrics"] = metrics;
  out["ratios"] = ratios;
  out["quick"] = quick;
  std::ofstream file{path};
  if (!file) {
    std::fprintf(stderr, "cannot open '%s' for writing\n", path.c_str());
    return false;
  }
  file << boost::json::serialize(out) << "\n";
  return static_cast<bool>(file);
}

bool writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || fs::is_directory(path, ec))
    return false;
  if (fs::exists(path, ec))
    return ::access(path.c_str(), W_OK) == 0;
  auto dir = fs::path{path}.parent_path();
  if (dir.empty())
    dir = ".";
  return fs::is_directory(dir, ec) && ::access(dir.c_str(), W_OK | X_OK) == 0;
}

int report::finish(const std::string& json_path) const {
  print();
  return !json_path.empty() && !write(json_path) ? 1 : 0;
}

void report::print() const {
  for (const auto& [key, value] : metrics)
    std::printf("metric %-40s %s\n", std::string{key}.c_str(),
                boost::json::serialize(value).c_str());
  for (const auto& [key, value] : ratios)
    std::printf("ratio  %-40s %s\n", std::string{key}.c_str(),
                boost::json::serialize(value).c_str());
}

} // namespace triad::bench
