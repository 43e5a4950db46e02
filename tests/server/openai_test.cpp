#include <boost/test/unit_test.hpp>

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
  BOOST_TEST(c.request.messages[2].content ==
             R"(<tool_call>{"name":"get_weather","arguments":{"city":"Oslo"}}</tool_call>)");
  BOOST_TEST(c.request.messages[3].role == "tool");
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
      {R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "x"}], "n": 2})", "n",
       "only n = 1"},
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

BOOST_AUTO_TEST_SUITE_END()
