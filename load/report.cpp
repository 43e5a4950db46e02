#include "load/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace triad::load {

namespace json = boost::json;

summary summarize(const run_result& r, const slo& o) {
  summary s;
  s.mode = r.mode;
  s.realtime_pacer = r.realtime_pacer;
  s.wall_s = r.wall_s;
  s.jobs = r.jobs.size();
  s.calls = r.calls.size();
  std::vector<double> ttft, ttft_sent, tpot, itl, e2e, e2e_sent, session, send_lag, dispatch_lag;
  std::map<std::string, std::uint64_t> errors;
  std::vector<bool> job_good(r.jobs.size(), true);
  std::size_t good_calls = 0;
  auto buckets = static_cast<std::size_t>(std::ceil(std::max(r.wall_s, 1e-9))) + 1;
  std::vector<std::uint64_t> ended(buckets), tokens(buckets), failed(buckets);
  double sum_lag = 0, sum_ttft = 0, sum_decode = 0;
  for (const auto& c : r.calls) {
    send_lag.push_back(c.sent_s - c.intended_s);
    s.calls_new_connection += c.new_connection ? 1 : 0;
    dispatch_lag.push_back(c.dispatched_s - c.intended_s);
    auto b = std::min(buckets - 1, static_cast<std::size_t>(std::max(0.0, c.end_s)));
    if (!c.ok) {
      ++errors[c.error_kind.empty() ? "error" : c.error_kind];
      ++failed[b];
      if (c.job < job_good.size())
        job_good[c.job] = false;
      continue;
    }
    ++s.calls_ok;
    ++ended[b];
    s.output_tokens += c.completion_tokens;
    s.prompt_tokens += c.prompt_tokens;
    s.cached_tokens += c.cached_tokens;
    s.node += c.node;
    for (auto t : c.token_s)
      ++tokens[std::min(buckets - 1, static_cast<std::size_t>(std::max(0.0, t)))];
    e2e.push_back(c.end_s - c.intended_s);
    e2e_sent.push_back(c.end_s - c.sent_s);
    bool good = o.e2e_ms <= 0 || (c.end_s - c.intended_s) * 1e3 <= o.e2e_ms;
    sum_lag += c.sent_s - c.intended_s;
    if (c.first_token_s >= 0) {
      ttft.push_back(c.first_token_s - c.intended_s);
      ttft_sent.push_back(c.first_token_s - c.sent_s);
      sum_ttft += c.first_token_s - c.sent_s;
      sum_decode += c.end_s - c.first_token_s;
      good = good && (o.ttft_ms <= 0 || (c.first_token_s - c.intended_s) * 1e3 <= o.ttft_ms);
      if (c.token_s.size() > 1) {
        double per =
            (c.token_s.back() - c.token_s.front()) / static_cast<double>(c.token_s.size() - 1);
        tpot.push_back(per);
        good = good && (o.tpot_ms <= 0 || per * 1e3 <= o.tpot_ms);
        for (std::size_t i = 1; i < c.token_s.size(); ++i)
          itl.push_back(c.token_s[i] - c.token_s[i - 1]);
      }
    } else {
      good = good && o.ttft_ms <= 0;
    }
    good_calls += good;
    if (!good && c.job < job_good.size())
      job_good[c.job] = false;
  }
  std::size_t good_jobs = 0;
  double sum_tool = 0, sum_think = 0;
  for (const auto& j : r.jobs) {
    if (!j.started) {
      ++s.jobs_not_started;
      continue;
    }
    if (!j.ok)
      continue;
    ++s.jobs_ok;
    sum_tool += j.tool_s;
    sum_think += j.think_s;
    double t = j.end_s - j.intended_s;
    session.push_back(t);
    if (job_good[j.job] && (o.session_s <= 0 || t <= o.session_s))
      ++good_jobs;
  }
  s.ttft = load::summarize(ttft);
  s.ttft_sent = load::summarize(ttft_sent);
  s.tpot = load::summarize(tpot);
  s.itl = load::summarize(itl);
  s.e2e = load::summarize(e2e);
  s.e2e_sent = load::summarize(e2e_sent);
  s.session = load::summarize(session);
  s.send_lag = load::summarize(send_lag);
  s.dispatch_lag = load::summarize(dispatch_lag);
  double wall = std::max(r.wall_s, 1e-9);
  s.calls_per_s = static_cast<double>(s.calls_ok) / wall;
  s.output_tokens_per_s = static_cast<double>(s.output_tokens) / wall;
  s.goodput_calls_per_s = static_cast<double>(good_calls) / wall;
  s.goodput_jobs_per_s = static_cast<double>(good_jobs) / wall;
  for (const auto& [k, v] : errors)
    s.errors[k] = v;
  s.fell_behind =
      s.dispatch_lag.count > 0 && (s.dispatch_lag.p99 > 0.010 || s.dispatch_lag.max > 0.100);
  for (std::size_t b = 0; b < buckets; ++b)
    s.timeline.push_back(json::object{
        {"second", b}, {"calls", ended[b]}, {"tokens", tokens[b]}, {"errors", failed[b]}});
  auto per_call = [&](double x) { return s.calls_ok ? x / static_cast<double>(s.calls_ok) : 0.0; };
  auto per_job = [&](double x) { return s.jobs_ok ? x / static_cast<double>(s.jobs_ok) : 0.0; };
  s.stages = json::object{{"send_lag_s_per_call", per_call(sum_lag)},
                          {"ttft_s_per_call", per_call(sum_ttft)},
                          {"decode_s_per_call", per_call(sum_decode)},
                          {"tool_s_per_job", per_job(sum_tool)},
                          {"think_s_per_job", per_job(sum_think)}};
  return s;
}

