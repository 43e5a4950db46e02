#include "runtime/checksum.hpp"

#include <algorithm>
#include <cstring>

#include <immintrin.h>

#define XXH_STATIC_LINKING_ONLY // XXH3_state_t on the stack
#include <xxhash.h>
// XXH3 through the library's run-time dispatch: AVX2/AVX-512 where the CPU has them (four
// times the SSE2 default on this machine).
#include <xxh_x86dispatch.h>

namespace triad {

namespace {

// The block checksum, defined over 64-byte stripes (the last one zero-padded) read as eight
// little-endian 64-bit lanes d[0..7]. Stripe s uses the key k[i] = key0[i] + s * key_step and
// adds, per lane, lo32(d[i] ^ k[i]) * hi32(d[i] ^ k[i]) to acc[i] and d[i ^ 1] to acc[i]: the
// accumulate step of XXH3 with a key that moves per stripe. Every changed 64-bit word changes
// its partner lane's sum by a nonzero amount, and the moving key makes stripes' places count.
// The eight sums and the length finish through XXH3-64. One definition, three kernels (AVX-512,
// AVX2, portable), all giving the same value; the copy fuses into the same pass, so a checked
// copy reads each byte once.
constexpr std::size_t stripe = 64;
alignas(64) constexpr std::uint64_t key0[8] = {
    0xbe4ba423396cfeb8ull, 0x1cad21f72c81017cull, 0xdb979083e96dd4deull, 0x1f67b3b7a4a44072ull,
    0x78e5c0cc4ee679cbull, 0x2172ffcc7dd05a82ull, 0x8e2443f7744608b8ull, 0x4c263a81e69035e0ull};
constexpr std::uint64_t key_step = 0x9e3779b97f4a7c15ull;
// Copies at or above this size stream past the caches (non-temporal stores): a transfer's
// destination is read next by another party, not by this core, and skipping the
// read-for-ownership makes the fused pass as fast as memcpy.
constexpr std::size_t streaming_bytes = 64 << 10;

using sums = checksum_sums;

// Stripes [first, first + count) of `src` into `acc`, written to `dst` when it is not null.
using stripe_kernel = void (*)(std::byte* dst, const std::byte* src, std::size_t count,
                               std::uint64_t first, sums& acc, bool stream);

std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v; // x86 and every other target triad builds for is little-endian
}

void stripes_portable(std::byte* dst, const std::byte* src, std::size_t count, std::uint64_t first,
                      sums& acc, bool /*stream*/) {
  for (std::size_t s = 0; s < count; ++s) {
    const std::byte* in = src + s * stripe;
    if (dst != nullptr)
      std::memcpy(dst + s * stripe, in, stripe);
    std::uint64_t d[8];
    for (int i = 0; i < 8; ++i)
      d[i] = load_le64(in + 8 * i);
    for (int i = 0; i < 8; ++i) {
      auto x = d[i] ^ (key0[i] + (first + s) * key_step);
      acc.acc[i] += (x & 0xffffffffu) * (x >> 32) + d[i ^ 1];
    }
  }
}

__attribute__((target("avx2"))) void stripes_avx2(std::byte* dst, const std::byte* src,
                                                  std::size_t count, std::uint64_t first, sums& acc,
                                                  bool stream) {
  __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc.acc));
  __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc.acc + 4));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(key_step));
  const __m256i at = _mm256_set1_epi64x(static_cast<long long>(first * key_step));
  __m256i k0 = _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(key0)), at);
  __m256i k1 = _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(key0 + 4)), at);
  for (std::size_t s = 0; s < count; ++s) {
    const auto* in = reinterpret_cast<const __m256i*>(src + s * stripe);
    __m256i v0 = _mm256_loadu_si256(in);
    __m256i v1 = _mm256_loadu_si256(in + 1);
    if (dst != nullptr) {
      auto* out = reinterpret_cast<__m256i*>(dst + s * stripe);
      if (stream) {
        _mm256_stream_si256(out, v0);
        _mm256_stream_si256(out + 1, v1);
      } else {
        _mm256_storeu_si256(out, v0);
        _mm256_storeu_si256(out + 1, v1);
      }
    }
    __m256i x0 = _mm256_xor_si256(v0, k0);
    __m256i x1 = _mm256_xor_si256(v1, k1);
    a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(x0, _mm256_srli_epi64(x0, 32)));
    a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(x1, _mm256_srli_epi64(x1, 32)));
    a0 = _mm256_add_epi64(a0, _mm256_shuffle_epi32(v0, 0x4E)); // d[i ^ 1]
    a1 = _mm256_add_epi64(a1, _mm256_shuffle_epi32(v1, 0x4E));
    k0 = _mm256_add_epi64(k0, step);
    k1 = _mm256_add_epi64(k1, step);
  }
  if (stream)
    _mm_sfence();
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc.acc), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc.acc + 4), a1);
}

