// triad-bench-agentic: the headline comparison of the orchestration layer, on simulated devices
// (SIMULATED: roofline `sim` backends with the llama3-8b shape: two H200 for prefill, two SN40L
// for decode; tools sleep for their scripted duration on the tool domains of a synthetic
// two-socket topology). The same seeded agentic workload (sessions of 3-8 tool calls of
// 50 ms-2 s, scripted output, tool results fed back) runs under four settings:
//   three_stage + pin, three_stage + demote, three_stage + discard, and monolithic (each of the
//   four devices prefills and decodes, and a request holds its slot while its tools run).
// Every device has the same number of slots in every setting. It reports throughput, session
// completion time p50/p99 and device busy fractions per setting, and the ratios between them.
// Sim settings run in virtual time by default (`--clock virtual`: the node's clock jumps over
// the gaps in which every actor, device and tool waits; time_scale 1); `--clock real` runs them
// in real time, --quick at time_scale 5 (device steps and tool sleeps 5x shorter in real time,
// so modelled times and their ratios stay the same).
// The capacity-bound comparison (code_agent_*, issue #28): llama3-70b in bf16, code-agent
// sessions whose contexts grow to 32K-120K tokens over 10-50 tool calls: three-stage on two
// tensor-parallel H200 pairs (prefill) and two tensor-parallel groups of four SN40L (decode)
// against a monolithic pool of 12 H200 in the same groups, with no slot cap: devices admit
// while the KV fits their memory tiers. It reports the peak KV one decoding device held.
// code_agent_three_stage_gaudi3 puts Gaudi 3 pairs in the H200 pairs' place. At equal cost:
// each setting's throughput per dollar of accelerators (device_usd: assumed prices).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <caf/all.hpp>

#include "actors/chat.hpp"
#include "actors/node.hpp"
#include "bench/oi_cf_report.hpp"
#include "bench/report.hpp"
#include "devices/device.hpp"
#include "devices/factory.hpp"
#include "devices/sim/profile.hpp"
#include "load/workload.hpp"
#include "runtime/main_guard.hpp"
#include "runtime/node_clock.hpp"
#include "tools/registry.hpp"

namespace {

using clock_type = triad::node_clock; // modelled time (virtual or real)

// One session of the workload: its prompt and its script.
struct session_spec {
  std::string system = "You are a coding agent with a build tool.";
  std::string user;
  triad::generation_script script;
  std::uint32_t tool_calls = 0;
  double arrival_s = 0; // modelled seconds after the run's start that the session begins
  double tool_s = 0;    // modelled seconds its tool calls take together
  // Tokens its script adds to the context: the answers' text and the tool results (a byte a
  // token, as the sim presets' tokenizer counts; the chat template's tokens not counted).
  std::uint64_t script_tokens = 0;
  // Its context at the end, as planned: the prompt and what the script adds.
  std::uint64_t planned_context() const { return system.size() + user.size() + script_tokens; }
};

// Appends to `s` `tokens` of answer, then a call of the "work" tool lasting `modelled_ms`
// (it sleeps that divided by `time_scale`) whose output is `bytes` characters.
void script_call(session_spec& s, std::uint32_t tokens, double modelled_ms, std::size_t bytes,
                 double time_scale) {
  auto args = "{\"ms\": " + std::to_string(static_cast<int>(modelled_ms / time_scale)) +
              ", \"bytes\": " + std::to_string(bytes) + "}";
  s.script.turns.push_back({tokens, triad::tool_call_text{"work", args}});
  s.tool_s += modelled_ms / 1000;
  s.script_tokens += tokens + bytes;
}

// Scripts `s.tool_calls` calls of the "work" tool into `s`: each `text` tokens of answer, then
// the call (a duration from `tool_ms`, modelled ms; an output of `result` characters); then a
// closing answer.
template<class Ms, class Bytes, class Text>
void script_calls(session_spec& s, std::mt19937_64& rng, Ms& tool_ms, Bytes& result, Text& text,
                  double time_scale) {
  for (std::uint32_t c = 0; c < s.tool_calls; ++c) {
    // Drawn in the order the workloads always drew them (a seed's sessions stay the same).
    const double modelled_ms = tool_ms(rng);
    const auto bytes = result(rng);
    script_call(s, text(rng), modelled_ms, bytes, time_scale);
  }
  s.script.turns.push_back({text(rng), std::nullopt});
  s.script_tokens += s.script.turns.back().tokens;
}

// The workload, the same for every setting: `n` sessions from `seed`. Tool durations are
// modelled milliseconds; the tool sleeps them divided by `time_scale`.
std::vector<session_spec> make_workload(std::size_t n, std::uint64_t seed, double time_scale) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<std::uint32_t> calls{3, 8}, text{20, 60}, result{100, 400},
      prompt{300, 900};
  std::uniform_real_distribution<double> tool_ms{50.0, 2000.0};
  std::vector<session_spec> out;
  for (std::size_t i = 0; i < n; ++i) {
    session_spec s;
    s.user = "Session " + std::to_string(i) + ": ";
    auto len = prompt(rng);
    while (s.user.size() < len)
      s.user += "investigate the failing build and fix it; ";
    s.tool_calls = calls(rng);
    script_calls(s, rng, tool_ms, result, text, time_scale);
    out.push_back(std::move(s));
  }
  return out;
}

// A code agent's context lengths, in tokens: its opening prompt and the context it aims at
// (drawn uniformly in each range); the tool results make up the growth between them, each
// between `min_result` and `max_result` tokens, after `text_per_turn` tokens of the agent's own
// text a turn (its mean, 100, where the band counts it; the code agent's does not).
struct context_band {
  std::uint32_t prompt_min, prompt_max, final_min, final_max, min_result, max_result, text_per_turn;
};

// The code agent of the capacity-bound comparison: 12-20K tokens of repository context growing
// to about 32K-120K (llama3-70b holds 131072), 1-4K tokens a tool result.
constexpr context_band code_agent_band{12'000, 20'000, 32'000, 120'000, 1'000, 4'000, 0};

