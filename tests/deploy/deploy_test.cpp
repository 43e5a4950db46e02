// The Prometheus rules and the Grafana dashboard under deploy/: promtool checks the rules and runs
// their unit tests, every dashboard query parses as PromQL, and every metric, label and label
// value they name is one a running node exports.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include "load/runner.hpp"
#include "load/target.hpp"
#include "load/workload.hpp"
#include "server/http_server.hpp"
#include "tests/actors/support.hpp"
#include "tests/process.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

fs::path source_dir() {
  const char* dir = std::getenv("TRIAD_SOURCE_DIR");
  BOOST_REQUIRE_MESSAGE(dir != nullptr, "TRIAD_SOURCE_DIR is not set (ctest sets it)");
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in{p};
  BOOST_REQUIRE_MESSAGE(in, "cannot read " << p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// promtool must be there: the test suite installs it (Debian's prometheus package).
void require_promtool() {
  BOOST_REQUIRE_MESSAGE(triad::test::run_command("command -v promtool >/dev/null").status == 0,
                        "promtool not found (Debian package prometheus): run "
                        "scripts/install-deps.sh --test");
}

// One target of a dashboard panel: the panel's title and the query.
struct panel_query {
  std::string panel;
  std::string expr;
  std::string legend; // its legendFormat ("{{stage}}"), or empty
};

std::vector<panel_query> dashboard_queries() {
  auto doc = json::parse(read_file(source_dir() / "deploy/grafana/triad-dashboard.json"));
  std::vector<panel_query> out;
  for (const auto& p : doc.at("panels").as_array()) {
    const auto& panel = p.as_object();
    if (const auto* targets = panel.if_contains("targets"))
      for (const auto& t : targets->as_array())
        out.push_back({json::value_to<std::string>(panel.at("title")),
                       json::value_to<std::string>(t.at("expr")),
                       t.as_object().contains("legendFormat")
                           ? json::value_to<std::string>(t.at("legendFormat"))
                           : std::string{}});
  }
  return out;
}

// The query as Prometheus sees it once Grafana filled in its variables.
std::string substitute_variables(const std::string& expr) {
  std::string out;
  for (std::size_t i = 0; i < expr.size();) {
    if (expr.compare(i, 16, "$__rate_interval") == 0) {
      out += "5m";
      i += 16;
    } else if (expr.compare(i, 9, "$instance") == 0) {
      out += ".*";
      i += 9;
    } else {
      out += expr[i++];
    }
  }
  return out;
}

// A metric a query names, with the label matchers written on it.
struct metric_use {
  std::string name;
  std::vector<std::pair<std::string, std::string>> matchers; // label, value (= or =~)
};

// The triad_ and process_ metrics a PromQL text names (recorded series, with ':', are not).
std::vector<metric_use> metrics_named(const std::string& text) {
  std::vector<metric_use> out;
  auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  };
  for (std::size_t i = 0; i < text.size();) {
    if (!ident(text[i]) || (i > 0 && ident(text[i - 1]))) {
      ++i;
      continue;
    }
    auto end = i;
    while (end < text.size() && ident(text[end]))
      ++end;
    std::string word = text.substr(i, end - i);
    i = end;
    if ((word.rfind("triad_", 0) != 0 && word.rfind("process_", 0) != 0) ||
        word.find(':') != std::string::npos)
      continue;
    metric_use use{word, {}};
    if (i < text.size() && text[i] == '{') {
      auto close = text.find('}', i);
      BOOST_REQUIRE_MESSAGE(close != std::string::npos, "unclosed matcher after " << word);
      std::string body = text.substr(i + 1, close - i - 1);
      // label op "value", comma separated (values hold no commas or quotes here)
      std::stringstream parts{body};
      for (std::string m; std::getline(parts, m, ',');) {
        auto op = m.find_first_of("=!");
        auto q1 = m.find('"'), q2 = m.rfind('"');
        if (op == std::string::npos || q1 == std::string::npos || q2 <= q1)
          continue;
        auto label = m.substr(0, op);
        label.erase(0, label.find_first_not_of(' '));
        label.erase(label.find_last_not_of(' ') + 1);
        use.matchers.emplace_back(label, m.substr(q1 + 1, q2 - q1 - 1));
      }
      i = close + 1;
    }
    out.push_back(std::move(use));
  }
  return out;
}

// What a node exports: each family's type, and each label's values seen in its samples.
struct exposition {
  std::map<std::string, std::string> types;
  std::map<std::string, std::map<std::string, std::set<std::string>>>
      labels; // family->label->values
};

// The family a series name belongs to: itself when typed, else the histogram whose _bucket,
// _sum or _count it is (else itself, untyped).
std::string family_of(const std::map<std::string, std::string>& types, const std::string& name) {
  if (types.count(name))
    return name;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"})
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      auto base = name.substr(0, name.size() - suffix.size());
      if (auto t = types.find(base); t != types.end() && t->second == "histogram")
        return base;
    }
  return name;
}