json::object to_json(const summary& s) {
  return json::object{
      {"mode", s.mode},
      {"realtime_pacer", s.realtime_pacer},
      {"wall_s", s.wall_s},
      {"jobs", s.jobs},
      {"jobs_ok", s.jobs_ok},
      {"jobs_not_started", s.jobs_not_started},
      {"calls", s.calls},
      {"calls_ok", s.calls_ok},
      {"calls_new_connection", s.calls_new_connection},
      {"prompt_tokens", s.prompt_tokens},
      {"cached_tokens", s.cached_tokens},
      {"output_tokens", s.output_tokens},
      {"server_tool_calls", s.node.server_tool_calls},
      {"kv_kept_calls", s.node.kv_kept_calls},
      {"kv_stored_calls", s.node.kv_stored_calls},
      {"store_tokens", s.node.store_tokens},
      {"calls_per_s", s.calls_per_s},
      {"output_tokens_per_s", s.output_tokens_per_s},
      {"goodput_calls_per_s", s.goodput_calls_per_s},
      {"goodput_jobs_per_s", s.goodput_jobs_per_s},
      {"ttft_ms", to_json(s.ttft, 1e3)},
      {"ttft_from_send_ms", to_json(s.ttft_sent, 1e3)},
      {"tpot_ms", to_json(s.tpot, 1e3)},
      {"itl_ms", to_json(s.itl, 1e3)},
      {"e2e_ms", to_json(s.e2e, 1e3)},
      {"e2e_from_send_ms", to_json(s.e2e_sent, 1e3)},
      {"session_s", to_json(s.session)},
      {"send_lag_us", to_json(s.send_lag, 1e6)},
      {"dispatch_lag_us", to_json(s.dispatch_lag, 1e6)},
      {"client_fell_behind", s.fell_behind},
      {"errors", s.errors},
      {"stages", s.stages},
      {"timeline", s.timeline},
  };
}

