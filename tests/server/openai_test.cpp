#include <algorithm>
#include <cctype>
#include <set>
#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include "grammar/matcher.hpp"
#include "server/openai.hpp"
#include "tests/printers.hpp"

namespace {

triad::openai_chat ok(std::string_view body) {
  auto r = triad::parse_chat_request(body, "triad-tiny");
  if (auto* e = std::get_if<triad::api_error>(&r))
    BOOST_FAIL("refused: " + e->message);
  return std::get<triad::openai_chat>(std::move(r));
}

triad::api_error refused(std::string_view body) {
  auto r = triad::parse_chat_request(body, "triad-tiny");
  BOOST_REQUIRE_MESSAGE(std::holds_alternative<triad::api_error>(r), "accepted: " << body);
  return std::get<triad::api_error>(r);
}

// -- request events, as a request actor reports them --

triad::request_event token_event(char c) {
  triad::request_event ev;
  ev.kind = triad::request_event::token;
  ev.tok = static_cast<unsigned char>(c);
  ev.text = std::string(1, c);
  return ev;
}

triad::request_event done_event(triad::finish_reason why) {
  triad::request_event ev;
  ev.kind = triad::request_event::done;
  ev.finish = why;
  ev.usage.prompt_tokens = 7;
  ev.usage.completion_tokens = 5;
  return ev;
}

triad::request_event error_event(triad::errc code, std::string message) {
  triad::request_event ev;
  ev.kind = triad::request_event::error;
  ev.code = code;
  ev.message = std::move(message);
  return ev;
}

triad::request_event call_event(std::string name, std::string args) {
  triad::request_event ev;
  ev.kind = triad::request_event::tool_call;
  ev.tool_name = std::move(name);
  ev.arguments_json = std::move(args);
  return ev;
}

// A hosted "shell" call and its result "a.txt\n", as the node reports them.
void run_hosted_shell(triad::completion_stream& answer) {
  answer.on_event(call_event("shell", R"({"command": "ls"})"));
  triad::request_event result;
  result.kind = triad::request_event::tool_result;
  result.tool_output = "a.txt\n";
  answer.on_event(result);
}

triad::completion_options answer_options(bool stream) {
  triad::completion_options o;
  o.stream = stream;
  o.id = "chatcmpl-1";
  o.created = 1700000000;
  o.model = "triad-tiny";
  o.request = 42;
  return o;
}

// The JSON objects of a stream's `data:` events, and whether it ended with [DONE].
std::vector<boost::json::value> events_of(const std::string& bytes, bool& done) {
  std::vector<boost::json::value> out;
  done = false;
  std::size_t at = 0;
  while ((at = bytes.find("data: ", at)) != std::string::npos) {
    auto end = bytes.find("\n\n", at);
    auto body = bytes.substr(at + 6, end - at - 6);
    if (body == "[DONE]")
      done = true;
    else
      out.push_back(boost::json::parse(body));
    at = end;
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(openai)

BOOST_AUTO_TEST_CASE(a_full_request_maps_onto_the_node_request) {
  auto c = ok(R"({"model": "triad-tiny", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "developer", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    "max_completion_tokens": 12, "temperature": 0, "top_p": 0.5, "seed": 7, "stop": ["\n\n"],
    "n": 1, "user": "alice", "unknown_field": [1, 2]})");
  BOOST_TEST(c.stream);
  BOOST_TEST(c.include_usage);
  BOOST_REQUIRE(c.request.messages.size() == 4u);
  BOOST_TEST(c.request.messages[0].role == "system");
  BOOST_TEST(c.request.messages[1].content == "Hi there");
  // The assistant's calls travel as OpenAI JSON (arguments parsed), for the model's template;
  // the byte format writes them as the model does.
  BOOST_TEST(c.request.messages[2].content.empty());
  BOOST_TEST(
      c.request.messages[2].tool_calls_json ==
      R"([{"type":"function","function":{"name":"get_weather","arguments":{"city":"Oslo"}},"id":"c1"}])");
  auto rendered = triad::tokenizer{}.decode(triad::render_prompt(c.request.messages));
  BOOST_TEST(rendered.find(R"(assistant:
<tool_call>{"name":"get_weather","arguments":{"city":"Oslo"}}</tool_call>)") != std::string::npos);
  BOOST_TEST(c.request.messages[3].role == "tool");
  BOOST_TEST(c.request.messages[3].tool_call_id == "c1");
  BOOST_TEST(c.request.tools_json ==
             R"([{"type":"function","function":{"name":"get_weather","parameters":{}}}])");
  BOOST_TEST(c.tools == std::vector<std::string>{"get_weather"});
  BOOST_TEST(c.request.max_tokens == 12u);
  BOOST_TEST(c.request.sampling.temperature == 0.0f);
  BOOST_TEST(c.request.sampling.top_p == 0.5f);
  BOOST_TEST(c.request.sampling.seed == 7u);
  BOOST_TEST(c.stop == std::vector<std::string>{"\n\n"});
  BOOST_TEST(c.request.session == "alice");
  BOOST_TEST(c.request.return_unhosted_calls);
}

BOOST_AUTO_TEST_CASE(the_script_extension_becomes_a_generation_script) {
  auto c = ok(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "go"}],
    "triad": {"session": "s9", "script": [{"tokens": 4, "tool_call": {"name": "shell",
      "arguments": {"command": "ls"}}}, {"tokens": 2}]}})");
  BOOST_REQUIRE(c.request.script.has_value());
  BOOST_REQUIRE(c.request.script->turns.size() == 2u);
  BOOST_TEST(c.request.script->turns[0].tokens == 4u);
  BOOST_TEST(c.request.script->turns[0].call->name == "shell");
  BOOST_TEST(c.request.script->turns[0].call->arguments_json == R"({"command":"ls"})");
  BOOST_TEST(!c.request.script->turns[1].call.has_value());
  BOOST_TEST(c.request.session == "s9");
}

