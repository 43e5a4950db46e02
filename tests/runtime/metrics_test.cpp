#include "runtime/metrics.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

#include "runtime/defaults.hpp"
#include "runtime/detail/proc_stat.hpp"

namespace {

using triad::labels;

/// One parsed sample line: its name, labels in the order written, and value.
struct parsed_sample {
  std::string name;
  labels lbls;
  double value = 0;
  std::string value_text;

  /// The value of label `name`, or nullopt when absent.
  std::optional<std::string> label(std::string_view name) const {
    for (const auto& [k, v] : lbls) {
      if (k == name) {
        return v;
      }
    }
    return std::nullopt;
  }
};

/// One parsed family: HELP text, TYPE and its samples in order.
struct parsed_family {
  std::string name;
  std::optional<std::string> help;
  std::string type = "untyped";
  std::vector<parsed_sample> samples;
};

/// Thrown on any departure from the 0.0.4 text format, with the line number.
struct parse_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An independent parser of the Prometheus text exposition format 0.0.4. It checks the grammar
/// of every line, that HELP/TYPE come before a family's samples and at most once, that sample
/// names belong to their family (with _bucket/_sum/_count for histograms) and that each family's
/// lines are contiguous.
class exposition_parser {
public:
  explicit exposition_parser(std::string_view text)
      : text_(text) {}

  std::vector<parsed_family> parse() {
    if (!text_.empty() && text_.back() != '\n') {
      fail("text does not end with a newline");
    }
    std::size_t start = 0;
    while (start < text_.size()) {
      std::size_t end = text_.find('\n', start);
      line_ = text_.substr(start, end - start);
      ++line_no_;
      pos_ = 0;
      parse_line();
      start = end + 1;
    }
    return families_;
  }

private:
  [[noreturn]] void fail(const std::string& why) const {
    throw parse_failure("line " + std::to_string(line_no_) + " (" + std::string(line_) +
                        "): " + why);
  }

  bool at_end() const { return pos_ >= line_.size(); }
  char peek() const { return at_end() ? '\0' : line_[pos_]; }

  void expect(char c) {
    if (peek() != c) {
      fail(std::string("expected '") + c + "' at column " + std::to_string(pos_));
    }
    ++pos_;
  }

  void skip_blanks() {
    while (!at_end() && (line_[pos_] == ' ' || line_[pos_] == '\t')) {
      ++pos_;
    }
  }

  std::string read_name(bool allow_colon) {
    auto is_start = [&](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (allow_colon && c == ':');
    };
    std::size_t begin = pos_;
    if (at_end() || !is_start(line_[pos_])) {
      fail("expected a name at column " + std::to_string(pos_));
    }
    ++pos_;
    while (!at_end() &&
           (is_start(line_[pos_]) || std::isdigit(static_cast<unsigned char>(line_[pos_])))) {
      ++pos_;
    }
    return std::string(line_.substr(begin, pos_ - begin));
  }

  std::string read_token() {
    std::size_t begin = pos_;
    while (!at_end() && line_[pos_] != ' ' && line_[pos_] != '\t') {
      ++pos_;
    }
    return std::string(line_.substr(begin, pos_ - begin));
  }

  double parse_number(const std::string& text) {
    if (text == "+Inf") {
      return std::numeric_limits<double>::infinity();
    }
    if (text == "-Inf") {
      return -std::numeric_limits<double>::infinity();
    }
    if (text == "NaN") {
      return std::numeric_limits<double>::quiet_NaN();
    }
    if (text.empty()) {
      fail("missing value");
    }
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || text.find_first_of("iInN") != std::string::npos) {
      fail("bad number \"" + text + "\"");
    }
    return value;
  }

