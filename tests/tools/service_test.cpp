#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/node_config.hpp"
#include "tests/tools/test_support.hpp"
#include "tools/service.hpp"

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// Two domains of two cores; `tool_cores` of them reserved for tools with `queue` waiting calls.
struct node {
  node(unsigned tool_cores, std::size_t queue) {
    auto t = triad::topology::load_synthetic("pack:1 numa:2 core:2 pu:1");
    BOOST_REQUIRE(t.has_value());
    topo = std::make_unique<triad::topology>(std::move(t).value());
    config.tools.cores = tool_cores;
    config.tools.queue_capacity = queue;
    auto p = triad::make_plan(topo->info(), config);
    BOOST_REQUIRE(p.has_value());
    plan = *p;
    auto s = triad::domain_set::start(*topo, plan, config.scheduler, false);
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    domains = std::move(s).value();
    auto svc = triad::tool_service::start(*domains, plan, *topo, triad::test::sleeper_registry(),
                                          config.tools, &metrics);
    BOOST_REQUIRE_MESSAGE(svc.has_value(), (svc ? "" : svc.error().message));
    service = std::move(svc).value();
  }
  ~node() {
    service.reset();
    domains->stop(10s);
  }

  // Sends `calls` and collects every result by call id.
  std::map<std::uint64_t, triad::tool_reply> run(std::vector<triad::tool_invocation> calls) {
    std::map<std::uint64_t, triad::tool_reply> results;
    caf::scoped_actor self{domains->orchestration().system()};
    for (auto& c : calls)
      service->invoke(c, caf::actor{self});
    for (std::size_t i = 0; i < calls.size(); ++i)
      self->receive(
          [&](triad::tool_result_atom, std::uint64_t id, triad::tool_reply& r) {
            BOOST_TEST(results.count(id) == 0u, "a second result for call " << id);
            results[id] = std::move(r);
          },
          caf::after(30s) >> [] { BOOST_FAIL("a tool result was lost"); });
    return results;
  }

  triad::node_config config;
  std::unique_ptr<triad::topology> topo;
  triad::plan plan;
  triad::metrics_registry metrics;
  std::unique_ptr<triad::domain_set> domains;
  std::unique_ptr<triad::tool_service> service;
};

triad::tool_invocation nap(std::uint64_t id, int ms) {
  triad::tool_invocation c;
  c.id = id;
  c.name = "nap";
  c.arguments_json = R"({"ms": )" + std::to_string(ms) + "}";
  return c;
}

} // namespace

BOOST_AUTO_TEST_SUITE(service)

BOOST_AUTO_TEST_CASE(executors_run_in_the_plans_tool_domains) {
  node n{1, 4};
  std::vector<unsigned> with_tools;
  for (auto& d : n.plan.domains)
    if (!d.tool_cpus.empty())
      with_tools.push_back(d.domain);
  BOOST_REQUIRE(!with_tools.empty());
  BOOST_TEST(n.service->domain_ids() == with_tools);
}

BOOST_AUTO_TEST_CASE(each_call_gets_exactly_one_result_under_its_own_id) {
  node n{1, 8};
  std::vector<triad::tool_invocation> calls;
  for (std::uint64_t i = 0; i < 6; ++i)
    calls.push_back(nap(100 + i, 20));
  auto results = n.run(calls);
  BOOST_TEST(results.size() == 6u);
  for (auto& [id, r] : results) {
    BOOST_TEST(r.ok, "call " << id << ": " << r.content);
    BOOST_TEST(r.details_json.find("20") != std::string::npos);
  }
  BOOST_TEST(n.metrics.render().find(R"(triad_tool_invocations_total{outcome="ok"} 6)") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(calls_beyond_every_domains_queue_are_answered_busy) {
  node n{1, 1}; // one tool core: one call runs, one waits, the rest are refused
  std::vector<triad::tool_invocation> calls;
  for (std::uint64_t i = 0; i < 5; ++i)
    calls.push_back(nap(i, 400));
  auto results = n.run(calls);
  int ok = 0, busy = 0;
  for (auto& [id, r] : results) {
    ok += r.ok;
    busy += r.busy;
    if (r.busy)
      BOOST_TEST(r.content.find("busy") != std::string::npos);
  }
  BOOST_TEST(ok == 2);
  BOOST_TEST(busy == 3);
}

BOOST_AUTO_TEST_CASE(a_call_past_its_deadline_fails_with_the_reason) {
  node n{1, 4};
  auto call = nap(7, 3000);
  call.deadline = 200ms;
  auto results = n.run({call});
  BOOST_REQUIRE(results.count(7) == 1u);
  BOOST_TEST(!results[7].ok);
  BOOST_TEST(results[7].content.find("did not answer within 200 ms") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(invalid_arguments_come_back_as_a_failed_result) {
  node n{1, 4};
  triad::tool_invocation c;
  c.id = 1;
  c.name = "nap";
  c.arguments_json = R"({"ms": "soon"})";
  auto results = n.run({c});
  BOOST_TEST(!results[1].ok);
  BOOST_TEST(results[1].content.find("arguments.ms") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_invocation_whose_owner_exits_stops_waiting) {
  node n{1, 4};
  auto& sys = n.domains->orchestration().system();
  auto owner = sys.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](triad::tool_result_atom, std::uint64_t, triad::tool_reply&) {}};
  });
  auto inv = n.service->invoke(nap(1, 2000), owner);
  caf::scoped_actor self{sys};
  self->monitor(inv);
  caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(1500ms) >> [] { BOOST_FAIL("the invocation outlived its owner"); });
  BOOST_TEST(down);
}

BOOST_AUTO_TEST_CASE(a_finished_invocation_supervises_the_next_call_into_its_domain) {
  node n{1, 4};
  BOOST_REQUIRE(n.service->domain_ids().size() == 1u);
  caf::scoped_actor self{n.domains->orchestration().system()};
  std::vector<caf::actor> invocations;
  for (std::uint64_t id = 1; id <= 3; ++id) {
    invocations.push_back(n.service->invoke(nap(id, 1), caf::actor{self}));
    self->receive(
        [&](triad::tool_result_atom, std::uint64_t got, triad::tool_reply& r) {
          BOOST_TEST(got == id);
          BOOST_TEST(r.ok, r.content);
        },
        caf::after(30s) >> [] { BOOST_FAIL("a tool result was lost"); });
  }
  BOOST_TEST((invocations[1] == invocations[0]));
  BOOST_TEST((invocations[2] == invocations[0]));
}

BOOST_AUTO_TEST_CASE(a_plan_without_tool_cpus_is_an_error) {
  auto t = triad::topology::load_synthetic("pack:1 numa:1 core:2 pu:1");
  BOOST_REQUIRE(t.has_value());
  triad::node_config config;
  auto p = triad::make_plan(t->info(), config);
  BOOST_REQUIRE(p.has_value());
  for (auto& d : p->domains)
    d.tool_cpus.clear();
  auto s = triad::domain_set::start(*t, *p, config.scheduler, false);
  BOOST_REQUIRE(s.has_value());
  auto svc = triad::tool_service::start(**s, *p, *t, triad::test::sleeper_registry(), config.tools);
  BOOST_REQUIRE(!svc.has_value());
  BOOST_TEST(svc.error().message.find("no tool cpus") != std::string::npos);
  (*s)->stop(5s);
}

BOOST_AUTO_TEST_SUITE_END()
