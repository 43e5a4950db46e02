#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include "jinja/template.hpp"
#include "tests/printers.hpp"
#include "tests/process.hpp"

namespace {

namespace json = boost::json;
using triad::jinja::jinja_template;
using triad::jinja::value;

std::string render(std::string_view source, const json::value& context = json::object{}) {
  auto t = jinja_template::parse(source);
  BOOST_REQUIRE_MESSAGE(t, (t ? "" : t.error().to_string()));
  auto out = t->render(value::from_json(context));
  BOOST_REQUIRE_MESSAGE(out, (out ? "" : out.error().to_string()));
  return *out;
}

std::string source_dir() {
  const char* s = std::getenv("TRIAD_SOURCE_DIR");
  BOOST_REQUIRE_MESSAGE(s != nullptr, "TRIAD_SOURCE_DIR is not set (ctest sets it)");
  return s;
}

// @huggingface/jinja's renderings of data/cases.json, or null (the case says NOT RUN).
std::optional<json::object> reference() {
  const char* node = std::getenv("TRIAD_NODE");
  const char* modules = std::getenv("TRIAD_TOKENIZER_REFS");
  if (node == nullptr || *node == '\0' || modules == nullptr ||
      !std::filesystem::exists(std::filesystem::path{modules} / "@huggingface/jinja")) {
    BOOST_TEST_MESSAGE("NOT RUN: @huggingface/jinja is not installed (scripts/test.sh installs "
                       "it into .cache/tokenizers)");
    BOOST_WARN_MESSAGE(false, "Jinja reference comparison NOT RUN");
    return std::nullopt;
  }
  const std::string dir = source_dir() + "/tests/jinja";
  const std::string command = std::string{node} + " " + dir + "/reference.mjs " + modules + " " +
                              dir + "/data/cases.json";
  auto r = triad::test::run_command(command);
  BOOST_REQUIRE_MESSAGE(r.status == 0, "the reference script failed: " << command);
  return json::parse(r.out).as_object();
}

} // namespace

BOOST_AUTO_TEST_CASE(templates_render_byte_identical_to_huggingface_jinja) {
  auto ref = reference();
  if (!ref)
    return;
  std::ifstream in{source_dir() + "/tests/jinja/data/cases.json"};
  auto cases = json::parse(std::string{std::istreambuf_iterator<char>{in}, {}}).as_object();
  const auto& contexts = cases.at("contexts").as_array();
  const auto& out = ref->at("out").as_object();
  std::size_t compared = 0;
  for (const auto& [name, source] : ref->at("templates").as_object()) {
    auto t = jinja_template::parse(source.as_string());
    BOOST_REQUIRE_MESSAGE(t, name << ": " << (t ? "" : t.error().to_string()));
    for (std::size_t i = 0; i < contexts.size(); ++i) {
      const std::string key = std::string{name} + "/" + std::to_string(i);
      const auto& want = out.at(key);
      auto got = t->render(value::from_json(contexts[i]));
      if (want.is_object()) { // the reference refused it: so must triad
        BOOST_TEST(!got, key << " rendered, the reference failed: " << want.at("error"));
      } else {
        BOOST_REQUIRE_MESSAGE(got, key << ": " << (got ? "" : got.error().to_string()));
        const std::string expected_text{want.as_string()};
        BOOST_TEST(*got == expected_text,
                   key << "\n--- triad:\n" << *got << "\n--- @huggingface/jinja:\n" << expected_text);
      }
      ++compared;
    }
  }
  BOOST_TEST_MESSAGE("compared " << compared << " renderings");
  BOOST_TEST(compared >= 40u);
}

BOOST_AUTO_TEST_CASE(raise_exception_is_an_error_with_its_message) {
  auto t = jinja_template::parse("{{ raise_exception('roles must alternate') }}");
  BOOST_REQUIRE(t);
  auto out = t->render(value::dict());
  BOOST_REQUIRE(!out);
  BOOST_TEST(out.error().message.find("roles must alternate") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(syntax_errors_name_the_line) {
  auto t = jinja_template::parse("ok\n{% if x %}\nno end");
  BOOST_REQUIRE(!t);
  BOOST_TEST(t.error().code == triad::errc::parse_error);
  BOOST_TEST(t.error().message.find("endif") != std::string::npos);
  auto u = jinja_template::parse("{% frobnicate %}");
  BOOST_REQUIRE(!u);
  BOOST_TEST(u.error().message.find("unknown statement 'frobnicate'") != std::string::npos);
  auto v = jinja_template::parse("{{ 'open }}");
  BOOST_REQUIRE(!v);
}

BOOST_AUTO_TEST_CASE(set_inside_a_loop_stays_in_the_loop_namespaces_carry_out) {
  BOOST_TEST(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}") ==
             "1");
  BOOST_TEST(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}"
                    "{% endfor %}{{ ns.x }}") == "2");
}

BOOST_AUTO_TEST_CASE(json_values_keep_their_types_and_order) {
  json::value ctx = json::parse(R"({"o": {"z": 1, "a": 2.5, "t": true, "n": null, "s": "é\n"}})");
  BOOST_TEST(render("{{ o | tojson }}", ctx) ==
             R"({"z": 1, "a": 2.5, "t": true, "n": null, "s": "é\n"})");
  BOOST_TEST(render("{{ o.z + 1 }} {{ o.a * 2 }} {{ o.t }} [{{ o.n }}]", ctx) == "2 5.0 true []");
}