  parsed_family& family_for(const std::string& name, bool for_sample) {
    if (current_ && families_[*current_].name == name) {
      return families_[*current_];
    }
    if (seen_.count(name) != 0) {
      fail("family " + name + " is not contiguous");
    }
    if (for_sample && current_ && families_[*current_].type == "histogram") {
      // A sample of the current family under a histogram suffix.
      parsed_family& cur = families_[*current_];
      for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
        if (name == cur.name + std::string(suffix)) {
          return cur;
        }
      }
    }
    seen_.insert(name);
    families_.push_back(parsed_family{name, std::nullopt, "untyped", {}});
    current_ = families_.size() - 1;
    return families_.back();
  }

  void parse_line() {
    if (line_.empty()) {
      return;
    }
    if (line_[0] == '#') {
      parse_comment();
    } else {
      parse_sample();
    }
  }

  void parse_comment() {
    ++pos_;
    skip_blanks();
    std::string keyword = read_token();
    if (keyword != "HELP" && keyword != "TYPE") {
      return; // an ordinary comment
    }
    skip_blanks();
    std::string name = read_name(true);
    parsed_family& fam = family_for(name, false);
    if (!fam.samples.empty()) {
      fail(keyword + " after samples of " + name);
    }
    if (keyword == "HELP") {
      if (fam.help) {
        fail("second HELP for " + name);
      }
      std::string help;
      if (!at_end()) {
        expect(' ');
        while (!at_end()) {
          char c = line_[pos_++];
          if (c == '\\') {
            char next = peek();
            ++pos_;
            if (next == '\\') {
              help += '\\';
            } else if (next == 'n') {
              help += '\n';
            } else {
              fail("bad escape in HELP");
            }
          } else {
            help += c;
          }
        }
      }
      fam.help = help;
    } else {
      if (fam.type != "untyped" || type_seen_.count(name) != 0) {
        fail("second TYPE for " + name);
      }
      type_seen_.insert(name);
      expect(' ');
      std::string type = read_token();
      if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
          type != "untyped") {
        fail("unknown type " + type);
      }
      if (!at_end()) {
        fail("text after TYPE");
      }
      fam.type = type;
    }
  }

  void parse_sample() {
    parsed_sample sample;
    sample.name = read_name(true);
    if (peek() == '{') {
      ++pos_;
      std::set<std::string> names;
      while (peek() != '}') {
        std::string label = read_name(false);
        if (!names.insert(label).second) {
          fail("duplicate label " + label);
        }
        expect('=');
        expect('"');
        std::string value;
        for (;;) {
          if (at_end()) {
            fail("unterminated label value");
          }
          char c = line_[pos_++];
          if (c == '"') {
            break;
          }
          if (c == '\\') {
            char next = peek();
            ++pos_;
            if (next == '\\') {
              value += '\\';
            } else if (next == '"') {
              value += '"';
            } else if (next == 'n') {
              value += '\n';
            } else {
              fail("bad escape in label value");
            }
          } else {
            value += c;
          }
        }
        sample.lbls.emplace_back(label, value);
        if (peek() == ',') {
          ++pos_;
        } else if (peek() != '}') {
          fail("expected ',' or '}' at column " + std::to_string(pos_));
        }
      }
      expect('}');
    }
    expect(' ');
    skip_blanks();
    sample.value_text = read_token();
    sample.value = parse_number(sample.value_text);
    skip_blanks();
    if (!at_end()) {
      std::string timestamp = read_token();
      char* end = nullptr;
      std::strtoll(timestamp.c_str(), &end, 10);
      if (timestamp.empty() || end != timestamp.c_str() + timestamp.size() || !at_end()) {
        fail("bad timestamp");
      }
    }
    parsed_family& fam = family_for(sample.name, true);
    if (fam.type == "histogram" && sample.name == fam.name) {
      fail("histogram sample without a suffix");
    }
    fam.samples.push_back(std::move(sample));
  }

  std::string_view text_;
  std::string_view line_;
  std::size_t line_no_ = 0;
  std::size_t pos_ = 0;
  std::vector<parsed_family> families_;
  std::optional<std::size_t> current_; // index into families_
  std::set<std::string> seen_;
  std::set<std::string> type_seen_;
};

std::vector<parsed_family> parse(const std::string& text) {
  try {
    return exposition_parser(text).parse();
  } catch (const parse_failure& e) {
    BOOST_FAIL("exposition does not parse: " << e.what() << "\n" << text);
  }
  return {};
}

const parsed_family& find_family(const std::vector<parsed_family>& fams, std::string_view name) {
  for (const auto& fam : fams) {
    if (fam.name == name) {
      return fam;
    }
  }
  BOOST_FAIL("no family " << name);
  throw std::logic_error("unreachable");
}

