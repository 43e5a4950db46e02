#include <memory>
#include <random>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "tests/printers.hpp"

namespace {

using namespace triad::grammar;
namespace json = boost::json;

std::shared_ptr<const grammar> compile(std::string_view schema, json_options options = {}) {
  auto g = from_json_schema(json::parse(schema), options);
  BOOST_REQUIRE_MESSAGE(g, (g ? "" : g.error().to_string()));
  return std::make_shared<const grammar>(std::move(*g));
}

// Whether `text` is a complete match.
bool matches(const std::shared_ptr<const grammar>& g, std::string_view text) {
  matcher m{g};
  return m.accept(text) && m.can_end();
}

// A random document of the grammar: random allowed bytes, preferring ones that close a string,
// array or object (so walks end), stopping where the grammar may end; empty when the walk ran
// out of steps.
std::string walk(const std::shared_ptr<const grammar>& g, std::mt19937& rng) {
  matcher m{g};
  std::string out;
  for (int step = 0; step < 4000; ++step) {
    if (m.can_end() && (m.done() || rng() % 4 == 0))
      return out;
    const auto next = m.next_bytes();
    std::vector<unsigned char> closing, any;
    for (unsigned c = 0; c < 256; ++c)
      if (next[c]) {
        any.push_back(static_cast<unsigned char>(c));
        if (c == '"' || c == ']' || c == '}')
          closing.push_back(static_cast<unsigned char>(c));
      }
    BOOST_REQUIRE(!any.empty());
    const auto& from = !closing.empty() && rng() % 3 == 0 ? closing : any;
    const unsigned char c = from[rng() % from.size()];
    BOOST_REQUIRE(m.accept(c));
    out += static_cast<char>(c);
  }
  return {};
}

constexpr std::string_view weather = R"({
  "type": "object",
  "properties": {
    "city": {"type": "string", "description": "where"},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer"},
    "detail": {"type": "object", "properties": {"wind": {"type": "boolean"},
                                                "level": {"type": ["number", "null"]}},
               "required": ["wind"], "additionalProperties": false}
  },
  "required": ["city", "unit"],
  "additionalProperties": false
})";

} // namespace

BOOST_AUTO_TEST_CASE(object_with_required_and_optional_properties) {
  const auto g = compile(weather);
  BOOST_TEST(matches(g, R"({"city":"Paris","unit":"celsius"})"));
  BOOST_TEST(matches(g, R"({"city":"Paris","unit":"fahrenheit","days":3})"));
  BOOST_TEST(matches(g, R"({"city":"","unit":"celsius","detail":{"wind":true,"level":null}})"));
  BOOST_TEST(matches(g, R"({"city":"x","unit":"celsius","detail":{"wind":false,"level":-1.5e3}})"));
  BOOST_TEST(!matches(g, R"({"unit":"celsius"})"));                           // city is required
  BOOST_TEST(!matches(g, R"({"city":"Paris","unit":"kelvin"})"));             // not in the enum
  BOOST_TEST(!matches(g, R"({"city":"Paris","unit":"celsius","x":1})"));      // no other property
  BOOST_TEST(!matches(g, R"({"city":"Paris","unit":"celsius","days":1.5})")); // an integer
  BOOST_TEST(!matches(g, R"({"city":"Paris","unit":"celsius","days":01})"));  // no leading 0
}

