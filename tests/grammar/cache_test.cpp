#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "grammar/cache.hpp"
#include "grammar/json_schema.hpp"

namespace {

using namespace triad::grammar;

std::shared_ptr<const grammar> any_object() {
  return std::make_shared<const grammar>(any_json_object());
}

std::shared_ptr<const token_index> bytes_vocabulary() {
  std::vector<std::string> v{"</s>"};
  for (int c = 0x20; c < 0x7f; ++c)
    v.emplace_back(1, static_cast<char>(c));
  return std::make_shared<const token_index>(std::move(v), std::vector<std::uint32_t>{0});
}

} // namespace

BOOST_AUTO_TEST_SUITE(grammar_cache_suite)

BOOST_AUTO_TEST_CASE(a_kept_grammar_is_found_by_its_key_and_counted) {
  grammar_cache cache{4};
  BOOST_TEST(cache.find("a") == nullptr);
  const auto g = cache.keep("a", any_object());
  BOOST_TEST(cache.find("a") == g);
  BOOST_TEST(cache.keep("a", any_object()) == g); // the first compile wins
  const auto c = cache.counts();
  BOOST_TEST(c.hits == 1u);
  BOOST_TEST(c.misses == 1u);
  BOOST_TEST(c.kept == 1u);
}

BOOST_AUTO_TEST_CASE(requests_with_a_kept_grammar_share_its_masks) {
  grammar_cache cache;
  const auto vocabulary = bytes_vocabulary();
  const auto g = cache.keep("o", any_object());
  const auto first = cache.masks(g, vocabulary);
  token_constraint c{first};
  std::vector<float> logits(vocabulary->size(), 0.0f);
  BOOST_TEST(c.apply(logits)); // computes the start state's mask
  BOOST_TEST(first->size() == 1u);
  const auto second = cache.masks(g, vocabulary);
  BOOST_TEST(second == first); // the next request finds the mask computed
  // A grammar the cache does not keep gets masks of its own.
  const auto other = any_object();
  BOOST_TEST(cache.masks(other, vocabulary) != cache.masks(other, vocabulary));
}

BOOST_AUTO_TEST_CASE(past_the_byte_budget_the_least_recently_used_masks_go) {
  const auto vocabulary = bytes_vocabulary();
  grammar_cache cache{8, 1}; // a byte: any kept mask is past it
  const auto a = cache.keep("a", any_object());
  const auto b = cache.keep("b", any_object());
  auto fill = [&](const std::shared_ptr<mask_cache>& masks) {
    token_constraint c{masks};
    std::vector<float> logits(vocabulary->size(), 0.0f);
    c.apply(logits);
  };
  const auto first = cache.masks(a, vocabulary);
  fill(first);
  BOOST_TEST(cache.counts().mask_bytes > 0u);
  const auto second = cache.masks(b, vocabulary);  // a's masks go: b is the one asked for
  BOOST_TEST(cache.masks(a, vocabulary) != first); // made afresh
  BOOST_TEST(first->size() == 1u);                 // a request holding them keeps them
  (void)second;
}

BOOST_AUTO_TEST_CASE(the_least_recently_used_grammar_leaves_first) {
  grammar_cache cache{2};
  cache.keep("a", any_object());
  cache.keep("b", any_object());
  BOOST_TEST(cache.find("a") != nullptr); // a is now the most recent
  cache.keep("c", any_object());
  BOOST_TEST(cache.find("b") == nullptr);
  BOOST_TEST(cache.find("a") != nullptr);
  BOOST_TEST(cache.find("c") != nullptr);
  BOOST_TEST(cache.counts().kept == 2u);
  grammar_cache none{0};
  BOOST_TEST(none.keep("a", any_object()) != nullptr); // still given back, not kept
  BOOST_TEST(none.find("a") == nullptr);
}

BOOST_AUTO_TEST_SUITE_END()
