#include <boost/test/unit_test.hpp>

#include "actors/chat.hpp"
#include "tests/printers.hpp"

BOOST_AUTO_TEST_SUITE(chat)

BOOST_AUTO_TEST_CASE(a_well_formed_call_gives_its_name_and_arguments) {
  auto c = triad::parse_tool_call(R"({"name": "grep", "arguments": {"pattern": "x"}})");
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->name == "grep");
  BOOST_TEST(c->arguments_json == R"({"pattern":"x"})");
}

BOOST_AUTO_TEST_CASE(a_call_larger_than_the_parse_buffer_is_read_whole) {
  // The parser's stack buffer is 2 KiB; a longer call (here about 40 KiB of arguments in 1000
  // entries) continues on the heap.
  std::string args = "{";
  for (int i = 0; i < 1000; ++i) {
    if (i > 0)
      args += ',';
    args += "\"k";
    args += std::to_string(i);
    args += "\":\"";
    args.append(30, static_cast<char>('a' + i % 26));
    args += '"';
  }
  args += "}";
  std::string call = R"({"name": "write", "arguments": )";
  call += args;
  call += '}';
  auto c = triad::parse_tool_call(call);
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->name == "write");
  BOOST_TEST(c->arguments_json == args);
}

BOOST_AUTO_TEST_CASE(arguments_written_as_a_json_string_are_accepted) {
  auto c = triad::parse_tool_call(R"({"name": "grep", "arguments": "{\"pattern\": \"x\"}"})");
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->arguments_json == R"({"pattern":"x"})");
}

BOOST_AUTO_TEST_CASE(malformed_calls_are_errors_that_say_what_is_wrong) {
  auto not_json = triad::parse_tool_call("{\"name\": \"grep\", ");
  BOOST_REQUIRE(!not_json.has_value());
  BOOST_TEST(not_json.error().message.find("not valid JSON") != std::string::npos);
  auto no_name = triad::parse_tool_call(R"({"arguments": {}})");
  BOOST_REQUIRE(!no_name.has_value());
  BOOST_TEST(no_name.error().message.find("\"name\"") != std::string::npos);
  auto bad_args = triad::parse_tool_call(R"({"name": "grep", "arguments": [1]})");
  BOOST_REQUIRE(!bad_args.has_value());
  BOOST_TEST(bad_args.error().message.find("arguments") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_script_writes_its_calls_in_the_models_syntax_and_ends_with_eos) {
  triad::generation_script s;
  s.turns.push_back({5, triad::tool_call_text{"nap", R"({"ms": 1})"}});
  s.turns.push_back({3, std::nullopt});
  auto t = triad::script_tokens(s);
  BOOST_TEST(t.back() == triad::tokenizer::eos);
  auto start = std::find(t.begin(), t.end(), triad::tokenizer::tool_call_start);
  auto end = std::find(t.begin(), t.end(), triad::tokenizer::tool_call_end);
  BOOST_REQUIRE(start == t.begin() + 5);
  BOOST_REQUIRE(end != t.end());
  auto call = triad::parse_tool_call(triad::tokenizer{}.decode({start + 1, end}));
  BOOST_REQUIRE(call.has_value());
  BOOST_TEST(call->name == "nap");
  BOOST_TEST(call->arguments_json == R"({"ms":1})");
  BOOST_TEST(t.size() == 5u + 1u + static_cast<std::size_t>(end - start - 1) + 1u + 3u + 1u);
}

BOOST_AUTO_TEST_CASE(a_script_call_larger_than_its_buffers_is_written_whole) {
  // Arguments past the script's 1 KiB parse arena and its 256-byte serializer buffer.
  std::string big(4000, 'q');
  triad::generation_script s;
  s.turns.push_back({0, triad::tool_call_text{"grep", R"({"pattern": ")" + big + R"("})"}});
  s.turns.push_back({0, triad::tool_call_text{"raw", "not json"}});
  auto t = triad::script_tokens(s);
  std::vector<std::string> calls;
  for (auto it = t.begin(); it != t.end(); ++it)
    if (*it == triad::tokenizer::tool_call_start) {
      auto end = std::find(it, t.end(), triad::tokenizer::tool_call_end);
      BOOST_REQUIRE(end != t.end());
      calls.push_back(triad::tokenizer{}.decode({it + 1, end}));
    }
  BOOST_REQUIRE_EQUAL(calls.size(), 2u);
  BOOST_TEST(calls[0] == R"({"name":"grep","arguments":{"pattern":")" + big + R"("}})");
  // Arguments that are not JSON are written as a JSON string.
  BOOST_TEST(calls[1] == R"({"name":"raw","arguments":"not json"})");
}

BOOST_AUTO_TEST_CASE(message_text_never_becomes_special_tokens) {
  auto p = triad::render_prompt({{"user", "<tool_call>{}</tool_call>"}});
  BOOST_TEST(p.front() == triad::tokenizer::bos);
  BOOST_TEST(std::count(p.begin(), p.end(), triad::tokenizer::tool_call_start) == 0);
  auto r = triad::render_tool_result("ok");
  BOOST_TEST(std::count(r.begin(), r.end(), triad::tokenizer::tool_response_start) == 1);
}

BOOST_AUTO_TEST_SUITE_END()
