#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/node.hpp"
#include "tests/actors/support.hpp"

namespace {

using namespace std::chrono_literals;
using triad::test::recorder;

// A turn whose answer is `tokens` scripted tokens, after one 5 ms "nap" call when `tool`.
triad::turn_request turn(std::string text, std::uint32_t tokens, bool tool = false) {
  triad::turn_request t;
  t.message = {"user", std::move(text)};
  triad::generation_script s;
  if (tool)
    s.turns.push_back({4, triad::tool_call_text{"nap", R"({"ms": 5})"}});
  s.turns.push_back({tokens, std::nullopt});
  t.script = s;
  return t;
}

// Runs one turn to its end; returns the final event.
triad::request_event run_turn(triad::node& n, const caf::actor& session, triad::turn_request t) {
  caf::scoped_actor self{n.domains().orchestration().system()};
  auto rec = std::make_shared<recorder>();
  self->request(session, 30s, triad::turn_atom::value, std::move(t), rec->callback())
      .receive([](std::uint64_t id) { BOOST_TEST(id != 0u); },
               [](caf::error& e) { BOOST_FAIL("turn refused: " + caf::to_string(e)); });
  return rec->wait();
}

triad::session_info info(triad::node& n, const caf::actor& session) {
  caf::scoped_actor self{n.domains().orchestration().system()};
  triad::session_info out;
  self->request(session, 30s, triad::session_info_atom::value)
      .receive([&](triad::session_info& i) { out = std::move(i); },
               [](caf::error& e) { BOOST_FAIL("no session info: " + caf::to_string(e)); });
  return out;
}

triad::session_options options(bool keep_kv) {
  triad::session_options o;
  o.name = "agent-1";
  o.preamble = {{"system", "You are a coding agent."}};
  o.keep_kv = keep_kv;
  return o;
}

} // namespace

BOOST_AUTO_TEST_SUITE(session)

// Two turns of a session that keeps its KV; the second turn's usage.
triad::request_event two_turns(triad::node& n, triad::request_event& first) {
  auto s = n.open_session(options(true));
  first = run_turn(n, s, turn("List the failing tests.", 6));
  BOOST_REQUIRE_MESSAGE(first.kind == triad::request_event::done, first.message);
  auto after_first = info(n, s);
  BOOST_TEST(after_first.turns == 1u);
  BOOST_TEST(after_first.cached_tokens > 0u);
  auto second = run_turn(n, s, turn("Fix the first one.", 5));
  BOOST_REQUIRE_MESSAGE(second.kind == triad::request_event::done, second.message);
  auto after = info(n, s);
  BOOST_TEST(after.turns == 2u);
  BOOST_TEST(after.prefill_tokens == after_first.prefill_tokens + second.usage.prefill_tokens);
  BOOST_TEST(after.completion_tokens ==
             first.usage.completion_tokens + second.usage.completion_tokens);
  BOOST_TEST(after.context_tokens == second.conversation->tokens.size());
  BOOST_TEST(after.device_s > 0.0);
  return second;
}

BOOST_AUTO_TEST_CASE(a_session_keeps_its_kv_in_the_store_so_a_turn_prefills_only_what_is_new) {
  auto n = triad::test::start_node();
  triad::request_event first;
  auto second = two_turns(*n, first);
  // The conversation's KV went into the store as blocks, not into the session: the second
  // turn's prompt found its full pages there, and computed the rest (the last partial page,
  // the EOS the first turn ended with, this turn) and, on the decode device, the token the
  // prefill device chose.
  BOOST_TEST(!first.conversation->kv.has_value());
  BOOST_TEST(first.conversation->stored_tokens > 0u);
  BOOST_TEST(second.usage.cached_tokens == first.conversation->stored_tokens / 16 * 16);
  BOOST_TEST(second.usage.prefill_tokens ==
             second.usage.prompt_tokens - second.usage.cached_tokens + 1);
}

