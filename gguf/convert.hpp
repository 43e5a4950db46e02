#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "gguf/types.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Decodes `values.size()` values of `type` from `encoded` (whole blocks) into floats, exactly as
/// ggml's reference dequantization does. Reads f32, f16, bf16, q4_0, q8_0, q4_K and q6_K; other
/// types are `errc::unsupported`, naming the type.
expected<void> dequantize(ggml_type type, std::span<const std::byte> encoded,
                          std::span<float> values);

/// Encodes `values` (a multiple of the type's block) as `type`: f32, f16 and bf16 round to
/// nearest even; q8_0 and q4_0 follow ggml's reference quantizers; q4_K and q6_K use plain
/// round-to-nearest scales (the format ggml reads, not its error-minimising search). Tests and
/// benchmarks write model files with it.
expected<std::vector<std::byte>> quantize(ggml_type type, std::span<const float> values);

} // namespace triad
