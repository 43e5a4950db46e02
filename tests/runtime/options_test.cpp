#include "runtime/options.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>
#include <vector>

using namespace triad;

namespace {

/// A section as an area declares one: a struct with its defaults, and its table of keys.
struct widget_config {
  std::string name;
  std::size_t count = 3;
  std::chrono::milliseconds period{50};
  bool enabled = true;
  double ratio = 0.5;
  std::vector<std::string> tags;
  bool operator==(const widget_config&) const = default;
};

const options::section<widget_config>& widget_section() {
  using c = widget_config;
  static const options::section<c> section{
      "widgets",
      true,
      {
          options::unique_name<c>("widget", "widgets", " (every widget needs a name)"),
          options::integer("count", &c::count, {1, 10}, "widgets made"),
          options::integer("period_ms", &c::period, {1, 1000}, "how often"),
          options::boolean<c>("enabled", &c::enabled, "whether it runs"),
          options::number<c>("ratio", &c::ratio, options::positive, "a share"),
          options::strings<c>("tags", &c::tags, "an array of strings", "labels"),
      },
      {},
  };
  return section;
}

/// Reads `text`'s [[widgets]]; the error message when it fails.
expected<std::vector<widget_config>> read(std::string_view text) {
  auto doc = options::document::parse(text, "w.toml");
  if (!doc)
    return doc.error();
  const std::vector<std::string_view> top = {"widgets"};
  doc->check_top_level(top);
  std::vector<widget_config> out;
  doc->read(widget_section(), out);
  if (auto ok = doc->finish(); !ok)
    return ok.error();
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(options_tables)

BOOST_AUTO_TEST_CASE(a_section_reads_its_keys_and_keeps_defaults_for_the_rest) {
  auto w = read("[[widgets]]\nname = \"a\"\ncount = 7\nperiod_ms = 20\n");
  BOOST_TEST_REQUIRE(w.has_value(), (w ? "" : w.error().message));
  BOOST_TEST_REQUIRE(w->size() == 1u);
  BOOST_TEST((*w)[0].name == "a");
  BOOST_TEST((*w)[0].count == 7u);
  BOOST_TEST((*w)[0].period.count() == 20);
  BOOST_TEST((*w)[0].enabled);
  BOOST_TEST((*w)[0].ratio == 0.5);
}

BOOST_AUTO_TEST_CASE(a_value_out_of_range_names_file_line_key_and_what_is_allowed) {
  auto w = read("[[widgets]]\nname = \"a\"\ncount = 11\n");
  BOOST_TEST_REQUIRE(!w.has_value());
  BOOST_TEST(w.error().message ==
             "w.toml:3:9: widgets[0].count = 11: out of range; allowed: integer 1..10");
}

BOOST_AUTO_TEST_CASE(an_unknown_key_lists_the_keys_of_the_table) {
  auto w = read("[[widgets]]\nname = \"a\"\ncolour = 1\n");
  BOOST_TEST_REQUIRE(!w.has_value());
  BOOST_TEST(w.error().message ==
             "w.toml:3:1: widgets[0].colour = 1: unknown key; allowed keys in [[widgets]]: "
             "name, count, period_ms, enabled, ratio, tags");
}

BOOST_AUTO_TEST_CASE(the_first_error_in_the_file_is_the_one_reported) {
  auto w = read("[[widgets]]\nname = \"a\"\nratio = -1\ncount = 0\n");
  BOOST_TEST_REQUIRE(!w.has_value());
  BOOST_TEST(w.error().message.starts_with("w.toml:3:9: widgets[0].ratio = -1: out of range"));
}

BOOST_AUTO_TEST_CASE(a_required_key_missing_and_a_name_given_twice_are_errors) {
  auto missing = read("[[widgets]]\ncount = 2\n");
  BOOST_TEST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message ==
             "w.toml:1:1: widgets[0].name: missing (every widget needs a name); allowed: 1..64 "
             "characters from A-Z, a-z, 0-9, '_' and '-'");
  auto twice = read("[[widgets]]\nname = \"a\"\n[[widgets]]\nname = \"a\"\n");
  BOOST_TEST_REQUIRE(!twice.has_value());
  BOOST_TEST(twice.error().message ==
             "w.toml:4:8: widgets[1].name = \"a\": duplicate widget name, already given by "
             "widgets[0].name at w.toml:2:8; allowed: names unique across widgets");
}

BOOST_AUTO_TEST_CASE(render_writes_what_read_reads_back) {
  widget_config a;
  a.name = "a-1";
  a.count = 10;
  a.period = std::chrono::milliseconds{1000};
  a.enabled = false;
  a.ratio = 0.1;
  a.tags = {"x \"quoted\"", "y"};
  widget_config b;
  b.name = "b";
  std::string text;
  options::render(text, widget_section(), std::vector<widget_config>{a, b});
  auto back = read(text);
  BOOST_TEST_REQUIRE(back.has_value(), (back ? "" : back.error().message) << "\n" << text);
  BOOST_TEST_REQUIRE(back->size() == 2u);
  BOOST_TEST(((*back)[0] == a), text);
  BOOST_TEST(((*back)[1] == b), text);
}

BOOST_AUTO_TEST_CASE(a_toml_syntax_error_is_a_parse_error) {
  auto w = read("[[widgets]\n");
  BOOST_TEST_REQUIRE(!w.has_value());
  BOOST_TEST((w.error().code == errc::parse_error));
  BOOST_TEST(w.error().message.starts_with("w.toml:1:"));
}

BOOST_AUTO_TEST_SUITE_END()