/// The samples of a family named exactly `name` (e.g. "triad_x_bucket").
std::vector<parsed_sample> samples_named(const parsed_family& fam, std::string_view name) {
  std::vector<parsed_sample> out;
  for (const auto& s : fam.samples) {
    if (s.name == name) {
      out.push_back(s);
    }
  }
  return out;
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

/// Checks that registration failed with invalid_argument and that the message names every needle.
template<class T>
void check_error(const triad::expected<T>& result, std::vector<std::string_view> needles) {
  BOOST_REQUIRE(!result.has_value());
  BOOST_TEST((result.error().code == triad::errc::invalid_argument));
  for (auto needle : needles) {
    BOOST_TEST(contains(result.error().message, needle),
               "message \"" << result.error().message << "\" lacks \"" << needle << "\"");
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(metrics)

BOOST_AUTO_TEST_CASE(content_type_is_text_format_0_0_4) {
  BOOST_TEST(triad::metrics_registry::content_type == "text/plain; version=0.0.4; charset=utf-8");
}

BOOST_AUTO_TEST_CASE(empty_registry_renders_nothing) {
  triad::metrics_registry reg;
  BOOST_TEST(reg.render().empty());
}

BOOST_AUTO_TEST_CASE(counter_renders_exact_text) {
  triad::metrics_registry reg;
  auto c = reg.add_counter("triad_requests_total", "Requests served.");
  BOOST_REQUIRE(c.has_value());
  (*c)->inc();
  (*c)->inc(2);
  BOOST_TEST(reg.render() == "# HELP triad_requests_total Requests served.\n"
                             "# TYPE triad_requests_total counter\n"
                             "triad_requests_total 3\n");
}

BOOST_AUTO_TEST_CASE(names_and_types_parse) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_counter("triad_a_total", "a counter", {{"kind", "x"}}).has_value());
  BOOST_REQUIRE(reg.add_gauge("triad_b", "a gauge").has_value());
  BOOST_REQUIRE(reg.add_histogram("triad_c_seconds", "a histogram", {0.5, 1}).has_value());
  BOOST_REQUIRE(reg.add_counter("triad_ns:d_total", "colon allowed").has_value());
  auto fams = parse(reg.render());
  BOOST_REQUIRE_EQUAL(fams.size(), 4u);
  // Registration order.
  BOOST_TEST(fams[0].name == "triad_a_total");
  BOOST_TEST(fams[0].type == "counter");
  BOOST_TEST(fams[0].help.value_or("") == "a counter");
  BOOST_TEST(fams[1].name == "triad_b");
  BOOST_TEST(fams[1].type == "gauge");
  BOOST_TEST(fams[2].name == "triad_c_seconds");
  BOOST_TEST(fams[2].type == "histogram");
  BOOST_TEST(fams[3].name == "triad_ns:d_total");
  for (const auto& fam : fams) {
    BOOST_TEST(fam.name.starts_with("triad_"));
    BOOST_TEST(fam.help.has_value());
    BOOST_TEST(!fam.samples.empty());
  }
}

BOOST_AUTO_TEST_CASE(label_values_with_hostile_text_round_trip) {
  const std::vector<std::string> hostile = {
      "plain",
      "",
      "quote\"inside",
      "back\\slash",
      "line\nbreak",
      "\\n is not a newline",
      "\\\"",
      "trailing backslash\\",
      "}{,=\" le=\"+Inf\"",
      "unicode: h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80",
      "tab\there",
  };
  triad::metrics_registry reg;
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    auto g = reg.add_gauge("triad_hostile", "hostile labels",
                           {{"id", std::to_string(i)}, {"value", hostile[i]}});
    BOOST_REQUIRE(g.has_value());
    (*g)->set(static_cast<double>(i));
  }
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_hostile");
  BOOST_REQUIRE_EQUAL(fam.samples.size(), hostile.size());
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    const auto& s = fam.samples[i];
    BOOST_TEST(s.label("id").value_or("?") == std::to_string(i));
    BOOST_TEST(s.label("value").value_or("<missing>") == hostile[i]);
    BOOST_TEST(s.value == static_cast<double>(i));
  }
}

BOOST_AUTO_TEST_CASE(label_escaping_exact_text) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_counter("triad_x_total", "x", {{"v", "a\"b\\c\nd"}}).has_value());
  BOOST_TEST(contains(reg.render(), "triad_x_total{v=\"a\\\"b\\\\c\\nd\"} 0\n"));
}

BOOST_AUTO_TEST_CASE(help_escaping_round_trips) {
  const std::string help = "first line\nsecond \\ line with \"quotes\" and \xc3\xa9";
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_gauge("triad_helpful", help).has_value());
  std::string text = reg.render();
  // Quotes stay as they are in HELP; only backslash and newline are escaped.
  BOOST_TEST(contains(text, "# HELP triad_helpful first line\\nsecond \\\\ line with \"quotes\""));
  BOOST_TEST(find_family(parse(text), "triad_helpful").help.value_or("") == help);
}

BOOST_AUTO_TEST_CASE(labels_render_in_first_registration_order) {
  triad::metrics_registry reg;
  auto first = reg.add_counter("triad_ordered_total", "o", {{"zeta", "1"}, {"alpha", "2"}});
  auto swapped = reg.add_counter("triad_ordered_total", "o", {{"alpha", "4"}, {"zeta", "3"}});
  BOOST_REQUIRE(first.has_value());
  BOOST_REQUIRE(swapped.has_value());
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_ordered_total");
  BOOST_REQUIRE_EQUAL(fam.samples.size(), 2u);
  for (const auto& s : fam.samples) {
    BOOST_REQUIRE_EQUAL(s.lbls.size(), 2u);
    BOOST_TEST(s.lbls[0].first == "zeta");
    BOOST_TEST(s.lbls[1].first == "alpha");
  }
  BOOST_TEST(fam.samples[1].label("zeta").value_or("") == "3");
  BOOST_TEST(fam.samples[1].label("alpha").value_or("") == "4");
}

