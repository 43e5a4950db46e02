#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace triad::detail {

/// Converts floats to bfloat16 bits (round to nearest even); parallel for large inputs.
void to_bf16(const float* src, std::uint16_t* dst, std::size_t n) noexcept;

/// One bfloat16 value as float.
inline float from_bf16(std::uint16_t x) noexcept {
  std::uint32_t bits = static_cast<std::uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

/// out[r] = x[r] / rms(x[r]) * w, for `rows` rows of `width` (rows in parallel).
void rmsnorm(const float* x, const float* w, float* out, std::size_t rows, std::size_t width,
             float eps) noexcept;

/// rmsnorm on the calling thread alone, for callers already inside a parallel region.
void rmsnorm_serial(const float* x, const float* w, float* out, std::size_t rows,
                    std::size_t width, float eps) noexcept;

/// out[r][i] = silu(gate_up[r][i]) * gate_up[r][ffn + i] (rows in parallel).
void silu_mul(const float* gate_up, float* out, std::size_t rows, std::size_t ffn) noexcept;

/// x[i] += y[i] (in parallel).
void add_inplace(float* x, const float* y, std::size_t n) noexcept;

/// Rotary embedding tables: cos and sin of pos * theta^(-2i/d), [pos][head_dim/2].
struct rope_table {
  /// Tables for positions 0..max_positions-1; frequency i is theta^(-2i/head_dim) divided by
  /// `factors[i]` where given (empty: no scaling).
  rope_table(std::size_t max_positions, std::size_t head_dim, double theta,
             std::span<const float> factors = {}, bool adjacent = false);
  /// Rotates one head vector in place: frequency i turns dimensions (i, i + head_dim/2)
  /// ("rotate half"), or (2i, 2i + 1) when `adjacent`.
  void apply(float* vec, std::size_t pos) const noexcept;

  std::size_t half;       ///< head_dim / 2
  bool adjacent;          ///< pairs of adjacent dimensions
  std::vector<float> cos; ///< [pos][half]
  std::vector<float> sin; ///< [pos][half]
};

/// Where one sequence's K and V of one (layer, kv head) live: page p's runs start at
/// base + pages[p] * page_bytes + k_offset (or v_offset). A K run is stored transposed,
/// [head_dim][page_tokens], so scores of a page's positions are one vector per dimension; a V
/// run is [page_tokens][head_dim].
struct kv_runs {
  const std::byte* base;      ///< page 0
  const std::uint32_t* pages; ///< page ids in sequence order
  std::size_t page_bytes;     ///< bytes per page
  std::size_t k_offset;       ///< offset of the K run inside a page
  std::size_t v_offset;       ///< offset of the V run inside a page
  std::size_t page_tokens;    ///< rows per run
  bool bf16;                  ///< rows stored as bf16 (else f32)
};

/// Causal attention of one token over positions 0..n-1 for a group of `group` query heads that
/// share one KV head: q and out are [group][head_dim]; scratch holds group * n floats.
void attend(const float* q, std::size_t group, std::size_t head_dim, std::size_t n,
            const kv_runs& kv, float scale, float* out, float* scratch) noexcept;

/// Stores `n` floats as f32 or bf16 at `dst`.
void store(const float* src, void* dst, std::size_t n, bool dst_bf16) noexcept;

/// Stores a K row of `n` floats as column `slot` of a transposed run of `page_tokens` columns.
void store_column(const float* src, void* run, std::size_t slot, std::size_t page_tokens,
                  std::size_t n, bool dst_bf16) noexcept;

} // namespace triad::detail
