#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "gguf/types.hpp"
#include "runtime/error.hpp"

namespace triad {

/// One metadata value of a GGUF file, widened: every integer type reads as int64 (uint64 as
/// uint64), f32 and f64 as double; arrays keep their element type in `element`.
struct gguf_value {
  gguf_type type = gguf_type::u32;    ///< the type the file stores
  gguf_type element = gguf_type::u32; ///< arrays: the elements' type
  std::variant<std::int64_t, std::uint64_t, double, bool, std::string, std::vector<std::int64_t>,
               std::vector<double>, std::vector<std::string>>
      data; ///< the value; integer and bool arrays as int64, float arrays as double
};

/// One tensor of a GGUF file: where its bytes are in the mapping and how to read them.
struct gguf_tensor {
  std::string name;                ///< e.g. "blk.0.attn_q.weight"
  ggml_type type = ggml_type::f32; ///< element encoding
  /// Dimensions, fastest first (ggml's ne): a matrix of `dims[1]` rows of `dims[0]` values.
  std::vector<std::uint64_t> dims;
  std::uint64_t offset = 0;          ///< from the start of the tensor data section
  std::span<const std::byte> bytes;  ///< the encoded values, inside the file's mapping
  std::uint64_t elements = 0;        ///< product of dims
};

/// A GGUF file (versions 2 and 3, little-endian), memory-mapped read-only and checked whole at
/// open: every string, array and tensor lies inside the file, every tensor's type is known and
/// its rows are whole blocks, offsets are aligned and no two tensors share a name. Tensor bytes
/// are never copied; they stay valid while the file object lives.
class gguf_file {
public:
  /// Maps and checks `path`. Errors name the file and the field: not_found / io_error when it
  /// cannot be read, parse_error for malformed contents, unsupported for version 1, big-endian
  /// files and unknown tensor types.
  static expected<std::shared_ptr<const gguf_file>> open(const std::filesystem::path& path);

  /// Checks and indexes `bytes` as a GGUF image (`source` names it in errors); the caller keeps
  /// `bytes` alive for the result's lifetime. What `open` does after mapping; fuzz targets call it.
  static expected<std::unique_ptr<gguf_file>> parse(std::span<const std::byte> bytes,
                                                     std::string source);

  ~gguf_file();
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  /// The path (or source name) errors use.
  const std::string& source() const noexcept { return source_; }
  /// Format version, 2 or 3.
  std::uint32_t version() const noexcept { return version_; }
  /// Alignment of tensor data (`general.alignment`, 32 when absent).
  std::uint64_t alignment() const noexcept { return alignment_; }
  /// Size of the file in bytes.
  std::uint64_t file_bytes() const noexcept { return bytes_.size(); }

  // -- metadata --

  /// The value of `key`, or null.
  const gguf_value* find(std::string_view key) const noexcept;
  /// Metadata keys in file order.
  const std::vector<std::string>& keys() const noexcept { return keys_; }
  /// A string value; errors name the key when it is missing or of another type.
  expected<std::string_view> string(std::string_view key) const;
  /// A non-negative integer of any integer type.
  expected<std::uint64_t> unsigned_integer(std::string_view key) const;
  /// A number of any integer or float type.
  expected<double> number(std::string_view key) const;
  /// A bool.
  expected<bool> boolean(std::string_view key) const;
  /// An array of strings.
  expected<std::span<const std::string>> strings(std::string_view key) const;
  /// An array of integers (or bools, as 0 and 1).
  expected<std::span<const std::int64_t>> integers(std::string_view key) const;
  /// An array of floats.
  expected<std::span<const double>> numbers(std::string_view key) const;

  // -- tensors --

  /// Tensors in file order.
  const std::vector<gguf_tensor>& tensors() const noexcept { return tensors_; }
  /// The tensor named `name`, or null.
  const gguf_tensor* tensor(std::string_view name) const noexcept;

private:
  gguf_file() = default;

  std::string source_;
  std::span<const std::byte> bytes_;
  void* mapping_ = nullptr; // owned when open() mapped it
  std::size_t mapping_bytes_ = 0;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, gguf_value> values_;
  std::vector<gguf_tensor> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

} // namespace triad
