#include "load/workload.hpp"

#include <charconv>
#include <cmath>

#include "load/detail/text.hpp"

namespace triad::load {

namespace {

using detail::split_colons;
constexpr auto number = detail::to_number;
constexpr auto num = detail::number_text;

} // namespace

std::uint64_t distribution_spec::sample(std::mt19937_64& rng, std::uint64_t floor) const {
  double v = a;
  switch (kind) {
  case fixed:
    break;
  case uniform:
    v = static_cast<double>(std::uniform_int_distribution<std::int64_t>{
        static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)}(rng));
    break;
  case lognormal:
    v = std::lognormal_distribution<double>{std::log(a), b}(rng);
    break;
  }
  auto r = static_cast<std::uint64_t>(std::llround(std::max(0.0, v)));
  return std::max(r, floor);
}

double distribution_spec::mean() const {
  switch (kind) {
  case fixed:
    return a;
  case uniform:
    return (a + b) / 2;
  case lognormal:
    return a * std::exp(b * b / 2);
  }
  return a;
}

expected<distribution_spec> parse_distribution(std::string_view text, std::string_view what) {
  auto bad = [&](std::string why) {
    return make_error(errc::invalid_argument,
                      std::string{what} + " '" + std::string{text} + "': " + why +
                          "; allowed: N, fixed:N, uniform:LO:HI (0 <= LO <= HI), "
                          "lognormal:MEDIAN:SIGMA (MEDIAN > 0, SIGMA >= 0)");
  };
  auto parts = split_colons(text);
  distribution_spec d;
  if (parts.size() == 1) {
    if (!number(parts[0], d.a) || d.a < 0)
      return bad("not a number >= 0");
    return d;
  }
  if (parts[0] == "fixed" && parts.size() == 2) {
    if (!number(parts[1], d.a) || d.a < 0)
      return bad("not a number >= 0");
    return d;
  }
  if (parts[0] == "uniform" && parts.size() == 3) {
    d.kind = distribution_spec::uniform;
    if (!number(parts[1], d.a) || !number(parts[2], d.b) || d.a < 0 || d.b < d.a)
      return bad("bounds must be numbers with 0 <= LO <= HI");
    return d;
  }
  if (parts[0] == "lognormal" && parts.size() == 3) {
    d.kind = distribution_spec::lognormal;
    if (!number(parts[1], d.a) || !number(parts[2], d.b) || d.a <= 0 || d.b < 0)
      return bad("needs MEDIAN > 0 and SIGMA >= 0");
    return d;
  }
  return bad("unknown form");
}

std::string to_string(const distribution_spec& d) {
  switch (d.kind) {
  case distribution_spec::fixed:
    return "fixed:" + num(d.a);
  case distribution_spec::uniform:
    return "uniform:" + num(d.a) + ":" + num(d.b);
  case distribution_spec::lognormal:
    return "lognormal:" + num(d.a) + ":" + num(d.b);
  }
  return "unknown";
}

