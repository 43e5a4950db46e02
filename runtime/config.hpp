#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/defaults.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Where the node learns its machine's layout.
enum class topology_source {
  machine,   ///< hwloc discovery of this machine (threads are bound only here)
  xml,       ///< an hwloc XML file (format 2.0), for planning other machines
  synthetic, ///< an hwloc synthetic description such as "pack:2 numa:3 core:43 pu:2"
};

/// What a device does in the pipeline.
enum class device_role {
  prefill, ///< builds KV caches from prompts
  decode,  ///< generates tokens
  both,    ///< prefill and decode on one device
};

/// Which implementation runs a device's work.
enum class device_backend {
  cpu,  ///< real transformer on this machine's cores (oneDNN)
  sim,  ///< roofline model of a named accelerator (simulated)
  cuda, ///< reserved for an NVIDIA GPU backend, not built yet: a device with it is refused
};

/// Element type of the model's weights and KV cache.
enum class model_dtype {
  automatic, ///< "auto": bf16 where this CPU runs it well, else f32 (chosen at run time)
  bf16,      ///< bfloat16
  f32,       ///< IEEE single precision
};

/// `model.preset` values: presets of the real transformer model the `cpu` devices run.
/// (A `cpu` device takes no `profile`; the model comes from `[model]`.)
inline constexpr std::array<std::string_view, 2> cpu_device_profiles = {"tiny", "small"};
/// Every `model.preset` value: the cpu presets, and shapes of real models (Llama-3-8B) that only
/// `sim` devices run, for roofline timings at a realistic size (simulated).
inline constexpr std::array<std::string_view, 3> model_presets = {"tiny", "small", "llama3-8b"};
/// The built-in simulated accelerators: `profile` values a `sim` device accepts besides the
/// names of the file's `[[sim_profiles]]`, which may not reuse them.
/// A `cuda` device (not built yet) is refused at start whatever its profile.
inline constexpr std::array<std::string_view, 7> sim_device_profiles = {
    "h100", "h200", "b200", "gaudi3", "sn40l", "sn50", "xeon6_amx"};

/// Names of topology sources, roles and backends as written in the config file.
std::string_view to_string(topology_source value) noexcept;
/// Name of a device role as written in the config file.
std::string_view to_string(device_role value) noexcept;
/// Name of a device backend as written in the config file.
std::string_view to_string(device_backend value) noexcept;
/// Name of a model dtype as written in the config file ("auto", "bf16", "f32").
std::string_view to_string(model_dtype value) noexcept;

/// `[topology]`: where the topology comes from.
struct topology_config {
  topology_source source = topology_source::machine; ///< `source`: "machine", "xml", "synthetic"
  std::string xml; ///< `xml`: path of the XML file (source = "xml"); relative to the config file
  std::string synthetic; ///< `synthetic`: hwloc synthetic string (source = "synthetic")
  bool bind_threads =
      defaults::topology::bind_threads; ///< `bind_threads`: pin threads (machine only)
  bool operator==(const topology_config&) const = default;
};

/// `[scheduler]`: the per-domain CAF actor systems.
struct scheduler_config {
  /// `orchestration_domains`: NUMA domain ids hosting orchestration actors; empty = automatic.
  std::vector<unsigned> orchestration_domains;
  /// `threads_per_domain`: CAF workers per domain; 0 = the placement plan's count (one per
  /// worker cpu of the domain, one when all its cpus run driver threads).
  std::size_t threads_per_domain = defaults::scheduler::threads_per_domain;
  /// `moderate_sleep_us`: after its polls, an idle worker polls as many times again with a sleep
  /// this long between them before it blocks, in microseconds (0: it blocks at once).
  std::chrono::microseconds moderate_sleep = defaults::scheduler::moderate_sleep;
  /// `poll_attempts`: times an idle worker checks its domain's queue (with a CPU pause after
  /// each) before it sleeps; at least 1.
  std::size_t poll_attempts = defaults::scheduler::poll_attempts;
  bool operator==(const scheduler_config&) const = default;
};

/// `[tools]`: cores and queues for tool processes.
struct tools_config {
  unsigned cores = defaults::tools::cores; ///< `cores`: cores reserved for tools, at least 1
  std::vector<unsigned> domains; ///< `domains`: NUMA domain ids for tools; empty = automatic
  std::size_t queue_capacity = defaults::tools::queue_capacity; ///< `queue_capacity`, at least 1
  /// `hosted`: the built-in tools the node runs itself ("file_read", "shell", "compile",
  /// "vector_search"); empty by default, so a node runs no tool the operator did not name.
  /// Calls to any other tool go back to the client.
  std::vector<std::string> hosted;
  bool operator==(const tools_config&) const = default;
};