// GCC 12 warns that its own AVX-512 intrinsics' placeholder operands may be uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void stripes_avx512(std::byte* dst, const std::byte* src,
                                                       std::size_t count, std::uint64_t first,
                                                       sums& acc, bool stream) {
  __m512i a = _mm512_load_si512(acc.acc);
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(key_step));
  __m512i k = _mm512_add_epi64(_mm512_load_si512(key0),
                               _mm512_set1_epi64(static_cast<long long>(first * key_step)));
  for (std::size_t s = 0; s < count; ++s) {
    __m512i v = _mm512_loadu_si512(src + s * stripe);
    if (dst != nullptr) {
      if (stream)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + s * stripe), v);
      else
        _mm512_storeu_si512(dst + s * stripe, v);
    }
    __m512i x = _mm512_xor_si512(v, k);
    a = _mm512_add_epi64(a, _mm512_mul_epu32(x, _mm512_srli_epi64(x, 32)));
    a = _mm512_add_epi64(a, _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0x4E)));
    k = _mm512_add_epi64(k, step);
  }
  if (stream)
    _mm_sfence();
  _mm512_store_si512(acc.acc, a);
}
#pragma GCC diagnostic pop

stripe_kernel pick_kernel() noexcept {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return stripes_avx512;
  if (__builtin_cpu_supports("avx2"))
    return stripes_avx2;
  return stripes_portable;
}

const stripe_kernel kernel = pick_kernel();

// One pass over `src`: its checksum, and its bytes written to `dst` when that is not null
// (with bit `flip_bit` of the written bytes flipped when it is >= 0: the bit is flipped in
// flight, so the checksum sees what was written).
std::uint64_t checksum_pass(std::byte* dst, std::span<const std::byte> src,
                            std::int64_t flip_bit) noexcept {
  sums acc;
  const std::size_t whole = src.size() / stripe;
  const bool stream = dst != nullptr && src.size() >= streaming_bytes &&
                      reinterpret_cast<std::uintptr_t>(dst) % stripe == 0;
  // Stripes that go through a padded or flipped copy of their own: the tail, and the one with
  // the flipped bit.
  auto odd_stripe = [&](std::size_t s) {
    alignas(64) std::byte piece[stripe] = {};
    auto n = std::min(stripe, src.size() - s * stripe);
    std::memcpy(piece, src.data() + s * stripe, n);
    if (flip_bit >= 0 && static_cast<std::size_t>(flip_bit) / 8 / stripe == s)
      piece[static_cast<std::size_t>(flip_bit / 8) % stripe] ^= std::byte{1} << (flip_bit % 8);
    if (dst != nullptr)
      std::memcpy(dst + s * stripe, piece, n);
    stripes_portable(nullptr, piece, 1, s, acc, false);
  };
  std::size_t flipped = flip_bit >= 0 && static_cast<std::size_t>(flip_bit) / 8 < src.size()
                            ? static_cast<std::size_t>(flip_bit) / 8 / stripe
                            : whole + 1;
  std::size_t at = 0;
  if (flipped < whole) {
    kernel(dst, src.data(), flipped, 0, acc, stream);
    odd_stripe(flipped);
    at = flipped + 1;
  }
  if (at < whole)
    kernel(dst == nullptr ? nullptr : dst + at * stripe, src.data() + at * stripe, whole - at, at,
           acc, stream);
  if (src.size() % stripe != 0)
    odd_stripe(whole);
  return XXH3_64bits_withSeed(acc.acc, sizeof(acc.acc), src.size());
}

} // namespace

std::uint64_t block_checksum(std::span<const std::byte> bytes) noexcept {
  return checksum_pass(nullptr, bytes, -1);
}

expected<void> copy_checked(std::span<std::byte> dst, std::span<const std::byte> src,
                            std::uint64_t expected, std::int64_t flip_bit) {
  if (dst.size() != src.size())
    return make_error(errc::invalid_argument, "copy_checked: destination holds " +
                                                  std::to_string(dst.size()) + " bytes, source " +
                                                  std::to_string(src.size()));
  auto got = checksum_pass(dst.data(), src, flip_bit);
  if (got != expected)
    return make_error(errc::corrupted, "block checksum mismatch after the copy: expected " +
                                           std::to_string(expected) + ", got " +
                                           std::to_string(got));
  return {};
}

void checksum_range(std::byte* dst, std::span<const std::byte> src, std::size_t at,
                    checksum_sums& into, bool nontemporal) noexcept {
  // Whole stripes through the kernel (non-temporal stores when asked, into aligned memory); a
  // tail shorter than a stripe only at the end of a block.
  const std::size_t whole = src.size() / stripe;
  const bool stream =
      nontemporal && dst != nullptr && reinterpret_cast<std::uintptr_t>(dst) % stripe == 0;
  const std::uint64_t first = at / stripe;
  if (whole > 0)
    kernel(dst, src.data(), whole, first, into, stream);
  if (src.size() % stripe != 0) {
    alignas(64) std::byte piece[stripe] = {};
    auto n = src.size() % stripe;
    std::memcpy(piece, src.data() + whole * stripe, n);
    if (dst != nullptr)
      std::memcpy(dst + whole * stripe, piece, n);
    stripes_portable(nullptr, piece, 1, first + whole, into, false);
  }
}

void checksum_sums::add(const checksum_sums& other) noexcept {
  for (int i = 0; i < 8; ++i)
    acc[i] += other.acc[i];
}

std::uint64_t checksum_finish(const checksum_sums& sums, std::size_t size) noexcept {
  return XXH3_64bits_withSeed(sums.acc, sizeof(sums.acc), size);
}

} // namespace triad
