#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "load/target.hpp"

namespace triad::load::detail {

/// Reads an OpenAI event stream as it arrives: `data: {json}` events of chat chunks (or plain
/// completion chunks), an optional usage chunk, `data: [DONE]`, or an error event.
class sse_reader {
public:
  /// Consumes bytes that arrived at `at`.
  void feed(std::string_view bytes, clock_type::time_point at);
  /// Fills `r` (content, tool call, finish reason, usage, token times, ok or the error).
  void finish_into(call_result& r);

private:
  void event(std::string_view payload, clock_type::time_point at);

  std::string pending_;
  struct piece {
    clock_type::time_point at;
    std::size_t bytes;
  };
  std::vector<piece> pieces_; // text-bearing chunks
  std::string content_, tool_name_, tool_args_, tool_id_, finish_, error_;
  std::uint64_t prompt_ = 0, completion_ = 0, cached_ = 0;
  node_usage node_;
  bool usage_ = false, done_ = false;
};

/// Reads a non-streamed chat (or plain) completion body into `r`.
void read_completion(std::string_view body, call_result& r);

} // namespace triad::load::detail
