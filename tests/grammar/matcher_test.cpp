#include <memory>

#include <boost/test/unit_test.hpp>

#include "grammar/matcher.hpp"

namespace {

using namespace triad::grammar;

// root ::= "ab" ("c" | "d")+ ; built by hand.
std::shared_ptr<const grammar> ab_cd_plus() {
  grammar_builder b;
  const auto root = b.declare("root");
  byte_set cd;
  cd.set('c');
  cd.set('d');
  auto s = b.literal("ab");
  s.push_back(b.repeat(b.bytes(cd), 1, 0, true, "cds"));
  b.add(root, s);
  return std::make_shared<const grammar>(b.finish());
}

} // namespace

BOOST_AUTO_TEST_CASE(accepts_only_what_the_grammar_allows) {
  matcher m{ab_cd_plus()};
  BOOST_TEST(!m.accept('b'));
  BOOST_TEST(m.accepted() == 0u);
  BOOST_TEST(m.accept("ab"));
  BOOST_TEST(!m.can_end()); // one of c, d is required
  BOOST_TEST(!m.accept('a'));
  BOOST_TEST(m.accept("cdcc"));
  BOOST_TEST(m.can_end());
  BOOST_TEST(!m.done()); // more may follow
}

BOOST_AUTO_TEST_CASE(refused_string_changes_nothing) {
  matcher m{ab_cd_plus()};
  BOOST_TEST(m.accept("abc"));
  BOOST_TEST(!m.accept("cdx"));
  BOOST_TEST(m.accepted() == 3u);
  BOOST_TEST(m.accept('d'));
}

BOOST_AUTO_TEST_CASE(rollback_returns_to_an_earlier_state) {
  matcher m{ab_cd_plus()};
  BOOST_TEST(m.accept("abcd"));
  m.rollback(3);
  BOOST_TEST(m.accepted() == 1u);
  BOOST_TEST(!m.accept('c'));
  BOOST_TEST(m.accept('b'));
  const auto next = m.next_bytes();
  BOOST_TEST(next.count() == 2u);
  BOOST_TEST(next['c']);
  BOOST_TEST(next['d']);
}

BOOST_AUTO_TEST_CASE(alternatives_with_a_common_prefix_stay_open) {
  // root ::= "abc" | "abd" | "ab"
  grammar_builder b;
  const auto root = b.declare("root");
  b.add(root, b.literal("abc"));
  b.add(root, b.literal("abd"));
  b.add(root, b.literal("ab"));
  matcher m{std::make_shared<const grammar>(b.finish())};
  BOOST_TEST(m.accept("ab"));
  BOOST_TEST(m.can_end());
  BOOST_TEST(m.next_bytes().count() == 2u);
  BOOST_TEST(m.accept('d'));
  BOOST_TEST(m.done());
  BOOST_TEST(m.can_end());
  BOOST_TEST(!m.accept('d'));
}

BOOST_AUTO_TEST_CASE(bounded_repetition_stops_at_its_maximum) {
  grammar_builder b;
  const auto root = b.declare("root");
  b.add(root, {b.repeat(b.byte('x'), 2, 4, false, "xs")});
  matcher m{std::make_shared<const grammar>(b.finish())};
  BOOST_TEST(m.accept('x'));
  BOOST_TEST(!m.can_end());
  BOOST_TEST(m.accept("x"));
  BOOST_TEST(m.can_end());
  BOOST_TEST(m.accept("xx"));
  BOOST_TEST(m.done());
  BOOST_TEST(!m.accept('x'));
}

BOOST_AUTO_TEST_CASE(a_long_loop_keeps_the_stack_shallow) {
  // 100000 repetitions through a right-recursive rule: each byte replaces the loop's frame.
  matcher m{ab_cd_plus()};
  BOOST_TEST(m.accept("ab"));
  for (int i = 0; i < 100000; ++i)
    BOOST_REQUIRE(m.accept(i % 2 ? 'c' : 'd'));
  BOOST_TEST(m.can_end());
}

BOOST_AUTO_TEST_CASE(recursive_rules_nest) {
  // root ::= "(" root ")" | "x"
  grammar_builder b;
  const auto root = b.declare("root");
  sequence nested{b.byte('(')};
  nested.push_back(grammar_builder::ref(root));
  nested.push_back(b.byte(')'));
  b.add(root, nested);
  b.add(root, b.literal("x"));
  matcher m{std::make_shared<const grammar>(b.finish())};
  BOOST_TEST(m.accept("((("));
  BOOST_TEST(!m.accept(')'));
  BOOST_TEST(m.accept("x))"));
  BOOST_TEST(!m.can_end());
  BOOST_TEST(m.accept(")"));
  BOOST_TEST(m.can_end());
  BOOST_TEST(m.done());
}

BOOST_AUTO_TEST_CASE(grammar_prints_as_bnf) {
  const auto text = ab_cd_plus()->to_string();
  BOOST_TEST(text.find("root ::= 'a' 'b' cds") != std::string::npos, text);
  BOOST_TEST(text.find("[cd]") != std::string::npos, text);
}