BOOST_AUTO_TEST_CASE(same_name_and_labels_return_same_metric) {
  triad::metrics_registry reg;
  auto a = reg.add_counter("triad_same_total", "s", {{"x", "1"}, {"y", "2"}});
  auto b = reg.add_counter("triad_same_total", "s", {{"x", "1"}, {"y", "2"}});
  auto reordered = reg.add_counter("triad_same_total", "s", {{"y", "2"}, {"x", "1"}});
  auto other = reg.add_counter("triad_same_total", "s", {{"x", "1"}, {"y", "3"}});
  BOOST_REQUIRE(a && b && reordered && other);
  BOOST_TEST(*a == *b);
  BOOST_TEST(*a == *reordered);
  BOOST_TEST(*a != *other);
  auto g1 = reg.add_gauge("triad_same_gauge", "g");
  auto g2 = reg.add_gauge("triad_same_gauge", "g");
  auto h1 = reg.add_histogram("triad_same_seconds", "h", {1, 2});
  auto h2 = reg.add_histogram("triad_same_seconds", "h", {1, 2});
  BOOST_REQUIRE(g1 && g2 && h1 && h2);
  BOOST_TEST(*g1 == *g2);
  BOOST_TEST(*h1 == *h2);
}

BOOST_AUTO_TEST_CASE(histogram_buckets_are_cumulative_with_inf_equal_to_count) {
  triad::metrics_registry reg;
  auto h = reg.add_histogram("triad_latency_seconds", "latency", {0.005, 0.1, 1, 10},
                             {{"stage", "decode"}});
  BOOST_REQUIRE(h.has_value());
  const std::vector<double> observations = {0.001, 0.005, 0.05, 0.1, 0.5, 2, 20, 30, 0.0};
  double expected_sum = 0;
  for (double v : observations) {
    (*h)->observe(v);
    expected_sum += v;
  }
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_latency_seconds");
  BOOST_TEST(fam.type == "histogram");
  auto buckets = samples_named(fam, "triad_latency_seconds_bucket");
  auto sums = samples_named(fam, "triad_latency_seconds_sum");
  auto counts = samples_named(fam, "triad_latency_seconds_count");
  BOOST_REQUIRE_EQUAL(buckets.size(), 5u);
  BOOST_REQUIRE_EQUAL(sums.size(), 1u);
  BOOST_REQUIRE_EQUAL(counts.size(), 1u);

  const std::vector<std::string> les = {"0.005", "0.1", "1", "10", "+Inf"};
  // Inclusive upper bounds: 0.005 and 0.1 count in their own buckets.
  const std::vector<double> want = {3, 5, 6, 7, 9};
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    BOOST_TEST(buckets[i].label("stage").value_or("") == "decode");
    BOOST_TEST(buckets[i].label("le").value_or("") == les[i]);
    BOOST_TEST(buckets[i].lbls.back().first == "le");
    BOOST_TEST(buckets[i].value == want[i]);
    if (i > 0) {
      BOOST_TEST(buckets[i].value >= buckets[i - 1].value);
    }
  }
  BOOST_TEST(buckets.back().value == counts[0].value);
  BOOST_TEST(counts[0].value == static_cast<double>(observations.size()));
  BOOST_TEST(sums[0].value == expected_sum, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!counts[0].label("le").has_value());
  BOOST_TEST((*h)->count() == observations.size());
}