exposition parse_exposition(const std::string& text) {
  exposition e;
  std::stringstream lines{text};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::stringstream w{line.substr(7)};
      std::string name, type;
      w >> name >> type;
      e.types[name] = type;
      continue;
    }
    if (line.empty() || line[0] == '#')
      continue;
    auto brace = line.find('{');
    if (brace == std::string::npos)
      continue;
    const std::string family = family_of(e.types, line.substr(0, brace));
    auto close = line.find('}', brace);
    for (std::size_t at = brace + 1; at < close;) {
      auto eq = line.find('=', at);
      auto q1 = eq + 1, q2 = line.find('"', q1 + 1);
      while (q2 != std::string::npos && line[q2 - 1] == '\\')
        q2 = line.find('"', q2 + 1);
      e.labels[family][line.substr(at, eq - at)].insert(line.substr(q1 + 1, q2 - q1 - 1));
      at = q2 + 2; // past the quote and the comma
    }
  }
  return e;
}

// The labels whose values form a fixed set the node registers up front: a matcher's value on
// them must be one of those (a typo such as outcome="failure" never matches anything).
const std::set<std::string> enumerated_labels{"stage", "state", "outcome", "tier", "role"};

// What is wrong with the metric uses in `text` against what the node exports: a metric it does
// not export, a label it does not have, a value an enumerated label never takes.
std::vector<std::string> check_uses(const exposition& e, const std::string& text) {
  std::vector<std::string> problems;
  for (const auto& use : metrics_named(text)) {
    const std::string family = family_of(e.types, use.name);
    if (!e.types.count(family)) {
      problems.push_back("the node exports no metric " + use.name);
      continue;
    }
    const auto labels = e.labels.count(family) ? e.labels.at(family)
                                               : std::map<std::string, std::set<std::string>>{};
    for (const auto& [label, value] : use.matchers) {
      if (label == "instance" || label == "job")
        continue; // Prometheus adds them
      if (!labels.count(label)) {
        problems.push_back(use.name + " has no label " + label);
        continue;
      }
      if (!enumerated_labels.count(label))
        continue;
      std::stringstream alternatives{value};
      for (std::string v; std::getline(alternatives, v, '|');)
        if (!labels.at(label).count(v))
          problems.push_back(use.name + "{" + label + "} never has the value " + v);
    }
  }
  return problems;
}

// The labels `text` groups by (`by (...)`, `without (...)`) and, from `legend`, those a legend
// names (`{{stage}}`).
std::set<std::string> grouping_labels(const std::string& text, const std::string& legend = {}) {
  std::set<std::string> out;
  static const std::regex grouping{R"(\b(by|without)\s*\(([^)]*)\))"};
  for (std::sregex_iterator it{text.begin(), text.end(), grouping}, end; it != end; ++it) {
    std::stringstream names{(*it)[2].str()};
    for (std::string name; std::getline(names, name, ',');) {
      name.erase(0, name.find_first_not_of(" \n"));
      name.erase(name.find_last_not_of(" \n") + 1);
      if (!name.empty())
        out.insert(name);
    }
  }
  static const std::regex named{R"(\{\{\s*(\w+)\s*\}\})"};
  for (std::sregex_iterator it{legend.begin(), legend.end(), named}, end; it != end; ++it)
    out.insert((*it)[1].str());
  return out;
}