BOOST_AUTO_TEST_CASE(strings_take_escapes_and_utf8_only) {
  const auto g = compile(R"({"type": "string"})");
  BOOST_TEST(matches(g, R"("a\"b\\c\n\u00e9")"));
  BOOST_TEST(matches(g, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
  BOOST_TEST(!matches(g, "\"\xc0\xaf\""));     // overlong
  BOOST_TEST(!matches(g, "\"\xed\xa0\x80\"")); // a surrogate
  BOOST_TEST(!matches(g, "\"a\nb\""));         // a raw control character
  BOOST_TEST(!matches(g, R"("\x")"));          // not an escape
  BOOST_TEST(matches(g, R"("\ud83d\ude00 \u20AC")")); // a surrogate pair, a BMP character
  BOOST_TEST(!matches(g, R"("\udbb3,")"));             // a lone high surrogate
  BOOST_TEST(!matches(g, R"("\uDC00")"));              // a lone low one
}

BOOST_AUTO_TEST_CASE(arrays_keep_their_item_counts) {
  const auto g = compile(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                             "maxItems": 3})");
  BOOST_TEST(!matches(g, "[]"));
  BOOST_TEST(matches(g, "[1]"));
  BOOST_TEST(matches(g, "[1,-2,3]"));
  BOOST_TEST(!matches(g, "[1,2,3,4]"));
  BOOST_TEST(!matches(g, "[1,]"));
  const auto any = compile(R"({"type": "array"})");
  BOOST_TEST(matches(any, R"([])"));
  BOOST_TEST(matches(any, R"([1,"a",{"b":[null,true]},[]])"));
}

BOOST_AUTO_TEST_CASE(any_of_const_and_recursive_refs) {
  const auto g = compile(R"({
    "$defs": {"node": {"type": "object",
                       "properties": {"name": {"const": "n"},
                                      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["name", "children"], "additionalProperties": false}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "boolean"}]
  })");
  BOOST_TEST(matches(g, "true"));
  BOOST_TEST(matches(g, R"({"name":"n","children":[]})"));
  BOOST_TEST(matches(
      g, R"({"name":"n","children":[{"name":"n","children":[{"name":"n","children":[]}]}]})"));
  BOOST_TEST(!matches(g, R"({"name":"m","children":[]})"));
}

BOOST_AUTO_TEST_CASE(whitespace_is_bounded) {
  const auto compact = compile(weather);
  BOOST_TEST(!matches(compact, R"({ "city":"a","unit":"celsius"})"));
  json_options options;
  options.max_whitespace = 3;
  const auto spaced = compile(weather, options);
  BOOST_TEST(matches(spaced, "{\n  \"city\": \"a\",\n  \"unit\" : \"celsius\"\n}"));
  BOOST_TEST(!matches(spaced, R"({    "city":"a","unit":"celsius"})")); // four spaces
}

BOOST_AUTO_TEST_CASE(additional_properties_without_properties_allow_any_members_of_it) {
  const auto g = compile(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  BOOST_TEST(matches(g, R"({"a":1,"b":-2})"));
  BOOST_TEST(matches(g, R"({})"));
  BOOST_TEST(!matches(g, R"({"a":"x"})"));
  const auto any = compile(R"({"type": "object"})");
  BOOST_TEST(matches(any, R"({"a":[1],"b":{"c":null}})"));
}

BOOST_AUTO_TEST_CASE(schemas_the_grammar_would_not_keep_are_refused) {
  // Extra members beside declared ones (an extra could reuse a declared name), a keyword beside
  // anyOf (it would be dropped), a minimum count too large to hold, a schema with no finite
  // document, an enum value of another type.
  for (
      std::string_view schema :
      {R"({"type": "object", "properties": {"a": {"type": "integer"}},
            "additionalProperties": true})",
       R"({"type": "object", "properties": {"a": {"type": "null"}}, "anyOf": [{"type": "object"}]})",
       R"({"type": "array", "minItems": 1000000000})",
       R"({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1}},
            "$ref": "#/$defs/n"})",
       R"({"$ref": "#"})", R"({"type": "string", "enum": ["a", 1]})"}) {
    auto g = from_json_schema(json::parse(schema));
    BOOST_TEST(!g, schema);
  }
  // An enum with its type, and numbers written as people write them.
  const auto g = compile(R"({"type": "number", "enum": [1.5, 2, 1e300]})");
  BOOST_TEST(matches(g, "1.5"));
  BOOST_TEST(matches(g, "2"));
  BOOST_TEST(!matches(g, "1.5E0"));
}

