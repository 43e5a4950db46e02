#pragma once

#include <cstddef>

namespace triad::bench {

/// Round trip of two plain threads handing a value back and forth through two atomics, in
/// microseconds: the floor any cross-thread hand-off on this machine pays. Benchmarks report it
/// beside figures that depend on it (on shared VMs it moves by several times within minutes).
double thread_pingpong_us(std::size_t rounds);

} // namespace triad::bench
