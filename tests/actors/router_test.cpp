#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/router.hpp"
#include "tests/actors/support.hpp"

namespace {

using namespace std::chrono_literals;

// A router over one device with one slot, in the orchestration domain of a test node; the
// device actor is a stand-in (the router only hands it out).
struct router_fixture {
  std::unique_ptr<triad::node> node = triad::test::start_node();
  caf::scoped_actor self{node->domains().orchestration().system()};
  caf::actor device = self->spawn([]() -> caf::behavior { return {[](int) {}}; });

  caf::actor make(triad::schedule_policy policy) {
    triad::orchestration_options o;
    o.schedule = policy;
    return triad::spawn_router(node->domains().orchestration(),
                               {{"dev0", triad::device_role::both, device, 1}}, o);
  }

  ~router_fixture() { caf::anon_send_exit(device, caf::exit_reason::user_shutdown); }
};

} // namespace

BOOST_AUTO_TEST_SUITE(router)

BOOST_AUTO_TEST_CASE(plas_serves_the_session_with_less_attained_service_first) {
  router_fixture f;
  auto router = f.make(triad::schedule_policy::plas);
  f.self->send(router, triad::served_atom::value, std::string{"heavy"}, std::uint64_t{500});
  f.self->send(router, triad::served_atom::value, std::string{"light"}, std::uint64_t{20});
  std::uint64_t attained = 0;
  f.self->request(router, 30s, triad::attained_atom::value, std::string{"heavy"})
      .receive([&](std::uint64_t t) { attained = t; },
               [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  BOOST_TEST(attained == 500u);
  // "heavy" asks first, "light" second; with one slot freed, PLAS hands it to "light".
  auto holder = f.self->request(router, 30s, triad::route_atom::value,
                                triad::route_order{triad::route_stage::any, "holder", {}});
  holder.receive([](triad::route_reply& r) { BOOST_REQUIRE(r.ok); },
                 [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  auto heavy = f.self->request(router, 30s, triad::route_atom::value,
                               triad::route_order{triad::route_stage::any, "heavy", {}});
  auto light = f.self->request(router, 30s, triad::route_atom::value,
                               triad::route_order{triad::route_stage::any, "light", {}});
  f.self->send(router, triad::release_atom::value, std::string{"dev0"});
  bool light_served = false;
  light.receive([&](triad::route_reply& r) { light_served = r.ok; },
                [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  BOOST_TEST(light_served);
  // "heavy" still waits: the only slot is light's until it is released.
  bool heavy_early = false;
  f.self->receive([&](triad::route_reply&) { heavy_early = true; }, caf::after(50ms) >> [] {});
  BOOST_TEST(!heavy_early);
  f.self->send(router, triad::release_atom::value, std::string{"dev0"});
  heavy.receive([](triad::route_reply& r) { BOOST_TEST(r.ok); },
                [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(fcfs_serves_in_arrival_order_whatever_the_service) {
  router_fixture f;
  auto router = f.make(triad::schedule_policy::fcfs);
  f.self->send(router, triad::served_atom::value, std::string{"heavy"}, std::uint64_t{500});
  auto holder = f.self->request(router, 30s, triad::route_atom::value,
                                triad::route_order{triad::route_stage::any, "holder", {}});
  holder.receive([](triad::route_reply& r) { BOOST_REQUIRE(r.ok); },
                 [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  auto heavy = f.self->request(router, 30s, triad::route_atom::value,
                               triad::route_order{triad::route_stage::any, "heavy", {}});
  auto light = f.self->request(router, 30s, triad::route_atom::value,
                               triad::route_order{triad::route_stage::any, "light", {}});
  f.self->send(router, triad::release_atom::value, std::string{"dev0"});
  bool heavy_served = false;
  heavy.receive([&](triad::route_reply& r) { heavy_served = r.ok; },
                [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  BOOST_TEST(heavy_served);
  f.self->send(router, triad::release_atom::value, std::string{"dev0"});
  light.receive([](triad::route_reply& r) { BOOST_TEST(r.ok); },
                [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_request_is_never_sent_to_a_device_that_failed_it) {
  router_fixture f;
  auto router = f.make(triad::schedule_policy::fcfs);
  std::string reason;
  f.self
      ->request(router, 30s, triad::route_atom::value,
                triad::route_order{triad::route_stage::any, "s", {"dev0"}})
      .receive([&](triad::route_reply& r) { reason = r.ok ? "granted" : r.reason; },
               [](caf::error& e) { BOOST_FAIL(caf::to_string(e)); });
  BOOST_TEST(reason == "no device left for this stage: dev0 failed this request");
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
