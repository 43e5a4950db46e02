#include "tools/mcp.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "runtime/io.hpp"

namespace triad {

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

expected<std::shared_ptr<mcp_client>> mcp_client::start(mcp_server_config config) {
  if (config.argv.empty() || config.argv[0].empty() || config.argv[0][0] != '/')
    return make_error(errc::invalid_argument,
                      "mcp server '" + config.name + "': argv[0] must be an absolute path");
  std::shared_ptr<mcp_client> self{new mcp_client(std::move(config))};
  std::lock_guard guard{self->mutex_};
  if (auto ok = self->launch(); !ok)
    return ok.error();
  return self;
}

mcp_client::~mcp_client() {
  std::lock_guard guard{mutex_};
  kill_server();
}

int mcp_client::pid() const {
  std::lock_guard guard{mutex_};
  return pid_;
}

void mcp_client::kill_server() {
  // The sandbox owns the pipes: they close as it goes.
  server_ = sandbox_process{};
  to_server_ = from_server_ = -1;
  pid_ = -1;
  buffer_.clear();
}

expected<void> mcp_client::launch() {
  sandbox_request req;
  req.argv = config_.argv;
  req.env = config_.env;
  req.read_only.insert(req.read_only.end(), config_.read_only.begin(), config_.read_only.end());
  req.read_write = config_.read_write;
  req.discard_stderr = true;
  req.limits = config_.limits;
  auto started = sandbox_process::start(req);
  if (!started)
    return make_error(started.error().code,
                      "mcp server '" + config_.name + "': " + started.error().message);
  server_ = std::move(*started);
  pid_ = server_.pid();
  to_server_ = server_.stdin_fd();
  from_server_ = server_.stdout_fd();
  json::object params{{"protocolVersion", "2024-11-05"},
                      {"capabilities", json::object{}},
                      {"clientInfo", json::object{{"name", "triad"}, {"version", "0.1"}}}};
  auto init = request("initialize", std::move(params), config_.start_timeout);
  if (!init) {
    kill_server();
    return make_error(init.error().code, "mcp server '" + config_.name +
                                             "' did not initialize: " + init.error().message);
  }
  std::string note =
      json::serialize(json::object{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}) +
      "\n";
  // A server that exits right away shows at the next call; the note itself may go unread.
  [[maybe_unused]] auto sent = write_all(to_server_, note.data(), note.size());
  backoff_ = defaults::mcp::min_backoff;
  return {};
}

// Sends one request and waits for the response with its id, skipping notifications. A timeout
// or EOF kills the server (it is hung or gone) and schedules a restart.
expected<json::object> mcp_client::request(const std::string& method, json::object params,
                                           std::chrono::milliseconds timeout) {
  if (pid_ <= 0)
    return make_error(errc::stopped, "mcp server '" + config_.name + "' is not running");
  auto id = next_id_++;
  std::string line = json::serialize(json::object{
                         {"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}) +
                     "\n";
  if (!write_all(to_server_, line.data(), line.size())) {
    kill_server();
    next_restart_ = clock_type::now() + backoff_;
    return make_error(errc::io_error,
                      "mcp server '" + config_.name + "' closed its input (" + method + ")");
  }
  auto deadline = clock_type::now() + timeout;
  auto fail = [&](errc code, std::string why) {
    kill_server();
    next_restart_ = clock_type::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, defaults::mcp::max_backoff);
    return make_error(code, "mcp server '" + config_.name + "': " + why + " (" + method +
                                "); it is restarted on a later call");
  };
  for (;;) {
    for (auto nl = buffer_.find('\n'); nl != std::string::npos; nl = buffer_.find('\n')) {
      auto text = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      boost::system::error_code ec;
      auto msg = json::parse(text, ec);
      if (ec || !msg.is_object())
        continue; // not JSON-RPC: ignore the line
      const auto& obj = msg.as_object();
      const auto* got = obj.if_contains("id");
      if (got == nullptr || !got->is_int64() || got->as_int64() != id)
        continue; // a notification or a stale response
      if (const auto* err = obj.if_contains("error"))
        return make_error(errc::invalid_argument, "mcp server '" + config_.name + "' answered " +
                                                      method +
                                                      " with an error: " + json::serialize(*err));
      if (const auto* res = obj.if_contains("result"); res != nullptr && res->is_object())
        return res->as_object();
      return make_error(errc::parse_error,
                        "mcp server '" + config_.name + "': response without result to " + method);
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0)
      return fail(errc::busy, "no answer within " + std::to_string(timeout.count()) + " ms");
    pollfd p{from_server_, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready <= 0)
      continue;
    char buf[65536];
    auto r = ::read(from_server_, buf, sizeof(buf));
    if (r <= 0)
      return fail(errc::io_error, "the server exited");
    buffer_.append(buf, static_cast<std::size_t>(r));
  }
}

expected<void> mcp_client::ensure_running() {
  if (pid_ > 0)
    return {};
  auto now = clock_type::now();
  if (now < next_restart_)
    return make_error(errc::busy,
                      "mcp server '" + config_.name + "' is down; restarting in " +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             next_restart_ - now)
                                             .count()) +
                          " ms");
  if (auto ok = launch(); !ok) {
    next_restart_ = clock_type::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, defaults::mcp::max_backoff);
    return ok;
  }
  return {};
}

expected<std::vector<tool_spec>> mcp_client::list_tools() {
  std::lock_guard guard{mutex_};
  if (auto ok = ensure_running(); !ok)
    return ok.error();
  auto res = request("tools/list", {}, config_.call_timeout);
  if (!res)
    return res.error();
  std::vector<tool_spec> out;
  if (const auto* tools = res->if_contains("tools"); tools != nullptr && tools->is_array())
    for (const auto& t : tools->as_array()) {
      if (!t.is_object() || !t.as_object().contains("name"))
        continue;
      tool_spec spec;
      spec.name = std::string{t.at("name").as_string()};
      if (const auto* d = t.as_object().if_contains("description"); d != nullptr && d->is_string())
        spec.description = std::string{d->as_string()};
      if (const auto* s = t.as_object().if_contains("inputSchema"); s != nullptr && s->is_object())
        spec.parameters = s->as_object();
      else
        spec.parameters = json::object{{"type", "object"}};
      out.push_back(std::move(spec));
    }
  return out;
}

expected<tool_output> mcp_client::call(const std::string& tool, const json::object& arguments) {
  std::lock_guard guard{mutex_};
  if (auto ok = ensure_running(); !ok)
    return ok.error();
  auto res = request("tools/call", json::object{{"name", tool}, {"arguments", arguments}},
                     config_.call_timeout);
  if (!res)
    return res.error();
  std::string text;
  if (const auto* content = res->if_contains("content"); content != nullptr && content->is_array())
    for (const auto& part : content->as_array())
      if (part.is_object() && part.as_object().contains("text"))
        text += std::string{part.at("text").as_string()};
  if (const auto* err = res->if_contains("isError");
      err != nullptr && err->is_bool() && err->as_bool())
    return make_error(errc::invalid_argument,
                      "mcp tool '" + config_.name + "__" + tool + "' failed: " + text);
  return tool_output{text, *res};
}

expected<void> add_mcp_tools(tool_registry& registry, std::shared_ptr<mcp_client> client) {
  auto tools = client->list_tools();
  if (!tools)
    return tools.error();
  for (auto& spec : *tools) {
    auto remote = spec.name;
    spec.name = client->name() + "__" + remote;
    auto ok = registry.add(std::move(spec), [client, remote](const json::object& args) {
      return client->call(remote, args);
    });
    if (!ok)
      return ok;
  }
  return {};
}

} // namespace triad