// What is wrong with the labels `text` groups by or `legend` shows: a label none of the metrics
// it reads has (any the node exports, for a text that reads only recorded series).
std::vector<std::string> check_groupings(const exposition& e, const std::string& text,
                                         const std::string& legend = {}) {
  std::set<std::string> known = {"job", "instance", "le"}; // Prometheus's, and buckets'
  const auto uses = metrics_named(text);
  for (const auto& [family, labels] : e.labels) {
    const bool read = std::any_of(uses.begin(), uses.end(), [&](const metric_use& u) {
      return family_of(e.types, u.name) == family;
    });
    if (read || uses.empty())
      for (const auto& [label, values] : labels)
        known.insert(label);
  }
  std::vector<std::string> problems;
  for (const auto& label : grouping_labels(text, legend))
    if (!known.count(label))
      problems.push_back("groups by or shows the label " + label +
                         ", which none of its metrics has");
  return problems;
}

// The value of the sample written exactly as `series` (name and labels) in `text`; NaN if none.
double sample_of(const std::string& text, const std::string& series) {
  for (auto at = text.find(series + " "); at != std::string::npos;
       at = text.find(series + " ", at + 1))
    if (at == 0 || text[at - 1] == '\n')
      return std::stod(text.substr(at + series.size() + 1));
  return std::nan("");
}

} // namespace

BOOST_AUTO_TEST_SUITE(deploy)

BOOST_AUTO_TEST_CASE(under_a_triad_load_run_the_request_metrics_add_up) {
  // Agent sessions through triad-load's runner, each turn one request whose two calls of the
  // node's "nap" tool the node runs itself, three sessions at a time.
  auto n = triad::test::start_node();
  auto t = triad::load::make_inproc_target(*n, "triad-tiny");
  triad::load::workload_options w;
  w.kind = triad::load::workload_options::agent;
  w.turns = {triad::load::distribution_spec::fixed, 2, 0};
  w.tool_calls = {triad::load::distribution_spec::fixed, 2, 0};
  w.output = {triad::load::distribution_spec::fixed, 6, 0};
  w.call_tokens = {triad::load::distribution_spec::fixed, 4, 0};
  w.think_ms = {triad::load::distribution_spec::fixed, 0, 0};
  w.system_tokens = 64;
  triad::load::run_options o;
  o.concurrency = 3;
  o.hosted_tool = "nap";
  o.hosted_arguments = R"({"ms": 2})";
  auto r = triad::load::run(*t, triad::load::plan_jobs(w, 6, 5), o);
  std::uint64_t calls = 0, tool_calls = 0;
  for (const auto& c : r.calls) {
    BOOST_REQUIRE_MESSAGE(c.ok, c.error);
    ++calls;
    tool_calls += c.node.server_tool_calls;
  }
  BOOST_REQUIRE_EQUAL(calls, 12u); // 6 sessions of 2 turns
  BOOST_REQUIRE_EQUAL(tool_calls, 24u);
  const auto text = n->metrics().render();
  auto value = [&](const std::string& series) {
    const double v = sample_of(text, series);
    BOOST_TEST_REQUIRE(!std::isnan(v), "no sample " << series);
    return v;
  };
  // Every moment of every request is in one stage: the stages add up to end to end.
  double stages = 0;
  for (const char* stage : {"queue", "prefill", "transfer", "decode", "tool", "orchestration"})
    stages += value(std::string{"triad_request_stage_seconds_sum{stage=\""} + stage + "\"}");
  const double end_to_end = value("triad_request_seconds_sum");
  BOOST_TEST(stages == end_to_end, boost::test_tools::tolerance(0.01));
  BOOST_TEST(value("triad_request_stage_seconds_sum{stage=\"tool\"}") > 24 * 0.002 * 0.9);
  // One observation per request where one is due, and the counts match the run's.
  for (const char* count :
       {"triad_request_seconds_count", "triad_request_ttft_seconds_count",
        "triad_request_tool_calls_count", "triad_request_time_per_output_token_seconds_count"})
    BOOST_TEST(value(count) == static_cast<double>(calls), count);
  BOOST_TEST(value("triad_request_tool_calls_sum") == static_cast<double>(tool_calls));
  BOOST_TEST(value("triad_tool_invocations_total{outcome=\"ok\"}") ==
             static_cast<double>(tool_calls));
  BOOST_TEST(value("triad_request_transitions_total{state=\"done\"}") ==
             static_cast<double>(calls));
  // Three stages: each request's prompt moved from the prefill device to the decode device.
  BOOST_TEST(value("triad_request_kv_transfer_bytes_count") >= static_cast<double>(calls));
  BOOST_TEST(value("triad_request_kv_transfer_bytes_sum") > 0.0);
  BOOST_TEST(value("triad_request_inter_token_seconds_count") > static_cast<double>(calls));
}

