#include "runtime/trace.hpp"

#include <cstring>
#include <iomanip>
#include <system_error>

namespace triad {

std::string trace_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

expected<std::shared_ptr<trace_log>> trace_log::open(const std::filesystem::path& path) {
  std::ofstream out{path, std::ios::trunc};
  if (!out)
    return make_error(errc::io_error,
                      "trace file " + path.string() + ": cannot be written (" +
                          std::error_code{errno, std::generic_category()}.message() + ")");
  out << std::fixed << std::setprecision(3); // microseconds, to the nanosecond
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  return std::shared_ptr<trace_log>{new trace_log{path, std::move(out)}};
}

trace_log::trace_log(std::filesystem::path path, std::ofstream out)
    : path_(std::move(path))
    , out_(std::move(out))
    , origin_(std::chrono::steady_clock::now()) {}

trace_log::~trace_log() {
  std::lock_guard g{mutex_};
  out_ << "\n]}\n";
  out_.flush();
}

void trace_log::separate() {
  out_ << (first_ ? "\n" : ",\n");
  first_ = false;
}

int trace_log::process_id(const std::string& name) {
  auto [it, fresh] = processes_.emplace(name, static_cast<int>(processes_.size()) + 1);
  if (fresh)
    separate(), out_ << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << it->second
                     << ",\"tid\":0,\"args\":{\"name\":" << trace_string(name) << "}}";
  return it->second;
}

int trace_log::thread_id(int pid, const std::string& name) {
  auto [it, fresh] = threads_.emplace(std::pair{pid, name}, static_cast<int>(threads_.size()) + 1);
  if (fresh)
    separate(), out_ << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << pid
                     << ",\"tid\":" << it->second << ",\"args\":{\"name\":" << trace_string(name)
                     << "}}";
  return it->second;
}

void trace_log::add(const trace_span& span) {
  using us = std::chrono::duration<double, std::micro>;
  std::lock_guard g{mutex_};
  const int pid = process_id(span.process);
  const int tid = thread_id(pid, span.thread);
  separate();
  out_ << "{\"name\":" << trace_string(span.name) << ",\"cat\":" << trace_string(span.category)
       << ",\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << tid
       << ",\"ts\":" << us(span.start - origin_).count() << ",\"dur\":" << us(span.length).count();
  if (!span.args.empty()) {
    out_ << ",\"args\":{";
    for (std::size_t i = 0; i < span.args.size(); ++i)
      out_ << (i == 0 ? "" : ",") << trace_string(span.args[i].first) << ':' << span.args[i].second;
    out_ << '}';
  }
  out_ << '}';
  ++spans_;
}

void trace_log::flush() {
  std::lock_guard g{mutex_};
  out_.flush();
}

std::uint64_t trace_log::spans() const {
  std::lock_guard g{mutex_};
  return spans_;
}

} // namespace triad