// The context-length sweep's bands (context_<name>_* settings): the same agents, tools and
// hardware, only the contexts differ. The contexts each band's sessions reach are reported
// (planned_final_context_tokens) beside their runs.
const std::vector<std::pair<std::string, context_band>>& context_bands() {
  static const std::vector<std::pair<std::string, context_band>> bands = {
      {"8k", {1'000, 2'000, 4'000, 8'000, 50, 4'000, 100}},
      {"32k", {4'000, 8'000, 16'000, 32'000, 250, 4'000, 100}},
      {"128k", {12'000, 20'000, 64'000, 120'000, 1'000, 10'000, 100}},
  };
  return bands;
}

// The code-agent workload (SIMULATED, after the OI/CF paper's characterisation of coding
// agents): `n` sessions from `seed`, each opening with `band`'s prompt of repository context,
// then `calls` tool calls (builds, tests, file reads: 2-30 modelled seconds, output fed back)
// with 40-160 generated tokens between them, so a context grows turn by turn to the band's
// final length. Tool durations are modelled milliseconds divided by `time_scale`.
std::vector<session_spec> make_code_agent_workload(std::size_t n, std::uint64_t seed,
                                                   double time_scale, std::uint32_t min_calls,
                                                   std::uint32_t max_calls,
                                                   const context_band& band = code_agent_band) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<std::uint32_t> calls{min_calls, max_calls}, text{40, 160},
      prompt{band.prompt_min, band.prompt_max}, target{band.final_min, band.final_max};
  std::uniform_real_distribution<double> tool_ms{2000.0, 30000.0};
  std::vector<session_spec> out;
  for (std::size_t i = 0; i < n; ++i) {
    session_spec s;
    s.system = "You are a coding agent working in a large repository with a build tool.";
    s.user = "Session " + std::to_string(i) + ": ";
    auto len = prompt(rng);
    while (s.user.size() < len)
      s.user += "src/module.cpp: int compute(int x) { return x * 2 + 1; } // fix the failing test ";
    s.user.resize(len);
    s.tool_calls = calls(rng);
    // Each call's output: the growth to the session's final context, less the agent's own
    // text, spread over its calls (within the band's least and most result).
    const double growth =
        std::max<double>(0, static_cast<double>(target(rng)) - len -
                                static_cast<double>(band.text_per_turn) * (s.tool_calls + 1));
    const auto per_call = static_cast<std::uint32_t>(
        std::clamp(growth / s.tool_calls, static_cast<double>(band.min_result),
                   static_cast<double>(band.max_result)));
    std::uniform_int_distribution<std::uint32_t> result{per_call * 3 / 4, per_call * 5 / 4};
    script_calls(s, rng, tool_ms, result, text, time_scale);
    out.push_back(std::move(s));
  }
  return out;
}

// `n` sessions of triad-load's workload profile `profile` (load/workload.hpp: chat, web,
// computer-use, code-agent) from `seed`, as this bench runs a session: one request whose
// script makes every call. A user's later turn enters the same way as a tool result: after the
// user's think time (the call's duration), the user's message (its result) joins the context,
// so the session's KV lives as it would across the turn (paused, then growing). Tool durations
// are modelled milliseconds divided by `time_scale`; results are text of the planned length.
std::vector<session_spec> make_profile_workload(const std::string& profile, std::size_t n,
                                                std::uint64_t seed, double time_scale) {
  auto p = triad::load::find_workload_profile(profile);
  if (!p)
    return {};
  std::vector<session_spec> out;
  for (const auto& job : triad::load::plan_jobs(p->options, n, seed)) {
    session_spec s;
    s.system = job.system_text;
    s.user = job.turns.front().user_text;
    auto call = [&](std::uint32_t tokens, double ms, std::size_t bytes) {
      script_call(s, tokens, ms, bytes, time_scale);
      ++s.tool_calls;
    };
    for (std::size_t t = 0; t < job.turns.size(); ++t)
      for (const auto& c : job.turns[t].calls) {
        if (c.tool_ms >= 0)
          call(c.tokens, c.tool_ms, c.result_tokens);
        else if (t + 1 < job.turns.size()) // the turn's answer; the user's next message
          call(c.tokens, job.turns[t + 1].think_ms, job.turns[t + 1].user_text.size());
        else {
          s.script.turns.push_back({c.tokens, std::nullopt});
          s.script_tokens += c.tokens;
        }
      }
    out.push_back(std::move(s));
  }
  return out;
}

// "work": sleeps `ms` on its tool worker and answers `bytes` characters (a simulated tool).
std::shared_ptr<triad::tool_registry> bench_tools() {
  namespace json = boost::json;
  auto r = std::make_shared<triad::tool_registry>();
  auto schema = json::object{
      {"type", "object"},
      {"required", json::array{"ms", "bytes"}},
      {"properties", json::object{{"ms", json::object{{"type", "integer"}, {"minimum", 0}}},
                                  {"bytes", json::object{{"type", "integer"}, {"minimum", 0}}}}}};
  auto ok = r->add({"work", "a tool that takes a while (simulated)", schema},
                   [](const json::object& args) -> triad::expected<triad::tool_output> {
                     triad::node_clock::sleep_for(
                         std::chrono::milliseconds{args.at("ms").to_number<int>()});
                     auto n = args.at("bytes").to_number<std::size_t>();
                     std::string out;
                     while (out.size() < n)
                       out += "PASS test_case ok; ";
                     out.resize(n);
                     return triad::tool_output{out, {}};
                   });
  if (!ok)
    std::fprintf(stderr, "triad-bench-agentic: %s\n", ok.error().message.c_str());
  return r;
}

struct setting {
  std::string name;
  triad::layout device_layout;
  triad::kv_policy kv;
  /// Decode devices' KV memory (sim kv_mib; 0: the profile's), to make memory the bottleneck.
  std::uint64_t decode_kv_mib = 0;
  /// The pin policy's TTL, floor and ceiling: 0 the defaults (the p90 of the tool's recent
  /// durations, clamped); past a session's length, a session-long pin.
  std::chrono::milliseconds pin_ttl{0};
  /// The capacity-bound comparison: code-agent sessions on code_agent_hardware().
  bool code_agent = false;
  /// The datacenter-scale run: code-agent sessions arriving over time on datacenter_hardware().
  bool datacenter = false;
  /// Code-agent settings: the prefill groups' profile (code_agent_hardware's argument).
  std::string prefill_profile = "h200";
  /// A triad-load workload profile's sessions (make_profile_workload) on code_agent_hardware();
  /// empty: the setting's own workload.
  std::string workload_profile{};
  /// The context-length sweep: code agents of this context_bands() entry on
  /// code_agent_hardware(); empty: the setting's own workload.
  std::string context{};
};

struct outcome {
  std::vector<double> session_s; // modelled seconds from each session's arrival to its end
  std::vector<std::uint64_t> session_tokens; // each session's completion tokens
  std::vector<bool> session_failed;          // each session: whether it ended in an error
  double makespan_s = 0;         // modelled
  std::uint64_t completion_tokens = 0, prefill_tokens = 0, errors = 0;
  std::uint64_t tier_tokens = 0;  // tokens devices read from the KV store instead of computing
  std::uint64_t preemptions = 0;  // sequences whose KV a device dropped for memory
  std::uint64_t refused = 0;      // generate requests devices answered busy
  std::uint64_t pin_expiries = 0; // tool calls whose pinned KV moved to the store at its TTL
  double prefill_busy = 0, decode_busy = 0; // busy fraction, mean over the devices of a pool
  // Code-agent settings: the most KV one decoding device (role decode, or both) held, sampled
  // every 50 ms, in GB (pages at the bytes of KV a page stands for on the sim device).
  double peak_decode_kv_gb = 0;
  double wall_s = 0;             // real seconds the run took
  std::uint64_t clock_jumps = 0; // virtual time: times the clock jumped
  // Sim devices: the run's steps on the OI/CF plane, per pool of alike devices.
  std::vector<triad::bench::oi_cf_panel> oi_cf;
  // Sim devices, per pool (oi_cf's order): the most bytes one device of it held in each memory
  // tier (weights, activations and KV), by the tier's name, in GB.
  std::vector<std::vector<std::pair<std::string, double>>> tier_peak_gb;
};

std::map<std::string, triad::device_stats> device_stats(triad::node& n) {
  caf::scoped_actor self{n.domains().orchestration().system()};
  std::map<std::string, triad::device_stats> out;
  for (auto& [name, dev] : n.devices())
    self->request(dev, std::chrono::seconds{30}, triad::stats_atom::value)
        .receive([&, name = name](triad::device_stats& s) { out[name] = s; }, [&](caf::error&) {});
  return out;
}

// The devices a run uses: sim (the headline: H200 prefill, SN40L decode, llama3-8b shape) or
// cpu (this machine's cores, the tiny preset, real computation).
struct hardware {
  triad::device_backend backend = triad::device_backend::sim;
  std::string preset;
  struct device {
    std::string name, profile;
    triad::device_role role; // in the three-stage layout; monolithic makes every device "both"
    std::uint32_t tensor_parallel = 1; // devices of the profile in this (group) device
  };
  std::vector<device> devices;
  // The monolithic layout's devices (each doing both); empty: `devices`, each doing both.
  std::vector<device> monolithic{};
  // Tokens per KV page (and KV store block); 0: the node's default.
  std::size_t page_tokens = 0;
  // The devices of `layout` (monolithic runs each as role both; `role` says which pool's busy
  // figure counts it).
  const std::vector<device>& of(triad::layout layout) const {
    return layout == triad::layout::monolithic && !monolithic.empty() ? monolithic : devices;
  }
};

hardware sim_hardware() {
  return {triad::device_backend::sim,
          "llama3-8b",
          {{"h200-0", "h200", triad::device_role::prefill},
           {"h200-1", "h200", triad::device_role::prefill},
           {"sn40l-0", "sn40l", triad::device_role::decode},
           {"sn40l-1", "sn40l", triad::device_role::decode}}};
}

// The capacity-bound comparison (SIMULATED): llama3-70b in bf16 (137 GB of weights, 320 KiB of
// KV a token) on 12 accelerators in tensor-parallel groups. Three-stage: two pairs of H200
// (each 282 GB of HBM) prefill, two groups of four SN40L (each 256 GB of HBM and 6 TB of DDR)
// decode; monolithic: a pool of 12 H200 (equal device count) as three groups of four, each
// doing both (groups of one size: the router balances requests in flight, not device speed).
// With `prefill_profile` "gaudi3", two pairs of Gaudi 3 (each pair 256 GB of HBM2e) prefill
// instead of the H200 pairs; the decode groups and the monolithic pool stay the same.
// KV pages (and store blocks) of `page_tokens`.
hardware code_agent_hardware(std::size_t page_tokens, const std::string& prefill_profile = "h200") {
  const auto pair = prefill_profile == "h200" ? std::string{"h200x2-"} : prefill_profile + "x2-";
  return {triad::device_backend::sim,
          "llama3-70b",
          {{pair + "0", prefill_profile, triad::device_role::prefill, 2},
           {pair + "1", prefill_profile, triad::device_role::prefill, 2},
           {"sn40lx4-0", "sn40l", triad::device_role::decode, 4},
           {"sn40lx4-1", "sn40l", triad::device_role::decode, 4}},
          {{"h200x4-0", "h200", triad::device_role::both, 4},
           {"h200x4-1", "h200", triad::device_role::both, 4},
           {"h200x4-2", "h200", triad::device_role::both, 4}},
          page_tokens};
}

// The datacenter-scale run (SIMULATED, issue #28's virtual-time figure): 64 accelerators, the
// code-agent hardware eight times over for prefill and six times for decode: 8 tensor-parallel
// H200 pairs prefill, 12 groups of four SN40L decode; KV pages (and store blocks) of
// `page_tokens`.
hardware datacenter_hardware(std::size_t page_tokens) {
  hardware hw{triad::device_backend::sim, "llama3-70b", {}, {}};
  for (int i = 0; i < 8; ++i)
    hw.devices.push_back({"h200x2-" + std::to_string(i), "h200", triad::device_role::prefill, 2});
  for (int i = 0; i < 12; ++i)
    hw.devices.push_back({"sn40lx4-" + std::to_string(i), "sn40l", triad::device_role::decode, 4});
  hw.page_tokens = page_tokens;
  return hw;
}

// -- equal cost --

// What one accelerator costs to buy, in US dollars: ASSUMPTIONS of the equal-cost figures (no
// vendor lists all three; only Intel published a list price):
// - gaudi3 15,625: Intel's Computex 2024 list price of eight Gaudi 3 on their baseboard,
//   125,000 (reported by The Next Platform, 2024-06-13), divided by eight.
// - h200 32,000: assumed. NVIDIA lists no price; H100 SXM street prices reported in 2024 were
//   25,000-31,000, and the H200 sells above the H100.
// - sn40l 35,000: assumed. SambaNova sells systems, not sockets, and publishes no price: an
//   H200's price plus about 3,000 for the socket's 1.5 TB of DDR5.
// Other profiles have no price: a fleet holding one has no cost figure (0).
double device_usd(const std::string& profile) {
  return profile == "gaudi3"  ? 15'625.0
         : profile == "h200"  ? 32'000.0
         : profile == "sn40l" ? 35'000.0
                              : 0.0;
}

// What the accelerators of `hw` in `layout` cost to buy (device_usd each); 0 when one has no
// price.
double fleet_usd(const hardware& hw, triad::layout layout) {
  double sum = 0;
  for (const auto& d : hw.of(layout)) {
    const double each = device_usd(d.profile);
    if (each == 0)
      return 0;
    sum += each * d.tensor_parallel;
  }
  return sum;
}

hardware cpu_hardware() {
  return {triad::device_backend::cpu,
          "tiny",
          {{"cpu-prefill", "", triad::device_role::prefill},
           {"cpu-decode", "", triad::device_role::decode}}};
}

triad::expected<outcome> run(const setting& st, const hardware& hw,
                             const std::vector<session_spec>& work, double time_scale,
                             std::size_t slots, bool virtual_time) {
  auto config = triad::default_config();
  config.scheduler.virtual_time = virtual_time;
  // A session is one request, its tool calls included (a code agent's take tens of modelled
  // minutes): a day, not the default ten minutes, which virtual time applies to modelled time.
  config.limits.request_timeout_ms = 86'400'000;
  config.topology.source = triad::topology_source::synthetic;
  // Enough tool workers that tools never queue (a tool call holds one; every session may be in
  // one at once), on a synthetic machine of four domains with cores for them.
  const std::size_t tool_cores = std::max<std::size_t>(32, work.size());
  config.topology.synthetic =
      "pack:2 numa:2 core:" + std::to_string(std::max<std::size_t>(16, (tool_cores + 3) / 4)) +
      " pu:1";
  config.topology.bind_threads = false;
  config.scheduler.threads_per_domain = 1;
  // Idle workers of the four domains sleep at once instead of polling (0.46 ms after each job
  // by default): on a 2-core machine their polls took 40% of the cycles of the code-agent runs
  // from the actors and driver threads whose real time the modelled time counts.
  config.scheduler.poll_attempts = 1;
  config.tools.cores = static_cast<unsigned>(tool_cores);
  config.model.preset = hw.preset;
  if (hw.page_tokens != 0)
    config.model.page_tokens = hw.page_tokens;
  config.devices.clear();
  bool mono = st.device_layout == triad::layout::monolithic;
  const auto& devices = hw.of(st.device_layout);
  for (const auto& dev : devices) {
    triad::device_config d;
    d.name = dev.name;
    d.backend = hw.backend;
    d.profile = dev.profile;
    d.role = mono ? triad::device_role::both : dev.role;
    d.tensor_parallel = dev.tensor_parallel;
    if (hw.backend == triad::device_backend::sim) {
      d.time_scale = time_scale;
      if (d.role == triad::device_role::decode || mono)
        d.kv_mib = st.decode_kv_mib;
    } else {
      d.memory_mib = 256;
    }
    config.devices.push_back(d);
  }
  triad::node_options opts;
  opts.tools = bench_tools();
  config.orchestration.device_layout = st.device_layout;
  config.orchestration.kv = st.kv;
  config.orchestration.device_slots = slots;
  if (st.pin_ttl.count() > 0)
    config.orchestration.pin_ttl_min = config.orchestration.pin_ttl_max = st.pin_ttl;
  auto started = triad::node::start(config, opts);
  if (!started)
    return started.error();
  auto& n = **started;

  std::mutex m;
  std::condition_variable cv;
  std::size_t ended = 0;
  outcome out;
  out.session_s.resize(work.size());
  out.session_tokens.resize(work.size());
  out.session_failed.resize(work.size());
  auto before = device_stats(n);
  // Code-agent settings: samples the KV pages each decoding device holds until every session
  // has ended (its requests cost the devices' actors time: the other settings skip it).
  bool sampling = st.code_agent;
  std::uint64_t peak_pages = 0;
  std::condition_variable sample_cv;
  // Every 50 ms real, or (virtual time) every 2 modelled seconds, waiting on the node's clock.
  std::thread sampler{[&] {
    triad::node_clock::busy_scope counted; // the clock does not jump while it reads
    std::unique_lock<std::mutex> l{m};
    while (sampling) {
      l.unlock();
      auto now = device_stats(n);
      l.lock();
      for (const auto& dev : devices)
        if (mono || dev.role != triad::device_role::prefill)
          peak_pages = std::max<std::uint64_t>(peak_pages, now[dev.name].kv_pages_used);
      if (virtual_time) {
        l.unlock();
        triad::node_clock::sleep_for(std::chrono::seconds{2});
        l.lock();
      } else {
        sample_cv.wait_for(l, std::chrono::milliseconds{50}, [&] { return !sampling; });
      }
    }
  }};
  const auto wall_start = std::chrono::steady_clock::now();
  const auto jumps_before = triad::node_clock::statistics().jumps;
  auto start = clock_type::now();
  std::optional<triad::node_clock::busy_scope> submitting{std::in_place}; // no jump meanwhile
  for (std::size_t i = 0; i < work.size(); ++i) {
    // A session that arrives later: waits on the node's clock (in virtual time a jump).
    const auto arrival = start + std::chrono::duration_cast<clock_type::duration>(
                                     std::chrono::duration<double>(work[i].arrival_s / time_scale));
    if (work[i].arrival_s > 0)
      clock_type::sleep_until(arrival);
    triad::chat_request r;
    r.session = "session-" + std::to_string(i);
    r.messages = {{"system", work[i].system}, {"user", work[i].user}};
    r.script = work[i].script;
    r.max_tokens = triad::script_length(*r.script);
    r.max_tool_calls = std::max<std::uint32_t>(16, work[i].tool_calls);
    n.submit(std::move(r), [&, i, arrival](const triad::request_event& e) {
      if (e.kind != triad::request_event::done && e.kind != triad::request_event::error)
        return;
      auto t = std::chrono::duration<double>(clock_type::now() - arrival).count() * time_scale;
      std::lock_guard<std::mutex> g{m};
      if (e.kind == triad::request_event::error && out.errors++ == 0)
        std::fprintf(stderr, "triad-bench-agentic: %s: session %zu failed: %s\n", st.name.c_str(),
                     i, e.message.c_str());
      out.session_s[i] = t;
      out.session_tokens[i] = e.usage.completion_tokens;
      out.session_failed[i] = e.kind == triad::request_event::error;
      out.completion_tokens += e.usage.completion_tokens;
      out.prefill_tokens += e.usage.prefill_tokens;
      out.pin_expiries += e.usage.pin_expiries;
      ++ended;
      cv.notify_all();
    });
  }
  submitting.reset();
  {
    std::unique_lock<std::mutex> l{m};
    cv.wait(l, [&] { return ended == work.size(); });
    sampling = false;
  }
  sample_cv.notify_all();
  sampler.join();
  out.peak_decode_kv_gb = static_cast<double>(peak_pages) *
                          static_cast<double>(triad::model_preset(hw.preset)->kv_bytes_per_token(
                              triad::accelerator_dtype(config))) *
                          static_cast<double>(config.model.page_tokens) / 1e9;
  out.makespan_s = std::chrono::duration<double>(clock_type::now() - start).count() * time_scale;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  out.clock_jumps = triad::node_clock::statistics().jumps - jumps_before;
  auto after = device_stats(n);
  std::size_t np = 0, nd = 0;
  for (const auto& dev : devices) {
    // Modelled busy seconds for sim devices, real ones for cpu devices.
    double frac =
        (after[dev.name].busy_seconds - before[dev.name].busy_seconds) /
        (hw.backend == triad::device_backend::sim ? out.makespan_s : out.makespan_s / time_scale);
    out.tier_tokens += after[dev.name].tier_tokens - before[dev.name].tier_tokens;
    out.preemptions += after[dev.name].preemptions - before[dev.name].preemptions;
    out.refused += after[dev.name].refused - before[dev.name].refused;
    if (dev.role == triad::device_role::prefill)
      out.prefill_busy += frac, ++np;
    else
      out.decode_busy += frac, ++nd;
    if (hw.backend != triad::device_backend::sim)
      continue;
    const auto& steps = after[dev.name].oi_cf_steps; // empty: it ran no step
    const std::string role{mono ? "both" : triad::to_string(dev.role)};
    auto panel = std::find_if(out.oi_cf.begin(), out.oi_cf.end(), [&](const auto& p) {
      return p.role == role && p.profile == dev.profile && p.tensor_parallel == dev.tensor_parallel;
    });
    if (panel == out.oi_cf.end()) {
      panel =
          out.oi_cf.insert(out.oi_cf.end(), {st.name, role, dev.profile, dev.tensor_parallel, 0,
                                             std::vector<std::uint64_t>(triad::oi_cf_grid::cells)});
      std::vector<std::pair<std::string, double>> tiers;
      if (auto p = triad::builtin_profile(dev.profile))
        for (std::size_t t = 0; t < std::min(p->tiers.size(), triad::max_memory_tiers); ++t)
          tiers.emplace_back(p->tiers[t].name, 0.0);
      out.tier_peak_gb.push_back(std::move(tiers)); // one per panel, in the panels' order
    }
    auto& tier_peaks = out.tier_peak_gb[static_cast<std::size_t>(panel - out.oi_cf.begin())];
    const auto& peaks = after[dev.name].tier_peak_bytes; // since the node started: this run
    for (std::size_t t = 0; t < std::min(peaks.size(), tier_peaks.size()); ++t)
      tier_peaks[t].second = std::max(tier_peaks[t].second, peaks[t] / 1e9);
    ++panel->devices;
    const auto& was = before[dev.name].oi_cf_steps;
    for (std::size_t c = 0; c < steps.size() && steps.size() == panel->steps.size(); ++c)
      panel->steps[c] += steps[c] - (was.size() == steps.size() ? was[c] : 0);
  }
  out.prefill_busy /= static_cast<double>(std::max<std::size_t>(np, 1));
  out.decode_busy /= static_cast<double>(std::max<std::size_t>(nd, 1));
  n.stop();
  return out;
}

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-agentic: three_stage vs monolithic, pin/demote vs discard, on "
               "simulated H200 prefill and SN40L decode devices"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  std::uint64_t seed = 7;
  triad::bench::add_common_options(app, common, "fewer sessions, time_scale 5");
  std::string backend = "sim";
  app.add_option("--backend", backend,
                 "sim: simulated H200 prefill + SN40L decode (the headline); cpu: this "
                 "machine's cores with the tiny preset, real computation, 8 sessions")
      ->check(CLI::IsMember({"sim", "cpu"}));
  app.add_option("--seed", seed, "workload seed");
  double agent_scale_option = 0;
  std::size_t agent_sessions_option = 0;
  app.add_option("--agent-scale", agent_scale_option,
                 "code_agent_* settings with --clock real: modelled seconds per real second "
                 "(default: --quick 50, else 20)")
      ->check(CLI::PositiveNumber);
  app.add_option("--agent-sessions", agent_sessions_option,
                 "code_agent_* and context_* settings: sessions (default: --quick 24, else 64)")
      ->check(CLI::PositiveNumber);
  std::string clock = "";
  app.add_option("--clock", clock,
                 "virtual: the node's clock jumps over idle gaps (time_scale 1; default for "
                 "sim); real: modelled time runs at time_scale x real time (default for cpu)")
      ->check(CLI::IsMember({"virtual", "real"}));
  double dc_minutes_option = 0;
  // Pages of 128 tokens (vLLM's block size on Gaudi) for the llama3-70b settings: at the node's
  // 16, a 100K-token context is 6K blocks, each with its actor in the KV store, and the run's
  // CPU goes there (measured on the datacenter setting: the same modelled figures within 1% over
  // 10 minutes, 3.9x the wall time).
  std::size_t page_tokens = 128;
  app.add_option("--page-tokens", page_tokens,
                 "llama3-70b settings (code_agent_*, profile_*, datacenter_three_stage): tokens "
                 "per KV page and store block (default 128)")
      ->check(CLI::Range(1, 4096));
  std::size_t dc_sessions_option = 0, profile_sessions_option = 0;
  app.add_option("--profile-sessions", profile_sessions_option,
                 "profile_* settings (triad-load's chat, web and computer-use profiles on the "
                 "code-agent hardware): sessions each (default: --quick 12, else 48)")
      ->check(CLI::PositiveNumber);
  app.add_option("--datacenter-minutes", dc_minutes_option,
                 "datacenter_three_stage (64 devices): minutes of modelled arrivals (default: "
                 "--quick 5, else 60)")
      ->check(CLI::PositiveNumber);
  app.add_option("--datacenter-sessions", dc_sessions_option,
                 "datacenter_three_stage: sessions arriving (default: 3 a modelled minute)")
      ->check(CLI::PositiveNumber);
  double slo_ms_per_token = 50;
  app.add_option("--slo-ms-per-token", slo_ms_per_token,
                 "goodput SLO: a session meets it when its time outside its tools, over its "
                 "completion tokens, is at most this many modelled ms (default 50: 20 tokens/s)")
      ->check(CLI::PositiveNumber);
  std::string html_path;
  app.add_option("--html", html_path,
                 "writes the sim devices' steps on the OI/CF plane (an SVG per pool, over the "
                 "device's roofline ridge and capacity walls) to this HTML file")
      ->check(triad::bench::writable_path());
  std::string only;
  app.add_option("--settings", only,
                 "comma-separated setting names to run (default: all); ratios need both sides");
  CLI11_PARSE(app, argc, argv);

  const bool cpu = backend == "cpu";
  const auto hw = cpu ? cpu_hardware() : sim_hardware();
  const bool virtual_time = clock.empty() ? !cpu : clock == "virtual";
  // cpu devices run in real time, so their tools do too; in virtual time modelled time is the
  // node's clock.
  const double time_scale = quick && !cpu && !virtual_time ? 5.0 : 1.0;
  const std::size_t sessions = cpu ? 8 : quick ? 48 : 96;
  const std::size_t slots = cpu ? 4 : 8; // per device, in every setting
  auto work = make_workload(sessions, seed, time_scale);
  std::vector<setting> settings = {
      {"three_stage_pin", triad::layout::three_stage, triad::kv_policy::pin},
      {"three_stage_demote", triad::layout::three_stage, triad::kv_policy::demote},
      {"three_stage_discard", triad::layout::three_stage, triad::kv_policy::discard},
      {"monolithic", triad::layout::monolithic, triad::kv_policy::pin},
  };
  // Device memory as the bottleneck (sim only): each decode device holds the KV of a few
  // sessions at most (a session's context ends near 3k tokens, 128 KiB of KV each), far less
  // than its slots' sessions hold across their tool calls, so KV must leave the device while
  // tools run: demote (into the store's host tier) against discard, and a pin whose TTL moves
  // a long call's KV to the store against a pin held for the whole session.
  const std::uint64_t bottleneck_kv_mib = 1536;
  const std::chrono::milliseconds session_long{86'400'000};
  if (!cpu)
    settings.insert(settings.end(), {
                                        {"memory_bound_demote", triad::layout::three_stage,
                                         triad::kv_policy::demote, bottleneck_kv_mib},
                                        {"memory_bound_discard", triad::layout::three_stage,
                                         triad::kv_policy::discard, bottleneck_kv_mib},
                                        {"memory_bound_pin_ttl", triad::layout::three_stage,
                                         triad::kv_policy::pin, bottleneck_kv_mib},
                                        {"memory_bound_pin_session", triad::layout::three_stage,
                                         triad::kv_policy::pin, bottleneck_kv_mib, session_long},
                                        {"code_agent_three_stage",
                                         triad::layout::three_stage,
                                         triad::kv_policy::pin,
                                         0,
                                         {},
                                         true},
                                        {"code_agent_three_stage_gaudi3",
                                         triad::layout::three_stage,
                                         triad::kv_policy::pin,
                                         0,
                                         {},
                                         true,
                                         false,
                                         "gaudi3"},
                                        {"code_agent_monolithic",
                                         triad::layout::monolithic,
                                         triad::kv_policy::pin,
                                         0,
                                         {},
                                         true},
                                        {"datacenter_three_stage",
                                         triad::layout::three_stage,
                                         triad::kv_policy::pin,
                                         0,
                                         {},
                                         true,
                                         true},
                                    });
  // Per workload: triad-load's profiles (not code-agent: code_agent_* has its own) on the
  // code-agent hardware, in both layouts.
  const std::vector<std::string> profiles = {"chat", "web", "computer-use"};
  auto profile_id = [](std::string name) {
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
  };
  // A comparison of the layouts: `<prefix>_three_stage` and `<prefix>_monolithic`, code-agent
  // settings that `configure` gives their workload.
  auto add_both_layouts = [&](const std::string& prefix, auto configure) {
    for (auto device_layout : {triad::layout::three_stage, triad::layout::monolithic}) {
      setting st{prefix +
                     (device_layout == triad::layout::monolithic ? "_monolithic" : "_three_stage"),
                 device_layout, triad::kv_policy::pin};
      st.code_agent = true;
      configure(st);
      settings.push_back(st);
    }
  };
  if (!cpu)
    for (const auto& name : profiles)
      add_both_layouts("profile_" + profile_id(name),
                       [&](setting& st) { st.workload_profile = name; });
  // Per context length: code agents whose contexts stay in one band, in both layouts.
  if (!cpu)
    for (const auto& [band, range] : context_bands())
      add_both_layouts("context_" + band, [&](setting& st) { st.context = band; });
  // The memory-bound settings run faster in --quick (the figures are modelled seconds).
  const double bound_scale = quick && !virtual_time ? 4 * time_scale : time_scale;
  auto bound_work = make_workload(sessions, seed, bound_scale);
  // The capacity-bound comparison: llama3-70b code agents on tensor-parallel groups, no slot
  // cap (each device admits while the KV fits its tiers), modelled 20x (--quick 50x) faster than
  // real time: steps over long contexts cost real CPU (planning, messages), which a higher
  // time_scale would count as modelled time (at 400x, 8 sessions: a third of the throughput).
  const auto agent_hw = code_agent_hardware(page_tokens);
  const auto agent_hw_gaudi3 = code_agent_hardware(page_tokens, "gaudi3");
  const double agent_scale = virtual_time             ? 1.0
                             : agent_scale_option > 0 ? agent_scale_option
                             : quick                  ? 50.0
                                                      : 20.0;
  const std::size_t agent_sessions = agent_sessions_option > 0 ? agent_sessions_option
                                     : quick                   ? 24
                                                               : 64;
  auto agent_work =
      make_code_agent_workload(agent_sessions, seed, agent_scale, 10, quick ? 25 : 50);
  const std::size_t profile_sessions = profile_sessions_option > 0 ? profile_sessions_option
                                       : quick                     ? 12
                                                                   : 48;
  std::map<std::string, std::vector<session_spec>> context_work; // the sweep's, by band
  for (const auto& [band, range] : context_bands())
    context_work[band] =
        make_code_agent_workload(agent_sessions, seed + 4, agent_scale, 10, quick ? 25 : 50, range);
  std::map<std::string, std::vector<session_spec>> profile_work;
  for (const auto& name : profiles)
    profile_work[name] = make_profile_workload(name, profile_sessions, seed + 3, agent_scale);
  // The datacenter-scale run: code-agent sessions arriving uniformly at random over the minutes
  // given, on 64 devices; its figure is how much faster than real time the simulation ran.
  const auto dc_hw = datacenter_hardware(page_tokens);
  const double dc_minutes = dc_minutes_option > 0 ? dc_minutes_option : quick ? 5.0 : 60.0;
  const std::size_t dc_sessions = dc_sessions_option > 0
                                      ? dc_sessions_option
                                      : static_cast<std::size_t>(std::ceil(3 * dc_minutes));
  auto dc_work = make_code_agent_workload(dc_sessions, seed + 1, agent_scale, 10, quick ? 25 : 50);
  {
    std::mt19937_64 rng{seed + 2};
    std::uniform_real_distribution<double> at{0.0, dc_minutes * 60.0};
    std::vector<double> arrivals(dc_work.size());
    for (auto& a : arrivals)
      a = at(rng);
    std::sort(arrivals.begin(), arrivals.end());
    for (std::size_t i = 0; i < dc_work.size(); ++i)
      dc_work[i].arrival_s = arrivals[i];
  }
  auto wanted = [&](const std::string& name) {
    if (only.empty())
      return true;
    const std::string list = "," + only + ",";
    return list.find("," + name + ",") != std::string::npos;
  };
  triad::bench::report rep;
  rep.quick = quick;
  std::map<std::string, outcome> results;
  std::map<std::string, double> fleet_cost; // settings whose devices all have a price
  std::map<std::string, double> goodputs;   // tokens/s of sessions that met the SLO
  std::uint64_t errors = 0;
  for (const auto& st : settings) {
    if (!wanted(st.name))
      continue;
    const bool bound = st.decode_kv_mib != 0;
    const hardware& used = st.datacenter                  ? dc_hw
                           : !st.code_agent               ? hw
                           : st.prefill_profile == "h200" ? agent_hw
                                                          : agent_hw_gaudi3;
    // The setting's sessions, their time scale and the devices' slot cap (0: capacity-driven).
    const auto& work_of = st.datacenter                  ? dc_work
                          : !st.code_agent               ? (bound ? bound_work : work)
                          : !st.workload_profile.empty() ? profile_work[st.workload_profile]
                          : !st.context.empty()          ? context_work[st.context]
                                                         : agent_work;
    const double scale = st.code_agent ? agent_scale : bound ? bound_scale : time_scale;
    const std::uint32_t device_slots = st.code_agent ? 0 : slots;
    auto r = run(st, used, work_of, scale, device_slots, virtual_time);
    if (!r) {
      std::fprintf(stderr, "triad-bench-agentic: %s: %s\n", st.name.c_str(),
                   r.error().message.c_str());
      return 1;
    }
    errors += r->errors;
    auto tput = static_cast<double>(r->completion_tokens) / r->makespan_s;
    // Goodput: the completion tokens of the sessions that met the SLO, per modelled second.
    std::uint64_t good_tokens = 0;
    std::size_t good_sessions = 0;
    for (std::size_t i = 0; i < work_of.size(); ++i) {
      const double outside_tools = r->session_s[i] - work_of[i].tool_s;
      if (!r->session_failed[i] && r->session_tokens[i] > 0 &&
          outside_tools <= slo_ms_per_token / 1000 * static_cast<double>(r->session_tokens[i])) {
        good_tokens += r->session_tokens[i];
        ++good_sessions;
      }
    }
    const double goodput = static_cast<double>(good_tokens) / r->makespan_s;
    goodputs[st.name] = goodput;
    auto p50 = triad::bench::percentile(r->session_s, 0.5),
         p99 = triad::bench::percentile(r->session_s, 0.99);
    char peak_text[48] = "";
    if (st.code_agent)
      std::snprintf(peak_text, sizeof peak_text, "  peak KV %.1f GB", r->peak_decode_kv_gb);
    std::printf("%-30s %7.1f tokens/s  session p50 %7.2f s  p99 %7.2f s  prefilled %9llu  "
                "from store %8llu  preempted %5llu  busy prefill %.2f decode %.2f%s  "
                "modelled/wall %.1f\n",
                st.name.c_str(), tput, p50, p99, static_cast<unsigned long long>(r->prefill_tokens),
                static_cast<unsigned long long>(r->tier_tokens),
                static_cast<unsigned long long>(r->preemptions), r->prefill_busy, r->decode_busy,
                peak_text, r->makespan_s / r->wall_s);
    std::fflush(stdout);
    rep.metrics[st.name] = boost::json::object{
        {"throughput_tokens_per_s", tput},
        {"session_p50_s", p50},
        {"session_p99_s", p99},
        {"makespan_s", r->makespan_s},
        {"completion_tokens", r->completion_tokens},
        {"prefill_tokens", r->prefill_tokens},
        {"prefill_pool_busy_fraction", r->prefill_busy},
        {"decode_pool_busy_fraction", r->decode_busy},
        {"errors", r->errors},
        {"store_tokens", r->tier_tokens},
        {"preemptions", r->preemptions},
        {"refused_busy", r->refused},
        {"pin_expiries", r->pin_expiries},
        {"wall_s", r->wall_s},
        {"modelled_over_wall_seconds", r->makespan_s / r->wall_s},
        {"clock_jumps", r->clock_jumps},
    };
    if (st.code_agent)
      rep.metrics[st.name].as_object()["peak_decode_device_kv_gb"] = r->peak_decode_kv_gb;
    rep.metrics[st.name].as_object()["goodput_tokens_per_s"] = goodput;
    rep.metrics[st.name].as_object()["slo_met_sessions_fraction"] =
        static_cast<double>(good_sessions) /
        static_cast<double>(std::max<std::size_t>(1, work_of.size()));
    if (!r->tier_peak_gb.empty()) {
      boost::json::object pools;
      for (std::size_t k = 0; k < r->oi_cf.size() && k < r->tier_peak_gb.size(); ++k) {
        boost::json::object tiers;
        for (const auto& [tier, gb] : r->tier_peak_gb[k])
          tiers[tier] = gb;
        pools[r->oi_cf[k].role + " " + r->oi_cf[k].profile + " x" +
              std::to_string(r->oi_cf[k].tensor_parallel)] = std::move(tiers);
      }
      rep.metrics[st.name].as_object()["tier_peak_resident_gb"] = std::move(pools);
    }
    if (const double usd = fleet_usd(used, st.device_layout); usd > 0) {
      fleet_cost[st.name] = usd;
      rep.metrics[st.name].as_object()["fleet_usd"] = usd;
      rep.metrics[st.name].as_object()["throughput_tokens_per_s_per_million_usd"] =
          tput / (usd / 1e6);
    }
    results.emplace(st.name, std::move(*r));
  }
  auto tput = [&](const std::string& s) {
    return static_cast<double>(results[s].completion_tokens) / results[s].makespan_s;
  };
  auto p = [&](const std::string& s, double q) {
    return triad::bench::percentile(results[s].session_s, q);
  };
  // A ratio of two settings, when both ran (and the second's figure is not 0: then the ratio
  // is left out and the metrics show why).
  auto ratio = [&](const std::string& name, const std::string& a, const std::string& b,
                   auto figure) {
    if (results.count(a) != 0 && results.count(b) != 0 && figure(b) != 0)
      rep.ratios[name] = figure(a) / figure(b);
  };
  auto p50 = [&](const std::string& s) { return p(s, 0.5); };
  auto p99 = [&](const std::string& s) { return p(s, 0.99); };
  auto prefilled = [&](const std::string& s) {
    return static_cast<double>(results[s].prefill_tokens);
  };
  if (!cpu) {
    rep.metrics["memory_bound_decode_kv_mib"] = bottleneck_kv_mib;
    ratio("demote_over_discard_throughput", "memory_bound_demote", "memory_bound_discard", tput);
    ratio("pin_ttl_over_pin_session_p99", "memory_bound_pin_ttl", "memory_bound_pin_session", p99);
    ratio("three_stage_over_monolithic_throughput_capacity_bound", "code_agent_three_stage",
          "code_agent_monolithic", tput);
    ratio("monolithic_over_three_stage_session_p99_capacity_bound", "code_agent_monolithic",
          "code_agent_three_stage", p99);
    ratio("three_stage_gaudi3_over_monolithic_throughput_capacity_bound",
          "code_agent_three_stage_gaudi3", "code_agent_monolithic", tput);
    auto goodput = [&](const std::string& s) { return goodputs[s]; };
    ratio("three_stage_over_monolithic_goodput_capacity_bound", "code_agent_three_stage",
          "code_agent_monolithic", goodput);
    // At equal cost: throughput per dollar of accelerators (device_usd), which is the
    // throughput a fleet of equal price would give if throughput grew with the fleet.
    auto per_usd = [&](const std::string& s) {
      return fleet_cost.count(s) != 0 ? tput(s) / fleet_cost[s] : 0.0;
    };
    if (fleet_cost.count("code_agent_monolithic") != 0) {
      if (fleet_cost.count("code_agent_three_stage") != 0)
        ratio("three_stage_over_monolithic_throughput_per_cost_capacity_bound",
              "code_agent_three_stage", "code_agent_monolithic", per_usd);
      if (fleet_cost.count("code_agent_three_stage_gaudi3") != 0)
        ratio("three_stage_gaudi3_over_monolithic_throughput_per_cost_capacity_bound",
              "code_agent_three_stage_gaudi3", "code_agent_monolithic", per_usd);
    }
    // `<prefix>_three_stage`'s figure over `<prefix>_monolithic`'s (or, `inverse`, the other
    // way round), as ratio `name`.
    auto layouts_ratio = [&](const std::string& name, const std::string& prefix, auto figure,
                             bool inverse = false) {
      const auto three = prefix + "_three_stage", mono = prefix + "_monolithic";
      ratio(name, inverse ? mono : three, inverse ? three : mono, figure);
    };
    for (const auto& name : profiles) {
      const auto id = profile_id(name);
      layouts_ratio("three_stage_over_monolithic_throughput_" + id, "profile_" + id, tput);
      layouts_ratio("monolithic_over_three_stage_session_p99_" + id, "profile_" + id, p99, true);
      layouts_ratio("three_stage_over_monolithic_goodput_" + id, "profile_" + id, goodput);
    }
    for (const auto& [band, range] : context_bands()) {
      layouts_ratio("three_stage_over_monolithic_throughput_context_" + band, "context_" + band,
                    tput);
      layouts_ratio("three_stage_over_monolithic_goodput_context_" + band, "context_" + band,
                    goodput);
    }
    if (std::any_of(settings.begin(), settings.end(), [&](const setting& st) {
          return !st.context.empty() && results.count(st.name) != 0;
        })) {
      boost::json::object bands;
      for (const auto& [band, range] : context_bands()) {
        std::vector<double> planned;
        for (const auto& session : context_work[band])
          planned.push_back(static_cast<double>(session.planned_context()));
        bands[band] = boost::json::object{
            {"prompt_tokens", boost::json::array{range.prompt_min, range.prompt_max}},
            {"aimed_final_context_tokens", boost::json::array{range.final_min, range.final_max}},
            {"planned_final_context_tokens",
             boost::json::object{{"min", *std::min_element(planned.begin(), planned.end())},
                                 {"median", triad::bench::median(planned)},
                                 {"max", *std::max_element(planned.begin(), planned.end())}}}};
      }
      rep.metrics["contexts"] = boost::json::object{
          {"sessions", agent_sessions},
          {"bands", std::move(bands)},
          {"workloads", "code agents as code_agent_* (10-25 tool calls, --quick; else 10-50), "
                        "their contexts in one band each"},
          {"devices", "as code_agent"},
      };
    }
    if (std::any_of(settings.begin(), settings.end(), [&](const setting& st) {
          return !st.workload_profile.empty() && results.count(st.name) != 0;
        }))
      rep.metrics["profiles"] = boost::json::object{
          {"sessions", profile_sessions},
          {"workloads", "triad-load's profiles chat, web, computer-use (load/README.md), each "
                        "session one request: a user's later turn enters as a tool call lasting "
                        "the think time whose result is the user's message"},
          {"devices", "as code_agent"},
      };
    if (results.count("datacenter_three_stage") != 0) {
      const auto& dc = results["datacenter_three_stage"];
      rep.ratios["modelled_over_wall_seconds"] = dc.makespan_s / dc.wall_s;
      rep.metrics["datacenter"] = boost::json::object{
          {"sessions", dc_sessions},
          {"arrival_minutes", dc_minutes},
          {"devices", "64: 8x (2 H200 tensor-parallel) prefill + 12x (4 SN40L tensor-parallel) "
                      "decode, llama3-70b"},
          {"clock", virtual_time ? "virtual" : "real"},
      };
    }
    rep.metrics["code_agent"] = boost::json::object{
        {"sessions", agent_sessions},
        {"time_scale", agent_scale},
        {"model", agent_hw.preset},
        {"devices", "three-stage: 2x (2 H200 tensor-parallel) prefill + 2x (4 SN40L "
                    "tensor-parallel) decode (code_agent_three_stage_gaudi3: 2x (2 Gaudi 3) "
                    "prefill); monolithic: 3x (4 H200), 12 in all, each doing both (its busy "
                    "figure is decode_pool_busy_fraction)"},
        {"device_usd_assumed",
         boost::json::object{{"h200", device_usd("h200")},
                             {"gaudi3", device_usd("gaudi3")},
                             {"sn40l", device_usd("sn40l")},
                             {"basis", "purchase price per accelerator: Gaudi 3 Intel's "
                                       "Computex 2024 list (125,000 for eight), H200 and SN40L "
                                       "assumed (no published price)"}}},
        {"slots_per_device", "none (capacity-driven admission)"},
    };
  }
  rep.metrics["sessions"] = sessions;
  rep.metrics["slots_per_device"] = slots;
  rep.metrics["time_scale"] = time_scale;
  rep.metrics["clock"] = virtual_time ? "virtual" : "real";
  rep.metrics["seed"] = seed;
  rep.metrics["slo_ms_per_token"] = slo_ms_per_token;
  rep.metrics["backend"] = backend;
  rep.metrics["simulated"] =
      cpu ? "tools sleep (devices compute for real)"
          : "sim devices (roofline; llama3-8b shape, code_agent_*: llama3-70b); tools sleep";
  ratio("three_stage_over_monolithic_throughput", "three_stage_pin", "monolithic", tput);
  ratio("monolithic_over_three_stage_session_p99", "monolithic", "three_stage_pin", p99);
  ratio("discard_over_pin_session_p50", "three_stage_discard", "three_stage_pin", p50);
  ratio("discard_over_demote_session_p50", "three_stage_discard", "three_stage_demote", p50);
  ratio("discard_over_pin_prefill_tokens", "three_stage_discard", "three_stage_pin", prefilled);
  if (!html_path.empty()) {
    std::vector<triad::bench::oi_cf_panel> panels;
    for (const auto& st : settings) // in the settings' order
      if (auto it = results.find(st.name); it != results.end())
        panels.insert(panels.end(), it->second.oi_cf.begin(), it->second.oi_cf.end());
    if (auto ok = triad::bench::write_oi_cf_report(
            html_path, "triad-bench-agentic: steps on the OI/CF plane", panels);
        !ok) {
      std::fprintf(stderr, "triad-bench-agentic: %s\n", ok.error().message.c_str());
      return 1;
    }
    std::printf("OI/CF report: %s\n", html_path.c_str());
  }
  const int written = rep.finish(json_path);
  return written != 0 || errors != 0 ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-agentic", argc, argv, run);
}