BOOST_AUTO_TEST_CASE(every_bad_field_is_named_with_its_value) {
  struct bad_case {
    const char* body;
    const char* param;
    const char* says;
  };
  const bad_case cases[] = {
      {R"({"model": "triad-tiny"})", "messages", "required"},
      {R"({"messages": [{"role": "user", "content": "x"}]})", "model", "required"},
      {R"({"model": "triad-tiny", "messages": []})", "messages", "non-empty array"},
      {R"({"model": "triad-tiny", "messages": [{"role": "robot", "content": "x"}]})",
       "messages[0].role", "'robot'"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user"}]})", "messages[0].content",
       "required"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": 5}]})",
       "messages[0].content", "got an integer 5"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})",
       "max_tokens", "1..1000000"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}], "temperature": 3})",
       "temperature", "0..2"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 0})",
       "top_p", "0 < top_p"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}], "n": 0})", "n",
       "1..16"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})",
       "stream", "a boolean"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "stop": ["a", "b", "c", "d", "e"]})",
       "stop", "at most 4"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "triad": {"script": [{"tokens": 2, "tool_call": {"name": "x"}}]}})",
       "triad.script", "last turn"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "triad": {"script": [{"tokens": -1}]}})",
       "triad.script[0].tokens", "0..65536"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "tool_choice": "none", "triad": {"script": [{"tokens": 2, "tool_call": {"name": "x"}},
           {"tokens": 1}]}})",
       "triad.script[0].tool_call", "tool_choice \"none\""},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "a"}}],
           "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice.function.name", "'b' is not a function of this request's tools"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice.function.name", "declares none"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "tool_choice": "required"})",
       "tool_choice", "needs tools"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "b", "parameters":
                       {"type": "object", "properties": {"s": {"type": "string", "format": "email"}}}}}],
           "tool_choice": "required"})",
       "tools[1].function.parameters", "format"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "required",
           "triad": {"script": [{"tokens": 2}]}})",
       "triad.script", "tool_choice of 'required'"},
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}],
           "parallel_tool_calls": 1})",
       "parallel_tool_calls", "a boolean"},
  };
  for (const auto& c : cases) {
    auto e = refused(c.body);
    BOOST_TEST_CONTEXT(c.body) {
      BOOST_TEST(e.status == 400u);
      BOOST_TEST(e.param == c.param);
      BOOST_TEST(e.message.find(c.says) != std::string::npos, e.message);
      BOOST_TEST(triad::to_json(e).find("\"invalid_request_error\"") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(tool_choice_required_or_named_compiles_a_grammar_of_the_calls) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "a"}},
      {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}}])";
  const auto head = std::string{R"({"model": "triad-tiny", "messages": [{"role": "user",
      "content": "x"}], )"} + tools;
  auto automatic = ok(head + "}");
  BOOST_TEST(automatic.tool_choice == "auto");
  BOOST_TEST(!automatic.request.tool_grammar); // the model chooses
  auto required = ok(head + R"(, "tool_choice": "required", "parallel_tool_calls": false})");
  BOOST_TEST(required.tool_choice == "required");
  BOOST_TEST(!required.parallel_tool_calls);
  BOOST_REQUIRE(required.request.tool_grammar);
  auto named = ok(head + R"(, "tool_choice": {"type": "function", "function": {"name": "b"}}})");
  BOOST_TEST(named.tool_choice == "function");
  BOOST_TEST(named.tool_choice_function == "b");
  BOOST_REQUIRE(named.request.tool_grammar);
  // The byte format's calls: <tool_call>{"name": .., "arguments": ..}</tool_call>, one only.
  const std::string open(1, static_cast<char>(triad::grammar::call_open_marker));
  const std::string close(1, static_cast<char>(triad::grammar::call_close_marker));
  triad::grammar::matcher m{named.request.tool_grammar};
  BOOST_TEST(!m.accept(open + R"({"name":"a")"));
  triad::grammar::matcher n{named.request.tool_grammar};
  BOOST_TEST(n.accept(open + R"({"name":"b","arguments":{"k":[1]}})" + close));
  BOOST_TEST(n.can_end());
  // A function called "none" is named, not the mode.
  auto odd = ok(std::string{R"({"model": "triad-tiny", "messages": [{"role": "user",
      "content": "x"}], "tools": [{"type": "function", "function": {"name": "none"}}],
      "tool_choice": {"type": "function", "function": {"name": "none"}}})"});
  BOOST_TEST(odd.tool_choice == "function");
  BOOST_TEST(odd.request.max_tool_calls > 0u);
}

