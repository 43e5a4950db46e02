#pragma once

#include <string_view>

namespace triad {

/// The body of a binary's main().
using main_body = int (*)(int argc, char** argv);

/// Runs `body` and catches whatever it throws, so no exception ends a binary with an abort: the
/// exception is printed as one line, "<program>: fatal: <what it was>", and the exit code is 1.
/// Every triad binary's main() is `return triad::guarded_main("<program>", argc, argv, run);`.
int guarded_main(std::string_view program, int argc, char** argv, main_body body) noexcept;

} // namespace triad
