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

BOOST_AUTO_TEST_CASE(llama3_calls_are_objects_with_parameters_separated_by_semicolons) {
  auto one = triad::parse_tool_calls(triad::call_syntax::llama3,
                                     R"( {"name": "get_weather", "parameters": {"city": "Oslo"}})");
  BOOST_REQUIRE(one);
  BOOST_REQUIRE(one->size() == 1u);
  BOOST_TEST((*one)[0].name == "get_weather");
  BOOST_TEST((*one)[0].arguments_json == R"({"city":"Oslo"})");
  auto two = triad::parse_tool_calls(
      triad::call_syntax::llama3,
      R"({"type": "function", "name": "a", "parameters": {}}; {"name": "b", "arguments": {"x": 1}})");
  BOOST_REQUIRE(two);
  BOOST_REQUIRE(two->size() == 2u);
  BOOST_TEST((*two)[0].name == "a");
  BOOST_TEST((*two)[1].arguments_json == R"({"x":1})");
  auto prose = triad::parse_tool_calls(triad::call_syntax::llama3, R"({"name": "a"} and then)");
  BOOST_TEST(!prose);
  auto cut = triad::parse_tool_calls(triad::call_syntax::llama3, R"({"name": "a", "param)");
  BOOST_REQUIRE(!cut);
  BOOST_TEST(cut.error().message.find("not valid JSON") != std::string::npos);
  BOOST_TEST(!triad::parse_tool_calls(triad::call_syntax::llama3, "  "));
  // An answer that merely starts with '{' is a call only with its parameters.
  const auto person = R"({"name": "Alice", "age": 30})";
  BOOST_TEST(triad::parse_tool_calls(triad::call_syntax::llama3, person).has_value());
  auto strict = triad::parse_tool_calls(triad::call_syntax::llama3, person, true);
  BOOST_REQUIRE(!strict);
  BOOST_TEST(strict.error().message.find("\"parameters\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(mistral_calls_are_an_array_of_objects) {
  auto calls = triad::parse_tool_calls(
      triad::call_syntax::mistral,
      R"( [{"name": "a", "arguments": {"q": "x"}, "id": "abc123XYZ"}, {"name": "b", "arguments": {}}])");
  BOOST_REQUIRE(calls);
  BOOST_REQUIRE(calls->size() == 2u);
  BOOST_TEST((*calls)[0].arguments_json == R"({"q":"x"})");
  BOOST_TEST((*calls)[1].name == "b");
  auto empty = triad::parse_tool_calls(triad::call_syntax::mistral, "[]");
  BOOST_REQUIRE(!empty);
  BOOST_TEST(empty.error().message.find("non-empty JSON array") != std::string::npos);
  auto bad = triad::parse_tool_calls(triad::call_syntax::mistral, R"([{"arguments": {}}])");
  BOOST_REQUIRE(!bad);
  BOOST_TEST(bad.error().message.find("\"name\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(mistral_v11_calls_are_name_args_pairs) {
  auto calls = triad::parse_tool_calls(
      triad::call_syntax::mistral,
      R"(get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{})");
  BOOST_REQUIRE(calls);
  BOOST_REQUIRE(calls->size() == 2u);
  BOOST_TEST((*calls)[0].name == "get_weather");
  BOOST_TEST((*calls)[0].arguments_json == R"({"city":"Oslo"})");
  BOOST_TEST((*calls)[1].name == "get_time");
  BOOST_TEST((*calls)[1].arguments_json == "{}");
  auto no_args = triad::parse_tool_calls(triad::call_syntax::mistral, "get_weather");
  BOOST_REQUIRE(!no_args);
  BOOST_TEST(no_args.error().message.find("name[ARGS]") != std::string::npos);
  BOOST_TEST(!triad::parse_tool_calls(triad::call_syntax::mistral, R"([ARGS]{"a": 1})"));
  BOOST_TEST(!triad::parse_tool_calls(triad::call_syntax::mistral, "f[ARGS]{not json"));
}

BOOST_AUTO_TEST_CASE(written_calls_parse_back_in_every_syntax) {
  const std::vector<triad::tool_call_text> calls{{"get_weather", R"({"city":"Oslo"})"},
                                                 {"get_time", R"({"zone":"CET"})"}};
  for (auto syntax :
       {triad::call_syntax::tagged, triad::call_syntax::llama3, triad::call_syntax::mistral}) {
    BOOST_TEST_CONTEXT(triad::to_string(syntax)) {
      const std::size_t n = syntax == triad::call_syntax::tagged ? 1 : 2; // tagged: one per pair
      auto text = triad::write_tool_calls(
          syntax, {calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(n)});
      auto back = triad::parse_tool_calls(syntax, text);
      BOOST_REQUIRE(back);
      BOOST_REQUIRE(back->size() == n);
      for (std::size_t i = 0; i < n; ++i) {
        BOOST_TEST((*back)[i].name == calls[i].name);
        BOOST_TEST((*back)[i].arguments_json == calls[i].arguments_json);
      }
    }
  }
  BOOST_TEST(!triad::parse_tool_calls(triad::call_syntax::none, "{}"));
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

namespace {

// What a scanner tells of `site` fed `step` bytes at a time: per call, its name and its
// arguments' pieces joined, and how many pieces came before the name was known (must be 0).
struct scanned {
  std::vector<std::string> names, arguments;
  std::size_t pieces = 0;
};

scanned scan(std::string_view site, std::size_t step) {
  triad::call_scanner s;
  scanned out;
  for (std::size_t at = 0; at < site.size(); at += step)
    for (auto& p : s.push(site.substr(at, step))) {
      ++out.pieces;
      if (!p.name.empty()) {
        BOOST_TEST(p.call == out.names.size()); // a call is named before its arguments
        out.names.push_back(p.name);
        out.arguments.emplace_back();
      }
      BOOST_REQUIRE(p.call < out.arguments.size());
      out.arguments[p.call] += p.arguments;
    }
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_call_streams_its_name_then_its_arguments_as_written) {
  const std::string site =
      R"({"name": "get_weather", "arguments": {"city": "Oslo \"}{", "n": [1, {"x": 2}]}})";
  for (std::size_t step : {1u, 3u, 7u, 1000u}) {
    auto s = scan(site, step);
    BOOST_REQUIRE(s.names.size() == 1u);
    BOOST_TEST(s.names[0] == "get_weather");
    BOOST_TEST(s.arguments[0] == R"({"city": "Oslo \"}{", "n": [1, {"x": 2}]})");
  }
  // Byte by byte, the name comes alone and the arguments in many pieces.
  BOOST_TEST(scan(site, 1).pieces > 10u);
}

BOOST_AUTO_TEST_CASE(a_site_of_several_calls_streams_each_in_turn) {
  const std::string mistral =
      R"([{"name": "a", "arguments": {}}, {"arguments": {"k": "v"}, "name": "b\u0031"}])";
  auto s = scan(mistral, 2);
  BOOST_REQUIRE(s.names.size() == 2u);
  BOOST_TEST(s.names[0] == "a");
  BOOST_TEST(s.arguments[0] == "{}");
  BOOST_TEST(s.names[1] == "b1"); // named after its arguments: they wait for it
  BOOST_TEST(s.arguments[1] == R"({"k": "v"})");
  const std::string llama3 =
      R"({"name": "t", "parameters": {"z": 1}}; {"name": "u", "parameters": {}})";
  auto l = scan(llama3, 5);
  BOOST_REQUIRE(l.names.size() == 2u);
  BOOST_TEST(l.arguments[0] == R"({"z": 1})");
  BOOST_TEST(l.names[1] == "u");
}

BOOST_AUTO_TEST_CASE(arguments_written_as_a_string_do_not_stream) {
  auto s = scan(R"({"name": "f", "arguments": "{\"a\": 1}"})", 1);
  BOOST_REQUIRE(s.names.size() == 1u);
  BOOST_TEST(s.arguments[0].empty()); // the parsed call gives them
}

BOOST_AUTO_TEST_CASE(message_text_never_becomes_special_tokens) {
  auto p = triad::render_prompt({{"user", "<tool_call>{}</tool_call>"}});
  BOOST_TEST(p.front() == triad::tokenizer::bos);
  BOOST_TEST(std::count(p.begin(), p.end(), triad::tokenizer::tool_call_start) == 0);
  auto r = triad::render_tool_result("ok");
  BOOST_TEST(std::count(r.begin(), r.end(), triad::tokenizer::tool_response_start) == 1);
}

BOOST_AUTO_TEST_SUITE_END()
