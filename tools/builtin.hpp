#pragma once

#include <filesystem>

#include "tools/defaults.hpp"
#include "tools/registry.hpp"
#include "tools/sandbox.hpp"
#include "tools/vector_index.hpp"

namespace triad {

/// The sandbox limits compile uses by default: the defaults, with room for clang's address
/// space.
inline sandbox_limits compile_limits() {
  sandbox_limits l;
  l.address_space_bytes = defaults::builtin_tools::compile_address_space_bytes;
  return l;
}

/// `file_read`: reads a file inside `root` (openat2 with RESOLVE_BENEATH, so "..", absolute
/// paths and symlinks leading out are refused by the kernel), optionally a line range, up to a
/// size cap. Only regular files: it opens without blocking (O_NONBLOCK) and refuses FIFOs,
/// sockets, devices and directories, so no call can hold a tool worker.
expected<void> add_file_read_tool(tool_registry& registry, const std::filesystem::path& root);

/// The host paths `shell` sees, read-only: a minimal /usr, its programs and libraries
/// (/usr/bin, /usr/lib, /usr/lib64 where it exists); not /usr/local, /usr/share, /usr/include,
/// /usr/src or /usr/sbin.
std::vector<std::string> shell_read_only();

/// The host paths `compile` sees, read-only: shell's and the toolchain's headers and parts
/// (/usr/include, /usr/libexec where it exists).
std::vector<std::string> compile_read_only();

/// `shell`: runs a bash command in the sealed sandbox (run_sandboxed: no host path but
/// shell_read_only(), read-only; network off; a fresh size-capped /work; limits as given).
expected<void> add_shell_tool(tool_registry& registry, sandbox_limits limits = {});

/// `compile`: clang on a C or C++ source, syntax-only or to an object, flags from an allowlist,
/// in the sealed sandbox (compile_read_only(); the source in its /work); diagnostics come back
/// structured (file,
/// line, column, severity, message), and in object mode the object's size.
expected<void> add_compile_tool(tool_registry& registry, sandbox_limits limits = compile_limits());

/// `vector_search`: the k chunks of the indexed corpus nearest to a query, with scores and
/// source locations (file, line range).
expected<void> add_vector_search_tool(tool_registry& registry,
                                      std::shared_ptr<const vector_index> index);

/// Registers the built-in tools named in `hosted` (`[tools].hosted`) and no other: file_read
/// jailed to `root`; shell and compile in the sealed sandbox (nothing of `root` visible);
/// vector_search over the text files under `root` (indexed at start, the index kept in
/// `root`/.index). An unknown name, or a tool that cannot be set up (vector_search over a root
/// with no text), is an error naming it.
expected<void> add_hosted_tools(tool_registry& registry, const std::vector<std::string>& hosted,
                                const std::filesystem::path& root);

} // namespace triad
