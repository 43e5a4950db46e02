#include <cmath>
#include <memory>
#include <random>

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include "grammar/json_schema.hpp"
#include "grammar/token_mask.hpp"

namespace {

using namespace triad::grammar;

// A vocabulary of JSON pieces, printable bytes and random byte strings (id 0 empty: a control
// token; id 1 the end token).
std::vector<std::string> vocabulary(std::size_t random_tokens) {
  std::vector<std::string> v{"",     "</s>", "{",   "}",        "{\"",  "\":",     "\",\"", "[",
                             "]",    ",",    "\"",  "city",     "unit", "celsius", "ce",    "c",
                             "true", "t",    "tr",  "null",     "1",    "12",      "-",     ".5",
                             "e",    " ",    "\"}", "\xc3\xa9", "\xc3"};
  for (char c = 0x20; c < 0x7f; ++c) // every printable byte alone, as byte-level vocabularies have
    v.push_back(std::string(1, c));
  std::mt19937 rng{3};
  const std::string alphabet = "{}[]\",:abcdeilnrstuy0123456789.- \xc3\xa9";
  for (std::size_t i = 0; i < random_tokens; ++i) {
    std::string t;
    const std::size_t n = 1 + rng() % 6;
    for (std::size_t j = 0; j < n; ++j)
      t += alphabet[rng() % alphabet.size()];
    v.push_back(t);
  }
  return v;
}

// The mask by trying each token alone.
std::vector<bool> brute_force(matcher& m, const std::vector<std::string>& vocab) {
  std::vector<bool> out(vocab.size());
  for (std::size_t t = 0; t < vocab.size(); ++t) {
    if (t == 1) {
      out[t] = m.can_end();
      continue;
    }
    if (vocab[t].empty())
      continue;
    if (m.accept(vocab[t])) {
      out[t] = true;
      m.rollback(vocab[t].size());
    }
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(mask_equals_trying_each_token) {
  auto g = from_json_schema(boost::json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
      "n": {"type": "number"}, "ok": {"type": "boolean"}}, "required": ["city"]})"));
  BOOST_REQUIRE(g);
  auto shared = std::make_shared<const grammar>(std::move(*g));
  const auto vocab = vocabulary(3000);
  token_index index{vocab, {1}};
  matcher m{shared};
  // Along one document, compare at every byte boundary.
  const std::string doc =
      "{\"city\":\"Lyon \xc3\xa9t\\u00e9\",\"unit\":\"celsius\",\"n\":-12.5e3,\"ok\":true}";
  std::vector<std::uint32_t> mask;
  for (std::size_t i = 0; i <= doc.size(); ++i) {
    index.mask(m, mask);
    BOOST_REQUIRE_EQUAL(m.accepted(), i); // the mask leaves the matcher where it was
    const auto expected = brute_force(m, vocab);
    std::size_t count = 0;
    for (std::uint32_t t = 0; t < vocab.size(); ++t) {
      BOOST_REQUIRE_MESSAGE(allowed(mask, t) == expected[t], "token " << t << " '" << vocab[t]
                                                                      << "' after '"
                                                                      << doc.substr(0, i) << "'");
      count += expected[t];
    }
    BOOST_TEST(count > 0u);
    if (i < doc.size())
      BOOST_REQUIRE(m.accept(static_cast<unsigned char>(doc[i])));
  }
  BOOST_TEST(m.can_end());
  index.mask(m, mask);
  BOOST_TEST(allowed(mask, 1));  // the end token, where the document is complete
  BOOST_TEST(!allowed(mask, 0)); // never a control token
}

BOOST_AUTO_TEST_CASE(cached_masks_equal_fresh_ones) {
  auto g = from_json_schema(boost::json::parse(
      R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}})"));
  BOOST_REQUIRE(g);
  auto machine = std::make_shared<automaton>(std::make_shared<const grammar>(std::move(*g)));
  auto vocab = std::make_shared<const token_index>(vocabulary(500), std::vector<std::uint32_t>{1});
  mask_cache cache{machine, vocab, 8};
  matcher m{machine};
  const std::string doc = R"({"a":["xy","zz","q"]})";
  std::vector<std::uint32_t> fresh;
  for (int pass = 0; pass < 2; ++pass) {
    m.reset();
    for (std::size_t i = 0; i <= doc.size(); ++i) {
      const auto kept = cache.at(m);
      vocab->mask(m, fresh);
      BOOST_REQUIRE(*kept == fresh);
      if (i < doc.size())
        BOOST_REQUIRE(m.accept(static_cast<unsigned char>(doc[i])));
    }
  }
  BOOST_TEST(cache.size() == 8u); // at most max_states kept
}

