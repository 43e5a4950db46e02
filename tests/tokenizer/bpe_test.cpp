#include <cstdio>

#include <boost/test/unit_test.hpp>

#include "gguf/writer.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tests/printers.hpp"

namespace {

// Pieces of `text` under the named pre-tokenizer.
std::vector<std::string> split(std::string_view name, std::string_view text) {
  auto p = triad::pretokenizer::named(name);
  BOOST_REQUIRE_MESSAGE(p, (p ? "" : p.error().to_string()));
  std::vector<std::string_view> pieces;
  p->split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

// GPT-2's spelling of a byte string (space as U+0120 'Ġ', newline as U+010A 'Ċ').
std::string spell(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    if (b == ' ')
      out += "\xc4\xa0";
    else if (b == '\n')
      out += "\xc4\x8a";
    else
      out += static_cast<char>(b);
  }
  return out;
}

// A small byte-level vocabulary: the printable ASCII bytes, space and newline, a few merges
// and two added tokens.
triad::vocab small_vocab() {
  triad::vocab v;
  v.model = triad::tokenizer_model::gpt2;
  v.pre = "default";
  for (int b = 33; b < 127; ++b)
    v.tokens.push_back(std::string(1, static_cast<char>(b)));
  v.tokens.push_back(spell(" "));
  v.tokens.push_back(spell("\n"));
  v.merges = {"h e", "l l", "he ll", "hell o", spell(" ") + " w", "o r"};
  for (std::string m : {std::string{"he"}, std::string{"ll"}, std::string{"hell"},
                        std::string{"hello"}, spell(" ") + "w", std::string{"or"}})
    v.tokens.push_back(m);
  v.tokens.push_back("<|im_start|>");
  v.tokens.push_back("<tool_call>");
  v.kinds.assign(v.tokens.size(), triad::token_kind::normal);
  v.kinds[v.tokens.size() - 2] = triad::token_kind::control;
  v.kinds[v.tokens.size() - 1] = triad::token_kind::user_defined;
  return v;
}

std::unique_ptr<triad::model_tokenizer> small() {
  auto t = triad::make_tokenizer(small_vocab());
  BOOST_REQUIRE_MESSAGE(t, (t ? "" : t.error().to_string()));
  return std::move(*t);
}

triad::token id_of(const triad::model_tokenizer& t, std::string_view spelling) {
  const auto& tokens = t.vocabulary().tokens;
  auto it = std::find(tokens.begin(), tokens.end(), spelling);
  BOOST_REQUIRE(it != tokens.end());
  return static_cast<triad::token>(it - tokens.begin());
}

} // namespace

BOOST_AUTO_TEST_SUITE(pretokenizers)

BOOST_AUTO_TEST_CASE(gpt2_keeps_a_leading_space_with_its_word) {
  BOOST_TEST(split("default", "Hello world  42!") ==
             (std::vector<std::string>{"Hello", " world", " ", " 42", "!"}));
}

BOOST_AUTO_TEST_CASE(llama3_groups_digits_by_three_and_folds_contraction_case) {
  BOOST_TEST(split("llama-bpe", "12345 I'M") ==
             (std::vector<std::string>{"123", "45", " I", "'M"}));
}

BOOST_AUTO_TEST_CASE(qwen2_splits_every_digit) {
  BOOST_TEST(split("qwen2", "x=123") == (std::vector<std::string>{"x", "=", "1", "2", "3"}));
}

BOOST_AUTO_TEST_CASE(smollm_isolates_digits_before_gpt2s_pattern) {
  BOOST_TEST(split("smollm", "ab12 cd") ==
             (std::vector<std::string>{"ab", "1", "2", " cd"}));
}

BOOST_AUTO_TEST_CASE(letters_are_unicode_letters) {
  BOOST_TEST(split("llama-bpe", "café 中文") == (std::vector<std::string>{"café", " 中文"}));
}

BOOST_AUTO_TEST_CASE(invalid_utf8_passes_through_as_pieces) {
  std::string text = "ab\xff\xfe cd";
  auto pieces = split("default", text);
  std::string joined;
  for (const auto& p : pieces)
    joined += p;
  BOOST_TEST(joined == text);
}