BOOST_AUTO_TEST_CASE(observing_a_range_counts_as_observing_each_value) {
  // Runs within one bucket, changes of bucket, a return to an earlier bucket and NaN.
  const std::vector<double> values = {
      0.5, 0.7, 0.7, 3, 0.2, 20, 20, 20, 1, std::numeric_limits<double>::quiet_NaN(), 2};
  triad::metrics_registry reg;
  auto one_by_one = reg.add_histogram("triad_one_by_one", "h", {1, 2, 10});
  auto at_once = reg.add_histogram("triad_at_once", "h", {1, 2, 10});
  BOOST_REQUIRE(one_by_one && at_once);
  for (double v : values)
    (*one_by_one)->observe(v);
  (*at_once)->observe_each(values, [](double v) { return v; });
  auto want = (*one_by_one)->cumulative_counts();
  auto got = (*at_once)->cumulative_counts();
  BOOST_TEST(got == want, boost::test_tools::per_element());
  BOOST_TEST(want.back() == values.size());
  // NaN makes both sums NaN; the sums of the finite values agree.
  BOOST_TEST(std::isnan((*at_once)->sum()));
  std::vector<double> finite(values.begin(), values.begin() + 9);
  auto finite_once = reg.add_histogram("triad_finite", "h", {1, 2, 10});
  BOOST_REQUIRE(finite_once.has_value());
  (*finite_once)->observe_each(finite, [](double v) { return v * 2; });
  BOOST_TEST((*finite_once)->sum() == 2 * 66.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST((*finite_once)->count() == finite.size());
  // An empty range records nothing.
  (*finite_once)->observe_each(std::vector<double>{}, [](double v) { return v; });
  BOOST_TEST((*finite_once)->count() == finite.size());
  // Without finite bounds every value lands in +Inf.
  auto inf_only = reg.add_histogram("triad_inf_only", "h", {});
  BOOST_REQUIRE(inf_only.has_value());
  (*inf_only)->observe_each(values, [](double v) { return v; });
  BOOST_TEST((*inf_only)->count() == values.size());
}

BOOST_AUTO_TEST_CASE(a_tally_flushes_what_observing_each_value_would_have_counted) {
  const std::vector<double> values = {0.5, 0.7, 3, 0.2, 20, 1, 2};
  triad::metrics_registry reg;
  auto one_by_one = reg.add_histogram("triad_one_by_one", "h", {1, 2, 10});
  auto tallied = reg.add_histogram("triad_tallied", "h", {1, 2, 10});
  BOOST_REQUIRE(one_by_one && tallied);
  {
    triad::histogram::tally t{*tallied};
    for (double v : values) {
      (*one_by_one)->observe(v);
      t.observe(v);
    }
    BOOST_TEST((*tallied)->count() == 0u); // nothing shows before the flush
    t.flush();
    BOOST_TEST((*tallied)->count() == values.size());
    t.observe(4); // flushed by the destructor
  }
  (*one_by_one)->observe(4);
  auto want = (*one_by_one)->cumulative_counts();
  auto got = (*tallied)->cumulative_counts();
  BOOST_TEST(got == want, boost::test_tools::per_element());
  BOOST_TEST((*tallied)->sum() == (*one_by_one)->sum(), boost::test_tools::tolerance(1e-12));
  triad::histogram::tally nowhere{nullptr}; // observations without a histogram are dropped
  nowhere.observe(1);
  nowhere.flush();
}

BOOST_AUTO_TEST_CASE(a_counter_advanced_to_a_total_never_goes_down) {
  triad::metrics_registry reg;
  auto c = reg.add_counter("triad_mirrored_total", "c");
  BOOST_REQUIRE(c.has_value());
  (*c)->advance_to(5);
  BOOST_TEST((*c)->value() == 5.0);
  (*c)->advance_to(3);
  BOOST_TEST((*c)->value() == 5.0);
  (*c)->advance_to(std::numeric_limits<double>::quiet_NaN());
  BOOST_TEST((*c)->value() == 5.0);
}

BOOST_AUTO_TEST_CASE(collectors_run_before_each_render) {
  triad::metrics_registry reg;
  auto g = reg.add_gauge("triad_read_at_scrape", "g");
  BOOST_REQUIRE(g.has_value());
  int runs = 0;
  reg.add_collector([&] { (*g)->set(++runs); });
  BOOST_TEST(reg.render().find("triad_read_at_scrape 1\n") != std::string::npos);
  BOOST_TEST(reg.render().find("triad_read_at_scrape 2\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(process_metrics_render_under_their_standard_names) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(triad::add_process_metrics(reg).has_value());
  auto text = reg.render();
  for (const char* name :
       {"# TYPE process_cpu_seconds_total counter", "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge", "# TYPE process_open_fds gauge",
        "# TYPE process_max_fds gauge", "# TYPE process_threads gauge",
        "# TYPE process_start_time_seconds gauge"})
    BOOST_TEST(text.find(name) != std::string::npos, name);
  // Other names still need the triad_ prefix.
  BOOST_TEST(!reg.add_gauge("processes", "g").has_value());
}

// The wall clock when this test process initialised its statics, just after it started.
const double test_process_began =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

BOOST_AUTO_TEST_CASE(process_start_time_is_this_process_start) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(triad::add_process_metrics(reg).has_value());
  auto fams = parse(reg.render());
  auto start =
      samples_named(find_family(fams, "process_start_time_seconds"), "process_start_time_seconds");
  BOOST_REQUIRE_EQUAL(start.size(), 1u);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // This test process started before now, and not a day ago.
  BOOST_TEST(start.front().value <= now + 1);
  BOOST_TEST(start.front().value > now - 86400);
}

BOOST_AUTO_TEST_CASE(proc_stat_fields_follow_the_last_paren_of_the_name) {
  auto file =
      std::filesystem::temp_directory_path() / ("triad-proc-stat-" + std::to_string(::getpid()));
  {
    std::ofstream out{file};
    // A command name may hold spaces and parens; fields count from the last ')'.
    out << "4242 (a) b (c) S 1 2 3 4 5 6 7 8 9 10 11 12 13\n";
  }
  std::string name;
  auto fields = triad::detail::read_proc_stat(file, 15, &name);
  BOOST_REQUIRE(fields.has_value());
  BOOST_TEST(name == "a) b (c");
  BOOST_TEST((*fields)[0] == "S");                                  // field 3
  BOOST_TEST((*fields)[14 - 3] == "11");                            // field 14
  BOOST_TEST((*fields)[15 - 3] == "12");                            // field 15
  BOOST_TEST(!triad::detail::read_proc_stat(file, 22).has_value()); // too few fields
  std::filesystem::remove(file);
  BOOST_TEST(!triad::detail::read_proc_stat(file, 15).has_value()); // gone
}

BOOST_AUTO_TEST_CASE(histogram_with_default_duration_buckets) {
  triad::metrics_registry reg;
  auto h = reg.add_histogram("triad_step_seconds", "step", triad::default_duration_buckets());
  BOOST_REQUIRE(h.has_value());
  (*h)->observe(0.003);
  (*h)->observe(100);
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_step_seconds");
  auto buckets = samples_named(fam, "triad_step_seconds_bucket");
  BOOST_REQUIRE_EQUAL(buckets.size(), std::size(triad::defaults::metrics::duration_buckets) + 1);
  BOOST_TEST(buckets.front().label("le").value_or("") == "0.0001");
  BOOST_TEST(buckets[5].label("le").value_or("") == "0.005");
  BOOST_TEST(buckets[5].value == 1.0);
  BOOST_TEST(buckets[4].value == 0.0);
  BOOST_TEST(buckets[buckets.size() - 2].label("le").value_or("") == "60");
  BOOST_TEST(buckets[buckets.size() - 2].value == 1.0);
  BOOST_TEST(buckets.back().label("le").value_or("") == "+Inf");
  BOOST_TEST(buckets.back().value == 2.0);
}

BOOST_AUTO_TEST_CASE(histogram_without_labels_or_bounds_has_only_inf_bucket) {
  triad::metrics_registry reg;
  auto h = reg.add_histogram("triad_plain", "plain", {});
  BOOST_REQUIRE(h.has_value());
  (*h)->observe(1.5);
  BOOST_TEST(reg.render() == "# HELP triad_plain plain\n"
                             "# TYPE triad_plain histogram\n"
                             "triad_plain_bucket{le=\"+Inf\"} 1\n"
                             "triad_plain_sum 1.5\n"
                             "triad_plain_count 1\n");
}

BOOST_AUTO_TEST_CASE(histogram_sends_nan_and_inf_to_inf_bucket) {
  triad::metrics_registry reg;
  auto h = reg.add_histogram("triad_odd", "odd", {1});
  BOOST_REQUIRE(h.has_value());
  (*h)->observe(std::numeric_limits<double>::quiet_NaN());
  (*h)->observe(std::numeric_limits<double>::infinity());
  (*h)->observe(-std::numeric_limits<double>::infinity());
  auto counts = (*h)->cumulative_counts();
  BOOST_REQUIRE_EQUAL(counts.size(), 2u);
  BOOST_TEST(counts[0] == 1u); // -Inf <= 1
  BOOST_TEST(counts[1] == 3u);
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_odd");
  BOOST_TEST(std::isnan(samples_named(fam, "triad_odd_sum").at(0).value));
  BOOST_TEST(samples_named(fam, "triad_odd_sum").at(0).value_text == "NaN");
}

BOOST_AUTO_TEST_CASE(values_are_formatted_exactly) {
  triad::metrics_registry reg;
  const std::vector<std::pair<double, std::string>> cases = {
      {0, "0"},
      {-0.0, "0"},
      {3, "3"},
      {-42, "-42"},
      {0.1, "0.1"},
      {-2.5, "-2.5"},
      {1e15, "1000000000000000"},
      {0.0001, "0.0001"},
      {0.00012345, "0.00012345"},
      {0.00001, "1e-05"},
      {1234567.5, "1234567.5"},
      {1e20, "100000000000000000000"},
      {1e21, "1e+21"},
      {9007199254740991.0, "9007199254740991"},
      {1e300, "1e+300"},
      {1.5e-7, "1.5e-07"},
      {std::numeric_limits<double>::infinity(), "+Inf"},
      {-std::numeric_limits<double>::infinity(), "-Inf"},
      {std::numeric_limits<double>::quiet_NaN(), "NaN"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto g = reg.add_gauge("triad_fmt", "fmt", {{"i", std::to_string(i)}});
    BOOST_REQUIRE(g.has_value());
    (*g)->set(cases[i].first);
  }
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_fmt");
  BOOST_REQUIRE_EQUAL(fam.samples.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    BOOST_TEST(fam.samples[i].value_text == cases[i].second);
    if (!std::isnan(cases[i].first)) {
      BOOST_TEST(fam.samples[i].value == cases[i].first); // shortest form round-trips
    }
  }
}

BOOST_AUTO_TEST_CASE(counter_ignores_negative_and_nan_increments) {
  triad::metrics_registry reg;
  auto c = reg.add_counter("triad_mono_total", "m");
  BOOST_REQUIRE(c.has_value());
  (*c)->inc(5);
  (*c)->inc(-3);
  (*c)->inc(std::numeric_limits<double>::quiet_NaN());
  (*c)->inc(0.5);
  BOOST_TEST((*c)->value() == 5.5);
}

BOOST_AUTO_TEST_CASE(gauge_sets_increments_and_decrements) {
  triad::metrics_registry reg;
  auto g = reg.add_gauge("triad_queue_depth", "depth");
  BOOST_REQUIRE(g.has_value());
  (*g)->set(10);
  (*g)->inc();
  (*g)->inc(4);
  (*g)->dec();
  (*g)->dec(20);
  BOOST_TEST((*g)->value() == -6.0);
  BOOST_TEST(contains(reg.render(), "\ntriad_queue_depth -6\n"));
}

BOOST_AUTO_TEST_CASE(concurrent_counter_increments_sum_exactly) {
  triad::metrics_registry reg;
  constexpr int threads = 4;
  constexpr int per_thread = 100000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&reg] {
      // Each thread registers the same counter itself: registration is thread-safe too.
      auto c = reg.add_counter("triad_concurrent_total", "c", {{"k", "v"}});
      auto h = reg.add_histogram("triad_concurrent_seconds", "h", {0.5});
      if (!c || !h) {
        return;
      }
      for (int i = 0; i < per_thread; ++i) {
        (*c)->inc();
        (*h)->observe(i % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  // Rendering while writers run must still give parseable, consistent text.
  for (int i = 0; i < 20; ++i) {
    auto fams = parse(reg.render());
    for (const auto& fam : fams) {
      if (fam.name == "triad_concurrent_seconds") {
        BOOST_TEST(samples_named(fam, "triad_concurrent_seconds_bucket").back().value ==
                   samples_named(fam, "triad_concurrent_seconds_count").at(0).value);
      }
    }
  }
  for (auto& w : workers) {
    w.join();
  }
  auto c = reg.add_counter("triad_concurrent_total", "c", {{"k", "v"}});
  auto h = reg.add_histogram("triad_concurrent_seconds", "h", {0.5});
  BOOST_REQUIRE(c && h);
  BOOST_TEST((*c)->value() == static_cast<double>(threads * per_thread));
  BOOST_TEST((*h)->count() == static_cast<std::uint64_t>(threads * per_thread));
  BOOST_TEST((*h)->cumulative_counts().front() ==
             static_cast<std::uint64_t>(threads * per_thread / 2));
  BOOST_TEST((*h)->sum() == threads * (per_thread / 2) * 1.25);
  auto fams = parse(reg.render());
  const auto& fam = find_family(fams, "triad_concurrent_total");
  BOOST_REQUIRE_EQUAL(fam.samples.size(), 1u);
  BOOST_TEST(fam.samples[0].value_text == "400000");
}

BOOST_AUTO_TEST_CASE(error_name_without_prefix) {
  triad::metrics_registry reg;
  check_error(reg.add_counter("requests_total", "r"), {"\"requests_total\"", "triad_"});
  check_error(reg.add_gauge("", "r"), {"\"\"", "triad_"});
}

BOOST_AUTO_TEST_CASE(error_name_with_invalid_character) {
  triad::metrics_registry reg;
  check_error(reg.add_counter("triad_bad-name", "r"),
              {"\"triad_bad-name\"", "\"-\"", "[a-zA-Z_:][a-zA-Z0-9_:]*"});
  check_error(reg.add_gauge("triad_sp ace", "r"), {"\"triad_sp ace\"", "\" \""});
  check_error(reg.add_histogram("triad_\xc3\xa9", "r", {1}), {"[a-zA-Z_:][a-zA-Z0-9_:]*"});
}

BOOST_AUTO_TEST_CASE(error_invalid_label_name) {
  triad::metrics_registry reg;
  check_error(reg.add_counter("triad_l_total", "l", {{"1st", "v"}}),
              {"\"triad_l_total\"", "\"1st\"", "[a-zA-Z_][a-zA-Z0-9_]*"});
  check_error(reg.add_counter("triad_l_total", "l", {{"a:b", "v"}}),
              {"\"a:b\"", "\":\"", "[a-zA-Z_][a-zA-Z0-9_]*"});
  check_error(reg.add_counter("triad_l_total", "l", {{"", "v"}}), {"\"\"", "empty"});
}

BOOST_AUTO_TEST_CASE(error_reserved_double_underscore_label) {
  triad::metrics_registry reg;
  check_error(reg.add_gauge("triad_u", "u", {{"__name__", "x"}}), {"\"__name__\"", "\"__\""});
}

BOOST_AUTO_TEST_CASE(error_le_label_on_histogram_only) {
  triad::metrics_registry reg;
  check_error(reg.add_histogram("triad_h_seconds", "h", {1}, {{"le", "1"}}),
              {"\"triad_h_seconds\"", "\"le\"", "reserved"});
  BOOST_TEST(reg.add_counter("triad_le_ok_total", "le is fine here", {{"le", "1"}}).has_value());
}

BOOST_AUTO_TEST_CASE(error_duplicate_label_name) {
  triad::metrics_registry reg;
  check_error(reg.add_counter("triad_d_total", "d", {{"a", "1"}, {"a", "2"}}),
              {"\"triad_d_total\"", "\"a\"", "twice"});
}

BOOST_AUTO_TEST_CASE(error_reregistered_with_other_type) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_counter("triad_t_total", "t").has_value());
  check_error(reg.add_gauge("triad_t_total", "t"), {"\"triad_t_total\"", "counter", "gauge"});
  check_error(reg.add_histogram("triad_t_total", "t", {1}), {"counter", "histogram"});
}

BOOST_AUTO_TEST_CASE(error_reregistered_with_other_help) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_gauge("triad_help", "original help").has_value());
  check_error(reg.add_gauge("triad_help", "new help"),
              {"\"triad_help\"", "\"original help\"", "\"new help\""});
}

BOOST_AUTO_TEST_CASE(error_reregistered_with_other_label_names) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_counter("triad_ln_total", "ln", {{"a", "1"}, {"b", "2"}}).has_value());
  check_error(reg.add_counter("triad_ln_total", "ln", {{"a", "1"}}),
              {"\"triad_ln_total\"", "{a, b}", "{a}"});
  check_error(reg.add_counter("triad_ln_total", "ln", {{"a", "1"}, {"c", "2"}}), {"{a, c}"});
  check_error(reg.add_counter("triad_ln_total", "ln"), {"{}"});
}