BOOST_AUTO_TEST_CASE(a_pattern_is_matched_by_the_string_a_json_text_holds) {
  const auto g = compile(R"({"type": "string", "pattern": "^[a-z]{2,4}-\\d+$"})");
  BOOST_TEST(matches(g, R"("ab-12")"));
  BOOST_TEST(matches(g, R"("abcd-0")"));
  BOOST_TEST(!matches(g, R"("a-1")"));
  BOOST_TEST(!matches(g, R"("abcde-1")"));
  BOOST_TEST(!matches(g, R"("ab-")"));
  BOOST_TEST(!matches(g, R"("ab-12x")"));
  // Unanchored, anything may stand around the match.
  const auto loose = compile(R"({"type": "string", "pattern": "x(cat|dog)s?"})");
  BOOST_TEST(matches(loose, R"("my xdogs and more")"));
  BOOST_TEST(matches(loose, R"("xcat")"));
  BOOST_TEST(!matches(loose, R"("xcow")"));
  // Characters JSON escapes are written escaped; a negated class takes those past ASCII.
  const auto quoted = compile(R"({"type": "string", "pattern": "^\"[^\"]*\"\\\\$"})");
  BOOST_TEST(matches(quoted, R"("\"héllo\"\\")"));
  BOOST_TEST(!matches(quoted, R"("\"h\u00e9llo\"\\")")); // one way to write each character
  BOOST_TEST(!matches(quoted, R"("\"a\"b\"\\")"));
  const auto dotted = compile(R"({"type": "string", "pattern": "^.{3}$"})");
  BOOST_TEST(matches(dotted, R"("aé\t")"));
  BOOST_TEST(!matches(dotted, R"("a\nb")")); // '.' is no line end
  const auto email =
      compile(R"({"type": "string", "pattern": "^[\\w.+-]+@[\\w-]+(?:\\.[\\w-]+)+$"})");
  BOOST_TEST(matches(email, R"("ann.lee+x@mail.example.org")"));
  BOOST_TEST(!matches(email, R"("ann@localhost")"));
}

BOOST_AUTO_TEST_CASE(lengths_count_characters) {
  const auto g = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  BOOST_TEST(matches(g, R"("ab")"));
  BOOST_TEST(matches(g, R"("é\né")"));
  BOOST_TEST(!matches(g, R"("a")"));
  BOOST_TEST(!matches(g, R"("abcd")"));
  BOOST_TEST(matches(compile(R"({"type": "string", "minLength": 1})"), R"("a long one")"));
  BOOST_TEST(!matches(compile(R"({"type": "string", "minLength": 1})"), R"("")"));
}

BOOST_AUTO_TEST_CASE(a_pattern_beyond_the_subset_is_refused_naming_why) {
  for (const char* p : {"(?=a)b", "(a)\\1", "\\bword", "a^b", "[é]", "a{3,1}", "\\p{L}", "(ab"}) {
    auto g = from_json_schema(json::value{{"type", "string"}, {"pattern", p}});
    BOOST_REQUIRE_MESSAGE(!g, p);
    BOOST_TEST(g.error().code == triad::errc::unsupported);
    BOOST_TEST(g.error().message.find("pattern") != std::string::npos, g.error().message);
  }
  auto both =
      from_json_schema(json::parse(R"({"type": "string", "pattern": "a", "maxLength": 3})"));
  BOOST_REQUIRE(!both);
  BOOST_TEST(both.error().message.find("minLength or maxLength") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_pattern_that_would_swell_the_matcher_or_the_stack_is_refused) {
  for (const std::string& p :
       {std::string(200, '(') + "a" + std::string(200, ')'), // deep
        std::string{"(a{0,100}){0,100}"},                    // 10000 copies
        std::string(5000, 'a'), std::string{"[]"}, std::string{"[^]"}, std::string{"[^\\s\\S]"}}) {
    auto g = from_json_schema(json::value{{"type", "string"}, {"pattern", p}});
    BOOST_REQUIRE_MESSAGE(!g, p.substr(0, 40));
    BOOST_TEST(g.error().message.find("pattern") != std::string::npos, g.error().message);
  }
  // Within the bounds, and a lazy single repeat.
  BOOST_TEST(matches(compile(R"({"type": "string", "pattern": "^(a{0,64}){0,64}$"})"), R"("aaa")"));
  BOOST_TEST(matches(compile(R"({"type": "string", "pattern": "^a{1}?b$"})"), R"("ab")"));
  // Without a type, a pattern or a length makes it a string.
  BOOST_TEST(matches(compile(R"({"pattern": "^x+$"})"), R"("xx")"));
  BOOST_TEST(!matches(compile(R"({"pattern": "^x+$"})"), "3"));
  BOOST_TEST(!matches(compile(R"({"minLength": 2})"), R"("x")"));
}

BOOST_AUTO_TEST_CASE(unsupported_keywords_are_named) {
  auto g = from_json_schema(json::parse(R"({"type": "object", "properties":
                                            {"name": {"type": "string", "not": {"const": "a"}}}})"));
  BOOST_REQUIRE(!g);
  BOOST_TEST(g.error().code == triad::errc::unsupported);
  BOOST_TEST(g.error().message.find("'not'") != std::string::npos, g.error().message);
  BOOST_TEST(g.error().message.find("#/properties/name") != std::string::npos, g.error().message);
  auto one_of = from_json_schema(json::parse(R"({"oneOf": [{"type": "string"}]})"));
  BOOST_REQUIRE(!one_of);
  BOOST_TEST(one_of.error().message.find("'oneOf'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(malformed_schemas_are_invalid_arguments) {
  for (std::string_view bad : {R"({"type": "text"})", R"({"required": ["x"]})",
                               R"({"type": "array", "minItems": 3, "maxItems": 2})",
                               R"({"enum": []})", R"({"$ref": "#/$defs/missing"})", "[1]"}) {
    auto g = from_json_schema(json::parse(bad));
    BOOST_TEST(!g, bad);
  }
}

BOOST_AUTO_TEST_CASE(random_documents_of_a_schema_are_valid_json_of_it) {
  const auto g = compile(weather);
  std::mt19937 rng{7};
  int ended = 0;
  for (int i = 0; i < 200; ++i) {
    const auto text = walk(g, rng);
    if (text.empty())
      continue;
    ++ended;
    boost::system::error_code ec;
    const auto v = json::parse(text, ec);
    BOOST_REQUIRE_MESSAGE(!ec, text);
    const auto& o = v.as_object();
    BOOST_TEST(o.at("city").is_string());
    const auto unit = o.at("unit").as_string();
    BOOST_TEST((unit == "celsius" || unit == "fahrenheit"));
    for (const auto& [k, x] : o)
      BOOST_TEST((k == "city" || k == "unit" || k == "days" || k == "detail"), text);
    if (const auto* d = o.if_contains("days"))
      BOOST_TEST(d->is_int64(), text);
  }
  BOOST_TEST(ended > 150);
}

BOOST_AUTO_TEST_CASE(any_json_object_takes_objects_only) {
  const auto g = std::make_shared<const grammar>(any_json_object());
  BOOST_TEST(matches(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  BOOST_TEST(!matches(g, R"([1])"));
  BOOST_TEST(!matches(g, R"("a")"));
  const auto v = std::make_shared<const grammar>(any_json());
  BOOST_TEST(matches(v, R"("a")"));
  BOOST_TEST(matches(v, R"(-0.5E+2)"));
  BOOST_TEST(!matches(v, R"(+1)"));
}

// -- tool calls --

namespace {

// The functions of a request: get_weather (the weather schema) and get_time (no parameters).
std::vector<function_signature> weather_functions() {
  return {{"get_weather", json::parse(weather)}, {"get_time", json::value{}}};
}

std::shared_ptr<const grammar> calls_grammar(const call_layout& layout,
                                             std::vector<function_signature> functions) {
  auto g = from_tool_calls(functions, layout);
  BOOST_REQUIRE_MESSAGE(g, (g ? "" : g.error().to_string()));
  return std::make_shared<const grammar>(std::move(*g));
}

const std::string open_tag(1, static_cast<char>(call_open_marker));
const std::string close_tag(1, static_cast<char>(call_close_marker));

} // namespace

BOOST_AUTO_TEST_CASE(a_tool_call_grammar_takes_calls_to_declared_functions_only) {
  call_layout tagged;
  tagged.before_each = open_tag;
  tagged.after_each = close_tag;
  tagged.between = "\n";
  const auto g = calls_grammar(tagged, weather_functions());
  const auto call = [&](std::string_view body) { return open_tag + std::string{body} + close_tag; };
  BOOST_TEST(matches(g, call(R"({"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}})")));
  BOOST_TEST(matches(g, call(R"({"name":"get_time","arguments":{"zone":[1,2]}})")));
  BOOST_TEST(!matches(g, call(R"({"name":"get_weather","arguments":{"city":"Oslo"}})"))); // unit
  BOOST_TEST(!matches(g, call(R"({"name":"rm","arguments":{}})")));                // not declared
  BOOST_TEST(!matches(g, R"({"name":"get_time","arguments":{}})"));                 // no tags
  BOOST_TEST(!matches(g, call(R"({"name":"get_time","arguments":{}})") + "\n" +
                             call(R"({"name":"get_time","arguments":{}})"))); // one call only
  BOOST_TEST(!matches(g, ""));                                               // at least one
}

BOOST_AUTO_TEST_CASE(parallel_calls_take_up_to_max_calls_in_the_layout_of_the_family) {
  call_layout llama3;
  llama3.arguments_key = "parameters";
  llama3.between = "; ";
  llama3.max_calls = 2;
  const auto g = calls_grammar(llama3, {{"get_time", json::value{}}});
  const std::string one = R"({"name":"get_time","parameters":{}})";
  BOOST_TEST(matches(g, one));
  BOOST_TEST(matches(g, one + "; " + one));
  BOOST_TEST(!matches(g, one + "; " + one + "; " + one));
  BOOST_TEST(!matches(g, R"({"name":"get_time","arguments":{}})")); // Llama 3's key
  call_layout mistral;
  mistral.before_all = open_tag + "[";
  mistral.between = ", ";
  mistral.after_all = "]";
  mistral.max_calls = 3;
  const auto m = calls_grammar(mistral, weather_functions());
  const std::string t = R"({"name":"get_time","arguments":{}})";
  BOOST_TEST(matches(m, open_tag + "[" + t + ", " + t + "]"));
  BOOST_TEST(!matches(m, "[" + t + "]"));
}

BOOST_AUTO_TEST_CASE(text_before_calls_a_control_token_opens_is_not_a_grammar) {
  // The constraint waits for the call token instead (token_constraint::free_until_call).
  call_layout tagged;
  tagged.before_each = open_tag;
  tagged.after_each = close_tag;
  call_alternative text;
  text.what = call_alternative::kind::text;
  BOOST_TEST(!from_tool_calls(weather_functions(), tagged, {}, nullptr, text));
}

BOOST_AUTO_TEST_CASE(under_auto_a_llama3_answer_starting_with_a_brace_is_a_call) {
  call_layout llama3;
  llama3.arguments_key = "parameters";
  call_alternative text;
  text.what = call_alternative::kind::text;
  auto g = from_tool_calls({{"get_time", json::value{}}}, llama3, {}, nullptr, text);
  BOOST_REQUIRE(g);
  const auto rules = std::make_shared<const grammar>(std::move(*g));
  BOOST_TEST(matches(rules, "It is noon {or so}."));
  BOOST_TEST(matches(rules, " \n"
                            R"({"name":"get_time","parameters":{}})"));
  BOOST_TEST(matches(rules, "\n"));
  BOOST_TEST(!matches(rules, R"({"name":"get_date","parameters":{}})"));
  BOOST_TEST(!matches(rules, "{not a call}"));
}

BOOST_AUTO_TEST_CASE(with_a_response_format_the_answer_is_its_document_or_calls) {
  call_layout tagged;
  tagged.before_each = open_tag;
  tagged.after_each = close_tag;
  call_alternative json_answer;
  json_answer.what = call_alternative::kind::json;
  json_answer.schema = json::parse(R"({"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}},
      "required": ["n"], "additionalProperties": false, "$defs": {"n": {"type": "integer"}}})");
  auto g = from_tool_calls(weather_functions(), tagged, {}, nullptr, json_answer);
  BOOST_REQUIRE_MESSAGE(g, (g ? "" : g.error().to_string()));
  const auto rules = std::make_shared<const grammar>(std::move(*g));
  BOOST_TEST(matches(rules, R"({"n":4})"));
  BOOST_TEST(matches(rules, open_tag + R"({"name":"get_time","arguments":{}})" + close_tag));
  BOOST_TEST(!matches(rules, R"({"n":"four"})"));
  BOOST_TEST(!matches(rules, "plain text"));
  BOOST_TEST(!matches(rules, R"({"n":4})" + open_tag + R"({"name":"get_time","arguments":{}})" +
                                 close_tag));
  json_answer.schema = json::value{};
  auto any = from_tool_calls(weather_functions(), tagged, {}, nullptr, json_answer);
  BOOST_REQUIRE(any);
  BOOST_TEST(matches(std::make_shared<const grammar>(std::move(*any)), R"({"free":[1,2]})"));
  json_answer.schema = json::parse(R"({"type": "string", "format": "email"})");
  auto bad = from_tool_calls(weather_functions(), tagged, {}, nullptr, json_answer);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(bad.error().message.find("response_format: ") == 0u, bad.error().message);
}

BOOST_AUTO_TEST_CASE(each_function_resolves_its_own_refs_and_a_bad_schema_names_it) {
  const auto a = json::parse(R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}},
      "required": ["x"], "$defs": {"n": {"type": "integer"}}})");
  const auto b = json::parse(R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}},
      "required": ["x"], "$defs": {"n": {"type": "boolean"}}})");
  const auto g = calls_grammar({}, {{"a", a}, {"b", b}});
  BOOST_TEST(matches(g, R"({"name":"a","arguments":{"x":3}})"));
  BOOST_TEST(matches(g, R"({"name":"b","arguments":{"x":true}})"));
  BOOST_TEST(!matches(g, R"({"name":"b","arguments":{"x":3}})"));
  auto bad = from_tool_calls(
      {{"a", a}, {"odd", json::parse(R"({"type": "object", "properties": {"s": {"type": "string",
                                                    "pattern": "a\\1"}}})")}},
      {});
  BOOST_REQUIRE(!bad);
  BOOST_TEST(bad.error().message.find("function 'odd'") == 0u, bad.error().message);
  BOOST_TEST(bad.error().message.find("pattern") != std::string::npos, bad.error().message);
  BOOST_TEST(!from_tool_calls({}, {}));
}

