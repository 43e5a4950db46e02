#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/types.hpp"
#include "runtime/error.hpp"

namespace triad {

/// Builds a GGUF file (version 3 unless told, little-endian): metadata in the order set, then
/// tensor descriptions and the aligned tensor data. Tests and benchmarks write their model
/// files with it; the node only reads.
class gguf_writer {
public:
  /// A writer of format `version` (2 or 3) with tensor data aligned to `alignment` bytes (a
  /// power of two; other than 32 it is also written as `general.alignment`).
  explicit gguf_writer(std::uint32_t version = 3, std::uint32_t alignment = 32);

  // -- metadata; a key set twice is written twice (readers refuse such files) --

  /// A u32 value.
  void set_u32(std::string_view key, std::uint32_t value);
  /// An i32 value.
  void set_i32(std::string_view key, std::int32_t value);
  /// A u64 value.
  void set_u64(std::string_view key, std::uint64_t value);
  /// An f32 value.
  void set_f32(std::string_view key, float value);
  /// A bool value.
  void set_bool(std::string_view key, bool value);
  /// A string value.
  void set_string(std::string_view key, std::string_view value);
  /// An array of strings.
  void set_strings(std::string_view key, std::span<const std::string> values);
  /// An array of i32.
  void set_i32s(std::string_view key, std::span<const std::int32_t> values);
  /// An array of f32.
  void set_f32s(std::string_view key, std::span<const float> values);
  /// A value of any type from its encoded bytes (tests of the reader's checks).
  void set_raw(std::string_view key, gguf_type type, std::span<const std::byte> encoded);

  // -- tensors --

  /// A tensor of `type` with `dims` (fastest first) and its encoded bytes, which must be the
  /// type's size for those dims.
  expected<void> add_tensor(std::string_view name, ggml_type type,
                            std::vector<std::uint64_t> dims, std::vector<std::byte> bytes);
  /// An f32 tensor from values.
  expected<void> add_f32(std::string_view name, std::vector<std::uint64_t> dims,
                         std::span<const float> values);

  /// The whole file image.
  std::vector<std::byte> bytes() const;
  /// Writes the image to `path` (replacing it).
  expected<void> write(const std::filesystem::path& path) const;

private:
  struct tensor_entry {
    std::string name;
    ggml_type type;
    std::vector<std::uint64_t> dims;
    std::vector<std::byte> bytes;
  };
  std::uint32_t version_;
  std::uint32_t alignment_;
  std::uint64_t kv_count_ = 0;
  std::vector<std::byte> metadata_;
  std::vector<tensor_entry> tensors_;
};

/// Bytes a tensor of `type` with `elements` values takes (elements a multiple of its block).
std::uint64_t tensor_bytes(ggml_type type, std::uint64_t elements) noexcept;

} // namespace triad
