#pragma once

#include <cstddef>

namespace triad {

/// Reads exactly `n` bytes from `fd` into `to`, retrying interrupted and short reads. False on
/// an error or on end of file before `n` bytes.
bool read_all(int fd, void* to, std::size_t n) noexcept;

/// Writes all `n` bytes of `from` to `fd`, retrying interrupted and short writes. False when a
/// write fails or writes nothing.
bool write_all(int fd, const void* from, std::size_t n) noexcept;

} // namespace triad
