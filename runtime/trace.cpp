#include "runtime/trace.hpp"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <system_error>
#include <tuple>
#include <vector>

#include "runtime/options.hpp"

namespace triad {

namespace {

// Bytes of formatted events kept (per shard) before they are written to the file.
constexpr std::size_t flush_bytes = 64 << 10;

// The shard of trace_log's buffers the calling thread formats its spans into: its own, but for
// more threads than shards.
std::size_t this_threads_shard(std::size_t shards) {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine % shards;
}
// Spans kept per kept request (a long decode takes part in many device jobs); later ones are
// only in the file, and the kept trace says it was truncated.
constexpr std::size_t max_kept_events = 4096;

// `ns` nanoseconds as microseconds with three decimals ("12.345"), without the locale and
// formatting state of a stream.
void append_us(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ns / 1000);
  out.append(buf, end);
  const auto frac = static_cast<int>(ns % 1000);
  out += '.';
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + frac / 10 % 10);
  out += static_cast<char>('0' + frac % 10);
}

void append_int(std::string& out, long long v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// The metadata events naming a group (process) and a track (thread) in it, as Chrome's format
// writes them.
void append_process_name(std::string& out, int pid, std::string_view name) {
  out += R"({"name":"process_name","ph":"M","pid":)";
  append_int(out, pid);
  out += R"(,"tid":0,"args":{"name":)";
  options::append_quoted(out, name);
  out += "}}";
}

void append_thread_name(std::string& out, int pid, int tid, std::string_view name) {
  out += R"({"name":"thread_name","ph":"M","pid":)";
  append_int(out, pid);
  out += R"(,"tid":)";
  append_int(out, tid);
  out += R"(,"args":{"name":)";
  options::append_quoted(out, name);
  out += "}}";
}

} // namespace

void append_trace_string(std::string& out, std::string_view text) {
  options::append_quoted(out, text);
}

expected<std::shared_ptr<trace_log>> trace_log::open(const std::filesystem::path& path,
                                                     std::size_t kept_bytes) {
  std::ofstream out{path, std::ios::trunc};
  if (!out)
    return make_error(errc::io_error,
                      "trace file " + path.string() + ": cannot be written (" +
                          std::error_code{errno, std::generic_category()}.message() + ")");
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  return std::shared_ptr<trace_log>{new trace_log{path, std::move(out), kept_bytes}};
}

trace_log::trace_log(std::filesystem::path path, std::ofstream out, std::size_t kept_bytes)
    : path_(std::move(path))
    , out_(std::move(out))
    , origin_(clock_type::now())
    , max_kept_bytes_(kept_bytes) {}

trace_log::~trace_log() {
  flush();
  std::lock_guard g{mutex_};
  errno = 0;
  out_ << "\n]}\n";
  out_.close(); // a failure to close (the last bytes not written) is said too
  check_written();
}

void trace_log::append_event_start() {
  buffer_ += ",\n";
}

void trace_log::write_out(std::string& events) {
  // Every event begins with its separator; the file's first one has none.
  const std::size_t skip = first_ && !events.empty() ? 1 : 0;
  first_ = first_ && events.empty();
  errno = 0; // what check_written() says is this write's failure, not an older one
  out_.write(events.data() + skip, static_cast<std::streamsize>(events.size() - skip));
  events.clear();
  check_written();
}

void trace_log::check_written() {
  const int err = errno; // set by the failed call, if it said why
  if (out_ || !write_error_.empty())
    return;
  // Said once, where an operator looks (the node's stderr), and kept for write_error().
  write_error_ = "trace file " + path_.string() + ": a write failed (" +
                 (err != 0 ? std::error_code{err, std::generic_category()}.message()
                           : std::string{"unknown error"}) +
                 "); spans from then on are lost";
  std::fprintf(stderr, "triad: %s\n", write_error_.c_str());
}

std::optional<std::string> trace_log::write_error() const {
  std::lock_guard file{mutex_};
  if (write_error_.empty())
    return std::nullopt;
  return write_error_;
}

// The group `process`'s number, named in the file the first time (the mutex held).
int trace_log::process_id(std::string_view process) {
  auto p = processes_.find(process);
  if (p == processes_.end()) {
    p = processes_.emplace(std::string{process}, static_cast<int>(processes_.size()) + 1).first;
    append_event_start();
    append_process_name(buffer_, p->second, process);
  }
  return p->second;
}

// Names track `tid` of group `pid` in the file (the mutex held).
void trace_log::name_thread(int pid, int tid, std::string_view thread) {
  append_event_start();
  append_thread_name(buffer_, pid, tid, thread);
}

trace_track trace_log::track(std::string_view process, std::string_view thread) {
  std::lock_guard g{mutex_};
  const int pid = process_id(process);
  auto [t, fresh] = threads_.emplace(std::pair{pid, std::string{thread}}, next_tid_);
  if (fresh) {
    ++next_tid_;
    name_thread(pid, t->second, thread);
  }
  return {pid, t->second};
}

trace_track trace_log::new_track(std::string_view process, std::string_view thread,
                                 std::uint64_t owner) {
  std::lock_guard g{mutex_};
  const int pid = process_id(process);
  const int tid = next_tid_++;
  const auto from = buffer_.size();
  name_thread(pid, tid, thread);
  if (auto k = kept_.find(owner); owner != 0 && k != kept_.end()) {
    const auto before = k->second.track_names.size();
    k->second.track_names += ",\n";
    k->second.track_names.append(buffer_, buffer_.find('{', from)); // less the separator
    kept_bytes_ += k->second.track_names.size() - before;
  }
  if (buffer_.size() >= flush_bytes)
    write_out(buffer_);
  return {pid, tid};
}