std::vector<job_plan> plan_jobs(const workload_options& o, std::size_t count, std::uint64_t seed,
                                const trace* tr, double trace_speed) {
  std::vector<job_plan> jobs;
  std::mt19937_64 rng{seed};
  if (o.kind == workload_options::trace_replay && tr != nullptr) {
    for (std::size_t i = 0; i < tr->entries.size(); ++i) {
      const auto& e = tr->entries[i];
      job_plan j;
      j.index = i;
      j.session = "trace-" + std::to_string(i);
      j.arrival_s = e.timestamp_ms / 1000.0 / trace_speed;
      j.turns.push_back({0, trace_prompt(e, i), {{e.output_length, -1}}});
      jobs.push_back(std::move(j));
    }
    return jobs;
  }
  auto system = o.kind == workload_options::agent ? filler_text(1, o.system_tokens) : "";
  for (std::size_t i = 0; i < count; ++i) {
    job_plan j;
    j.index = i;
    j.session = (o.kind == workload_options::agent ? "agent-" : "chat-") + std::to_string(i);
    j.system_text = system;
    if (o.kind == workload_options::chat) {
      auto in = o.input.sample(rng, 1);
      auto out = static_cast<std::uint32_t>(o.output.sample(rng, 1));
      j.turns.push_back({0, filler_text(seed * 1'000'003 + i, in), {{out, -1}}});
    } else {
      auto turns = o.turns.sample(rng, 1);
      for (std::uint64_t t = 0; t < turns; ++t) {
        turn_plan turn;
        turn.think_ms = t == 0 ? 0 : static_cast<double>(o.think_ms.sample(rng));
        turn.user_text = filler_text(seed * 7'919 + i * 131 + t, o.user_tokens.sample(rng, 1));
        auto calls = o.tool_calls.sample(rng);
        for (std::uint64_t c = 0; c < calls; ++c) {
          auto tokens = static_cast<std::uint32_t>(o.call_tokens.sample(rng));
          auto ms = static_cast<double>(o.tool_ms.sample(rng));
          turn.calls.push_back(
              {tokens, ms, static_cast<std::uint32_t>(o.tool_result_tokens.sample(rng))});
        }
        turn.calls.push_back({static_cast<std::uint32_t>(o.output.sample(rng, 1)), -1});
        j.turns.push_back(std::move(turn));
      }
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

const std::vector<workload_profile>& workload_profiles() {
  using d = distribution_spec;
  auto agent = [](std::uint32_t system, d turns, d tool_calls, d tool_ms, d result, d call, d user,
                  d output, d think) {
    workload_options o;
    o.kind = workload_options::agent;
    o.system_tokens = system;
    o.turns = turns;
    o.tool_calls = tool_calls;
    o.tool_ms = tool_ms;
    o.tool_result_tokens = result;
    o.call_tokens = call;
    o.user_tokens = user;
    o.output = output;
    o.think_ms = think;
    return o;
  };
  static const std::vector<workload_profile> profiles = {
      {"chat",
       "a conversation of 2-8 turns with no tools: short questions, answers of a few hundred "
       "tokens, a person's pause of 5-60 s between turns",
       agent(256, {d::uniform, 2, 8}, {d::fixed, 0, 0}, {d::fixed, 0, 0}, {d::fixed, 0, 0},
             {d::fixed, 0, 0}, {d::lognormal, 80, 0.8}, {d::lognormal, 250, 0.6},
             {d::uniform, 5'000, 60'000})},
      {"code-agent",
       "one task: 12-20K tokens of repository context, then 10-50 tool calls (builds, tests, "
       "file reads) of 2-30 s returning 1.6-1.9K tokens each, so the context grows to "
       "32K-128K",
       agent(4096, {d::fixed, 1, 0}, {d::uniform, 10, 50}, {d::uniform, 2'000, 30'000},
             {d::uniform, 1'600, 1'900}, {d::uniform, 40, 160}, {d::uniform, 12'000, 20'000},
             {d::uniform, 100, 400}, {d::fixed, 0, 0})},
      {"web",
       "a browsing task of 1-2 user turns, each 3-10 page fetches and searches of 1-8 s "
       "returning 1-6K tokens of page text: few calls, large results",
       agent(2048, {d::uniform, 1, 2}, {d::uniform, 3, 10}, {d::uniform, 1'000, 8'000},
             {d::uniform, 1'000, 6'000}, {d::uniform, 20, 80}, {d::uniform, 30, 120},
             {d::uniform, 100, 500}, {d::uniform, 2'000, 20'000})},
      {"computer-use",
       "one task of 20-60 steps: a short action (click, type), 0.5-3 s to act and take a "
       "screenshot, the screenshot's 1.2-1.6K tokens back: many calls, steady growth",
       agent(3072, {d::fixed, 1, 0}, {d::uniform, 20, 60}, {d::uniform, 500, 3'000},
             {d::uniform, 1'200, 1'600}, {d::uniform, 30, 100}, {d::uniform, 30, 120},
             {d::uniform, 50, 200}, {d::fixed, 0, 0})},
  };
  return profiles;
}

expected<workload_profile> find_workload_profile(std::string_view name) {
  std::string allowed;
  for (const auto& p : workload_profiles()) {
    if (p.name == name)
      return p;
    allowed += (allowed.empty() ? "" : ", ") + p.name;
  }
  return make_error(errc::not_found,
                    "unknown workload profile '" + std::string{name} + "'; allowed: " + allowed);
}

} // namespace triad::load