BOOST_AUTO_TEST_CASE(bad_json_and_an_unknown_model_are_refused) {
  auto e = refused("{\"model\": ");
  BOOST_TEST(e.status == 400u);
  BOOST_TEST(e.message.find("not valid JSON") != std::string::npos);
  BOOST_TEST(refused("[1, 2]").message.find("JSON object") != std::string::npos);
  auto m = refused(R"({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})");
  BOOST_TEST(m.status == 404u);
  BOOST_TEST(m.code == "model_not_found");
}

BOOST_AUTO_TEST_CASE(a_plain_completion_takes_a_prompt_and_refuses_what_it_cannot_do) {
  auto c = triad::parse_completion_request(
      R"({"model": "triad-tiny", "prompt": ["def add(a, b):"], "stop": "\n"})", "triad-tiny");
  BOOST_REQUIRE(std::holds_alternative<triad::openai_chat>(c));
  const auto& chat = std::get<triad::openai_chat>(c);
  BOOST_TEST(chat.completion);
  BOOST_TEST(*chat.request.raw_prompt == "def add(a, b):");
  BOOST_TEST(chat.request.max_tokens == 16u);
  BOOST_TEST(chat.stop == std::vector<std::string>{"\n"});
  auto missing = triad::parse_completion_request(R"({"model": "triad-tiny"})", "triad-tiny");
  BOOST_TEST(std::get<triad::api_error>(missing).param == "prompt");
  auto echo = triad::parse_completion_request(
      R"({"model": "triad-tiny", "prompt": "x", "echo": true})", "triad-tiny");
  BOOST_TEST(std::get<triad::api_error>(echo).message.find("not supported") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(utf8_stream_passes_text_joins_split_characters_and_replaces_junk) {
  triad::utf8_stream u;
  BOOST_TEST(u.push("ab") == "ab");
  BOOST_TEST(u.push("\xc3") == "");         // first byte of "é"
  BOOST_TEST(u.push("\xa9") == "\xc3\xa9"); // completed
  BOOST_TEST(u.push("\xff") == "\xef\xbf\xbd");
  BOOST_TEST(u.push("\xe2\x82") == "");
  BOOST_TEST(u.push("x") == "\xef\xbf\xbd\xef\xbf\xbdx"); // broken sequence: each byte replaced
  BOOST_TEST(u.push("\xf0\x9f") == "");
  BOOST_TEST(u.finish() == "\xef\xbf\xbd");
  BOOST_TEST(u.push("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); // a surrogate
}

BOOST_AUTO_TEST_CASE(an_error_event_is_answered_by_its_code_never_its_text) {
  struct expect {
    triad::errc code;
    unsigned status;
    const char* api_code;
    std::uint32_t retry_ms;
  };
  for (const auto& x : {expect{triad::errc::exhausted, 400, "context_length_exceeded", 0},
                        expect{triad::errc::invalid_argument, 400, "invalid_request", 0},
                        expect{triad::errc::overloaded, 429, "rate_limit_exceeded", 150},
                        expect{triad::errc::stopped, 503, "draining", 150},
                        expect{triad::errc::busy, 503, "queue_timeout", 150},
                        expect{triad::errc::timed_out, 504, "request_timeout", 0},
                        expect{triad::errc::unavailable, 503, "no_device", 150},
                        expect{triad::errc::system_error, 500, "generation_failed", 0}}) {
    triad::request_event ev;
    ev.kind = triad::request_event::error;
    ev.code = x.code;
    ev.retry_ms = 150;
    // A message that reads like another kind: only the code counts.
    ev.message = "overloaded: draining; retry after 9 ms";
    auto e = triad::error_of(ev);
    BOOST_TEST(e.status == x.status, to_string(x.code));
    BOOST_TEST(e.code == x.api_code, to_string(x.code));
    BOOST_TEST(e.retry_ms == x.retry_ms, to_string(x.code));
    BOOST_TEST(e.message == ev.message);
  }
  // Retry-After defaults to a second where the event gives none.
  triad::request_event busy;
  busy.kind = triad::request_event::error;
  busy.code = triad::errc::busy;
  BOOST_TEST(triad::error_of(busy).retry_ms == 1000u);
}

BOOST_AUTO_TEST_CASE(finish_reasons_map_onto_openais) {
  BOOST_TEST(triad::openai_finish_reason(triad::finish_reason::stop) == "stop");
  BOOST_TEST(triad::openai_finish_reason(triad::finish_reason::length) == "length");
  BOOST_TEST(triad::openai_finish_reason(triad::finish_reason::tool_calls) == "tool_calls");
  BOOST_TEST(triad::openai_finish_reason(triad::finish_reason::tool_calls_limit) == "stop");
}

BOOST_AUTO_TEST_CASE(a_stop_string_split_across_tokens_ends_the_stream_before_it) {
  auto o = answer_options(true);
  o.stop = {"o w"};
  triad::completion_stream answer{o};
  std::string bytes;
  bool cancel = false;
  for (char c : std::string{"hello world"}) {
    auto out = answer.on_event(token_event(c));
    bytes += out.bytes;
    cancel = cancel || out.cancel;
    if (out.cancel)
      break; // the request is cancelled: its cancelled error comes next
  }
  BOOST_TEST(cancel);
  auto end = answer.on_event(error_event(triad::errc::cancelled, "cancelled"));
  BOOST_TEST(end.finished);
  BOOST_TEST(!end.error);
  bytes += end.bytes;
  bool done = false;
  auto events = events_of(bytes, done);
  BOOST_TEST(done);
  std::string text;
  std::string finish;
  for (const auto& e : events) {
    const auto& choice = e.at("choices").at(0);
    if (const auto* c = choice.at("delta").as_object().if_contains("content"))
      text += c->as_string();
    if (!choice.at("finish_reason").is_null())
      finish = choice.at("finish_reason").as_string();
  }
  BOOST_TEST(text == "hell"); // never a byte of the stop string
  BOOST_TEST(finish == "stop");
  BOOST_TEST(events.front().at("choices").at(0).at("delta").at("role") == "assistant");
}

BOOST_AUTO_TEST_CASE(a_call_for_the_client_ends_the_answer_with_tool_calls) {
  triad::completion_stream answer{answer_options(false)};
  BOOST_TEST(answer.on_event(token_event('a')).bytes.empty()); // not streamed: all at the end
  answer.on_event(call_event("get_weather", R"({"city": "Oslo"})"));
  auto out = answer.on_event(done_event(triad::finish_reason::tool_calls));
  BOOST_TEST(out.finished);
  auto body = boost::json::parse(out.bytes);
  BOOST_TEST(body.at("object") == "chat.completion");
  const auto& choice = body.at("choices").at(0);
  BOOST_TEST(choice.at("finish_reason") == "tool_calls");
  const auto& call = choice.at("message").at("tool_calls").at(0);
  BOOST_TEST(call.at("id").as_string() == triad::call_id(42, 0));
  BOOST_TEST(call.at("function").at("name") == "get_weather");
  BOOST_TEST(call.at("function").at("arguments") == R"({"city": "Oslo"})");
  BOOST_TEST(body.at("usage").at("total_tokens") == 12);
  BOOST_TEST(!body.as_object().contains("triad")); // the client's call, not a hosted one
}

BOOST_AUTO_TEST_CASE(parallel_calls_for_the_client_are_indexed_each_with_its_own_id) {
  for (bool stream : {false, true}) {
    BOOST_TEST_CONTEXT("stream " << stream) {
      triad::completion_stream answer{answer_options(stream)};
      std::string bytes = answer.on_event(call_event("get_weather", R"({"city":"Oslo"})")).bytes;
      bytes += answer.on_event(call_event("get_time", R"({"zone":"CET"})")).bytes;
      bytes += answer.on_event(done_event(triad::finish_reason::tool_calls)).bytes;
      boost::json::value calls;
      if (stream) {
        bool done = false;
        auto events = events_of(bytes, done);
        BOOST_TEST(done);
        for (const auto& e : events)
          if (const auto* d =
                  e.at("choices").at(0).at("delta").as_object().if_contains("tool_calls"))
            calls = *d;
        BOOST_TEST(events.back().at("choices").at(0).at("finish_reason") == "tool_calls");
      } else {
        const auto body = boost::json::parse(bytes);
        calls = body.at("choices").at(0).at("message").at("tool_calls");
        BOOST_TEST(body.at("choices").at(0).at("message").at("content").is_null());
        BOOST_TEST(!body.as_object().contains("triad")); // none of them hosted
      }
      BOOST_REQUIRE(calls.is_array());
      BOOST_REQUIRE(calls.as_array().size() == 2u);
      BOOST_TEST(calls.at(0).at("function").at("name") == "get_weather");
      BOOST_TEST(calls.at(1).at("function").at("name") == "get_time");
      BOOST_TEST(calls.at(1).at("function").at("arguments") == R"({"zone":"CET"})");
      BOOST_TEST(calls.at(0).at("id") != calls.at(1).at("id"));
      if (stream) {
        BOOST_TEST(calls.at(0).at("index") == 0);
        BOOST_TEST(calls.at(1).at("index") == 1);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(call_ids_are_nine_letters_and_digits_and_distinct) {
  // Mistral's chat template refuses a tool_call_id of any other shape.
  std::set<std::string> seen;
  for (std::uint64_t request : {0ULL, 1ULL, 42ULL, 1ULL << 40, ~0ULL})
    for (std::size_t index : {0u, 1u, 63u}) {
      auto id = triad::call_id(request, index);
      BOOST_TEST(id.size() == 9u);
      BOOST_TEST(std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(c) != 0; }));
      seen.insert(id);
    }
  BOOST_TEST(seen.size() == 15u);
}

BOOST_AUTO_TEST_CASE(a_hosted_call_then_a_client_call_are_told_apart) {
  triad::completion_stream answer{answer_options(false)};
  run_hosted_shell(answer);
  answer.on_event(call_event("get_weather", R"({"city": "Oslo"})"));
  auto body =
      boost::json::parse(answer.on_event(done_event(triad::finish_reason::tool_calls)).bytes);
  const auto& message = body.at("choices").at(0).at("message");
  BOOST_REQUIRE(message.at("tool_calls").as_array().size() == 1u);
  BOOST_TEST(message.at("tool_calls").at(0).at("function").at("name") == "get_weather");
  const auto& hosted = body.at("triad").at("server_tool_calls");
  BOOST_REQUIRE(hosted.as_array().size() == 1u);
  BOOST_TEST(hosted.at(0).at("name") == "shell");
  BOOST_TEST(hosted.at(0).at("result") == "a.txt\n");
}

BOOST_AUTO_TEST_CASE(hosted_calls_and_their_results_are_reported_apart) {
  triad::completion_stream answer{answer_options(false)};
  run_hosted_shell(answer);
  answer.on_event(token_event('k'));
  auto body = boost::json::parse(answer.on_event(done_event(triad::finish_reason::stop)).bytes);
  BOOST_TEST(body.at("choices").at(0).at("message").at("content") == "k");
  const auto& hosted = body.at("triad").at("server_tool_calls").at(0);
  BOOST_TEST(hosted.at("name") == "shell");
  BOOST_TEST(hosted.at("result") == "a.txt\n");
}

namespace {

// A token event with its log probability and one alternative.
triad::request_event scored_token(char c, float logprob) {
  auto ev = token_event(c);
  ev.logprob = logprob;
  ev.top_logprobs.push_back({static_cast<triad::token>('z'), "z", -0.25f});
  return ev;
}

} // namespace

BOOST_AUTO_TEST_CASE(logprobs_are_parsed_and_checked) {
  const std::string head =
      R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}])";
  auto c = ok(head + R"(, "logprobs": true, "top_logprobs": 3})");
  BOOST_TEST(c.request.logprobs);
  BOOST_TEST(c.request.top_logprobs == 3u);
  BOOST_TEST(!ok(head + "}").request.logprobs);
  BOOST_TEST(refused(head + R"(, "top_logprobs": 2})").message.find("needs logprobs") !=
             std::string::npos);
  BOOST_TEST(refused(head + R"(, "logprobs": true, "top_logprobs": 21})").param == "top_logprobs");
  BOOST_TEST(refused(head + R"(, "logprobs": 1})").param == "logprobs");
  auto plain = triad::parse_completion_request(
      R"({"model": "triad-tiny", "prompt": "a", "logprobs": 2})", "triad-tiny");
  BOOST_REQUIRE(std::holds_alternative<triad::openai_chat>(plain));
  BOOST_TEST(std::get<triad::openai_chat>(plain).request.top_logprobs == 2u);
  auto too_many = triad::parse_completion_request(
      R"({"model": "triad-tiny", "prompt": "a", "logprobs": 6})", "triad-tiny");
  BOOST_REQUIRE(std::holds_alternative<triad::api_error>(too_many));
  BOOST_TEST(std::get<triad::api_error>(too_many).param == "logprobs");
}

BOOST_AUTO_TEST_CASE(logprobs_come_per_content_token_in_openais_shapes) {
  for (bool completion : {false, true}) {
    auto o = answer_options(false);
    o.completion = completion;
    o.logprobs = true;
    triad::completion_stream answer{o};
    answer.on_event(scored_token('h', -0.5f));
    answer.on_event(scored_token('i', -1.5f));
    auto body = boost::json::parse(answer.on_event(done_event(triad::finish_reason::stop)).bytes);
    const auto& lp = body.at("choices").at(0).at("logprobs");
    BOOST_TEST_CONTEXT(boost::json::serialize(lp)) {
      if (completion) {
        BOOST_TEST(lp.at("tokens") == boost::json::parse(R"(["h", "i"])"));
        BOOST_TEST(lp.at("token_logprobs") == boost::json::parse("[-0.5, -1.5]"));
        BOOST_TEST(lp.at("top_logprobs").at(1) == boost::json::parse(R"({"z": -0.25})"));
        BOOST_TEST(lp.at("text_offset") == boost::json::parse("[0, 1]"));
      } else {
        const auto& content = lp.at("content");
        BOOST_REQUIRE(content.as_array().size() == 2u);
        BOOST_TEST(content.at(0).at("token") == "h");
        BOOST_TEST(content.at(0).at("logprob") == -0.5);
        BOOST_TEST(content.at(0).at("bytes") == boost::json::parse("[104]"));
        BOOST_TEST(content.at(1).at("top_logprobs").at(0).at("token") == "z");
        BOOST_TEST(content.at(1).at("top_logprobs").at(0).at("logprob") == -0.25);
      }
    }
  }
  // Not asked: null, as OpenAI answers.
  triad::completion_stream plain{answer_options(false)};
  plain.on_event(scored_token('h', -0.5f));
  auto body = boost::json::parse(plain.on_event(done_event(triad::finish_reason::stop)).bytes);
  BOOST_TEST(body.at("choices").at(0).at("logprobs").is_null());
}

BOOST_AUTO_TEST_CASE(streamed_logprobs_ride_with_the_content_of_their_tokens) {
  auto o = answer_options(true);
  o.logprobs = true;
  triad::completion_stream answer{o};
  std::string bytes;
  for (char c : std::string{"abc"})
    bytes += answer.on_event(scored_token(c, -1.0f)).bytes;
  bytes += answer.on_event(done_event(triad::finish_reason::stop)).bytes;
  bool done = false;
  std::size_t entries = 0;
  std::string text;
  for (const auto& e : events_of(bytes, done)) {
    const auto& choices = e.at("choices").as_array();
    if (choices.empty())
      continue;
    const auto& delta = choices[0].at("delta").as_object();
    if (const auto* c = delta.if_contains("content"); c && !c->as_string().empty()) {
      const auto& content = choices[0].at("logprobs").at("content").as_array();
      for (const auto& entry : content)
        text += std::string{entry.at("token").as_string()};
      entries += content.size();
    }
  }
  BOOST_TEST(entries == 3u);
  BOOST_TEST(text == "abc");
}

BOOST_AUTO_TEST_CASE(a_set_of_choices_answers_once_all_ended_and_an_error_ends_all) {
  triad::completion_set set{answer_options(false), 2};
  BOOST_TEST(set.on_event(1, token_event('b')).bytes.empty());
  BOOST_TEST(set.on_event(0, token_event('a')).bytes.empty());
  auto first = set.on_event(1, done_event(triad::finish_reason::stop));
  BOOST_TEST(!first.finished); // choice 0 goes on
  auto last = set.on_event(0, done_event(triad::finish_reason::length));
  BOOST_REQUIRE(last.finished);
  auto body = boost::json::parse(last.bytes);
  const auto& choices = body.at("choices").as_array();
  BOOST_REQUIRE(choices.size() == 2u);
  BOOST_TEST(choices[0].at("index") == 0);
  BOOST_TEST(choices[0].at("message").at("content") == "a");
  BOOST_TEST(choices[0].at("finish_reason") == "length");
  BOOST_TEST(choices[1].at("index") == 1);
  BOOST_TEST(choices[1].at("message").at("content") == "b");
  BOOST_TEST(body.at("usage").at("prompt_tokens") == 7);      // once
  BOOST_TEST(body.at("usage").at("completion_tokens") == 10); // both
  BOOST_TEST(body.at("usage").at("triad").at("choices").as_array().size() == 2u);

  triad::completion_set failing{answer_options(true), 2};
  auto started = failing.on_event(0, token_event('a'));
  BOOST_TEST(!started.bytes.empty());
  auto failed = failing.on_event(1, error_event(triad::errc::system_error, "boom"));
  BOOST_TEST(failed.finished);
  BOOST_TEST(failed.cancel_others);
  BOOST_TEST(!failed.error); // bytes went out: an error event, then [DONE]
  BOOST_TEST(failed.bytes.find("boom") != std::string::npos);
  BOOST_TEST(failed.bytes.find("[DONE]") != std::string::npos);
  BOOST_TEST(failing.on_event(0, done_event(triad::finish_reason::stop)).bytes.empty());
}

BOOST_AUTO_TEST_CASE(a_stop_string_drops_the_logprobs_of_the_tokens_it_takes) {
  auto o = answer_options(false);
  o.logprobs = true;
  o.stop = {"bc"};
  triad::completion_stream answer{o};
  for (char c : std::string{"abcd"})
    answer.on_event(scored_token(c, -1.0f));
  auto body = boost::json::parse(
      answer.on_event(error_event(triad::errc::cancelled, "cancelled")).bytes);
  BOOST_TEST(body.at("choices").at(0).at("message").at("content") == "a");
  BOOST_TEST(body.at("choices").at(0).at("logprobs").at("content").as_array().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_streamed_hosted_call_is_a_triad_chunk_with_no_choices_after_the_text) {
  triad::completion_stream answer{answer_options(true)};
  std::string bytes = answer.on_event(token_event('a')).bytes;
  answer.on_event(call_event("shell", R"({"command": "ls"})"));
  triad::request_event result;
  result.kind = triad::request_event::tool_result;
  result.tool_output = "a.txt\n";
  bytes += answer.on_event(result).bytes;
  bytes += answer.on_event(token_event('b')).bytes;
  bytes += answer.on_event(done_event(triad::finish_reason::stop)).bytes;
  bool done = false;
  const auto events = events_of(bytes, done);
  BOOST_TEST(done);
  std::string order; // t: text, c: the hosted call
  for (const auto& e : events) {
    BOOST_TEST(e.at("object") == "chat.completion.chunk");
    if (const auto* ext = e.as_object().if_contains("triad")) {
      BOOST_TEST(e.at("choices").as_array().empty());
      const auto& ran = ext->at("server_tool_call");
      BOOST_TEST(ran.at("index") == 0);
      BOOST_TEST(ran.at("name") == "shell");
      BOOST_TEST(ran.at("arguments") == R"({"command": "ls"})");
      BOOST_TEST(ran.at("result") == "a.txt\n");
      order += 'c';
    } else if (const auto* c = e.at("choices").at(0).at("delta").as_object().if_contains("content");
               c && !c->as_string().empty()) {
      order += 't';
    }
  }
  BOOST_TEST(order == "tct");
}

BOOST_AUTO_TEST_CASE(an_error_before_any_byte_is_an_http_error_and_after_one_an_event) {
  triad::completion_stream quiet{answer_options(true)};
  auto early = quiet.on_event(error_event(triad::errc::overloaded, "overloaded: 3 wait"));
  BOOST_TEST(early.finished);
  BOOST_REQUIRE(early.error.has_value());
  BOOST_TEST(early.error->status == 429u);
  BOOST_TEST(early.bytes.empty());

  triad::completion_stream started{answer_options(true)};
  BOOST_TEST(!started.on_event(token_event('x')).bytes.empty()); // the stream has begun
  auto late = started.on_event(error_event(triad::errc::timed_out, "past the deadline"));
  BOOST_TEST(late.finished);
  BOOST_TEST(!late.error);
  bool done = false;
  auto events = events_of(late.bytes, done);
  BOOST_TEST(done);
  BOOST_REQUIRE(events.size() == 1u);
  BOOST_TEST(events[0].at("error").at("code") == "request_timeout");
  // Nothing more after the end.
  BOOST_TEST(started.on_event(token_event('y')).bytes.empty());
}

BOOST_AUTO_TEST_CASE(a_streamed_completion_ends_with_usage_when_asked) {
  auto o = answer_options(true);
  o.completion = true;
  o.include_usage = true;
  triad::completion_stream answer{o};
  std::string bytes = answer.on_event(token_event('h')).bytes;
  bytes += answer.on_event(token_event('i')).bytes;
  bytes += answer.on_event(done_event(triad::finish_reason::length)).bytes;
  bool done = false;
  auto events = events_of(bytes, done);
  BOOST_TEST(done);
  std::string text;
  for (const auto& e : events)
    if (!e.at("choices").as_array().empty())
      text += e.at("choices").at(0).at("text").as_string();
  BOOST_TEST(text == "hi");
  BOOST_TEST(events.back().at("usage").at("completion_tokens") == 5);
  BOOST_TEST(events[events.size() - 2].at("choices").at(0).at("finish_reason") == "length");
  BOOST_TEST(events.front().at("object") == "text_completion");
}

BOOST_AUTO_TEST_SUITE_END()
