#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/json/object.hpp>

#include "server/openai.hpp"

namespace triad {

/// A `POST /v1/responses` body as the chat-completions request it asks for, and where each of
/// that request's messages came from ("instructions", "input", "input[3]").
struct responses_request {
  std::string chat_body;            ///< the chat-completions JSON body
  std::vector<std::string> origins; ///< per message of chat_body, its Responses field
};

/// Translates a `POST /v1/responses` body (OpenAI's Responses API, which agent SDKs use) into the
/// chat-completions request it asks for, so one parser checks both: `input` (a string, or items:
/// messages with roles system, developer, user, assistant and content a string or
/// input_text/output_text parts; `function_call` and `function_call_output` items),
/// `instructions` (a system message first), `tools` (`{"type": "function", "name",
/// "description", "parameters", "strict"}`), `tool_choice` (none, auto, required,
/// `{"type": "function", "name"}`), `parallel_tool_calls`, `max_output_tokens`, `temperature`,
/// `top_p`, `text.format` (text, json_object, json_schema), `stream`, `user`, `metadata`
/// (ignored) and the `triad` extension. The node keeps no responses (`store` is ignored), so
/// `previous_response_id` is refused. Errors name the Responses field (`input[2].call_id`).
std::variant<responses_request, api_error> responses_to_chat(std::string_view body);

/// A chat error's param in the Responses request's terms: `messages[k]...` becomes the input
/// item it came from (`origins[k]`), `max_tokens` `max_output_tokens`, `response_format`
/// `text.format`, `tools[i].function.x` `tools[i].x`, `tool_choice.function.name`
/// `tool_choice.name`.
std::string responses_param(const std::string& chat_param, const std::vector<std::string>& origins);

/// A request's events as a Responses API answer: a completion_stream (streamed chat chunks)
/// underneath, turned into `response.*` server-sent events (response.created, in_progress,
/// output_item.added / done, content_part.added / done, output_text.delta / done,
/// function_call_arguments.delta / done, completed or incomplete, each with its
/// sequence_number), or one `response` object at the end.
class response_stream {
public:
  /// An answer for `options` (its id becomes "resp_..."), streamed when `stream`.
  response_stream(completion_options options, bool stream);
  /// Takes the request's next event.
  completion_output on_event(const request_event& ev);
  /// Whether a stop string ended the answer.
  bool stopped_by_string() const noexcept { return chat_.stopped_by_string(); }
  /// The node's id of the request, once submitted.
  void set_request(std::uint64_t id) noexcept { chat_.set_request(id); }

private:
  void on_chunk(const boost::json::object& chunk, completion_output& out);
  void emit(std::string type, boost::json::object fields, completion_output& out);
  boost::json::object response_json(std::string_view status) const;
  void close_text(completion_output& out);
  void add_text(std::string_view text, completion_output& out, bool force = false);
  void close_calls(completion_output& out);

  completion_options options_;
  bool stream_;
  completion_stream chat_; // streamed chat chunks, read back here
  std::string id_;
  std::uint64_t sequence_ = 0;
  bool created_ = false, text_open_ = false, finished_ = false;
  std::string text_;
  std::string finish_;
  boost::json::array output_;                 // finished output items
  std::string blank_;                         // white space no message holds yet
  // The function_call items being written, by their chat index: where each is in output_ (its
  // place taken when it began) and its arguments so far.
  struct open_call {
    std::size_t output_index = 0;
    std::string arguments;
  };
  std::map<std::int64_t, open_call> calls_;
  boost::json::object usage_;
};

} // namespace triad