void print(const summary& s, std::FILE* out) {
  auto line = [&](const char* name, const distribution& d, double scale, const char* unit) {
    if (d.count == 0) {
      std::fprintf(out, "  %-22s -\n", name);
      return;
    }
    std::fprintf(out, "  %-22s p50 %9.2f  p90 %9.2f  p99 %9.2f  p99.9 %9.2f  max %9.2f %s\n", name,
                 d.p50 * scale, d.p90 * scale, d.p99 * scale, d.p999 * scale, d.max * scale, unit);
  };
  std::fprintf(out, "triad-load: %s%s, %.2f s\n", s.mode.c_str(),
               s.realtime_pacer ? " (real-time sender)" : "", s.wall_s);
  std::fprintf(out, "  jobs %zu (ok %zu, not started %zu); calls %zu (ok %zu)\n", s.jobs, s.jobs_ok,
               s.jobs_not_started, s.calls, s.calls_ok);
  if (s.calls_new_connection > 0)
    std::fprintf(out, "  %zu calls opened a connection before sending (none was idle)\n",
                 s.calls_new_connection);
  std::fprintf(out,
               "  throughput %.2f calls/s, %.1f output tokens/s; goodput %.2f calls/s, "
               "%.3f jobs/s\n",
               s.calls_per_s, s.output_tokens_per_s, s.goodput_calls_per_s, s.goodput_jobs_per_s);
  std::fprintf(out, "  tokens: prompt %llu (cached %llu), output %llu\n",
               static_cast<unsigned long long>(s.prompt_tokens),
               static_cast<unsigned long long>(s.cached_tokens),
               static_cast<unsigned long long>(s.output_tokens));
  if (s.node.server_tool_calls > 0 || s.node.store_tokens > 0)
    std::fprintf(out,
                 "  server-side tool calls %llu: KV kept on the device across %llu, waited in "
                 "the KV store across %llu; %llu prompt tokens read from the KV store\n",
                 static_cast<unsigned long long>(s.node.server_tool_calls),
                 static_cast<unsigned long long>(s.node.kv_kept_calls),
                 static_cast<unsigned long long>(s.node.kv_stored_calls),
                 static_cast<unsigned long long>(s.node.store_tokens));
  line("TTFT (from intended)", s.ttft, 1e3, "ms");
  line("TPOT", s.tpot, 1e3, "ms");
  line("ITL (per token)", s.itl, 1e3, "ms");
  line("E2E (from intended)", s.e2e, 1e3, "ms");
  line("session completion", s.session, 1, "s");
  line("send lag", s.send_lag, 1e6, "us");
  if (!s.errors.empty())
    std::fprintf(out, "  errors: %s\n", json::serialize(s.errors).c_str());
  if (s.fell_behind)
    std::fprintf(out,
                 "  WARNING: the client fell behind its schedule (dispatch lag p99 %.1f ms, "
                 "max %.1f ms): the offered load was lower than asked\n",
                 s.dispatch_lag.p99 * 1e3, s.dispatch_lag.max * 1e3);
}

namespace {

json::object call_json(const call_record& c) {
  json::object o{{"job", c.job},
                 {"turn", c.turn},
                 {"call", c.call},
                 {"session", c.session},
                 {"ok", c.ok},
                 {"intended_s", c.intended_s},
                 {"dispatched_s", c.dispatched_s},
                 {"sent_s", c.sent_s},
                 {"first_token_s", c.first_token_s},
                 {"end_s", c.end_s},
                 {"prompt_tokens", c.prompt_tokens},
                 {"completion_tokens", c.completion_tokens},
                 {"cached_tokens", c.cached_tokens},
                 {"finish_reason", c.finish_reason},
                 {"tool_call", c.tool_call}};
  if (!c.ok) {
    o["error_kind"] = c.error_kind;
    o["error"] = c.error;
  }
  if (c.traced) { // asked for its trace: the node's request id to fetch it by (when one came)
    o["traced"] = true;
    o["request_id"] = c.request_id;
  }
  return o;
}

bool open_for(std::ofstream& f, const std::filesystem::path& path, std::string& error) {
  f.open(path);
  if (!f) {
    error = "cannot write " + path.string();
    return false;
  }
  return true;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos)
    return s;
  std::string out = "\"";
  for (char ch : s)
    out += ch == '"' ? std::string{"\"\""} : std::string(1, ch);
  return out + "\"";
}