BOOST_AUTO_TEST_CASE(the_rules_and_config_pass_promtool_and_the_rules_unit_tests) {
  require_promtool();
  auto dir = (source_dir() / "deploy/prometheus").string();
  for (const char* command :
       {"promtool check config prometheus.yml", "promtool check rules triad-rules.yml",
        "promtool test rules triad-rules.test.yml"}) {
    auto r = triad::test::run_command("cd '" + dir + "' && " + command + " 2>&1");
    BOOST_TEST(r.status == 0, command << " failed:\n" << r.out);
  }
}

BOOST_AUTO_TEST_CASE(every_dashboard_query_parses_as_promql) {
  require_promtool();
  auto queries = dashboard_queries();
  BOOST_REQUIRE_GE(queries.size(), 20u);
  // Each query becomes a recording rule, so promtool's PromQL parser checks it.
  auto file =
      fs::temp_directory_path() / ("triad-dashboard-" + std::to_string(::getpid()) + ".yml");
  {
    std::ofstream out{file};
    out << "groups:\n  - name: dashboard\n    rules:\n";
    for (std::size_t i = 0; i < queries.size(); ++i) {
      out << "      - record: triad_dashboard:query_" << i << "\n        expr: '";
      for (char c : substitute_variables(queries[i].expr))
        out << (c == '\'' ? "''" : std::string(1, c)); // YAML single-quoted: a quote is doubled
      out << "'\n";
    }
  }
  auto r = triad::test::run_command("promtool check rules '" + file.string() + "' 2>&1");
  fs::remove(file);
  BOOST_TEST(r.status == 0, "a dashboard query is not PromQL:\n" << r.out);
}

