#include <algorithm>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "server/responses.hpp"
#include "tests/printers.hpp"

namespace {

namespace json = boost::json;

// The chat request a Responses body becomes, parsed.
json::value chat_of(std::string_view body) {
  auto r = triad::responses_to_chat(body);
  if (auto* e = std::get_if<triad::api_error>(&r))
    BOOST_FAIL("refused: " + e->message);
  return json::parse(std::get<triad::responses_request>(r).chat_body);
}

triad::request_event token(char c) {
  triad::request_event ev;
  ev.kind = triad::request_event::token;
  ev.tok = static_cast<unsigned char>(c);
  ev.text = std::string(1, c);
  return ev;
}

triad::request_event done(triad::finish_reason why) {
  triad::request_event ev;
  ev.kind = triad::request_event::done;
  ev.finish = why;
  ev.usage.prompt_tokens = 9;
  ev.usage.completion_tokens = 2;
  return ev;
}

triad::request_event failure(triad::errc code, std::string message) {
  triad::request_event ev;
  ev.kind = triad::request_event::error;
  ev.code = code;
  ev.message = std::move(message);
  return ev;
}

triad::completion_options options() {
  triad::completion_options o;
  o.id = "chatcmpl-7";
  o.created = 1700000000;
  o.model = "triad-tiny";
  o.request = 3;
  return o;
}

// The `event:` names and data of a stream, in order.
std::vector<std::pair<std::string, json::value>> events_of(const std::string& bytes) {
  std::vector<std::pair<std::string, json::value>> out;
  std::size_t at = 0;
  while ((at = bytes.find("event: ", at)) != std::string::npos) {
    const auto nl = bytes.find('\n', at);
    const auto name = bytes.substr(at + 7, nl - at - 7);
    const auto data = bytes.find("data: ", nl);
    const auto end = bytes.find("\n\n", data);
    out.emplace_back(name, json::parse(bytes.substr(data + 6, end - data - 6)));
    at = end;
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(responses_api)

BOOST_AUTO_TEST_CASE(input_items_become_the_chat_messages_they_are) {
  const auto chat = chat_of(R"({"model": "triad-tiny", "instructions": "Be brief.",
      "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather",
                 "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
      "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
      "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 40,
      "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}})");
  const auto& m = chat.at("messages").as_array();
  BOOST_REQUIRE(m.size() == 4u);
  BOOST_TEST(m[0].at("role") == "system");
  BOOST_TEST(m[1].at("content") == "weather?");
  BOOST_TEST(m[2].at("role") == "assistant");
  BOOST_TEST(m[2].at("tool_calls").as_array().size() == 2u); // consecutive calls: one message
  BOOST_TEST(m[3].at("role") == "tool");
  BOOST_TEST(m[3].at("tool_call_id") == "c1");
  BOOST_TEST(chat.at("tools").at(0).at("function").at("name") == "get_weather");
  BOOST_TEST(chat.at("tool_choice").at("function").at("name") == "get_weather");
  BOOST_TEST(chat.at("max_tokens") == 40);
  BOOST_TEST(chat.at("response_format").at("type") == "json_schema");
  BOOST_TEST(chat.at("response_format").at("json_schema").at("name") == "x");
}

BOOST_AUTO_TEST_CASE(bad_items_and_chat_errors_are_named_in_responses_terms) {
  auto refused = [](std::string_view body) {
    auto r = triad::responses_to_chat(body);
    BOOST_REQUIRE(std::holds_alternative<triad::api_error>(r));
    return std::get<triad::api_error>(r);
  };
  BOOST_TEST(refused(R"({"model": "m"})").param == "input");
  BOOST_TEST(refused(R"({"model": "m", "input": [{"type": "image"}]})").param == "input[0].type");
  BOOST_TEST(refused(R"({"model": "m", "input": [{"type": "function_call", "name": "f"}]})")
                 .param == "input[0].call_id");
  BOOST_TEST(refused(R"({"model": "m", "input": "x", "previous_response_id": "resp_1"})").param ==
             "previous_response_id");
  BOOST_TEST(refused(R"({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})").param ==
             "tools[0].type");
  const std::vector<std::string> origins{"instructions", "input[0]", "input[2]"};
  BOOST_TEST(triad::responses_param("messages[2].role", origins) == "input[2].role");
  BOOST_TEST(triad::responses_param("max_tokens", origins) == "max_output_tokens");
  BOOST_TEST(triad::responses_param("response_format.json_schema.schema", origins) ==
             "text.format.schema");
  BOOST_TEST(triad::responses_param("tools[1].function.parameters", origins) ==
             "tools[1].parameters");
  BOOST_TEST(triad::responses_param("tool_choice.function.name", origins) == "tool_choice.name");
}

BOOST_AUTO_TEST_CASE(a_response_not_streamed_is_one_object_with_its_output_items) {
  triad::response_stream answer{options(), false};
  BOOST_TEST(answer.on_event(token('h')).bytes.empty());
  answer.on_event(token('i'));
  triad::request_event call;
  call.kind = triad::request_event::tool_call;
  call.tool_name = "get_weather";
  call.arguments_json = R"({"city":"Oslo"})";
  answer.on_event(call);
  auto out = answer.on_event(done(triad::finish_reason::tool_calls));
  BOOST_REQUIRE(out.finished);
  const auto r = json::parse(out.bytes);
  BOOST_TEST(r.at("object") == "response");
  BOOST_TEST(r.at("id") == "resp_7");
  BOOST_TEST(r.at("status") == "completed");
  const auto& output = r.at("output").as_array();
  BOOST_REQUIRE(output.size() == 2u);
  BOOST_TEST(output[0].at("type") == "message");
  BOOST_TEST(output[0].at("content").at(0).at("text") == "hi");
  BOOST_TEST(output[1].at("type") == "function_call");
  BOOST_TEST(output[1].at("name") == "get_weather");
  BOOST_TEST(output[1].at("arguments") == R"({"city":"Oslo"})");
  BOOST_TEST(output[1].at("call_id").as_string().size() == 9u);
  BOOST_TEST(r.at("usage").at("input_tokens") == 9);
  BOOST_TEST(r.at("usage").at("output_tokens") == 2);
}

BOOST_AUTO_TEST_CASE(a_streamed_response_is_a_sequence_of_response_events) {
  triad::response_stream answer{options(), true};
  std::string bytes;
  for (char c : std::string{"abc"})
    bytes += answer.on_event(token(c)).bytes;
  bytes += answer.on_event(done(triad::finish_reason::length)).bytes;
  const auto events = events_of(bytes);
  BOOST_REQUIRE(events.size() >= 8u);
  BOOST_TEST(events.front().first == "response.created");
  BOOST_TEST(events.back().first == "response.incomplete"); // max_output_tokens
  std::string text;
  std::int64_t sequence = -1;
  for (const auto& [name, data] : events) {
    BOOST_TEST(data.at("type").as_string() == name);
    BOOST_TEST(data.at("sequence_number").as_int64() == sequence + 1);
    sequence = data.at("sequence_number").as_int64();
    if (name == "response.output_text.delta")
      text += std::string{data.at("delta").as_string()};
  }
  BOOST_TEST(text == "abc");
  const auto& last = events.back().second.at("response");
  BOOST_TEST(last.at("output").at(0).at("content").at(0).at("text") == "abc");
  BOOST_TEST(last.at("incomplete_details").at("reason") == "max_output_tokens");
}

BOOST_AUTO_TEST_CASE(an_error_before_any_byte_is_an_http_error) {
  triad::response_stream answer{options(), true};
  auto out = answer.on_event(failure(triad::errc::exhausted, "too long"));
  BOOST_TEST(out.finished);
  BOOST_REQUIRE(out.error);
  BOOST_TEST(out.error->status == 400u);
}

BOOST_AUTO_TEST_CASE(a_call_streamed_as_written_is_one_function_call_item_in_pieces) {
  triad::response_stream answer{options(), true};
  std::string bytes = answer.on_event(token('\n')).bytes; // white space before a call
  const std::vector<std::string> pieces{"", R"({"city":)", R"( "Oslo"})"};
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    triad::request_event delta;
    delta.kind = triad::request_event::tool_call_delta;
    delta.call_index = 0;
    delta.tool_name = i == 0 ? "get_weather" : "";
    delta.arguments_json = pieces[i];
    bytes += answer.on_event(delta).bytes;
  }
  triad::request_event call; // the whole call, parsed
  call.kind = triad::request_event::tool_call;
  call.tool_name = "get_weather";
  call.arguments_json = R"({"city":"Oslo"})";
  bytes += answer.on_event(call).bytes;
  bytes += answer.on_event(done(triad::finish_reason::tool_calls)).bytes;
  const auto events = events_of(bytes);
  std::vector<std::string> names;
  std::string arguments;
  for (const auto& [name, data] : events) {
    names.push_back(name);
    if (name == "response.function_call_arguments.delta")
      arguments += std::string{data.at("delta").as_string()};
    if (name == "response.function_call_arguments.done") {
      BOOST_TEST(data.at("name") == "get_weather");
      BOOST_TEST(data.at("arguments") == R"({"city": "Oslo"})"); // as written
    }
  }
  BOOST_TEST(arguments == R"({"city": "Oslo"})");
  BOOST_TEST(std::count(names.begin(), names.end(), "response.function_call_arguments.delta") == 2);
  BOOST_TEST(std::count(names.begin(), names.end(), "response.output_item.added") == 1);
  BOOST_TEST(std::count(names.begin(), names.end(), "response.output_text.delta") == 0);
  const auto& output = events.back().second.at("response").at("output").as_array();
  BOOST_REQUIRE(output.size() == 1u); // the newline made no message
  BOOST_TEST(output[0].at("type") == "function_call");
  BOOST_TEST(output[0].at("status") == "completed");
}

BOOST_AUTO_TEST_CASE(each_call_keeps_its_own_pieces_whatever_their_order) {
  triad::response_stream answer{options(), true};
  std::string bytes;
  auto delta = [&](std::uint32_t index, std::string name, std::string piece) {
    triad::request_event ev;
    ev.kind = triad::request_event::tool_call_delta;
    ev.call_index = index;
    ev.tool_name = std::move(name);
    ev.arguments_json = std::move(piece);
    bytes += answer.on_event(ev).bytes;
  };
  delta(0, "f", R"({"a":)");
  delta(1, "g", "{}");
  for (auto [name, args] : {std::pair{"f", R"({"a":1})"}, std::pair{"g", "{}"}}) {
    triad::request_event call;
    call.kind = triad::request_event::tool_call;
    call.tool_name = name;
    call.arguments_json = args;
    bytes += answer.on_event(call).bytes;
  }
  // f's last piece comes at the end (what its streamed text lacked of the parsed call).
  bytes += answer.on_event(done(triad::finish_reason::tool_calls)).bytes;
  const auto events = events_of(bytes);
  const auto& output = events.back().second.at("response").at("output").as_array();
  BOOST_REQUIRE(output.size() == 2u);
  BOOST_TEST(output[0].at("name") == "f");
  BOOST_TEST(output[0].at("arguments") == R"({"a":1})");
  BOOST_TEST(output[1].at("name") == "g");
  BOOST_TEST(output[1].at("arguments") == "{}");
}

BOOST_AUTO_TEST_CASE(an_answer_of_white_space_alone_is_still_a_message) {
  triad::response_stream answer{options(), false};
  answer.on_event(token(' '));
  auto out = answer.on_event(done(triad::finish_reason::stop));
  const auto r = json::parse(out.bytes);
  BOOST_REQUIRE(r.at("output").as_array().size() == 1u);
  BOOST_TEST(r.at("output").at(0).at("content").at(0).at("text") == " ");
}

BOOST_AUTO_TEST_CASE(a_failure_after_the_first_token_not_streamed_is_the_http_error) {
  triad::response_stream answer{options(), false};
  answer.on_event(token('h'));
  auto out = answer.on_event(failure(triad::errc::timed_out, "past the deadline"));
  BOOST_TEST(out.finished);
  BOOST_REQUIRE(out.error);
  BOOST_TEST(out.error->status == 504u);
}

BOOST_AUTO_TEST_CASE(a_failure_mid_stream_is_response_failed) {
  triad::response_stream answer{options(), true};
  std::string bytes = answer.on_event(token('h')).bytes;
  auto out = answer.on_event(failure(triad::errc::timed_out, "past the deadline"));
  BOOST_TEST(out.finished);
  BOOST_TEST(!out.error);
  const auto events = events_of(bytes + out.bytes);
  BOOST_REQUIRE(!events.empty());
  BOOST_TEST(events.back().first == "response.failed");
  BOOST_TEST(events.back().second.at("response").at("status") == "failed");
}

BOOST_AUTO_TEST_SUITE_END()