std::string fmt(double x, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char ch : s)
    switch (ch) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += ch;
    }
  return out;
}

// An SVG line chart of empirical CDFs, one polyline per series (values in ms).
std::string cdf_svg(const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  const double w = 640, h = 300, l = 60, b = 40, t = 10, rgt = 10;
  double xmax = 0;
  for (const auto& [name, xs] : series)
    for (auto x : xs)
      xmax = std::max(xmax, x);
  if (xmax <= 0)
    xmax = 1;
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h << "'>";
  o << "<rect x='" << l << "' y='" << t << "' width='" << w - l - rgt << "' height='" << h - t - b
    << "' fill='none' stroke='#999'/>";
  for (int i = 0; i <= 4; ++i) {
    double y = t + (h - t - b) * (1 - i / 4.0);
    double x = l + (w - l - rgt) * i / 4.0;
    o << "<text x='" << l - 6 << "' y='" << y + 4 << "' font-size='11' text-anchor='end'>"
      << fmt(i / 4.0) << "</text>";
    o << "<text x='" << x << "' y='" << h - b + 16 << "' font-size='11' text-anchor='middle'>"
      << fmt(xmax * i / 4.0, 1) << "</text>";
  }
  o << "<text x='" << (l + w - rgt) / 2 << "' y='" << h - 6
    << "' font-size='12' text-anchor='middle'>milliseconds</text>";
  std::size_t k = 0;
  for (const auto& [name, raw] : series) {
    auto xs = raw;
    std::sort(xs.begin(), xs.end());
    auto color = colors[k % 4];
    o << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    std::size_t step = std::max<std::size_t>(1, xs.size() / 400);
    for (std::size_t i = 0; i < xs.size(); i += step) {
      double x = l + (w - l - rgt) * xs[i] / xmax;
      double y =
          t + (h - t - b) * (1 - static_cast<double>(i + 1) / static_cast<double>(xs.size()));
      o << fmt(x, 1) << "," << fmt(y, 1) << " ";
    }
    if (!xs.empty())
      o << fmt(l + (w - l - rgt) * xs.back() / xmax, 1) << "," << t;
    o << "'/>";
    o << "<text x='" << l + 10 << "' y='" << t + 16 + 14 * k << "' font-size='12' fill='" << color
      << "'>" << escape_html(name) << " (" << xs.size() << ")</text>";
    ++k;
  }
  o << "</svg>";
  return o.str();
}

// An SVG bar chart of one value per bucket.
std::string bars_svg(const std::vector<double>& values, const std::string& unit) {
  const double w = 640, h = 220, l = 60, b = 36, t = 10, rgt = 10;
  double ymax = 1;
  for (auto v : values)
    ymax = std::max(ymax, v);
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h << "'>";
  o << "<rect x='" << l << "' y='" << t << "' width='" << w - l - rgt << "' height='" << h - t - b
    << "' fill='none' stroke='#999'/>";
  double bw = (w - l - rgt) / std::max<std::size_t>(1, values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    double bh = (h - t - b) * values[i] / ymax;
    o << "<rect x='" << fmt(l + bw * static_cast<double>(i), 1) << "' y='" << fmt(h - b - bh, 1)
      << "' width='" << fmt(std::max(1.0, bw - 1), 1) << "' height='" << fmt(bh, 1)
      << "' fill='#1f77b4'/>";
  }
  o << "<text x='" << l - 6 << "' y='" << t + 10 << "' font-size='11' text-anchor='end'>"
    << fmt(ymax, 0) << "</text>";
  o << "<text x='" << (l + w - rgt) / 2 << "' y='" << h - 8
    << "' font-size='12' text-anchor='middle'>second of the run (" << escape_html(unit)
    << " per second)</text></svg>";
  return o.str();
}

} // namespace