BOOST_AUTO_TEST_CASE(parameters_must_describe_an_object_and_any_object_is_the_default) {
  const auto g = calls_grammar({}, {{"f", json::parse("{}")}, {"g", json::parse("true")}});
  BOOST_TEST(matches(g, R"({"name":"f","arguments":{"a":[1,{"b":null}]}})"));
  BOOST_TEST(matches(g, R"({"name":"g","arguments":{}})"));
  BOOST_TEST(!matches(g, R"({"name":"f","arguments":3})"));
  BOOST_TEST(!matches(g, R"({"name":"g","arguments":"x"})"));
  std::size_t failed = 99;
  auto scalar = from_tool_calls({{"ok", json::value{}}, {"s", json::parse(R"({"type": "string"})")}},
                                {}, {}, &failed);
  BOOST_REQUIRE(!scalar);
  BOOST_TEST(failed == 1u);
  BOOST_TEST(scalar.error().message.find("an object's schema") != std::string::npos,
             scalar.error().message);
  failed = 99;
  auto endless = from_tool_calls(
      {{"loop", json::parse(R"({"type": "object", "properties": {"x": {"$ref": "#"}},
                                "required": ["x"]})")}},
      {}, {}, &failed);
  BOOST_REQUIRE(!endless);
  BOOST_TEST(failed == 0u);
  BOOST_TEST(endless.error().message.find("no finite") != std::string::npos,
             endless.error().message);
}

BOOST_AUTO_TEST_CASE(hermes_calls_may_have_newlines_inside_their_tags) {
  call_layout tagged;
  tagged.before_each = open_tag;
  tagged.after_each = close_tag;
  tagged.newlines_inside = true;
  const auto g = calls_grammar(tagged, {{"t", json::value{}}});
  BOOST_TEST(matches(g, open_tag + "\n" + R"({"name":"t","arguments":{}})" + "\n" + close_tag));
  BOOST_TEST(matches(g, open_tag + R"({"name":"t","arguments":{}})" + close_tag));
  BOOST_TEST(!matches(g, open_tag + "\n\n" + R"({"name":"t","arguments":{}})" + close_tag));
}

BOOST_AUTO_TEST_CASE(numbers_stay_within_what_every_parser_reads) {
  const auto integer = compile(R"({"type": "integer"})");
  BOOST_TEST(matches(integer, "-123456789012345678")); // 18 digits: an int64
  BOOST_TEST(!matches(integer, "1234567890123456789"));
  const auto number = compile(R"({"type": "number"})");
  BOOST_TEST(matches(number, "1.25e-12"));
  BOOST_TEST(matches(number, "0.000000000000000000000001"));
  BOOST_TEST(!matches(number, "1e308")); // a two-digit exponent: never an overflow
}