void trace_log::keep(std::uint64_t id, std::size_t limit) {
  std::lock_guard g{mutex_};
  if (limit == 0 || !kept_.try_emplace(id).second)
    return;
  kept_order_.push_back(id);
  while (kept_order_.size() > limit)
    drop_oldest_kept();
}

// Forgets the oldest kept trace (the mutex held).
void trace_log::drop_oldest_kept() {
  auto k = kept_.find(kept_order_.front());
  kept_bytes_ -= k->second.events.size() + k->second.track_names.size();
  kept_.erase(k);
  kept_order_.pop_front();
}

// Copies the event formatted at events[from..] to the kept traces of `owners` (the mutex held);
// `request_span`: one of a request's own spans (its stages, its root).
void trace_log::copy_to_owners(const std::string& events, std::size_t from, trace_track where,
                               bool request_span, std::span<const std::uint64_t> owners) {
  if (kept_.empty())
    return;
  const auto at = events.find('{', from); // less the separator
  const std::string_view event{events.data() + at, events.size() - at};
  for (auto owner : owners) {
    auto k = kept_.find(owner);
    if (k == kept_.end())
      continue;
    auto& t = k->second;
    // Past the cap only the request's own spans (its stages and root) are still kept, so a
    // truncated trace still covers the request.
    if (t.count >= max_kept_events && !request_span) {
      t.truncated = true;
      continue;
    }
    t.events += ",\n";
    t.events += event;
    t.tracks.emplace(where.pid, where.tid);
    ++t.count;
    kept_bytes_ += event.size() + 2;
  }
  while (kept_bytes_ > max_kept_bytes_ && kept_order_.size() > 1)
    drop_oldest_kept();
}

std::optional<std::string> trace_log::trace_of(std::uint64_t id) const {
  // Copied under the lock (the drivers and requests write spans meanwhile), formatted outside.
  kept_trace t;
  std::vector<std::pair<int, std::string>> process_names;
  std::vector<std::tuple<int, int, std::string>> track_names;
  {
    std::lock_guard g{mutex_};
    auto k = kept_.find(id);
    if (k == kept_.end())
      return std::nullopt;
    t = k->second;
    std::set<int> pids;
    for (auto [pid, tid] : t.tracks)
      pids.insert(pid);
    for (const auto& [name, pid] : processes_)
      if (pids.count(pid))
        process_names.emplace_back(pid, name);
    for (const auto& [key, tid] : threads_) // the remembered tracks (devices) its spans are on
      if (t.tracks.count({key.first, tid}))
        track_names.emplace_back(key.first, tid, key.second);
  }
  std::string out = R"({"displayTimeUnit":"ms","otherData":{"request":)";
  append_int(out, static_cast<long long>(id));
  out += R"(,"spans":)";
  append_int(out, static_cast<long long>(t.count));
  out += t.truncated ? R"(,"truncated":true},"traceEvents":[)"
                     : R"(,"truncated":false},"traceEvents":[)";
  std::string names;
  for (const auto& [pid, name] : process_names) {
    names += ",\n";
    append_process_name(names, pid, name);
  }
  for (const auto& [pid, tid, name] : track_names) {
    names += ",\n";
    append_thread_name(names, pid, tid, name);
  }
  names += t.track_names;
  names += t.events;
  out.append(names.empty() ? names : names.substr(1)); // less the first separator
  out += "\n]}\n";
  return out;
}

void trace_log::add(trace_track where, std::string_view name, std::string_view category,
                    clock_type::time_point start, clock_type::duration length,
                    std::string_view args, std::span<const std::uint64_t> owners) {
  using ns = std::chrono::nanoseconds;
  const auto at = std::chrono::duration_cast<ns>(start - origin_).count();
  const auto dur = std::chrono::duration_cast<ns>(length).count();
  // Formatted into the thread's own shard: writers on other threads do not wait for it.
  auto& shard = shards_[this_threads_shard(shards_.size())];
  std::lock_guard g{shard.mutex};
  auto& out = shard.events;
  const auto from = out.size();
  out += R"(,
{"name":)";
  append_trace_string(out, name);
  out += R"(,"cat":)";
  append_trace_string(out, category);
  out += R"(,"ph":"X","pid":)";
  append_int(out, where.pid);
  out += R"(,"tid":)";
  append_int(out, where.tid);
  out += R"(,"ts":)";
  append_us(out, at);
  out += R"(,"dur":)";
  append_us(out, dur);
  if (!args.empty()) {
    out += R"(,"args":{)";
    out += args;
    out += '}';
  }
  out += '}';
  spans_.fetch_add(1, std::memory_order_relaxed);
  if (!owners.empty()) {
    std::lock_guard kept{mutex_};
    copy_to_owners(out, from, where, category == "request", owners);
  }
  if (out.size() >= flush_bytes) {
    std::lock_guard file{mutex_};
    write_out(buffer_); // the names of the tracks first
    write_out(out);
  }
}

void trace_log::flush() {
  for (auto& shard : shards_) { // each shard's lock, then the file's (as add takes them)
    std::lock_guard g{shard.mutex};
    std::lock_guard file{mutex_};
    write_out(buffer_);
    write_out(shard.events);
  }
  std::lock_guard file{mutex_};
  errno = 0;
  out_.flush();
  check_written();
}

std::uint64_t trace_log::spans() const {
  return spans_.load(std::memory_order_relaxed);
}

} // namespace triad