bool write_jsonl(const run_result& r, const std::filesystem::path& path, std::string& error) {
  std::ofstream f;
  if (!open_for(f, path, error))
    return false;
  for (const auto& c : r.calls)
    f << json::serialize(call_json(c)) << '\n';
  return static_cast<bool>(f) || (error = "writing " + path.string() + " failed", false);
}

bool write_csv(const run_result& r, const std::filesystem::path& path, std::string& error) {
  std::ofstream f;
  if (!open_for(f, path, error))
    return false;
  f << "job,turn,call,session,ok,intended_s,dispatched_s,sent_s,first_token_s,end_s,"
       "prompt_tokens,completion_tokens,cached_tokens,finish_reason,tool_call,error_kind,error,"
       "traced,request_id\n";
  for (const auto& c : r.calls)
    f << c.job << ',' << c.turn << ',' << c.call << ',' << csv_field(c.session) << ','
      << (c.ok ? 1 : 0) << ',' << fmt(c.intended_s, 6) << ',' << fmt(c.dispatched_s, 6) << ','
      << fmt(c.sent_s, 6) << ',' << fmt(c.first_token_s, 6) << ',' << fmt(c.end_s, 6) << ','
      << c.prompt_tokens << ',' << c.completion_tokens << ',' << c.cached_tokens << ','
      << c.finish_reason << ',' << (c.tool_call ? 1 : 0) << ',' << csv_field(c.error_kind) << ','
      << csv_field(c.error) << ',' << (c.traced ? 1 : 0) << ',' << csv_field(c.request_id) << '\n';
  return static_cast<bool>(f) || (error = "writing " + path.string() + " failed", false);
}

bool read_trace(const std::string& doc, sampled_trace& t, std::string& error) {
  boost::system::error_code ec;
  auto v = json::parse(doc, ec);
  const json::array* events = nullptr;
  if (!ec && v.is_object())
    if (const auto* e = v.get_object().if_contains("traceEvents"); e != nullptr && e->is_array())
      events = &e->get_array();
  if (events == nullptr) {
    error = "the trace of request " + t.request_id + " is not a trace-event document";
    return false;
  }
  // A member of an event: its text, or its number (empty or 0 when absent or of another kind).
  auto text = [](const json::object& e, std::string_view key) -> std::string_view {
    const auto* m = e.if_contains(key);
    return m != nullptr && m->is_string() ? std::string_view{m->get_string()} : std::string_view{};
  };
  auto number = [](const json::object& e, std::string_view key) {
    const auto* m = e.if_contains(key);
    return m != nullptr && m->is_number() ? m->to_number<double>() : 0.0;
  };
  // The request's own track ("request <id>") and the spans on it; the rest are devices'.
  const std::string own_name = "request " + t.request_id;
  std::pair<double, double> own{-1, -1};
  for (const auto& e : *events)
    if (e.is_object() && text(e.get_object(), "name") == "thread_name")
      if (const auto* args = e.get_object().if_contains("args");
          args != nullptr && args->is_object() && text(args->get_object(), "name") == own_name)
        own = {number(e.get_object(), "pid"), number(e.get_object(), "tid")};
  double root_ts = 0;
  bool root = false;
  std::vector<trace_stage> stages;
  for (const auto& v : *events) {
    if (!v.is_object() || text(v.get_object(), "ph") != "X")
      continue;
    const auto& e = v.get_object();
    ++t.spans;
    const std::string name{text(e, "name")};
    const double ts = number(e, "ts") / 1e3, dur = number(e, "dur") / 1e3;
    if (std::pair{number(e, "pid"), number(e, "tid")} != own) {
      t.device_spans += text(e, "cat") == "device" ? 1 : 0;
      t.tool_spans += text(e, "cat") == "tool" ? 1 : 0;
    } else if (name == "request") {
      root = true;
      root_ts = ts;
      t.request_ms = dur;
    } else {
      stages.push_back({name, ts, dur});
    }
  }
  if (const auto* other = v.get_object().if_contains("otherData"); other && other->is_object())
    if (const auto* tr = other->get_object().if_contains("truncated"); tr && tr->is_bool())
      t.truncated = tr->get_bool();
  if (!root) {
    error = "the trace of request " + t.request_id + " has no span of the whole request";
    return false;
  }
  std::sort(stages.begin(), stages.end(),
            [](const trace_stage& a, const trace_stage& b) { return a.start_ms < b.start_ms; });
  for (auto& st : stages)
    st.start_ms -= root_ts;
  t.stages = std::move(stages);
  return true;
}

