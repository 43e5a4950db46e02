#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// One span of a trace: a complete event of Chrome's trace-event format ("ph": "X"), shown by
/// Perfetto and chrome://tracing on the track `thread` of the group `process` (a domain, a
/// device: where the work ran).
struct trace_span {
  std::string name;                             ///< what ran, e.g. "decode", "step"
  std::string category;                         ///< "request", "device", ...
  std::string process;                          ///< the track group: "domain0", "device decode0"
  std::string thread;                           ///< the track: "request 17", "driver"
  std::chrono::steady_clock::time_point start;  ///< when it began
  std::chrono::steady_clock::duration length{}; ///< how long it ran
  /// Extra facts shown with the span: (key, value) pairs, the values JSON text (a number, or a
  /// string with its quotes, see trace_string).
  std::vector<std::pair<std::string, std::string>> args;
};

/// `text` as a JSON string, quotes included (for trace_span::args).
std::string trace_string(std::string_view text);

/// A trace file being written: spans from any thread, each written as one JSON line of the
/// trace's `traceEvents` array, with the names of the tracks it uses. The array is closed when
/// the log is destroyed, so the file a stopped node leaves is one JSON document.
class trace_log {
public:
  /// Creates (or truncates) `path` and writes the document's head; the error names the path.
  static expected<std::shared_ptr<trace_log>> open(const std::filesystem::path& path);
  /// Closes the array and the file.
  ~trace_log();
  trace_log(const trace_log&) = delete;
  trace_log& operator=(const trace_log&) = delete;

  /// Writes `span`; thread-safe. Timestamps are microseconds since the log was opened.
  void add(const trace_span& span);
  /// Writes what is buffered to the file (a reader may then open it, less its closing bracket).
  void flush();
  /// Spans written so far.
  std::uint64_t spans() const;
  /// The file written.
  const std::filesystem::path& path() const noexcept { return path_; }

private:
  trace_log(std::filesystem::path path, std::ofstream out);
  // The id of a track group or track (written with its name the first time).
  int process_id(const std::string& name);
  int thread_id(int pid, const std::string& name);
  void separate(); // the comma (or not) before the next event

  std::filesystem::path path_;
  mutable std::mutex mutex_;
  std::ofstream out_;
  std::chrono::steady_clock::time_point origin_;
  std::map<std::string, int> processes_;
  std::map<std::pair<int, std::string>, int> threads_;
  std::uint64_t spans_ = 0;
  bool first_ = true; // no event written yet
};

} // namespace triad
