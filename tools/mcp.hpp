#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "tools/defaults.hpp"
#include "tools/registry.hpp"
#include "tools/sandbox.hpp"

namespace triad {

/// The sandbox limits of an MCP server: a long-lived process, so no per-process CPU or
/// address-space rlimit (a runtime such as node reserves gigabytes it never touches); the
/// cgroup caps its memory and processes as a tool call's.
inline sandbox_limits mcp_limits() {
  sandbox_limits l;
  l.cpu_seconds = static_cast<unsigned>(-1);
  l.address_space_bytes = ~0ull;
  l.open_files = 1024;
  return l;
}

/// An external MCP server started as a child process speaking JSON-RPC 2.0 over stdio, in the
/// sealed sandbox (sandbox_process) with its own profile: what it may read and write of the
/// host besides /usr.
struct mcp_server_config {
  std::string name;              ///< prefix of its tools in the registry: "<name>__<tool>"
  std::vector<std::string> argv; ///< program (absolute path inside the sandbox) and arguments
  std::vector<std::string> env;  ///< its environment
  std::chrono::milliseconds start_timeout = defaults::mcp::start_timeout; ///< initialize
  std::chrono::milliseconds call_timeout = defaults::mcp::call_timeout;   ///< per request
  /// Host paths it reads besides /usr (its install directory), bound read-only.
  std::vector<std::string> read_only;
  /// Host directories it may write (the workspace it serves), bound writable.
  std::vector<std::string> read_write;
  sandbox_limits limits = mcp_limits(); ///< its cgroup and rlimits
};

/// A client of one MCP server: starts it, initializes, lists and calls tools with timeouts. A
/// server that exits or hangs fails the call in flight with a clear error and is restarted on a
/// later call, with exponential backoff. Thread-safe (one request at a time).
class mcp_client {
public:
  /// Starts the server in its sandbox and runs the `initialize` handshake; an error when it
  /// cannot be sealed, started or initialized.
  static expected<std::shared_ptr<mcp_client>> start(mcp_server_config config);
  /// Kills the server's sandbox and reaps it.
  ~mcp_client();

  /// `tools/list`, as registry specs (names not yet prefixed).
  expected<std::vector<tool_spec>> list_tools();
  /// `tools/call`; the text parts of the result become the content, `isError` an error.
  expected<tool_output> call(const std::string& tool, const boost::json::object& arguments);
  /// The pid of the server's sandbox (its init) while it runs, else -1 (tests use it to crash
  /// the server).
  int pid() const;
  /// The configured name.
  const std::string& name() const noexcept { return config_.name; }

private:
  explicit mcp_client(mcp_server_config config)
      : config_(std::move(config)) {}
  expected<void> launch(); // spawn + initialize; caller holds mutex_
  void kill_server();      // caller holds mutex_
  expected<boost::json::object> request(const std::string& method, boost::json::object params,
                                        std::chrono::milliseconds timeout);
  expected<void> ensure_running(); // restart with backoff; caller holds mutex_

  mcp_server_config config_;
  mutable std::mutex mutex_;
  sandbox_process server_; // running while server_.pid() > 0
  int pid_ = -1;
  int to_server_ = -1;
  int from_server_ = -1;
  std::string buffer_;
  std::int64_t next_id_ = 1;
  std::chrono::milliseconds backoff_ = defaults::mcp::min_backoff;
  std::chrono::steady_clock::time_point next_restart_{};
};

/// Lists the server's tools and registers each as "<server>__<tool>" with its input schema.
expected<void> add_mcp_tools(tool_registry& registry, std::shared_ptr<mcp_client> client);

} // namespace triad