namespace {

// A relative link to `path`: percent-encoded but for unreserved characters and '/', so a
// report or folder name with '#', '?', '%' or a quote still links.
std::string link_to(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "./";
  for (unsigned char c : path)
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/')
      out += static_cast<char>(c);
    else
      out += {'%', hex[c >> 4], hex[c & 15]};
  return out;
}

// The sampled calls' traces: one row each with its stages as a bar, colored by stage.
std::string traces_html(const std::vector<sampled_trace>& traces) {
  static const std::map<std::string, std::string> colors{
      {"queue", "#e8a33c"},  {"prefill", "#4c8bf5"}, {"transfer", "#9b59b6"},
      {"decode", "#3cb371"}, {"tool", "#e74c3c"},    {"orchestration", "#f1c40f"}};
  std::ostringstream o;
  std::size_t got = 0;
  for (const auto& t : traces)
    got += t.file.empty() ? 0 : 1;
  o << "<h2>Sampled request traces</h2><p>" << traces.size()
    << " calls asked the node for their trace (x-triad-trace: 1); " << got
    << " came back. Each bar is the request's time in the node by stage; the link is its "
       "trace (open it in Perfetto or chrome://tracing): its stages and the device jobs and KV "
       "imports it took part in.</p><p>";
  for (const auto& [stage, color] : colors)
    o << "<span style='background:" << color << ";padding:0 6px;margin-right:6px'>"
      << escape_html(stage) << "</span>";
  o << "</p><table><tr><th>call</th><th>request</th><th>E2E ms</th><th>in node ms</th>"
       "<th>spans</th><th>stages</th></tr>";
  for (const auto& t : traces) {
    o << "<tr><td>job " << t.job << " turn " << t.turn << " call " << t.call << "</td><td>";
    if (t.file.empty()) {
      o << escape_html(t.request_id.empty() ? "-" : t.request_id) << "</td><td>" << fmt(t.e2e_ms)
        << "</td><td colspan='3' class='warn' style='text-align:left'>" << escape_html(t.error)
        << "</td></tr>";
      continue;
    }
    o << "<a href='" << link_to(t.file) << "'>" << escape_html(t.request_id) << "</a></td><td>"
      << fmt(t.e2e_ms) << "</td><td>" << fmt(t.request_ms) << "</td><td>" << t.spans << " ("
      << t.device_spans << " device, " << t.tool_spans << " tool"
      << (t.truncated ? "; truncated" : "") << ")</td><td><svg width='300' height='14'>";
    const double total = std::max(1e-9, t.request_ms);
    for (const auto& st : t.stages) {
      auto c = colors.find(st.name);
      o << "<rect x='" << fmt(300 * st.start_ms / total, 2) << "' y='1' width='"
        << fmt(std::max(0.5, 300 * st.length_ms / total), 2) << "' height='12' fill='"
        << (c == colors.end() ? "#999" : c->second) << "'><title>" << escape_html(st.name) << " "
        << fmt(st.length_ms, 3) << " ms</title></rect>";
    }
    o << "</svg></td></tr>";
  }
  o << "</table>";
  return o.str();
}

} // namespace