BOOST_AUTO_TEST_CASE(an_unknown_name_lists_the_known_ones) {
  auto p = triad::pretokenizer::named("deepseek-llm");
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().code == triad::errc::unsupported);
  BOOST_TEST(p.error().message.find("'deepseek-llm'") != std::string::npos);
  BOOST_TEST(p.error().message.find("qwen2") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(byte_level_bpe)

BOOST_AUTO_TEST_CASE(merges_apply_lowest_rank_first) {
  auto t = small();
  auto ids = t->encode("hello world", false);
  // "hello" merges fully; " world" becomes " w" + "or" + "l" + "d".
  std::vector<triad::token> want{id_of(*t, "hello"), id_of(*t, spell(" ") + "w"), id_of(*t, "or"),
                                 id_of(*t, "l"), id_of(*t, "d")};
  BOOST_TEST(ids == want);
  BOOST_TEST(t->decode(ids) == "hello world");
}

BOOST_AUTO_TEST_CASE(control_tokens_match_only_when_asked_added_tokens_always) {
  auto t = small();
  const auto start = id_of(*t, "<|im_start|>");
  const auto call = id_of(*t, "<tool_call>");
  auto with = t->encode("<|im_start|>hi<tool_call>", true);
  BOOST_TEST(with.front() == start);
  BOOST_TEST(with.back() == call);
  auto without = t->encode("<|im_start|>hi<tool_call>", false);
  BOOST_TEST(std::count(without.begin(), without.end(), start) == 0);
  BOOST_TEST(without.back() == call);
  BOOST_TEST(t->decode(without) == "<|im_start|>hi<tool_call>");
}

BOOST_AUTO_TEST_CASE(decoding_maps_spelled_bytes_back) {
  auto t = small();
  BOOST_TEST(t->decode(id_of(*t, spell(" "))) == " ");
  BOOST_TEST(t->decode(id_of(*t, spell("\n"))) == "\n");
  BOOST_TEST(t->decode(-1).empty());
}

BOOST_AUTO_TEST_CASE(a_vocabulary_reads_from_gguf_metadata) {
  auto v = small_vocab();
  triad::gguf_writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  std::vector<std::int32_t> kinds;
  for (auto k : v.kinds)
    kinds.push_back(static_cast<std::int32_t>(k));
  w.set_i32s("tokenizer.ggml.token_type", kinds);
  w.set_strings("tokenizer.ggml.merges", v.merges);
  w.set_u32("tokenizer.ggml.eos_token_id", 5);
  w.set_string("tokenizer.chat_template", "{{ messages }}");
  auto image = w.bytes();
  auto f = triad::gguf_file::parse(image, "vocab.gguf");
  BOOST_REQUIRE(f);
  auto read = triad::vocab::from_gguf(**f);
  BOOST_REQUIRE_MESSAGE(read, (read ? "" : read.error().to_string()));
  BOOST_TEST(read->tokens == v.tokens);
  BOOST_TEST(read->merges == v.merges);
  BOOST_TEST(read->pre == "qwen2");
  BOOST_TEST(*read->eos == 5);
  BOOST_TEST(!read->bos.has_value());
  BOOST_TEST(read->chat_template == "{{ messages }}");
  BOOST_TEST((read->kinds.back() == triad::token_kind::user_defined));
}

BOOST_AUTO_TEST_CASE(bad_vocabularies_are_named) {
  triad::gguf_writer w;
  w.set_string("tokenizer.ggml.model", "rwkv");
  auto image = w.bytes();
  auto f = triad::gguf_file::parse(image, "rwkv.gguf");
  BOOST_REQUIRE(f);
  auto v = triad::vocab::from_gguf(**f);
  BOOST_REQUIRE(!v);
  BOOST_TEST(v.error().message.find("'rwkv'") != std::string::npos);

  triad::gguf_writer o;
  o.set_string("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens{"a", "b"};
  o.set_strings("tokenizer.ggml.tokens", tokens);
  o.set_strings("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  o.set_u32("tokenizer.ggml.eos_token_id", 2);
  auto image2 = o.bytes();
  auto f2 = triad::gguf_file::parse(image2, "eos.gguf");
  BOOST_REQUIRE(f2);
  auto v2 = triad::vocab::from_gguf(**f2);
  BOOST_REQUIRE(!v2);
  BOOST_TEST(v2.error().message.find("eos_token_id is 2") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sentencepiece)

BOOST_AUTO_TEST_CASE(pieces_merge_by_score_and_unknown_characters_fall_back_to_bytes) {
  triad::vocab v;
  v.model = triad::tokenizer_model::llama;
  v.tokens = {"<unk>", "<s>", "\xe2\x96\x81", "h", "i", "\xe2\x96\x81h", "\xe2\x96\x81hi", "hi"};
  v.kinds = {triad::token_kind::unknown, triad::token_kind::control, triad::token_kind::normal,
             triad::token_kind::normal, triad::token_kind::normal, triad::token_kind::normal,
             triad::token_kind::normal, triad::token_kind::normal};
  // "hi" scores higher than "▁h": "▁" + "hi" is then not a piece, so "▁hi" must come from
  // "▁h" + "i" only if "▁h" merges first; with these scores "h"+"i" merges first and "▁hi"
  // follows from "▁" + "hi".
  v.scores = {0, 0, -1, -1, -1, -3, -4, -2};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.tokens.push_back(name);
    v.kinds.push_back(triad::token_kind::byte);
    v.scores.push_back(0);
  }
  v.unknown = 0;
  auto made = triad::make_tokenizer(v);
  BOOST_REQUIRE_MESSAGE(made, (made ? "" : made.error().to_string()));
  auto& t = **made;
  auto ids = t.encode("hi \xc3\xa9<s>hi", true);
  // "▁hi", "▁", then é's two bytes; "<s>" (asked for); a new fragment: "▁hi".
  std::vector<triad::token> want{6, 2, 8 + 0xc3, 8 + 0xa9, 1, 6};
  BOOST_TEST(ids == want);
  BOOST_TEST(t.decode(ids) == " hi \xc3\xa9<s> hi");
  // Without specials "<s>" is text: its characters have no pieces and fall back to bytes.
  auto plain = t.encode("<s>", false);
  BOOST_TEST(plain.size() == 4u); // "▁" and the three bytes of "<s>"
}

BOOST_AUTO_TEST_SUITE_END()
