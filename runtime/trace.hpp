#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/error.hpp"
#include "runtime/node_clock.hpp"

namespace triad {

/// A track of a trace: the group `process` (a domain, a device: where the work ran) and the
/// track `thread` in it ("request 17", "driver"), as trace_log::track numbered them.
struct trace_track {
  int pid = 0; ///< the group's number in the file
  int tid = 0; ///< the track's number in the file
};

/// `text` appended to `out` as a JSON string, quotes included (for a span's arguments).
void append_trace_string(std::string& out, std::string_view text);

/// A trace file being written: Chrome's trace-event format, which Perfetto and chrome://tracing
/// open. Spans come from any thread; each is one complete event ("ph": "X") on one line of the
/// `traceEvents` array, after the names of the tracks it uses. The array is closed when the log
/// is destroyed, so the file a stopped node leaves is one JSON document.
class trace_log {
public:
  using clock_type = node_clock; ///< the clock of the spans' times (virtual time included)

  /// Creates (or truncates) `path` and writes the document's head; the error names the path.
  /// `kept_bytes`: the memory the kept requests' traces (keep()) take at most.
  static expected<std::shared_ptr<trace_log>> open(const std::filesystem::path& path,
                                                   std::size_t kept_bytes = std::size_t{64} << 20);
  /// Closes the array and the file.
  ~trace_log();
  trace_log(const trace_log&) = delete;
  trace_log& operator=(const trace_log&) = delete;

  /// The track `thread` of group `process`, named in the file the first time it is asked for;
  /// a caller that writes many spans asks once and keeps it.
  trace_track track(std::string_view process, std::string_view thread);
  /// A new track `thread` of group `process`, numbered and named now and not remembered (the log
  /// keeps nothing per track): for a writer that lives shortly, as a request does. `owner`: the
  /// kept request (keep()) whose trace names this track, or 0.
  trace_track new_track(std::string_view process, std::string_view thread, std::uint64_t owner = 0);
  /// Writes one span on `where`; thread-safe. `args`: the span's arguments as the members of a
  /// JSON object without its braces (`"steps":7,"requests":"3"`), or empty. Times are written in
  /// microseconds since the log was opened.
  /// `owners`: the requests the span belongs to; a copy goes to the trace of each that is kept.
  void add(trace_track where, std::string_view name, std::string_view category,
           clock_type::time_point start, clock_type::duration length, std::string_view args = {},
           std::span<const std::uint64_t> owners = {});
  /// Keeps request `id`'s spans in memory as well, so trace_of() can answer for it (a client
  /// asked for its trace); the `limit` most recent kept requests stay, under open()'s
  /// `kept_bytes` in all, the oldest going first.
  void keep(std::uint64_t id, std::size_t limit);
  /// The spans of kept request `id` as a Chrome trace-event document of their own (with the
  /// names of their tracks), or none when it was not kept or was dropped for newer ones.
  std::optional<std::string> trace_of(std::uint64_t id) const;
  /// Writes what is buffered to the file (a reader may then open it, less its closing bracket).
  void flush();
  /// The first failed write to the file (a full disk, say), naming the file; none while every
  /// write succeeded. It is also said once on stderr when it happens.
  std::optional<std::string> write_error() const;
  /// Spans written so far.
  std::uint64_t spans() const;
  /// The file written.
  const std::filesystem::path& path() const noexcept { return path_; }

private:
  trace_log(std::filesystem::path path, std::ofstream out, std::size_t kept_bytes);
  void append_event_start(); // the separator before the next event, into buffer_
  int process_id(std::string_view process);
  void name_thread(int pid, int tid, std::string_view thread);
  void write_out(std::string& events); // to the file, emptied (mutex_ held)
  void check_written();                // notes the first failed write (mutex_ held)
  void copy_to_owners(const std::string& events, std::size_t from, trace_track where,
                      bool request_span, std::span<const std::uint64_t> owners);
  void drop_oldest_kept();

  // The spans of a kept request: its events, the tracks they are on, the names of tracks made
  // for it (new_track), capped at max_kept_events.
  struct kept_trace {
    std::string events;
    std::string track_names;
    std::set<std::pair<int, int>> tracks;
    std::size_t count = 0;
    bool truncated = false;
  };

  // Spans formatted and not yet written, by the threads that wrote them: a thread takes only
  // its own shard's lock for a span (the file's too when the shard is full, or the span goes
  // to a kept trace). Lock order: a shard's, then mutex_.
  struct shard {
    std::mutex mutex;
    std::string events; // each with its separator before it
  };

  std::filesystem::path path_;
  mutable std::mutex mutex_; // the file, the tracks' names and numbers, the kept traces
  std::ofstream out_;
  std::string buffer_; // formatted track names not yet written to out_
  std::array<shard, 8> shards_;
  clock_type::time_point origin_;
  std::map<std::string, int, std::less<>> processes_;
  std::map<std::pair<int, std::string>, int> threads_;
  std::map<std::uint64_t, kept_trace> kept_;
  std::deque<std::uint64_t> kept_order_; // oldest first
  std::size_t kept_bytes_ = 0;           // of the kept traces' events and track names
  std::size_t max_kept_bytes_;           // the bound of kept_bytes_ (open's kept_bytes)
  std::atomic<std::uint64_t> spans_{0};
  std::string write_error_; // the first failed write (empty: none)
  int next_tid_ = 1;        // the number of the next track
  bool first_ = true; // no event written to the file yet
};

} // namespace triad