bool write_html(const run_result& r, const summary& s, const std::string& title,
                const std::filesystem::path& path, std::string& error,
                const std::vector<sampled_trace>& traces) {
  std::vector<double> ttft, itl, e2e;
  for (const auto& c : r.calls) {
    if (!c.ok)
      continue;
    e2e.push_back((c.end_s - c.intended_s) * 1e3);
    if (c.first_token_s >= 0)
      ttft.push_back((c.first_token_s - c.intended_s) * 1e3);
    for (std::size_t i = 1; i < c.token_s.size(); ++i)
      itl.push_back((c.token_s[i] - c.token_s[i - 1]) * 1e3);
  }
  std::vector<double> calls_per_s, tokens_per_s;
  for (const auto& b : s.timeline) {
    calls_per_s.push_back(b.at("calls").to_number<double>());
    tokens_per_s.push_back(b.at("tokens").to_number<double>());
  }
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset='utf-8'><title>" << escape_html(title)
    << "</title><style>body{font-family:sans-serif;max-width:720px;margin:1em auto}"
       "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;"
       "text-align:right}th{background:#eee}.warn{color:#b00;font-weight:bold}</style></head>"
       "<body><h1>"
    << escape_html(title) << "</h1>";
  o << "<p>" << escape_html(s.mode) << ", " << fmt(s.wall_s) << " s; jobs " << s.jobs << " (ok "
    << s.jobs_ok << "), calls " << s.calls << " (ok " << s.calls_ok << "); throughput "
    << fmt(s.calls_per_s) << " calls/s, " << fmt(s.output_tokens_per_s, 1)
    << " output tokens/s; goodput " << fmt(s.goodput_calls_per_s) << " calls/s.</p>";
  if (s.fell_behind)
    o << "<p class='warn'>The client fell behind its schedule (dispatch lag p99 "
      << fmt(s.dispatch_lag.p99 * 1e3) << " ms): the offered load was lower than asked.</p>";
  if (!s.errors.empty())
    o << "<p class='warn'>Errors: " << escape_html(json::serialize(s.errors)) << "</p>";
  o << "<table><tr><th></th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th>"
       "<th>max</th></tr>";
  auto row = [&](const char* name, const distribution& d, double scale) {
    o << "<tr><th>" << name << "</th>";
    for (double v : {d.p50, d.p90, d.p95, d.p99, d.p999, d.max})
      o << "<td>" << (d.count ? fmt(v * scale) : "-") << "</td>";
    o << "</tr>";
  };
  row("TTFT (ms)", s.ttft, 1e3);
  row("TPOT (ms)", s.tpot, 1e3);
  row("ITL (ms)", s.itl, 1e3);
  row("E2E (ms)", s.e2e, 1e3);
  row("session (s)", s.session, 1);
  row("send lag (us)", s.send_lag, 1e6);
  o << "</table><h2>Latency CDFs (from the intended send time)</h2>"
    << cdf_svg({{"TTFT", ttft}, {"E2E", e2e}}) << cdf_svg({{"inter-token", itl}})
    << "<h2>Throughput over time</h2>" << bars_svg(calls_per_s, "calls completed")
    << bars_svg(tokens_per_s, "tokens") << "<h2>Per-stage breakdown (mean seconds)</h2><table>";
  for (const auto& [k, v] : s.stages)
    o << "<tr><th>" << escape_html(std::string{k}) << "</th><td>" << fmt(v.to_number<double>(), 4)
      << "</td></tr>";
  o << "</table>";
  if (!traces.empty())
    o << traces_html(traces);
  o << "</body></html>\n";
  std::ofstream f;
  if (!open_for(f, path, error))
    return false;
  f << o.str();
  return static_cast<bool>(f) || (error = "writing " + path.string() + " failed", false);
}

} // namespace triad::load