BOOST_AUTO_TEST_CASE(a_prefetched_mask_is_the_one_apply_computes_and_is_kept) {
  auto g = from_json_schema(boost::json::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"));
  BOOST_REQUIRE(g);
  const auto rules = std::make_shared<const grammar>(std::move(*g));
  const auto vocab_bytes = vocabulary(800);
  auto vocab = std::make_shared<const token_index>(vocab_bytes, std::vector<std::uint32_t>{1});
  auto ahead = std::make_shared<mask_cache>(std::make_shared<automaton>(rules), vocab);
  auto here = std::make_shared<mask_cache>(std::make_shared<automaton>(rules), vocab);
  token_constraint with{ahead}, without{here};
  const std::string doc = R"({"city":"Nice"})";
  std::vector<float> a(vocab->size()), b(vocab->size());
  for (std::size_t i = 0; i <= doc.size(); ++i) {
    std::fill(a.begin(), a.end(), 0.0f);
    std::fill(b.begin(), b.end(), 0.0f);
    BOOST_REQUIRE(with.apply(a));
    BOOST_REQUIRE(without.apply(b));
    BOOST_REQUIRE(a == b);
    if (i == doc.size())
      break;
    // Move on by a one-byte token, then compute the next mask ahead.
    const auto t = static_cast<std::uint32_t>(
        std::find(vocab_bytes.begin(), vocab_bytes.end(), std::string(1, doc[i])) -
        vocab_bytes.begin());
    BOOST_REQUIRE(with.advance(t));
    BOOST_REQUIRE(without.advance(t));
    with.prefetch();
  }
  // The worker kept what it computed: every state met is in the cache.
  BOOST_TEST(ahead->size() == here->size());
}

BOOST_AUTO_TEST_CASE(a_constraint_that_waits_for_a_call_leaves_text_free_then_holds) {
  // A vocabulary of the end token, the call's open and close tokens and every printable byte.
  std::vector<std::string> bytes{"", std::string(1, static_cast<char>(call_open_marker)),
                                 std::string(1, static_cast<char>(call_close_marker))};
  for (char c = 0x20; c < 0x7f; ++c)
    bytes.emplace_back(1, c);
  const auto id = [&](char c) { return static_cast<std::uint32_t>(3 + (c - 0x20)); };
  auto vocab = std::make_shared<const token_index>(bytes, std::vector<std::uint32_t>{0});
  call_layout tagged;
  tagged.before_each = bytes[1];
  tagged.after_each = bytes[2];
  auto g = from_tool_calls({{"get_time", boost::json::value{}}}, tagged);
  BOOST_REQUIRE(g);
  auto masks = std::make_shared<mask_cache>(
      std::make_shared<automaton>(std::make_shared<const grammar>(std::move(*g))), vocab);
  token_constraint c{masks, 200};
  c.free_until_call();
  std::vector<float> logits(vocab->size(), 0.0f);
  BOOST_TEST(c.apply(logits)); // text: nothing masked
  BOOST_TEST(std::count(logits.begin(), logits.end(), 0.0f) == static_cast<long>(logits.size()));
  BOOST_TEST(c.advance(id('h')));
  BOOST_TEST(c.complete()); // text may end
  BOOST_TEST(c.fits(1));    // a call fits 199 tokens
  BOOST_TEST(c.advance(1)); // the call opens: the grammar holds from here
  BOOST_TEST(!c.complete());
  BOOST_TEST(c.apply(logits));
  BOOST_TEST(logits[id('{')] == 0.0f);
  BOOST_TEST(std::isinf(logits[id('h')]));
  BOOST_TEST(std::isinf(logits[0])); // no end inside a call
  BOOST_TEST(!c.advance(id('h')));
  // Near the end of the budget a call that could not close is not begun.
  token_constraint tight{masks, 5};
  tight.free_until_call();
  BOOST_TEST(!tight.fits(1));
  std::vector<float> last(vocab->size(), 0.0f);
  BOOST_TEST(tight.apply_shortest(last));
  BOOST_TEST(std::isinf(last[1]));
  BOOST_TEST(last[id('h')] == 0.0f);
  BOOST_TEST(last[0] == 0.0f);
}

BOOST_AUTO_TEST_CASE(a_budget_closes_the_output_in_time_whatever_the_model_prefers) {
  // A "model" that always prefers the longest allowed token that keeps a string or array
  // going: unconstrained by the budget it would run on; with it, the output ends valid within
  // the budget, for every budget from the shortest document up.
  auto g = from_json_schema(boost::json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
      "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "tags", "unit"],
      "additionalProperties": false})"));
  BOOST_REQUIRE(g);
  auto shared = std::make_shared<const grammar>(std::move(*g));
  const auto words = vocabulary(200);
  auto vocab = std::make_shared<const token_index>(words, std::vector<std::uint32_t>{1});
  auto masks = std::make_shared<mask_cache>(std::make_shared<automaton>(shared), vocab);
  // The shortest document: {"city":"","tags":[],"unit":"celsius"}, 38 bytes, and its end.
  for (std::uint32_t budget : {39u, 40u, 45u, 60u, 120u}) {
    token_constraint c{masks, budget};
    std::string out;
    bool ended = false;
    for (std::uint32_t step = 0; step < budget && !ended; ++step) {
      std::vector<float> logits(words.size());
      for (std::size_t t = 0; t < words.size(); ++t) // long tokens, and never the end or '"'
        logits[t] = static_cast<float>(words[t].size()) -
                    (t == 1 || words[t].find_first_of("\"]") != std::string::npos ? 100.0f : 0.0f);
      std::vector<float> masked = logits;
      BOOST_REQUIRE(c.apply(masked));
      auto pick = static_cast<std::uint32_t>(std::max_element(masked.begin(), masked.end()) -
                                             masked.begin());
      if (!c.fits(pick)) {
        masked = logits;
        BOOST_REQUIRE(c.apply_shortest(masked));
        pick = static_cast<std::uint32_t>(std::max_element(masked.begin(), masked.end()) -
                                          masked.begin());
      }
      BOOST_REQUIRE(c.advance(pick));
      if (pick == 1)
        ended = true;
      else
        out += words[pick];
    }
    BOOST_TEST_CONTEXT("budget " << budget << ": " << out) {
      BOOST_TEST(ended);
      boost::system::error_code ec;
      const auto doc = boost::json::parse(out, ec);
      BOOST_TEST(!ec);
    }
  }
}

