// triad-node: the OpenAI-compatible HTTP node. Reads a TOML config (or the embedded default),
// prints where everything was placed, serves until SIGTERM or SIGINT, then drains: stops
// accepting, lets in-flight requests finish up to [server].drain_timeout_ms, exits 0.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "actors/node.hpp"
#include "devices/factory.hpp"
#include "runtime/main_guard.hpp"
#include "runtime/report.hpp"
#include "server/http_server.hpp"
#include "tools/builtin.hpp"
#include "tools/registry.hpp"

namespace {

int fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "triad-node: %s\n", message.c_str());
  return code;
}

// Exit code of a configuration the node cannot run (a bad file, a dtype this CPU lacks).
constexpr int config_error = 2;

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-node: an OpenAI-compatible triad node over HTTP"};
  std::string config_path;
  app.add_option("--config", config_path, "node configuration (TOML); default: the embedded one")
      ->check(CLI::ExistingFile);
  int port = -1;
  app.add_option("--port", port, "listen on this port instead of [server].port (0: any free)")
      ->check(CLI::Range(0, 65535));
  std::string listen;
  app.add_option("--listen", listen, "listen on this address instead of [server].listen");
  std::string tools_root;
  app.add_option("--tools-root", tools_root,
                 "directory file_read reads and vector_search indexes (shell and compile see "
                 "nothing of the host but /usr); default: a fresh directory under the temp "
                 "directory, removed at exit");
  std::vector<std::string> host_tools;
  app.add_option("--host-tools", host_tools,
                 "built-in tools to host instead of [tools].hosted (file_read, shell, compile, "
                 "vector_search); \"none\" for none")
      ->delimiter(',')
      ->check(CLI::IsMember({"file_read", "shell", "compile", "vector_search", "none"}));
  bool allow_scripts = false;
  app.add_flag("--allow-scripts", allow_scripts,
               "accept the triad.script request extension ([server].allow_scripts = true)");
  std::string model_path;
  app.add_option("--model", model_path,
                 "a GGUF model file to serve (llama, qwen2, qwen3) instead of [model].preset: its "
                 "weights, tokenizer and chat template ([model].path)")
      ->check(CLI::ExistingFile);
  std::string served_name;
  app.add_option("--served-model-name", served_name,
                 "the model name clients see; default: the file's general.name "
                 "([model].served_name)");
  std::string chat_template;
  app.add_option("--chat-template", chat_template,
                 "a Jinja chat template file to use instead of the model file's own "
                 "([model].chat_template)")
      ->check(CLI::ExistingFile);
  std::string trace_path;
  app.add_option("--trace", trace_path,
                 "write the spans of every request to this file (Chrome trace-event JSON, for "
                 "Perfetto or chrome://tracing); closed when the node stops");
  std::size_t kept_traces = triad::defaults::traces::kept_requests;
  auto* kept_option = app.add_option(
      "--kept-traces", kept_traces,
      "with --trace: requests that asked for their trace whose spans are kept in memory for GET "
      "/v1/traces/{id} (the most recent, --kept-trace-mib at most; 0: none)");
  std::size_t kept_trace_mib = triad::defaults::traces::kept_mib;
  auto* kept_mib_option =
      app.add_option("--kept-trace-mib", kept_trace_mib,
                     "with --trace: the memory those kept traces take at most, MiB (the oldest go "
                     "first past it)")
          ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  bool trace_asked = false;
  app.add_flag("--trace-asked-only", trace_asked,
               "with --trace: only requests that ask (header x-triad-trace: 1)");
  std::string role;
  app.add_option("--role", role,
                 "this node's part in a cluster instead of [cluster].role: all (one process), "
                 "front (HTTP, requests, router, tools; devices from [cluster].peers), prefill or "
                 "decode (the [[devices]] of that role, published on [cluster].listen:port)")
      ->check(CLI::IsMember({"all", "front", "prefill", "decode"}));
  int cluster_port = -1;
  app.add_option("--cluster-port", cluster_port,
                 "a device node's control port instead of [cluster].port (0: any free)")
      ->check(CLI::Range(0, 65535));
  std::vector<std::string> peers;
  app.add_option("--peers", peers,
                 "device nodes a front node joins instead of [cluster].peers (host:port, "
                 "comma-separated)")
      ->delimiter(',');
  std::string cluster_name;
  app.add_option("--node-name", cluster_name,
                 "this node's name in its peers' device names instead of [cluster].name");
  bool insecure = false;
  app.add_flag("--insecure", insecure,
               "serve on a non-loopback address without an API key ([server].api_key_env)");
  CLI11_PARSE(app, argc, argv);

  triad::node_config config = triad::default_config();
  if (!config_path.empty()) {
    auto loaded = triad::load_config(config_path);
    if (!loaded)
      return fail(loaded.error().message, config_error);
    config = std::move(*loaded);
  }
  if (port >= 0)
    config.server.port = static_cast<std::uint16_t>(port);
  if (!listen.empty())
    config.server.listen = listen;
  if (!host_tools.empty()) {
    std::erase(host_tools, "none");
    config.tools.hosted = host_tools;
  }
  if (allow_scripts)
    config.server.allow_scripts = true;
  if (!role.empty())
    config.cluster.role = role == "front"     ? triad::node_role::front
                          : role == "prefill" ? triad::node_role::prefill
                          : role == "decode"  ? triad::node_role::decode
                                              : triad::node_role::all;
  if (cluster_port >= 0)
    config.cluster.port = static_cast<std::uint16_t>(cluster_port);
  if (!peers.empty())
    config.cluster.peers = peers;
  if (!cluster_name.empty())
    config.cluster.name = cluster_name;
  if (!model_path.empty())
    config.model.path = model_path;
  if (!served_name.empty())
    config.model.served_name = served_name;
  if (!chat_template.empty())
    config.model.chat_template = chat_template;

  // A model file that cannot be served (architecture, tensors, tokenizer, chat template) is a
  // configuration error, reported before anything starts.
  auto model = triad::open_model(config.model);
  if (!model)
    return fail(model.error().message, config_error);
  if (auto format = triad::make_chat_format(*model, config.model.chat_template); !format)
    return fail(format.error().message, config_error);
  if (model->from_file())
    std::printf("triad-node: model %s (%s, %.1fM parameters, %u layers, vocabulary %u, context "
                "%u) from %s, %.1f MiB\n",
                model->served_name.c_str(), std::string{triad::to_string(model->shape.arch)}.c_str(),
                static_cast<double>(model->shape.parameters()) / 1e6, model->shape.layers,
                model->shape.vocab, model->shape.max_context, config.model.path.c_str(),
                static_cast<double>(model->file->file_bytes()) / (1 << 20));

  if (auto ok = triad::check_backends(config); !ok)
    return fail(ok.error().message, config_error);

  std::string api_key;
  if (!config.server.api_key_env.empty()) {
    const char* key = std::getenv(config.server.api_key_env.c_str());
    if (key == nullptr || *key == '\0')
      return fail("[server].api_key_env names " + config.server.api_key_env +
                  ", which is not set or empty; set it to the bearer token clients must send");
    api_key = key;
  }
  if (api_key.empty() && !triad::is_loopback(config.server.listen) && !insecure)
    return fail("[server].listen = \"" + config.server.listen +
                    "\" is reachable from other machines and no API key is set: set "
                    "[server].api_key_env to a variable holding the bearer token clients must "
                    "send, listen on 127.0.0.1 or ::1, or pass --insecure to serve anyone",
                config_error);

  const bool device_node = config.cluster.role == triad::node_role::prefill ||
                           config.cluster.role == triad::node_role::decode;
  if (device_node && !config.cluster.tls && !triad::is_loopback(config.cluster.listen) && !insecure)
    return fail("[cluster].listen = \"" + config.cluster.listen +
                    "\" is reachable from other machines and [cluster].tls is off: set tls = true "
                    "with certificate, key and cafile, listen on 127.0.0.1, or pass --insecure",
                config_error);

  // The tools the node hosts: calls to them run here; calls to others go back to the client.
  // Their directory (file_read's root, vector_search's index) is made only when one is hosted.
  std::error_code ec;
  const bool made_root = tools_root.empty() && !config.tools.hosted.empty();
  std::filesystem::path root = made_root ? std::filesystem::temp_directory_path(ec) /
                                               ("triad-node-" + std::to_string(::getpid()))
                                         : std::filesystem::path{tools_root};
  if (!root.empty())
    std::filesystem::create_directories(root, ec);
  if (ec)
    return fail("cannot create the tools directory " + root.string() + ": " + ec.message());

  // Signals are taken by sigwait in this thread only: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  triad::node_options options;
  options.tools_root = root;
  options.trace_file = trace_path;
  options.trace_all_requests = !trace_asked;
  if (trace_asked && trace_path.empty())
    return fail("--trace-asked-only needs --trace FILE", config_error);
  if (kept_option->count() > 0 && trace_path.empty())
    return fail("--kept-traces needs --trace FILE", config_error);
  options.kept_request_traces = kept_traces;
  if (kept_mib_option->count() > 0 && trace_path.empty())
    return fail("--kept-trace-mib needs --trace FILE", config_error);
  options.kept_trace_mib = kept_trace_mib;
  auto started = triad::node::start(config, options);
  if (!started)
    return fail("the node did not start: " + started.error().message);
  auto& node = **started;
  std::printf("%s", triad::describe(node.placement()).c_str());
  std::printf("triad-node: cpu: %s\n", triad::detect_cpu().describe().c_str());
  if (const auto& sb = node.sandbox_report()) {
    std::string applied;
    for (const auto& i : sb->isolation)
      applied += (applied.empty() ? "" : ", ") + i;
    std::printf("triad-node: tool sandbox: %s\n", applied.c_str());
    for (const auto& w : sb->warnings)
      std::printf("triad-node: WARNING: tool sandbox: %s\n", w.c_str());
  }
  for (const auto& d : node.device_reports()) {
    if (!d.failure.empty())
      std::printf("triad-node: device %s: FAILED, answers every request with: %s\n", d.name.c_str(),
                  d.failure.c_str());
    else if (d.backend == "cpu")
      std::printf("triad-node: device %s: cpu, dtype %s, path %s, %zu compute thread%s, weights "
                  "%.1f MiB, kernel %s\n",
                  d.name.c_str(), d.dtype.c_str(), d.path.c_str(), d.team, d.team == 1 ? "" : "s",
                  static_cast<double>(d.weight_bytes) / (1 << 20), d.kernel.c_str());
    else
      std::printf("triad-node: device %s: %s, kernel %s\n", d.name.c_str(), d.backend.c_str(),
                  d.kernel.c_str());
  }

  if (const auto* cp = node.cluster()) {
    if (device_node) {
      std::printf("triad-node: cluster: %s node %s, devices published on %s:%u (%s)\n",
                  std::string{triad::to_string(config.cluster.role)}.c_str(),
                  cp->node_name().c_str(), config.cluster.listen.c_str(), node.cluster_port(),
                  config.cluster.tls ? "TLS" : "plain TCP");
    } else
      std::printf("triad-node: cluster: %s node, joining %zu peer%s (%s)\n",
                  std::string{triad::to_string(config.cluster.role)}.c_str(),
                  config.cluster.peers.size(), config.cluster.peers.size() == 1 ? "" : "s",
                  config.cluster.tls ? "TLS" : "plain TCP");
    if (const auto kv = cp->kv_wire_address(); !kv.empty())
      std::printf("triad-node: cluster: KV wire (UCX, %s) on %s%s\n",
                  std::string{triad::to_string(config.cluster.kv_wire)}.c_str(), kv.c_str(),
                  triad::is_loopback(config.cluster.listen)
                      ? ""
                      : ", not encrypted (UCX has no TLS; kv_wire = \"off\" keeps KV in the "
                        "control messages)");
    if (const auto sharing = cp->kv_wire_sharing(); !sharing.empty())
      std::printf("triad-node: cluster: KV wire: %s\n", sharing.c_str());
  }

  triad::http_server_options http;
  http.server = config.server;
  http.limits = config.limits;
  http.model_id = node.model().served_name;
  http.api_key = api_key;
  auto server = triad::http_server::start(node, http);
  if (!server)
    return fail(server.error().message);
  std::string hosted;
  for (const auto& name : config.tools.hosted)
    hosted += (hosted.empty() ? "" : ", ") + name;
  std::string where;
  if (!hosted.empty())
    where = " in " + root.string();
  for (const auto& m : config.mcp_servers)
    hosted += (hosted.empty() ? "MCP server " : ", MCP server ") + m.name;
  if (!hosted.empty())
    where += config.tools.expose_to_all_requests ? ", run for every request"
                                                 : ", run for requests that declare them";
  std::printf("triad-node: serving model %s on http://%s:%u (hosted tools: %s%s; scripts %s)\n",
              http.model_id.c_str(), config.server.listen.c_str(), (*server)->port(),
              hosted.empty() ? "none" : hosted.c_str(), where.c_str(),
              config.server.allow_scripts ? "allowed" : "off");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  auto deadline = std::chrono::milliseconds{config.server.drain_timeout_ms};
  std::printf("triad-node: %s: draining (%zu requests in flight, up to %lld ms)\n",
              sig == SIGTERM ? "SIGTERM" : "SIGINT", (*server)->active(),
              static_cast<long long>(deadline.count()));
  std::fflush(stdout);
  auto start = std::chrono::steady_clock::now();
  (*server)->stop_accepting();
  bool drained = node.drain(deadline);
  auto left = deadline - std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start);
  drained = (*server)->wait_idle(std::max(left, std::chrono::milliseconds{100})) && drained;
  (*server)->stop();
  node.stop();
  if (made_root) // the directory it made for itself
    std::filesystem::remove_all(root, ec);
  std::printf("triad-node: stopped (%s)\n",
              drained ? "every request answered" : "drain deadline passed; the rest cancelled");
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-node", argc, argv, run);
}