BOOST_AUTO_TEST_CASE(every_metric_the_dashboard_and_rules_name_is_one_the_node_exports) {
  // A node behind its HTTP server (which adds the HTTP metrics) that served an agent turn with
  // tool calls: every family they register is rendered.
  auto n = triad::test::start_node();
  triad::http_server_options o;
  o.server.port = 0;
  auto server = triad::http_server::start(*n, o);
  BOOST_REQUIRE_MESSAGE(server.has_value(), (server ? "" : server.error().message));
  triad::test::recorder rec;
  triad::chat_request req;
  req.messages = {{"system", "You are a coding agent."}, {"user", "Fix the failing test."}};
  triad::generation_script s;
  s.turns.push_back({8, triad::tool_call_text{"nap", "{\"ms\": 1}"}});
  s.turns.push_back({4, std::nullopt});
  req.script = s;
  n->submit(req, rec.callback());
  BOOST_REQUIRE(rec.wait().kind == triad::request_event::done);
  // One request over HTTP, so the server counts a response.
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket sock{io};
    sock.connect({boost::asio::ip::make_address("127.0.0.1"), (*server)->port()});
    const std::string get = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    boost::asio::write(sock, boost::asio::buffer(get));
    std::string answer;
    boost::system::error_code ec;
    boost::asio::read(sock, boost::asio::dynamic_buffer(answer), ec); // to the close
    BOOST_REQUIRE(answer.rfind("HTTP/1.1 200", 0) == 0);
  }
  auto e = parse_exposition(n->metrics().render());
  BOOST_REQUIRE_GE(e.types.size(), 40u);
  for (const auto& q : dashboard_queries()) {
    for (const auto& problem : check_uses(e, q.expr))
      BOOST_ERROR("dashboard panel \"" << q.panel << "\": " << problem);
    for (const auto& problem : check_groupings(e, q.expr, q.legend))
      BOOST_ERROR("dashboard panel \"" << q.panel << "\": " << problem);
  }
  const auto rules = read_file(source_dir() / "deploy/prometheus/triad-rules.yml");
  for (const auto& problem : check_uses(e, rules))
    BOOST_ERROR("deploy/prometheus/triad-rules.yml: " << problem);
  for (const auto& problem : check_groupings(e, rules))
    BOOST_ERROR("deploy/prometheus/triad-rules.yml: " << problem);
}

BOOST_AUTO_TEST_CASE(the_checks_catch_a_metric_or_label_value_the_node_does_not_export) {
  // The checker itself: a misspelt metric, label and value are each reported; recorded series
  // (with ':') and histogram suffixes are not.
  auto e = parse_exposition("# TYPE triad_tool_invocations_total counter\n"
                            "triad_tool_invocations_total{outcome=\"ok\"} 1\n"
                            "# TYPE triad_request_seconds histogram\n"
                            "triad_request_seconds_bucket{le=\"+Inf\"} 1\n");
  auto problems = check_uses(
      e, R"(rate(triad_tool_invocations_total{outcome=~"ok|failure", instance=~".*"}[5m]))"
         R"( + triad_tool_invocation_total + triad:recorded:rate5m)"
         R"( + triad_request_seconds_bucket{stage="queue"} + triad_request_seconds_sum)");
  BOOST_TEST(problems == (std::vector<std::string>{
                             "triad_tool_invocations_total{outcome} never has the value failure",
                             "the node exports no metric triad_tool_invocation_total",
                             "triad_request_seconds_bucket has no label stage"}),
             boost::test_tools::per_element());
  BOOST_TEST(check_uses(e, R"(rate(triad_tool_invocations_total{outcome="ok"}[5m]))").empty());
}

BOOST_AUTO_TEST_CASE(the_checks_catch_a_grouping_or_legend_label_no_metric_has) {
  auto e = parse_exposition("# TYPE triad_tool_invocations_total counter\n"
                            "triad_tool_invocations_total{outcome=\"ok\"} 1\n"
                            "# TYPE triad_device_busy_seconds_total counter\n"
                            "triad_device_busy_seconds_total{device=\"d0\"} 1\n");
  // A label of another metric than the one read is not good enough; job and instance are.
  auto problems =
      check_groupings(e, "sum by (outcome, device) (rate(triad_tool_invocations_total[5m]))",
                      "{{outcome}} {{ stage }} {{instance}}");
  BOOST_TEST(problems == (std::vector<std::string>{
                             "groups by or shows the label device, which none of its metrics has",
                             "groups by or shows the label stage, which none of its metrics has"}),
             boost::test_tools::per_element());
  BOOST_TEST(check_groupings(e, "sum without (outcome) (triad_tool_invocations_total)").empty());
  // Over recorded series only, any label the node exports.
  BOOST_TEST(check_groupings(e, "max by (job, device) (triad:x:rate5m)").empty());
}

BOOST_AUTO_TEST_SUITE_END()
