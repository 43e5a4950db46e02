#pragma once

namespace triad::detail {

/// The git commit the node was built from (12 hex digits, or "unknown"), for triad_build_info;
/// defined in a source file generated at build time (cmake/commit_stamp.cmake), so it is the
/// commit of the build, not of the last configure.
const char* build_commit() noexcept;

} // namespace triad::detail
