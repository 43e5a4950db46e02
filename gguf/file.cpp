#include "gguf/file.hpp"

#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "runtime/io.hpp"

namespace triad {

namespace {

constexpr std::uint32_t gguf_magic = 0x46554747; // "GGUF" read little-endian
constexpr std::size_t max_dims = 4;              // ggml's GGML_MAX_DIMS
constexpr std::uint64_t max_array = 1u << 24;    // elements of one metadata array

// A bounds-checked reader over the image; every read names what it reads in its error.
class cursor {
public:
  cursor(std::span<const std::byte> bytes, const std::string& source)
      : bytes_(bytes)
      , source_(source) {}

  std::uint64_t position() const noexcept { return at_; }
  std::uint64_t left() const noexcept { return bytes_.size() - at_; }

  error fail(const std::string& what) const {
    return make_error(errc::parse_error,
                      "GGUF file '" + source_ + "' at byte " + std::to_string(at_) + ": " + what);
  }

  template<class T>
  expected<T> read(const std::string& what) {
    if (left() < sizeof(T))
      return fail(what + " runs past the end of the file (" + std::to_string(left()) +
                  " bytes left, " + std::to_string(sizeof(T)) + " needed)");
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }

  expected<std::string> read_string(const std::string& what) {
    auto length = read<std::uint64_t>("the length of " + what);
    if (!length)
      return length.error();
    if (*length > left())
      return fail(what + " claims " + std::to_string(*length) + " bytes but " +
                  std::to_string(left()) + " are left");
    std::string out(reinterpret_cast<const char*>(bytes_.data() + at_), *length);
    at_ += *length;
    return out;
  }

  // `n` bytes the caller checked are left; advances past them.
  const std::byte* read_span(std::uint64_t n) noexcept {
    const std::byte* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }

  void skip_to(std::uint64_t at) noexcept { at_ = at; }

private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  std::uint64_t at_ = 0;
};

// Bytes one element of a scalar type takes in the file; 0 for string and array.
std::size_t scalar_bytes(gguf_type type) noexcept {
  switch (type) {
  case gguf_type::u8:
  case gguf_type::i8:
  case gguf_type::boolean:
    return 1;
  case gguf_type::u16:
  case gguf_type::i16:
    return 2;
  case gguf_type::u32:
  case gguf_type::i32:
  case gguf_type::f32:
    return 4;
  case gguf_type::u64:
  case gguf_type::i64:
  case gguf_type::f64:
    return 8;
  case gguf_type::string:
  case gguf_type::array:
    return 0;
  }
  return 0;
}

bool known_value_type(std::uint32_t raw) noexcept {
  return raw <= static_cast<std::uint32_t>(gguf_type::f64);
}

// One integer, float or bool scalar of `type`, widened.
template<class T>
T load(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::int64_t integer_at(gguf_type type, const std::byte* p) noexcept {
  switch (type) {
  case gguf_type::u8:
  case gguf_type::boolean:
    return load<std::uint8_t>(p);
  case gguf_type::i8:
    return load<std::int8_t>(p);
  case gguf_type::u16:
    return load<std::uint16_t>(p);
  case gguf_type::i16:
    return load<std::int16_t>(p);
  case gguf_type::u32:
    return load<std::uint32_t>(p);
  case gguf_type::i32:
    return load<std::int32_t>(p);
  case gguf_type::u64:
    return static_cast<std::int64_t>(load<std::uint64_t>(p));
  case gguf_type::i64:
    return load<std::int64_t>(p);
  default:
    return 0;
  }
}

bool is_float(gguf_type type) noexcept {
  return type == gguf_type::f32 || type == gguf_type::f64;
}

double float_at(gguf_type type, const std::byte* p) noexcept {
  return type == gguf_type::f32 ? static_cast<double>(load<float>(p)) : load<double>(p);
}

expected<gguf_value> read_value(cursor& in, gguf_type type, const std::string& key) {
  gguf_value value;
  value.type = type;
  const std::string what = "the value of '" + key + "'";
  if (type == gguf_type::string) {
    auto s = in.read_string(what);
    if (!s)
      return s.error();
    value.data = std::move(*s);
    return value;
  }
  if (type == gguf_type::array) {
    auto raw_element = in.read<std::uint32_t>("the element type of " + what);
    if (!raw_element)
      return raw_element.error();
    if (!known_value_type(*raw_element))
      return in.fail(what + " is an array of unknown type " + std::to_string(*raw_element) +
                     " (allowed 0-12)");
    auto element = static_cast<gguf_type>(*raw_element);
    if (element == gguf_type::array)
      return in.fail(what + " is an array of arrays, which triad does not read");
    value.element = element;
    auto count = in.read<std::uint64_t>("the length of " + what);
    if (!count)
      return count.error();
    // Arrays are widened in memory (to int64, double, std::string): their length is bounded so
    // a file cannot make the reader use many times its own size.
    if (*count > max_array)
      return in.fail(what + " has " + std::to_string(*count) + " elements (allowed up to " +
                     std::to_string(max_array) + ")");
    if (element == gguf_type::string) {
      // Each string takes at least its 8-byte length: a count the file cannot hold is refused
      // before anything is reserved for it.
      if (*count > in.left() / 8)
        return in.fail(what + " claims " + std::to_string(*count) + " strings but only " +
                       std::to_string(in.left()) + " bytes are left");
      std::vector<std::string> out;
      out.reserve(*count);
      for (std::uint64_t i = 0; i < *count; ++i) {
        auto s = in.read_string("string " + std::to_string(i) + " of " + what);
        if (!s)
          return s.error();
        out.push_back(std::move(*s));
      }
      value.data = std::move(out);
      return value;
    }
    const std::size_t size = scalar_bytes(element);
    if (*count > in.left() / size)
      return in.fail(what + " claims " + std::to_string(*count) + " elements of " +
                     std::to_string(size) + " bytes but only " + std::to_string(in.left()) +
                     " bytes are left");
    auto raw = in.read_span(*count * size);
    if (is_float(element)) {
      std::vector<double> out(*count);
      for (std::uint64_t i = 0; i < *count; ++i)
        out[i] = float_at(element, raw + i * size);
      value.data = std::move(out);
    } else {
      std::vector<std::int64_t> out(*count);
      for (std::uint64_t i = 0; i < *count; ++i)
        out[i] = integer_at(element, raw + i * size);
      value.data = std::move(out);
    }
    return value;
  }
  const std::size_t size = scalar_bytes(type);
  if (in.left() < size)
    return in.fail(what + " runs past the end of the file");
  const std::byte* p = in.read_span(size);
  if (is_float(type))
    value.data = float_at(type, p);
  else if (type == gguf_type::boolean) {
    auto b = load<std::uint8_t>(p);
    if (b > 1)
      return in.fail(what + " is a bool of value " + std::to_string(b) + " (allowed 0 or 1)");
    value.data = b == 1;
  } else if (type == gguf_type::u64)
    value.data = load<std::uint64_t>(p);
  else
    value.data = integer_at(type, p);
  return value;
}

} // namespace

expected<std::unique_ptr<gguf_file>> gguf_file::parse(std::span<const std::byte> bytes,
                                                      std::string source) {
  std::unique_ptr<gguf_file> self{new gguf_file};
  self->source_ = std::move(source);
  self->bytes_ = bytes;
  const std::string& name = self->source_;
  cursor in{bytes, name};
  auto magic = in.read<std::uint32_t>("the magic number");
  if (!magic || *magic != gguf_magic)
    return make_error(errc::parse_error, "file '" + name +
                                             "' is not a GGUF file (it does not start with the "
                                             "bytes 'GGUF')");
  auto version = in.read<std::uint32_t>("the version");
  if (!version)
    return version.error();
  if ((*version & 0xffffu) == 0 && *version != 0)
    return make_error(errc::unsupported, "GGUF file '" + name +
                                             "' is big-endian (version field " +
                                             std::to_string(*version) +
                                             "); triad reads little-endian GGUF only");
  if (*version == 1)
    return make_error(errc::unsupported, "GGUF file '" + name +
                                             "' is version 1, which was retired in 2023; "
                                             "triad reads versions 2 and 3 (convert it again)");
  if (*version != 2 && *version != 3)
    return make_error(errc::unsupported, "GGUF file '" + name + "' has version " +
                                             std::to_string(*version) +
                                             "; triad reads versions 2 and 3");
  self->version_ = *version;
  auto tensor_count = in.read<std::uint64_t>("the tensor count");
  if (!tensor_count)
    return tensor_count.error();
  auto kv_count = in.read<std::uint64_t>("the metadata count");
  if (!kv_count)
    return kv_count.error();
  // A key-value pair takes at least 12 bytes (key length and value type), a tensor's
  // description at least 24: counts the file cannot hold are refused before any reservation.
  if (*kv_count > in.left() / 12)
    return in.fail("the metadata count " + std::to_string(*kv_count) +
                   " cannot fit in the file's remaining " + std::to_string(in.left()) + " bytes");
  for (std::uint64_t i = 0; i < *kv_count; ++i) {
    auto key = in.read_string("metadata key " + std::to_string(i));
    if (!key)
      return key.error();
    auto raw_type = in.read<std::uint32_t>("the type of '" + *key + "'");
    if (!raw_type)
      return raw_type.error();
    if (!known_value_type(*raw_type))
      return in.fail("metadata '" + *key + "' has unknown value type " +
                     std::to_string(*raw_type) + " (allowed 0-12)");
    auto value = read_value(in, static_cast<gguf_type>(*raw_type), *key);
    if (!value)
      return value.error();
    if (self->values_.contains(*key))
      return in.fail("metadata key '" + *key + "' appears twice");
    self->keys_.push_back(*key);
    self->values_.emplace(std::move(*key), std::move(*value));
  }
  if (const auto* align = self->find("general.alignment")) {
    const auto* a = std::get_if<std::int64_t>(&align->data);
    if (align->type != gguf_type::u32 || a == nullptr || *a == 0 || (*a & (*a - 1)) != 0)
      return make_error(errc::parse_error, "GGUF file '" + name +
                                               "': general.alignment must be a u32 power of "
                                               "two");
    self->alignment_ = static_cast<std::uint64_t>(*a);
  }

  if (*tensor_count > in.left() / 24)
    return in.fail("the tensor count " + std::to_string(*tensor_count) +
                   " cannot fit in the file's remaining " + std::to_string(in.left()) + " bytes");
  self->tensors_.reserve(*tensor_count);
  for (std::uint64_t i = 0; i < *tensor_count; ++i) {
    gguf_tensor t;
    auto tname = in.read_string("the name of tensor " + std::to_string(i));
    if (!tname)
      return tname.error();
    t.name = std::move(*tname);
    const std::string what = "tensor '" + t.name + "'";
    auto n_dims = in.read<std::uint32_t>("the dimension count of " + what);
    if (!n_dims)
      return n_dims.error();
    if (*n_dims == 0 || *n_dims > max_dims)
      return in.fail(what + " has " + std::to_string(*n_dims) + " dimensions (allowed 1-4)");
    t.elements = 1;
    for (std::uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = in.read<std::uint64_t>("dimension " + std::to_string(d) + " of " + what);
      if (!dim)
        return dim.error();
      if (*dim == 0 || *dim > (std::uint64_t{1} << 40) ||
          t.elements > std::numeric_limits<std::uint64_t>::max() / *dim)
        return in.fail(what + " has dimension " + std::to_string(d) + " of " +
                       std::to_string(*dim) + " (allowed 1 to 2^40, product below 2^64)");
      t.dims.push_back(*dim);
      t.elements *= *dim;
    }
    auto raw_type = in.read<std::uint32_t>("the type of " + what);
    if (!raw_type)
      return raw_type.error();
    auto traits = traits_of(*raw_type);
    if (!traits)
      return make_error(errc::unsupported,
                        "GGUF file '" + name + "': " + what + " has ggml type " +
                            std::to_string(*raw_type) +
                            ", which triad does not know (it reads f32, f16, bf16, q4_0, q4_1, "
                            "q5_0, q5_1, q8_0, q8_1 and q2_K-q8_K)");
    t.type = static_cast<ggml_type>(*raw_type);
    if (t.dims[0] % traits->block_elements != 0)
      return in.fail(what + " of type " + std::string{traits->name} + " has rows of " +
                     std::to_string(t.dims[0]) + " values, not a multiple of its block of " +
                     std::to_string(traits->block_elements));
    auto offset = in.read<std::uint64_t>("the offset of " + what);
    if (!offset)
      return offset.error();
    t.offset = *offset;
    if (self->tensor_index_.contains(t.name))
      return in.fail("tensor name '" + t.name + "' appears twice");
    self->tensor_index_.emplace(t.name, self->tensors_.size());
    self->tensors_.push_back(std::move(t));
  }
  // Tensor data starts at the next multiple of the alignment.
  const std::uint64_t a = self->alignment_;
  const std::uint64_t data_start = (in.position() + a - 1) / a * a;
  if (data_start > bytes.size() && !self->tensors_.empty())
    return in.fail("the tensor data section would start past the end of the file");
  for (auto& t : self->tensors_) {
    const auto traits = traits_of(t.type);
    const std::uint64_t blocks = t.elements / traits.block_elements;
    if (blocks > std::numeric_limits<std::uint64_t>::max() / traits.block_bytes)
      return make_error(errc::parse_error, "GGUF file '" + name + "': tensor '" + t.name +
                                               "' has more bytes than 2^64");
    const std::uint64_t size = blocks * traits.block_bytes;
    if (t.offset % a != 0)
      return make_error(errc::parse_error, "GGUF file '" + name + "': tensor '" + t.name +
                                               "' starts at offset " + std::to_string(t.offset) +
                                               ", not a multiple of the alignment " +
                                               std::to_string(a));
    if (t.offset > bytes.size() - data_start || size > bytes.size() - data_start - t.offset)
      return make_error(errc::parse_error,
                        "GGUF file '" + name + "': tensor '" + t.name + "' (" +
                            std::to_string(size) + " bytes at offset " +
                            std::to_string(t.offset) + ") runs past the end of the file (" +
                            std::to_string(bytes.size()) + " bytes; is it truncated?)");
    t.bytes = bytes.subspan(data_start + t.offset, size);
  }
  return self;
}

expected<std::shared_ptr<const gguf_file>> gguf_file::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  unique_fd fd{::open(name.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd)
    return make_error(errno == ENOENT ? errc::not_found : errc::io_error,
                      "cannot open GGUF file '" + name + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return make_error(errc::io_error,
                      "cannot stat GGUF file '" + name + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return make_error(errc::invalid_argument, "'" + name + "' is not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0)
    return make_error(errc::parse_error, "file '" + name + "' is empty, not a GGUF file");
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED)
    return make_error(errc::io_error,
                      "cannot map GGUF file '" + name + "': " + std::strerror(errno));
  std::span<const std::byte> bytes{static_cast<const std::byte*>(map), size};
  auto parsed = parse(bytes, name);
  if (!parsed) {
    ::munmap(map, size);
    return parsed.error();
  }
  (*parsed)->mapping_ = map;
  (*parsed)->mapping_bytes_ = size;
  return std::shared_ptr<const gguf_file>{std::move(*parsed)};
}

gguf_file::~gguf_file() {
  if (mapping_ != nullptr)
    ::munmap(mapping_, mapping_bytes_);
}

const gguf_value* gguf_file::find(std::string_view key) const noexcept {
  auto it = values_.find(std::string{key});
  return it == values_.end() ? nullptr : &it->second;
}

const gguf_tensor* gguf_file::tensor(std::string_view name) const noexcept {
  auto it = tensor_index_.find(std::string{name});
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

error missing(const std::string& source, std::string_view key) {
  return make_error(errc::not_found,
                    "GGUF file '" + source + "' has no metadata '" + std::string{key} + "'");
}

error wrong_type(const std::string& source, std::string_view key, const gguf_value& v,
                 std::string_view wanted) {
  std::string is{to_string(v.type)};
  if (v.type == gguf_type::array)
    is += " of " + std::string{to_string(v.element)};
  return make_error(errc::parse_error, "GGUF file '" + source + "': metadata '" +
                                           std::string{key} + "' is " + is + ", expected " +
                                           std::string{wanted});
}

} // namespace

expected<std::string_view> gguf_file::string(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* s = std::get_if<std::string>(&v->data))
    return std::string_view{*s};
  return wrong_type(source_, key, *v, "a string");
}

expected<std::uint64_t> gguf_file::unsigned_integer(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* u = std::get_if<std::uint64_t>(&v->data))
    return *u;
  if (const auto* i = std::get_if<std::int64_t>(&v->data)) {
    if (*i < 0)
      return make_error(errc::parse_error, "GGUF file '" + source_ + "': metadata '" +
                                               std::string{key} + "' is " + std::to_string(*i) +
                                               ", expected a non-negative integer");
    return static_cast<std::uint64_t>(*i);
  }
  return wrong_type(source_, key, *v, "an integer");
}

expected<double> gguf_file::number(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* d = std::get_if<double>(&v->data))
    return *d;
  if (const auto* i = std::get_if<std::int64_t>(&v->data))
    return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v->data))
    return static_cast<double>(*u);
  return wrong_type(source_, key, *v, "a number");
}

expected<bool> gguf_file::boolean(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* b = std::get_if<bool>(&v->data))
    return *b;
  return wrong_type(source_, key, *v, "a bool");
}

expected<std::span<const std::string>> gguf_file::strings(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* s = std::get_if<std::vector<std::string>>(&v->data))
    return std::span<const std::string>{*s};
  return wrong_type(source_, key, *v, "an array of strings");
}

expected<std::span<const std::int64_t>> gguf_file::integers(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* s = std::get_if<std::vector<std::int64_t>>(&v->data))
    return std::span<const std::int64_t>{*s};
  return wrong_type(source_, key, *v, "an array of integers");
}

expected<std::span<const double>> gguf_file::numbers(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr)
    return missing(source_, key);
  if (const auto* s = std::get_if<std::vector<double>>(&v->data))
    return std::span<const double>{*s};
  return wrong_type(source_, key, *v, "an array of numbers");
}

} // namespace triad