/// `[server]`: triad-node's HTTP endpoint.
struct server_config {
  std::string listen{defaults::server::listen}; ///< `listen`: an IPv4 or IPv6 address
  std::uint16_t port = defaults::server::port;  ///< `port`: 0..65535 (0: any free port)
  /// `api_key_env`: the environment variable holding the bearer token clients must send
  /// (`Authorization: Bearer <token>`); empty: no authentication. The token itself never sits
  /// in the config file.
  std::string api_key_env;
  /// `allow_scripts`: whether requests may carry the `triad.script` extension (forced output
  /// for benchmarks and tests); off by default, a refused script is a 400 naming this key.
  bool allow_scripts = false;
  std::size_t max_header_bytes = defaults::server::max_header_bytes;     ///< `max_header_bytes`
  std::uint32_t header_timeout_ms = defaults::server::header_timeout_ms; ///< `header_timeout_ms`
  std::uint32_t idle_timeout_ms = defaults::server::idle_timeout_ms;     ///< `idle_timeout_ms`
  std::uint32_t drain_timeout_ms = defaults::server::drain_timeout_ms;   ///< `drain_timeout_ms`
  std::size_t threads = defaults::server::threads; ///< `threads`: HTTP threads, 1..256
  bool operator==(const server_config&) const = default;
};

/// `[limits]`: admission bounds of the node.
struct limits_config {
  std::size_t max_concurrent_requests = defaults::limits::max_concurrent_requests; ///< at least 1
  std::uint64_t max_body_bytes = defaults::limits::max_body_bytes;                 ///< at least 1
  /// `queue_timeout_ms`: how long a request may wait for a device before it is answered "busy"
  /// (HTTP 503 with Retry-After) and leaves the queue; 0 = no limit.
  std::uint32_t queue_timeout_ms = defaults::limits::queue_timeout_ms;
  /// `request_timeout_ms`: how long an admitted request may take in all (queueing, compute and
  /// tools) before it ends with a timeout error (HTTP 504); 0 = no limit.
  std::uint32_t request_timeout_ms = defaults::limits::request_timeout_ms;
  bool operator==(const limits_config&) const = default;
};

/// `[model]`: the transformer model the node serves.
struct model_config {
  /// `preset`: one of model_presets ("tiny", "small", "llama3-8b"); cpu devices run only
  /// cpu_device_profiles ("tiny", "small").
  std::string preset{defaults::model::preset};
  /// `dtype`: "auto", "bf16" or "f32"; the default is defaults::model::dtype. "auto" is
  /// resolved per machine by the cpu backend (devices/cpu/isa.hpp); sim devices count bf16.
  model_dtype dtype = model_dtype::automatic;
  /// `page_tokens`: tokens per KV cache page, 1..4096.
  std::size_t page_tokens = defaults::model::page_tokens;
  /// `context_tokens`: the context requests are served in, at most the model's (a smaller one
  /// bounds each request's KV and compute); 0: the model's own. Prompts with their max_tokens
  /// and tool outputs are fitted to it.
  std::uint32_t context_tokens = 0;
  bool operator==(const model_config&) const = default;
};

/// One `[[sim_profiles]]` entry: a user-defined accelerator a `sim` device can name as its
/// `profile`. Figures are decimal units (1 GB/s = 1e9 bytes/s) except memory_gib (2^30 bytes).
struct sim_profile_config {
  /// `name`: required; letters, digits, '_' and '-'; unique among sim profiles and none of
  /// sim_device_profiles.
  std::string name;
  double peak_tflops = 0;           ///< `peak_tflops`: required; dense TFLOP/s, > 0
  double memory_bandwidth_gb_s = 0; ///< `memory_bandwidth_gb_s`: required; GB/s, > 0
  double memory_gib = 0;            ///< `memory_gib`: required; device memory in GiB, > 0
  /// `link_bandwidth_gb_s`: GB/s to a peer device, >= 0; 0 = none.
  double link_bandwidth_gb_s = defaults::device::sim_link_bandwidth_gb_s;
  /// `step_overhead_us`: microseconds added to every step, >= 0.
  double step_overhead_us = defaults::device::sim_step_overhead_us;
  /// `attention_tflops`: sustained TFLOP/s of attention over the KV cache, >= 0; 0 = peak.
  double attention_tflops = 0;
  /// `overlap`: whether compute and memory traffic overlap (step = the larger); false adds them.
  bool overlap = true;
  /// `source`: where the figures come from.
  std::string source{defaults::device::sim_profile_source};
  bool operator==(const sim_profile_config&) const = default;
};

