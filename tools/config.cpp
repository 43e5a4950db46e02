#include "tools/config.hpp"

namespace triad {

namespace {

constexpr std::string_view command_allowed =
    "an array: the program's absolute path, then its arguments";

const char* not_absolute(const std::string& v) {
  return v.empty() || v[0] != '/' ? "not an absolute path" : nullptr;
}

/// The program of an MCP server's command is an absolute path.
void check_mcp_server(options::table& t, mcp_server_entry& out) {
  if (t.state_of("command") == options::state::valid &&
      (out.command.empty() || out.command[0].empty() || out.command[0][0] != '/'))
    t.fail("command", "the program must be an absolute path", command_allowed);
}

} // namespace

const options::section<tools_config>& tools_section() {
  using c = tools_config;
  static const options::section<c> section{
      "tools",
      false,
      {
          options::integer("cores", &c::cores, {1, 4096}, "cores reserved for tool processes",
                           "tools need at least one core"),
          options::domain_ids("domains", &c::domains, "NUMA domains for tools; [] = automatic"),
          options::integer("queue_capacity", &c::queue_capacity, {1, 1'000'000},
                           "tool calls waiting per tool domain before new ones are refused"),
          options::names<c>("hosted", &c::hosted, builtin_tool_names,
                            "built-in tools the node runs itself; [] = none"),
          options::boolean("expose_to_all_requests", &c::expose_to_all_requests,
                           "hosted tools run for requests that did not declare them"),
      },
      {},
  };
  return section;
}

const options::section<mcp_server_entry>& mcp_server_section() {
  using c = mcp_server_entry;
  static const options::section<c> section{
      "mcp_servers",
      true,
      {
          options::unique_name<c>("MCP server", "MCP servers",
                                  " (every MCP server needs a name: its tools are <name>__<tool>)",
                                  {}, "not a valid name"),
          options::strings<c>("command", &c::command, std::string{command_allowed},
                              "the program to start and its arguments")
              .required(" (the program to start and its arguments)"),
          options::strings<c>(
              "env", &c::env, "an array of \"KEY=value\" strings", "its whole environment",
              [](const std::string& v) -> const char* {
                return v.find('=') == std::string::npos || v[0] == '=' ? "not KEY=value" : nullptr;
              }),
          options::strings<c>("read_only", &c::read_only, "an array of absolute host paths",
                              "host paths it reads besides /usr", not_absolute),
          options::strings<c>("read_write", &c::read_write, "an array of absolute host directories",
                              "host directories it may write", not_absolute),
      },
      check_mcp_server,
  };
  return section;
}

} // namespace triad