BOOST_AUTO_TEST_CASE(masks_made_of_frames_equal_trying_each_token) {
  // The cache builds a state's mask from what each frame on top takes whatever lies below, and
  // tries the tokens that reach a frame's end from the state: the same as trying every token,
  // for a schema and for any JSON (recursive, frames nested deep).
  const auto vocab = vocabulary(3000);
  auto index = std::make_shared<const token_index>(vocab, std::vector<std::uint32_t>{1});
  auto schema = from_json_schema(boost::json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
      "n": {"type": ["number", "null"]}, "ok": {"type": "boolean"}}, "required": ["city"]})"));
  BOOST_REQUIRE(schema);
  const std::pair<grammar, std::string> cases[] = {
      {std::move(*schema), R"({"city":"a\"b","tags":["x","",""],"n":-1.5e3,"ok":false})"},
      {any_json(), R"([{"a":[[1,{"b":"c"}],null]},"d",[[[]]],{"":{}}])"},
  };
  for (const auto& [g, doc] : cases) {
    auto machine = std::make_shared<automaton>(std::make_shared<const grammar>(g));
    mask_cache cache{machine, index};
    matcher m{machine};
    for (std::size_t i = 0; i <= doc.size(); ++i) {
      const auto mask = cache.at(m);
      const auto expected = brute_force(m, vocab);
      for (std::uint32_t t = 0; t < vocab.size(); ++t)
        BOOST_REQUIRE_MESSAGE(allowed(*mask, t) == expected[t],
                              "token " << t << " '" << vocab[t] << "' after '" << doc.substr(0, i)
                                       << "'");
      if (i < doc.size())
        BOOST_REQUIRE(m.accept(static_cast<unsigned char>(doc[i])));
    }
  }
}