/// One `[[devices]]` entry.
struct device_config {
  std::string name;                             ///< `name`: unique; letters, digits, '_' and '-'
  device_backend backend = device_backend::cpu; ///< `backend`: "cpu", "sim", "cuda"
  device_role role = device_role::both;         ///< `role`: "prefill", "decode", "both"
  /// `topology_device`: the hwloc OS device (e.g. "nvml3", "cuda0") this device is; empty = none.
  std::string topology_device;
  /// `domain`: NUMA domain for a device without a topology device; empty = automatic.
  std::optional<unsigned> domain;
  /// `profile`: backend "sim": a built-in (sim_device_profiles) or `[[sim_profiles]]` name,
  /// empty = defaults::device::sim_profile; backend "cuda": any string; backend "cpu": always
  /// empty (the model comes from `[model]`).
  std::string profile;
  /// `time_scale`: modelled seconds per real second, finite and >= 0; 0 = never wait. Only
  /// given for backend "sim".
  double time_scale = defaults::device::time_scale;
  std::uint64_t memory_mib = defaults::device::memory_mib; ///< `memory_mib`: memory budget, >= 1
  std::size_t queue_capacity = defaults::device::queue_capacity; ///< `queue_capacity`, >= 1
  /// `prefix_cache`: keep finished sequences' KV pages for later prompts with the same start.
  bool prefix_cache = defaults::device::prefix_cache;
  /// `burst_steps`: decode steps one driver job may run back to back, 1..1024 (1: none).
  std::size_t burst_steps = defaults::device::burst_steps;
  /// `burst_window_us`: driver time after which a burst's tokens go out, 0..1000000.
  std::uint32_t burst_window_us = defaults::device::burst_window_us;
  /// `compute_cores`: cores of the device's domain its compute (oneDNN, OpenMP team) runs on,
  /// 0..4096; 0 = automatic (the placement plan splits the domain's free cores among its cpu
  /// devices, see make_plan). Non-zero only for backend "cpu".
  std::size_t compute_cores = defaults::device::compute_cores;
  bool operator==(const device_config&) const = default;
};

/// Where a request's KV goes while one of its tool calls runs.
enum class kv_policy : std::uint8_t {
  discard, ///< freed; the whole conversation is prefilled again after the tool
  pin,     ///< kept on the decode device (parked) until the tool returns
  demote,  ///< copied to host memory of the orchestration domain, freed on the device, and
           ///< imported into a decode device when the tool returns
};

/// How devices are used.
enum class layout : std::uint8_t {
  three_stage, ///< prefill devices, then decode devices; tools on CPU domains, asynchronously
  monolithic,  ///< one device prefills and decodes, and its slot is held while a tool runs
};

/// Which waiting request the router serves first when a device frees up.
enum class schedule_policy : std::uint8_t {
  fcfs, ///< first come, first served
  plas, ///< least attained service first: the session that received fewer tokens so far
};

/// "discard", "pin", "demote" (and the like for the other enums).
std::string_view to_string(kv_policy p) noexcept;
/// "three_stage" or "monolithic".
std::string_view to_string(layout l) noexcept;
/// "fcfs" or "plas".
std::string_view to_string(schedule_policy p) noexcept;

/// What happens to the requests of a device whose step failed (the backend reported an error
/// or threw).
enum class device_failure_policy : std::uint8_t {
  retry, ///< each moves to another device (up to max_device_retries times), recomputing its KV
  fail,  ///< each ends with an error naming the device and the failure
};

/// "retry" or "fail".
std::string_view to_string(device_failure_policy p) noexcept;

/// What happens to a tool's output that would overflow the model's context.
enum class tool_overflow_policy : std::uint8_t {
  truncate, ///< the output is cut to fit, with a note to the model saying how much was left out
  fail,     ///< the request ends with an error naming the sizes
};

/// "truncate" or "fail".
std::string_view to_string(tool_overflow_policy p) noexcept;

