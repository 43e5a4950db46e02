#include <chrono>

#include <boost/test/unit_test.hpp>

#include "runtime/deadline_alarm.hpp"

using namespace std::chrono_literals;
using triad::deadline_alarm;

namespace {

const auto t0 = triad::node_clock::time_point{} + 1h;

} // namespace

BOOST_AUTO_TEST_SUITE(deadline_alarm_suite)

BOOST_AUTO_TEST_CASE(the_first_deadline_arms_and_its_message_fires_once) {
  deadline_alarm alarm{10ms};
  auto n = alarm.arm(t0);
  BOOST_REQUIRE(n.has_value());
  BOOST_TEST((alarm.armed_at() == t0));
  BOOST_TEST(alarm.fire(*n));
  BOOST_TEST(!alarm.armed_at().has_value());
  BOOST_TEST(!alarm.fire(*n)); // disarmed: a repeat is stale
}

BOOST_AUTO_TEST_CASE(a_later_or_near_deadline_is_left_to_the_armed_check) {
  deadline_alarm alarm{10ms};
  BOOST_REQUIRE(alarm.arm(t0).has_value());
  BOOST_TEST(!alarm.arm(t0 + 5s).has_value());  // later: the armed check re-arms for it
  BOOST_TEST(!alarm.arm(t0 - 5ms).has_value()); // within the slack: one check covers both
  BOOST_TEST((alarm.armed_at() == t0));
}

BOOST_AUTO_TEST_CASE(an_earlier_deadline_arms_anew_and_makes_the_armed_message_stale) {
  deadline_alarm alarm{10ms};
  auto late = alarm.arm(t0);
  auto early = alarm.arm(t0 - 1s);
  BOOST_REQUIRE(late.has_value());
  BOOST_REQUIRE(early.has_value());
  BOOST_TEST(*early != *late);
  BOOST_TEST((alarm.armed_at() == t0 - 1s));
  BOOST_TEST(!alarm.fire(*late)); // stale: the earlier one is armed
  BOOST_TEST(alarm.fire(*early));
}

BOOST_AUTO_TEST_CASE(after_firing_any_deadline_arms_again) {
  deadline_alarm alarm{10ms};
  auto n = alarm.arm(t0);
  BOOST_REQUIRE(alarm.fire(*n));
  auto next = alarm.arm(t0 + 1h); // later than the last, but nothing is armed now
  BOOST_REQUIRE(next.has_value());
  BOOST_TEST(alarm.fire(*next));
}

BOOST_AUTO_TEST_SUITE_END()
