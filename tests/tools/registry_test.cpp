#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/printers.hpp"
#include "tools/registry.hpp"

namespace json = boost::json;

namespace {

triad::tool_registry with_echo() {
  triad::tool_registry r;
  triad::tool_spec spec{"echo", "Echo the text back.",
                        json::parse(R"({"type": "object", "additionalProperties": false,
                          "required": ["text"],
                          "properties": {
                            "text": {"type": "string", "maxLength": 10},
                            "times": {"type": "integer", "minimum": 1, "maximum": 3},
                            "mode": {"enum": ["plain", "loud"]},
                            "tags": {"type": "array", "items": {"type": "string"}}}})")
                            .as_object()};
  auto ok = r.add(spec, [](const json::object& args) -> triad::expected<triad::tool_output> {
    return triad::tool_output{std::string{args.at("text").as_string()}, {}};
  });
  BOOST_REQUIRE(ok.has_value());
  return r;
}

std::string call_error(const triad::tool_registry& r, const std::string& args) {
  auto out = r.call("echo", args);
  BOOST_REQUIRE(!out);
  return out.error().message;
}

} // namespace

BOOST_AUTO_TEST_SUITE(registry)

BOOST_AUTO_TEST_CASE(a_valid_call_runs_the_tool) {
  auto r = with_echo();
  auto out = r.call("echo", R"({"text": "hi", "times": 2, "mode": "loud", "tags": ["a"]})");
  BOOST_REQUIRE(out.has_value());
  BOOST_TEST(out->content == "hi");
  BOOST_TEST(r.list().size() == 1u);
}

BOOST_AUTO_TEST_CASE(schema_violations_name_the_field) {
  auto r = with_echo();
  BOOST_TEST(call_error(r, R"({})").find("missing required field 'text'") != std::string::npos);
  BOOST_TEST(
      call_error(r, R"({"text": 5})").find("arguments.text: expected string, got integer 5") !=
      std::string::npos);
  BOOST_TEST(call_error(r, R"({"text": "01234567890"})").find("arguments.text: string of 11") !=
             std::string::npos);
  BOOST_TEST(
      call_error(r, R"({"text": "a", "times": 9})").find("arguments.times: value 9 is above") !=
      std::string::npos);
  BOOST_TEST(
      call_error(r, R"({"text": "a", "mode": "quiet"})").find("allowed: \"plain\", \"loud\"") !=
      std::string::npos);
  BOOST_TEST(call_error(r, R"({"text": "a", "tags": ["x", 3]})").find("arguments.tags[1]") !=
             std::string::npos);
  BOOST_TEST(call_error(r, R"({"text": "a", "rm": true})").find("unknown field 'rm'") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(malformed_json_and_unknown_tools_are_errors) {
  auto r = with_echo();
  BOOST_TEST(call_error(r, R"({"text": )").find("not valid JSON") != std::string::npos);
  auto unknown = r.call("nope", "{}");
  BOOST_REQUIRE(!unknown);
  BOOST_TEST(unknown.error().message.find("registered: echo") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_registrations_are_refused) {
  auto r = with_echo();
  auto fn = [](const json::object&) -> triad::expected<triad::tool_output> {
    return triad::tool_output{};
  };
  BOOST_TEST(r.add({"echo", "", json::parse(R"({"type": "object"})").as_object()}, fn)
                 .error()
                 .message.find("already registered") != std::string::npos);
  BOOST_TEST(!r.add({"bad name", "", json::parse(R"({"type": "object"})").as_object()}, fn));
  BOOST_TEST(!r.add({"arr", "", json::parse(R"({"type": "array"})").as_object()}, fn));
}

BOOST_AUTO_TEST_SUITE_END()
