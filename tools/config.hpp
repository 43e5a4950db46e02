#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/options.hpp"
#include "tools/defaults.hpp"

/// The tools' config sections: `[tools]` and `[[mcp_servers]]`.
namespace triad {

/// The built-in tools a node can host (`[tools].hosted`).
inline constexpr std::array<std::string_view, 4> builtin_tool_names = {"file_read", "shell",
                                                                       "compile", "vector_search"};

/// `[tools]`: cores and queues for tool processes.
struct tools_config {
  unsigned cores = defaults::tools::cores; ///< `cores`: cores reserved for tools, at least 1
  std::vector<unsigned> domains; ///< `domains`: NUMA domain ids for tools; empty = automatic
  std::size_t queue_capacity = defaults::tools::queue_capacity; ///< `queue_capacity`, at least 1
  /// `hosted`: the built-in tools the node runs itself (builtin_tool_names); empty by default,
  /// so a node runs no tool the operator did not name. Calls to any other tool go back to the
  /// client.
  std::vector<std::string> hosted;
  /// `expose_to_all_requests`: every HTTP request may call every hosted tool (built-in or MCP),
  /// even one it did not declare in its `tools`. Off by default: a hosted tool runs only for a
  /// request that declared it; a call to an undeclared one goes back to the client. (Requests
  /// of the embedded API, made by the program that configured the node, declare what they
  /// want in chat_request::declared_tools; left unset, they may call every hosted tool.)
  bool expose_to_all_requests = false;
  bool operator==(const tools_config&) const = default;
};

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

/// The `[tools]` section's keys.
const options::section<tools_config>& tools_section();
/// The `[[mcp_servers]]` section's keys.
const options::section<mcp_server_entry>& mcp_server_section();

} // namespace triad