/// `[orchestration]`: policies of the request actors and the router.
struct orchestration_options {
  /// `kv`: "discard", "pin" or "demote": where a request's KV stays while its tools run.
  kv_policy kv = kv_policy::pin;
  /// `layout`: "three_stage" or "monolithic".
  layout device_layout = layout::three_stage;
  /// `schedule`: "fcfs" or "plas": which waiting request gets a freed device slot.
  schedule_policy schedule = schedule_policy::fcfs;
  /// `max_waiting`: requests that may wait for devices at once, 0..1000000; beyond, refused.
  std::size_t max_waiting = defaults::orchestration::max_waiting;
  /// `retry_after_ms`: what a refusal tells the caller to wait, 1..600000 ms.
  std::chrono::milliseconds retry_after = defaults::orchestration::retry_after;
  /// `tool_deadline_ms`: how long one tool call may run, 1..86400000 ms.
  std::chrono::milliseconds tool_deadline = defaults::orchestration::tool_deadline;
  /// `device_slots`: requests one device serves at once (router slots), 0..65536; 0 = the
  /// device's own admission bound (defaults::device_actor::max_sequences).
  std::size_t device_slots = 0;
  /// `device_failure`: "retry" or "fail".
  device_failure_policy device_failure = device_failure_policy::retry;
  /// `tool_result_overflow`: "truncate" or "fail": a tool output that would overflow the
  /// model's context (with the tokens the request may still generate).
  tool_overflow_policy tool_result_overflow = tool_overflow_policy::truncate;
  /// `max_device_retries`: moves to another device per request after failures, 0..16.
  std::uint32_t max_device_retries = defaults::orchestration::max_device_retries;
  /// `busy_backoff_ms`: after a device answers busy, the router hands it one request per
  /// sequence that leaves it, and one more per backoff; a backoff with no busy answer ends
  /// that, 1..60000 ms.
  std::chrono::milliseconds busy_backoff = defaults::orchestration::busy_backoff;
  bool operator==(const orchestration_options&) const = default;
};

/// The whole node configuration, as read from a TOML file.
/// `[[mcp_servers]]`: an MCP server the node starts (in the tools' sandbox, with this profile)
/// and hosts the tools of, as "<name>__<tool>".
struct mcp_server_entry {
  std::string name; ///< `name`: 1..64 characters from A-Z, a-z, 0-9, '_' and '-'; unique
  std::vector<std::string> command;    ///< `command`: program (absolute path) and arguments
  std::vector<std::string> env;        ///< `env`: its whole environment, "KEY=value" entries
  std::vector<std::string> read_only;  ///< `read_only`: host paths it reads besides /usr
  std::vector<std::string> read_write; ///< `read_write`: host directories it may write
  bool operator==(const mcp_server_entry&) const = default;
};

struct node_config {
  topology_config topology;                     ///< `[topology]`
  scheduler_config scheduler;                   ///< `[scheduler]`
  tools_config tools;                           ///< `[tools]`
  limits_config limits;                         ///< `[limits]`
  server_config server;                         ///< `[server]` (triad-node only)
  model_config model;                           ///< `[model]`
  orchestration_options orchestration;          ///< `[orchestration]`
  std::vector<device_config> devices;           ///< `[[devices]]`
  std::vector<sim_profile_config> sim_profiles; ///< `[[sim_profiles]]`
  std::vector<mcp_server_entry> mcp_servers;    ///< `[[mcp_servers]]` (none by default)
  bool operator==(const node_config&) const = default;
};

/// Parses a node configuration from TOML text; `source_name` names it in error messages.
/// Unknown keys, wrong types and values out of range are errors naming file, line, key,
/// the value given and what is allowed. The first error in file order is returned:
/// errc::parse_error for TOML syntax, errc::invalid_argument for the schema. Never throws.
expected<node_config> parse_config(std::string_view toml_text, std::string_view source_name);

/// Reads and parses a node configuration file; a relative `topology.xml` is resolved
/// against the file's directory (made absolute). A missing file is errc::not_found, an
/// unreadable one errc::io_error, both naming the path. Never throws.
expected<node_config> load_config(const std::filesystem::path& file);

/// Renders a configuration as TOML, every field included, that parse_config reads back to
/// an equal value when the configuration is valid.
std::string to_toml(const node_config& config);

/// The embedded default: this machine's topology, the "tiny" model, one cpu prefill and one
/// cpu decode device.
node_config default_config();

/// The embedded default with threads unbound and `devices` (name, role) as zero-time sim
/// devices (time_scale 0: a step costs only its simulated logits): a node whose CPU time is
/// triad's own, for tests and overhead benchmarks.
node_config zero_time_sim_config(const std::vector<std::pair<std::string, device_role>>& devices = {
                                     {"prefill0", device_role::prefill},
                                     {"decode0", device_role::decode}});

} // namespace triad