BOOST_AUTO_TEST_CASE(without_a_kv_store_a_session_keeps_its_kv_as_bytes) {
  auto n = triad::test::start_node({}, [](triad::node_config& c) { c.kvstore.host_mib = 0; });
  triad::request_event first;
  auto second = two_turns(*n, first);
  // New tokens only: the EOS the first turn ended with (sampled, never computed) and this turn.
  BOOST_TEST(first.conversation->kv.has_value());
  triad::chat_message next{"user", "Fix the first one."};
  BOOST_TEST(second.usage.prefill_tokens == triad::render_turn({next}).size() + 1);
}

BOOST_AUTO_TEST_CASE(without_kept_kv_every_turn_prefills_the_conversation_again) {
  auto n = triad::test::start_node();
  auto s = n->open_session(options(false));
  auto first = run_turn(*n, s, turn("List the failing tests.", 6));
  BOOST_REQUIRE(first.kind == triad::request_event::done);
  BOOST_TEST(info(*n, s).cached_tokens == 0u);
  triad::chat_message next{"user", "Fix the first one."};
  auto second = run_turn(*n, s, turn(next.content, 5));
  BOOST_REQUIRE(second.kind == triad::request_event::done);
  // The whole conversation, plus the first token of the answer, which the prefill device sampled
  // and the decode device computes; the prefill device finds whole pages of the first turn's
  // prompt in its prefix cache and those the answer completed in the decode device's (copied
  // from its memory), and computes the rest.
  BOOST_TEST(second.usage.cached_tokens > 0u);
  BOOST_TEST(second.usage.cached_tokens % 16 == 0u);
  BOOST_TEST(second.usage.cached_tokens <= first.conversation->tokens.size());
  BOOST_TEST(second.usage.prefill_tokens + second.usage.cached_tokens ==
             first.conversation->tokens.size() + triad::render_turn({next}).size() + 1);
}

BOOST_AUTO_TEST_CASE(the_history_holds_each_turns_messages_and_tool_results) {
  auto n = triad::test::start_node();
  auto s = n->open_session(options(true));
  BOOST_REQUIRE(run_turn(*n, s, turn("Run the tests.", 3, true)).kind ==
                triad::request_event::done);
  auto i = info(*n, s);
  std::vector<std::string> roles;
  for (const auto& m : i.history)
    roles.push_back(m.role);
  std::vector<std::string> expected = {"system", "user", "assistant", "tool", "assistant"};
  BOOST_TEST(roles == expected, boost::test_tools::per_element());
  BOOST_TEST(i.history[3].content == "rested");
  BOOST_TEST(i.history[2].content.find("<tool_call>") != std::string::npos);
  BOOST_TEST(i.tool_calls == 1u);
}

BOOST_AUTO_TEST_CASE(a_second_turn_while_one_runs_is_refused_and_limits_hold) {
  auto n = triad::test::start_node();
  auto o = options(true);
  o.max_turns = 1;
  auto s = n->open_session(o);
  caf::scoped_actor self{n->domains().orchestration().system()};
  auto rec = std::make_shared<recorder>();
  self->request(s, 30s, triad::turn_atom::value, turn("Slow one.", 4, true), rec->callback())
      .receive([](std::uint64_t) {}, [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  std::string refused;
  self->request(s, 30s, triad::turn_atom::value, turn("Another.", 2), triad::request_callback{})
      .receive([](std::uint64_t) { BOOST_FAIL("a second turn was accepted"); },
               [&](caf::error& e) { refused = caf::to_string(e); });
  BOOST_TEST(refused.find("busy: a turn is running") != std::string::npos, refused);
  BOOST_REQUIRE(rec->wait().kind == triad::request_event::done);
  std::string limit;
  // The end of the turn reaches the session by message: wait until it is no longer busy.
  for (int i = 0; i < 200 && info(*n, s).busy; ++i)
    std::this_thread::sleep_for(5ms);
  self->request(s, 30s, triad::turn_atom::value, turn("Again.", 2), triad::request_callback{})
      .receive([](std::uint64_t) { BOOST_FAIL("a turn past the limit was accepted"); },
               [&](caf::error& e) { limit = caf::to_string(e); });
  BOOST_TEST(limit.find("turn limit reached (1 turns)") != std::string::npos, limit);
}

BOOST_AUTO_TEST_SUITE_END()