BOOST_AUTO_TEST_CASE(error_reregistered_with_other_buckets) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_histogram("triad_b_seconds", "b", {0.5, 1}).has_value());
  check_error(reg.add_histogram("triad_b_seconds", "b", {0.5, 2}),
              {"\"triad_b_seconds\"", "[0.5, 1]", "[0.5, 2]"});
}

BOOST_AUTO_TEST_CASE(error_bounds_not_strictly_increasing) {
  triad::metrics_registry reg;
  check_error(reg.add_histogram("triad_inc_seconds", "i", {1, 0.5}),
              {"\"triad_inc_seconds\"", "0.5", "strictly increasing"});
  check_error(reg.add_histogram("triad_inc_seconds", "i", {1, 1}), {"strictly increasing"});
}

BOOST_AUTO_TEST_CASE(error_bounds_not_finite) {
  triad::metrics_registry reg;
  const double inf = std::numeric_limits<double>::infinity();
  check_error(reg.add_histogram("triad_fin_seconds", "f", {1, inf}),
              {"\"triad_fin_seconds\"", "+Inf", "finite"});
  check_error(
      reg.add_histogram("triad_fin_seconds", "f", {std::numeric_limits<double>::quiet_NaN()}),
      {"NaN", "finite"});
}

BOOST_AUTO_TEST_CASE(error_sample_names_collide) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_histogram("triad_q", "q", {1}).has_value());
  check_error(reg.add_counter("triad_q_count", "c"), {"\"triad_q_count\"", "\"triad_q\""});
  BOOST_REQUIRE(reg.add_gauge("triad_r_sum", "g").has_value());
  check_error(reg.add_histogram("triad_r", "h", {1}), {"\"triad_r\"", "\"triad_r_sum\""});
}

BOOST_AUTO_TEST_CASE(failed_registration_leaves_no_trace) {
  triad::metrics_registry reg;
  BOOST_REQUIRE(reg.add_counter("triad_ok_total", "ok").has_value());
  BOOST_TEST(!reg.add_counter("triad_ok_total", "ok", {{"__x", "1"}}).has_value());
  BOOST_TEST(!reg.add_histogram("triad_never", "n", {2, 1}).has_value());
  auto fams = parse(reg.render());
  BOOST_REQUIRE_EQUAL(fams.size(), 1u);
  BOOST_TEST(fams[0].samples.size() == 1u);
}

BOOST_AUTO_TEST_CASE(parser_rejects_malformed_text) {
  // The checks above only mean something if the parser is strict.
  for (std::string bad : {
           "triad_x{a=\"1} 1\n",
           "triad_x{a=\"\\t\"} 1\n",
           "triad_x 1e\n",
           "triad_x{1a=\"x\"} 1\n",
           "# TYPE triad_x counter\ntriad_y 1\n# TYPE triad_x counter\n",
           "triad_x 1",
       }) {
    BOOST_CHECK_THROW(exposition_parser(bad).parse(), parse_failure);
  }
}

BOOST_AUTO_TEST_SUITE_END()
