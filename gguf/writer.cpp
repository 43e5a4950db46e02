#include "gguf/writer.hpp"

#include <cstring>
#include <fstream>

namespace triad {

namespace {

// Appends `n` bytes (resize and copy: g++ 12 misreads vector::insert here as an overflow).
void append(std::vector<std::byte>& out, const void* from, std::size_t n) {
  if (n == 0)
    return;
  const auto at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, from, n);
}

template<class T>
void put(std::vector<std::byte>& out, T value) {
  append(out, &value, sizeof(T));
}

void put_string(std::vector<std::byte>& out, std::string_view s) {
  put<std::uint64_t>(out, s.size());
  append(out, s.data(), s.size());
}

} // namespace

std::uint64_t tensor_bytes(ggml_type type, std::uint64_t elements) noexcept {
  auto t = traits_of(type);
  return elements / t.block_elements * t.block_bytes;
}

gguf_writer::gguf_writer(std::uint32_t version, std::uint32_t alignment)
    : version_(version)
    , alignment_(alignment) {
  if (alignment_ != 32)
    set_u32("general.alignment", alignment_);
}

void gguf_writer::set_raw(std::string_view key, gguf_type type,
                          std::span<const std::byte> encoded) {
  put_string(metadata_, key);
  put<std::uint32_t>(metadata_, static_cast<std::uint32_t>(type));
  append(metadata_, encoded.data(), encoded.size());
  ++kv_count_;
}

void gguf_writer::set_u32(std::string_view key, std::uint32_t value) {
  set_raw(key, gguf_type::u32, std::as_bytes(std::span{&value, 1}));
}

void gguf_writer::set_i32(std::string_view key, std::int32_t value) {
  set_raw(key, gguf_type::i32, std::as_bytes(std::span{&value, 1}));
}

void gguf_writer::set_u64(std::string_view key, std::uint64_t value) {
  set_raw(key, gguf_type::u64, std::as_bytes(std::span{&value, 1}));
}

void gguf_writer::set_f32(std::string_view key, float value) {
  set_raw(key, gguf_type::f32, std::as_bytes(std::span{&value, 1}));
}

void gguf_writer::set_bool(std::string_view key, bool value) {
  std::uint8_t b = value ? 1 : 0;
  set_raw(key, gguf_type::boolean, std::as_bytes(std::span{&b, 1}));
}

void gguf_writer::set_string(std::string_view key, std::string_view value) {
  std::vector<std::byte> v;
  put_string(v, value);
  set_raw(key, gguf_type::string, v);
}

void gguf_writer::set_strings(std::string_view key, std::span<const std::string> values) {
  std::vector<std::byte> v;
  put<std::uint32_t>(v, static_cast<std::uint32_t>(gguf_type::string));
  put<std::uint64_t>(v, values.size());
  for (const auto& s : values)
    put_string(v, s);
  set_raw(key, gguf_type::array, v);
}

void gguf_writer::set_i32s(std::string_view key, std::span<const std::int32_t> values) {
  std::vector<std::byte> v;
  put<std::uint32_t>(v, static_cast<std::uint32_t>(gguf_type::i32));
  put<std::uint64_t>(v, values.size());
  for (auto x : values)
    put(v, x);
  set_raw(key, gguf_type::array, v);
}

void gguf_writer::set_f32s(std::string_view key, std::span<const float> values) {
  std::vector<std::byte> v;
  put<std::uint32_t>(v, static_cast<std::uint32_t>(gguf_type::f32));
  put<std::uint64_t>(v, values.size());
  for (auto x : values)
    put(v, x);
  set_raw(key, gguf_type::array, v);
}

expected<void> gguf_writer::add_tensor(std::string_view name, ggml_type type,
                                       std::vector<std::uint64_t> dims,
                                       std::vector<std::byte> bytes) {
  std::uint64_t elements = 1;
  for (auto d : dims)
    elements *= d;
  const auto t = traits_of(type);
  if (dims.empty() || dims[0] % t.block_elements != 0)
    return make_error(errc::invalid_argument, "gguf writer: tensor '" + std::string{name} +
                                                  "' needs rows of whole " +
                                                  std::string{t.name} + " blocks");
  if (bytes.size() != tensor_bytes(type, elements))
    return make_error(errc::invalid_argument,
                      "gguf writer: tensor '" + std::string{name} + "' has " +
                          std::to_string(bytes.size()) + " bytes, its shape needs " +
                          std::to_string(tensor_bytes(type, elements)));
  tensors_.push_back({std::string{name}, type, std::move(dims), std::move(bytes)});
  return {};
}

expected<void> gguf_writer::add_f32(std::string_view name, std::vector<std::uint64_t> dims,
                                    std::span<const float> values) {
  auto b = std::as_bytes(values);
  return add_tensor(name, ggml_type::f32, std::move(dims), {b.begin(), b.end()});
}

std::vector<std::byte> gguf_writer::bytes() const {
  std::vector<std::byte> out;
  put<std::uint32_t>(out, 0x46554747);
  put<std::uint32_t>(out, version_);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, kv_count_);
  append(out, metadata_.data(), metadata_.size());
  auto align = [&](std::uint64_t n) { return (n + alignment_ - 1) / alignment_ * alignment_; };
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims)
      put<std::uint64_t>(out, d);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
    put<std::uint64_t>(out, offset);
    offset = align(offset + t.bytes.size());
  }
  out.resize(align(out.size()));
  for (const auto& t : tensors_) {
    append(out, t.bytes.data(), t.bytes.size());
    out.resize(align(out.size()));
  }
  return out;
}

expected<void> gguf_writer::write(const std::filesystem::path& path) const {
  auto image = bytes();
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  out.close();
  if (!out)
    return make_error(errc::io_error, "gguf writer: cannot write '" + path.string() + "'");
  return {};
}

} // namespace triad
