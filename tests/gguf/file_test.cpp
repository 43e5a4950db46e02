#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "gguf/convert.hpp"
#include "gguf/file.hpp"
#include "gguf/writer.hpp"
#include "tests/printers.hpp"

namespace {

// A file of every metadata kind and three tensors of different types.
triad::gguf_writer sample(std::uint32_t version = 3, std::uint32_t alignment = 32) {
  triad::gguf_writer w{version, alignment};
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_i32("some.negative", -5);
  w.set_u64("some.big", 1ull << 40);
  w.set_f32("llama.rope.freq_base", 500000.0f);
  w.set_bool("some.flag", true);
  std::vector<std::string> tokens{"<s>", "hello", "\xe4\xb8\xad"};
  w.set_strings("tokenizer.ggml.tokens", tokens);
  std::vector<std::int32_t> types{3, 1, 1};
  w.set_i32s("tokenizer.ggml.token_type", types);
  std::vector<float> scores{0.0f, -1.5f, -2.5f};
  w.set_f32s("tokenizer.ggml.scores", scores);
  std::vector<float> a(8 * 3);
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>(i) * 0.25f;
  BOOST_REQUIRE(w.add_f32("a.weight", {8, 3}, a));
  auto half = triad::quantize(triad::ggml_type::f16, a);
  BOOST_REQUIRE(half);
  BOOST_REQUIRE(w.add_tensor("b.weight", triad::ggml_type::f16, {8, 3}, *half));
  std::vector<float> c(64, 1.0f);
  auto q = triad::quantize(triad::ggml_type::q8_0, c);
  BOOST_REQUIRE(q);
  BOOST_REQUIRE(w.add_tensor("c.weight", triad::ggml_type::q8_0, {64}, *q));
  return w;
}

// Parses an image held by the test.
triad::expected<std::unique_ptr<triad::gguf_file>> parse(const std::vector<std::byte>& image) {
  return triad::gguf_file::parse(image, "test.gguf");
}

// A file in the temp directory, removed at the end of the case.
struct temp_file {
  explicit temp_file(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             (name + "-" + std::to_string(::getpid()))) {}
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

void patch_u32(std::vector<std::byte>& image, std::size_t at, std::uint32_t v) {
  std::memcpy(image.data() + at, &v, 4);
}

// Offset of the first occurrence of `text` in the image.
std::size_t find(const std::vector<std::byte>& image, std::string_view text) {
  std::string_view all{reinterpret_cast<const char*>(image.data()), image.size()};
  auto at = all.find(text);
  BOOST_REQUIRE(at != std::string_view::npos);
  return at;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_written_file_reads_back_every_value_and_tensor) {
  for (std::uint32_t version : {2u, 3u}) {
    auto image = sample(version).bytes();
    auto f = parse(image);
    BOOST_REQUIRE_MESSAGE(f, (f ? "" : f.error().to_string()));
    const auto& file = **f;
    BOOST_TEST(file.version() == version);
    BOOST_TEST(*file.string("general.architecture") == "llama");
    BOOST_TEST(*file.unsigned_integer("llama.block_count") == 2u);
    BOOST_TEST(*file.number("some.negative") == -5.0);
    BOOST_TEST(*file.unsigned_integer("some.big") == (1ull << 40));
    BOOST_TEST(*file.number("llama.rope.freq_base") == 500000.0);
    BOOST_TEST(*file.boolean("some.flag"));
    auto tokens = file.strings("tokenizer.ggml.tokens");
    BOOST_REQUIRE(tokens);
    BOOST_TEST(tokens->size() == 3u);
    BOOST_TEST((*tokens)[2] == "\xe4\xb8\xad");
    BOOST_TEST((*file.integers("tokenizer.ggml.token_type"))[0] == 3);
    BOOST_TEST((*file.numbers("tokenizer.ggml.scores"))[2] == -2.5);
    BOOST_TEST(file.keys().size() == 9u);
    BOOST_TEST(file.keys().front() == "general.architecture");
    BOOST_REQUIRE(file.tensors().size() == 3u);
    const auto* a = file.tensor("a.weight");
    BOOST_REQUIRE(a != nullptr);
    BOOST_TEST(a->dims == (std::vector<std::uint64_t>{8, 3}));
    BOOST_TEST(a->elements == 24u);
    BOOST_TEST(a->bytes.size() == 96u);
    float v;
    std::memcpy(&v, a->bytes.data() + 4 * 5, 4);
    BOOST_TEST(v == 1.25f);
    const auto* b = file.tensor("b.weight");
    BOOST_REQUIRE(b != nullptr);
    BOOST_TEST((b->type == triad::ggml_type::f16));
    std::vector<float> back(24);
    BOOST_REQUIRE(triad::dequantize(b->type, b->bytes, back));
    BOOST_TEST(back[23] == 5.75f);
    const auto* c = file.tensor("c.weight");
    BOOST_REQUIRE(c != nullptr);
    BOOST_TEST(c->bytes.size() == 68u); // two blocks of 32
    BOOST_TEST((c->bytes.data() - image.data()) % 32 == 0);
    BOOST_TEST(file.tensor("missing") == nullptr);
  }
}

BOOST_AUTO_TEST_CASE(tensor_data_follows_general_alignment) {
  auto image = sample(3, 64).bytes();
  auto f = parse(image);
  BOOST_REQUIRE(f);
  BOOST_TEST((*f)->alignment() == 64u);
  for (const auto& t : (*f)->tensors())
    BOOST_TEST((t.bytes.data() - image.data()) % 64 == 0);
}

BOOST_AUTO_TEST_CASE(getters_name_a_missing_key_and_a_wrong_type) {
  auto image = sample().bytes();
  auto f = parse(image);
  BOOST_REQUIRE(f);
  auto missing = (*f)->unsigned_integer("llama.context_length");
  BOOST_REQUIRE(!missing);
  BOOST_TEST(missing.error().code == triad::errc::not_found);
  BOOST_TEST(missing.error().message.find("llama.context_length") != std::string::npos);
  auto wrong = (*f)->string("llama.block_count");
  BOOST_REQUIRE(!wrong);
  BOOST_TEST(wrong.error().code == triad::errc::parse_error);
  BOOST_TEST(wrong.error().message.find("u32") != std::string::npos);
  auto negative = (*f)->unsigned_integer("some.negative");
  BOOST_REQUIRE(!negative);
  BOOST_TEST(negative.error().message.find("-5") != std::string::npos);
  auto array = (*f)->integers("tokenizer.ggml.tokens");
  BOOST_REQUIRE(!array);
  BOOST_TEST(array.error().message.find("array of string") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_file_that_is_not_gguf_is_refused_by_its_magic) {
  std::vector<std::byte> image(64, std::byte{'x'});
  auto f = parse(image);
  BOOST_REQUIRE(!f);
  BOOST_TEST(f.error().code == triad::errc::parse_error);
  BOOST_TEST(f.error().message.find("not a GGUF file") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(version_1_big_endian_and_future_versions_are_unsupported) {
  auto image = sample().bytes();
  for (std::uint32_t version : {1u, 0x03000000u, 4u}) {
    patch_u32(image, 4, version);
    auto f = parse(image);
    BOOST_REQUIRE(!f);
    BOOST_TEST(f.error().code == triad::errc::unsupported);
  }
  patch_u32(image, 4, 0x03000000u);
  BOOST_TEST(parse(image).error().message.find("big-endian") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(every_truncation_is_a_parse_error_naming_the_file) {
  auto image = sample().bytes();
  // The last tensor's padding is not needed to read it; every cut before its last byte is.
  auto whole = parse(image);
  BOOST_REQUIRE(whole);
  const auto& last = (*whole)->tensors().back().bytes;
  const auto last_byte = static_cast<std::size_t>(last.data() + last.size() - image.data());
  for (std::size_t cut = 0; cut < last_byte; ++cut) {
    std::vector<std::byte> part(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(cut));
    auto f = parse(part);
    BOOST_REQUIRE_MESSAGE(!f, "a file cut at " << cut << " of " << image.size() << " parsed");
    BOOST_TEST(f.error().message.find("test.gguf") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(unknown_tensor_type_is_named) {
  auto image = sample().bytes();
  // The type of "a.weight" follows its name, dimension count and two dimensions.
  auto at = find(image, "a.weight") + 8 + 4 + 16;
  patch_u32(image, at, 4); // q4_2, retired
  auto f = parse(image);
  BOOST_REQUIRE(!f);
  BOOST_TEST(f.error().code == triad::errc::unsupported);
  BOOST_TEST(f.error().message.find("'a.weight' has ggml type 4") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(misaligned_overlong_and_partial_block_tensors_are_refused) {
  {
    auto image = sample().bytes();
    auto at = find(image, "c.weight") + 8 + 4 + 8 + 4; // its offset
    std::uint64_t off;
    std::memcpy(&off, image.data() + at, 8);
    off += 4;
    std::memcpy(image.data() + at, &off, 8);
    auto f = parse(image);
    BOOST_REQUIRE(!f);
    BOOST_TEST(f.error().message.find("not a multiple of the alignment") != std::string::npos);
  }
  {
    auto image = sample().bytes();
    auto at = find(image, "c.weight") + 8 + 4 + 8 + 4;
    std::uint64_t off = 1ull << 20;
    std::memcpy(image.data() + at, &off, 8);
    auto f = parse(image);
    BOOST_REQUIRE(!f);
    BOOST_TEST(f.error().message.find("runs past the end") != std::string::npos);
  }
  {
    triad::gguf_writer w;
    std::vector<std::byte> bytes(34);
    // A q8_0 row of 33 values: the writer refuses it, so build it as 64 and patch the dim.
    std::vector<std::byte> two(68);
    BOOST_REQUIRE(w.add_tensor("q.weight", triad::ggml_type::q8_0, {64}, two));
    auto image = w.bytes();
    auto at = find(image, "q.weight") + 8 + 4;
    std::uint64_t dim = 33;
    std::memcpy(image.data() + at, &dim, 8);
    auto f = parse(image);
    BOOST_REQUIRE(!f);
    BOOST_TEST(f.error().message.find("not a multiple of its block of 32") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(duplicate_keys_and_tensor_names_are_refused) {
  triad::gguf_writer w;
  w.set_u32("x", 1);
  w.set_u32("x", 2);
  auto image = w.bytes();
  auto f = parse(image);
  BOOST_REQUIRE(!f);
  BOOST_TEST(f.error().message.find("'x' appears twice") != std::string::npos);
  triad::gguf_writer t;
  std::vector<float> v(4);
  BOOST_REQUIRE(t.add_f32("w", {4}, v));
  BOOST_REQUIRE(t.add_f32("w", {4}, v));
  auto image2 = t.bytes();
  auto f2 = parse(image2);
  BOOST_REQUIRE(!f2);
  BOOST_TEST(f2.error().message.find("'w' appears twice") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(counts_the_file_cannot_hold_are_refused_before_allocating) {
  auto image = sample().bytes();
  std::uint64_t huge = 1ull << 62;
  std::memcpy(image.data() + 16, &huge, 8); // metadata count
  auto f = parse(image);
  BOOST_REQUIRE(!f);
  BOOST_TEST(f.error().message.find("cannot fit") != std::string::npos);
  // An array claiming more strings than bytes left.
  auto image2 = sample().bytes();
  auto at = find(image2, "tokenizer.ggml.tokens") + 21 + 4 + 4; // its count
  std::memcpy(image2.data() + at, &huge, 8);
  auto f2 = parse(image2);
  BOOST_REQUIRE(!f2);
  BOOST_TEST(f2.error().message.find("tokenizer.ggml.tokens") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(arrays_of_arrays_and_bad_bools_are_refused) {
  triad::gguf_writer w;
  std::vector<std::byte> nested(12);
  std::uint32_t array = 9;
  std::memcpy(nested.data(), &array, 4);
  w.set_raw("nested", triad::gguf_type::array, nested);
  auto image = w.bytes();
  auto f = parse(image);
  BOOST_REQUIRE(!f);
  BOOST_TEST(f.error().message.find("array of arrays") != std::string::npos);
  triad::gguf_writer b;
  std::byte two{2};
  b.set_raw("flag", triad::gguf_type::boolean, std::span{&two, 1});
  auto image2 = b.bytes();
  auto f2 = parse(image2);
  BOOST_REQUIRE(!f2);
  BOOST_TEST(f2.error().message.find("bool of value 2") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(open_maps_a_file_and_names_what_it_cannot_open) {
  temp_file file{"triad-gguf-test.gguf"};
  BOOST_REQUIRE(sample().write(file.path));
  auto f = triad::gguf_file::open(file.path);
  BOOST_REQUIRE_MESSAGE(f, (f ? "" : f.error().to_string()));
  BOOST_TEST((*f)->tensors().size() == 3u);
  BOOST_TEST((*f)->file_bytes() == std::filesystem::file_size(file.path));
  auto none = triad::gguf_file::open(file.path.string() + ".missing");
  BOOST_REQUIRE(!none);
  BOOST_TEST(none.error().code == triad::errc::not_found);
  BOOST_TEST(none.error().message.find(".missing") != std::string::npos);
  auto dir = triad::gguf_file::open(std::filesystem::temp_directory_path());
  BOOST_REQUIRE(!dir);
  temp_file empty{"triad-gguf-empty.gguf"};
  { std::ofstream{empty.path}; }
  auto e = triad::gguf_file::open(empty.path);
  BOOST_REQUIRE(!e);
  BOOST_TEST(e.error().message.find("empty") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_image_written_by_another_writer_reads) {
  // The fuzz corpus's seeds were written by a separate Python script (struct.pack), not by
  // gguf_writer, so the reader is not only checked against its own writer.
  const char* source = std::getenv("TRIAD_SOURCE_DIR");
  BOOST_REQUIRE_MESSAGE(source != nullptr, "TRIAD_SOURCE_DIR is not set (ctest sets it)");
  auto f = triad::gguf_file::open(std::filesystem::path{source} /
                                  "tests/fuzz/corpus/gguf_file/valid_v2_align64.gguf");
  BOOST_REQUIRE_MESSAGE(f, (f ? "" : f.error().to_string()));
  BOOST_TEST((*f)->version() == 2u);
  BOOST_TEST((*f)->alignment() == 64u);
  BOOST_TEST(*(*f)->string("general.architecture") == "llama");
  BOOST_TEST((*(*f)->strings("tokenizer.ggml.tokens"))[2] == "<s>");
  const auto* b = (*f)->tensor("b.weight");
  BOOST_REQUIRE(b != nullptr);
  std::vector<float> y(32);
  BOOST_REQUIRE(triad::dequantize(b->type, b->bytes, y));
  BOOST_TEST((b->type == triad::ggml_type::q8_0));
  BOOST_TEST(y[3] == 1.5f); // d 0.5, value 3
  BOOST_TEST(y[31] == 15.5f);
  const auto* a = (*f)->tensor("a.weight");
  BOOST_REQUIRE(a != nullptr);
  BOOST_TEST((a->bytes.data() - b->bytes.data()) % 64 == 0);
}

BOOST_AUTO_TEST_CASE(a_tensor_whose_byte_size_overflows_is_refused) {
  auto image = sample().bytes();
  // "a.weight" is f32 [8, 3]: claim [2^40, 2^22], 2^62 values of 4 bytes.
  auto at = find(image, "a.weight") + 8 + 4;
  std::uint64_t dims[2] = {1ull << 40, 1ull << 22};
  std::memcpy(image.data() + at, dims, sizeof dims);
  auto f = parse(image);
  BOOST_REQUIRE(!f);
  BOOST_TEST(f.error().message.find("a.weight") != std::string::npos);
}
