#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "devices/cpu/isa.hpp"

namespace triad::test {

/// Whether this CPU has the AVX-512 subsets (F, BW, DQ, VL) and FMA triad's AVX-512 kernels use.
inline bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("fma");
}

/// Whether this CPU has AVX2 and FMA.
inline bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/// Whether this CPU runs triad's own kernels of `isa` (none always runs).
inline bool cpu_has(vector_isa isa) {
  switch (isa) {
  case vector_isa::avx512:
    return cpu_has_avx512();
  case vector_isa::avx2:
    return cpu_has_avx2();
  case vector_isa::none:
    break;
  }
  return true;
}

/// `n` values uniform in [-1, 1), fresh each run; the seed is logged so a failure can be
/// replayed.
inline std::vector<float> random_floats(std::size_t n) {
  static std::uint64_t seed = std::random_device{}();
  BOOST_TEST_MESSAGE("random seed " << seed);
  std::mt19937_64 rng{seed++};
  std::uniform_real_distribution<float> dist{-1.0f, 1.0f};
  std::vector<float> out(n);
  for (auto& v : out)
    v = dist(rng);
  return out;
}

/// Largest |got - want| over the M x N outputs of x[M][K] x w[K][N] (row-major), relative to
/// sum_k |x||w| of each output, want computed in double. Fails the test if any element of `got`
/// past the M x N outputs differs from `guard` (a kernel wrote past its outputs).
inline double worst_matmul_error(const std::vector<float>& got, const std::vector<float>& x,
                                 const std::vector<float>& w, unsigned m, unsigned k, unsigned n,
                                 float guard) {
  for (std::size_t i = std::size_t{m} * n; i < got.size(); ++i)
    BOOST_REQUIRE_MESSAGE(got[i] == guard, "wrote past the outputs at " << i);
  double worst = 0;
  for (unsigned r = 0; r < m; ++r)
    for (unsigned j = 0; j < n; ++j) {
      double want = 0;
      double scale = 0;
      for (unsigned i = 0; i < k; ++i) {
        double term = static_cast<double>(x[std::size_t{r} * k + i]) * w[std::size_t{i} * n + j];
        want += term;
        scale += std::abs(term);
      }
      double err = std::abs(got[std::size_t{r} * n + j] - want) / std::max(scale, 1e-30);
      worst = std::max(worst, err);
    }
  return worst;
}

} // namespace triad::test
