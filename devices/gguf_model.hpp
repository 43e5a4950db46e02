#pragma once

#include <filesystem>
#include <memory>

#include "devices/cpu/weights.hpp"
#include "devices/model.hpp"
#include "gguf/file.hpp"
#include "runtime/error.hpp"

namespace triad {

/// A GGUF model file opened for serving: the mapped file and the decoder shape read from it.
struct gguf_model {
  std::shared_ptr<const gguf_file> file; ///< mapped read-only; tensors are read from it
  model_shape shape;                     ///< from the metadata and the tensors' shapes
};

/// The decoder shape of the model in `file`: `general.architecture` must be llama, qwen2 or
/// qwen3 (others are `errc::unsupported`, naming it and the supported list); hyperparameters
/// from `<arch>.*` metadata, the vocabulary from token_embd.weight, biases, q/k norms, tied
/// output and rotary frequency factors from which tensors exist. Errors name the file and key.
expected<model_shape> shape_of(const gguf_file& file);

/// Checks that `file` holds every tensor `shape` needs, with the shape and a type triad reads,
/// so a bad file fails at start and not at its first request.
expected<void> check_tensors(const gguf_file& file, const model_shape& shape);

/// Opens, checks and describes a model file: `gguf_file::open`, `shape_of`, `check_tensors`.
expected<gguf_model> open_gguf_model(const std::filesystem::path& path);

/// The file's weights, a layer at a time: a matmul weight whose parts are all block types
/// (q4_0, q8_0, q4_K, q6_K) as runs of the file's mapped rows (quantized_rows, kept alive by
/// `file`); other matmul weights decoded, transposed to [in][out], fused (q|k|v, gate|up) and
/// rounded to `type`. Rows stay in the file's order (a llama file's q and k in adjacent-pair
/// rotary order: model_shape::rope_adjacent).
std::unique_ptr<weight_source> gguf_weight_source(std::shared_ptr<const gguf_file> file,
                                                  const model_shape& shape, dtype type);

} // namespace triad
