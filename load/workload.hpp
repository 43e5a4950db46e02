#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "load/trace.hpp"
#include "runtime/error.hpp"

namespace triad::load {

/// A distribution of a non-negative quantity (token counts, milliseconds): "N" or "fixed:N",
/// "uniform:LO:HI" (inclusive), "lognormal:MEDIAN:SIGMA" (log-space standard deviation;
/// request-length distributions of real traces are roughly lognormal).
struct distribution_spec {
  /// The kinds.
  enum kind_t : std::uint8_t { fixed, uniform, lognormal };
  kind_t kind = fixed; ///< which
  double a = 0;        ///< fixed: the value; uniform: low; lognormal: median
  double b = 0;        ///< uniform: high; lognormal: sigma
  /// A value drawn with `rng`, rounded, at least `floor`.
  std::uint64_t sample(std::mt19937_64& rng, std::uint64_t floor = 0) const;
  /// The mean of the distribution.
  double mean() const;
};

/// Parses a distribution; `what` names it in errors (e.g. "--input-tokens").
expected<distribution_spec> parse_distribution(std::string_view text, std::string_view what);

/// "fixed:128", "uniform:1:3", ... (what parse_distribution reads back).
std::string to_string(const distribution_spec& d);

/// One LLM call of a plan: `tokens` of text, then (when `tool_ms` >= 0) a tool call that takes
/// `tool_ms` on the client before the conversation goes on.
struct call_plan {
  std::uint32_t tokens = 0;        ///< text tokens the answer has
  double tool_ms = -1;             ///< < 0: the answer ends here (no tool call)
  std::uint32_t result_tokens = 0; ///< the tool's result, sent back (when tool_ms >= 0)
};

/// One user turn: the user's message, then calls until one ends without a tool call.
struct turn_plan {
  double think_ms = 0;          ///< the user's pause before sending it (0 for the first)
  std::string user_text;        ///< the message
  std::vector<call_plan> calls; ///< at least one; only the last has no tool call
};

/// A unit of load: a chat request (one turn of one call), a trace request, or an agent session.
struct job_plan {
  std::size_t index = 0;        ///< 0.. in arrival order
  std::string session;          ///< the session id (PLAS accounting)
  std::string system_text;      ///< the system prompt (shared by all agent sessions: a prefix)
  std::vector<turn_plan> turns; ///< at least one
  double arrival_s = -1;        ///< the trace's own arrival time (seconds), or < 0
};

/// What to generate.
struct workload_options {
  /// The kinds.
  enum kind_t : std::uint8_t { chat, agent, trace_replay };
  kind_t kind = chat;                                               ///< which
  distribution_spec input{distribution_spec::fixed, 256, 0};        ///< chat: prompt tokens
  distribution_spec output{distribution_spec::fixed, 64, 0};        ///< chat, agent: answer tokens
  distribution_spec turns{distribution_spec::uniform, 1, 2};        ///< agent: turns per session
  distribution_spec tool_calls{distribution_spec::uniform, 3, 8};   ///< agent: calls per turn
  distribution_spec tool_ms{distribution_spec::uniform, 50, 2000};  ///< agent: tool durations
  distribution_spec think_ms{distribution_spec::uniform, 0, 1000};  ///< agent: between turns
  distribution_spec call_tokens{distribution_spec::uniform, 8, 48}; ///< agent: text before a call
  distribution_spec user_tokens{distribution_spec::uniform, 32, 128}; ///< agent: user messages
  distribution_spec tool_result_tokens{distribution_spec::fixed, 64, 0}; ///< agent: each result
  std::uint32_t system_tokens = 512;  ///< agent: the shared system prompt
  std::string tool_name = "sim_tool"; ///< agent: the (client-side) tool's name
};

/// A named agentic workload (`triad-load --profile NAME`): sessions shaped after the OI/CF
/// paper's characterisation of agentic traffic (arXiv 2601.22001: chat, coding agents, web
/// browsing, computer use). The figures are this project's choices within that description,
/// documented in load/README.md; options given beside a profile override its values.
struct workload_profile {
  std::string name;         ///< "chat", "code-agent", "web", "computer-use"
  std::string summary;      ///< one line: what a session of it is
  workload_options options; ///< kind agent; its distributions
};

/// The built-in profiles, in a fixed order.
const std::vector<workload_profile>& workload_profiles();

/// The profile called `name`; errc::not_found naming it and the allowed names otherwise.
expected<workload_profile> find_workload_profile(std::string_view name);

/// `count` jobs of `options`, drawn from `seed` (trace_replay: one per entry of `tr`, `count`
/// ignored; arrival times from the trace's timestamps divided by `trace_speed`).
std::vector<job_plan> plan_jobs(const workload_options& options, std::size_t count,
                                std::uint64_t seed, const trace* tr = nullptr,
                                double trace_speed = 1.0);

} // namespace triad::load
