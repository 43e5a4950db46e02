#include <boost/test/unit_test.hpp>

#include "cluster/detail/peer_plan.hpp"

using triad::detail::known_peer;
using triad::detail::peer_lookup;
using triad::detail::plan_peers;

namespace {

using spawns = std::vector<std::pair<std::string, std::string>>;
using addresses = std::vector<std::string>;

} // namespace

BOOST_AUTO_TEST_SUITE(cluster_peer_plan)

BOOST_AUTO_TEST_CASE(every_address_of_a_first_lookup_is_tried) {
  auto plan = plan_peers({}, {{"decode.triad:4400", {"10.0.0.1:4400", "10.0.0.2:4400"}},
                              {"10.0.1.9:4400", {"10.0.1.9:4400"}}});
  BOOST_TEST((plan.spawn == spawns{{"10.0.0.1:4400", "decode.triad:4400"},
                                   {"10.0.0.2:4400", "decode.triad:4400"},
                                   {"10.0.1.9:4400", "10.0.1.9:4400"}}));
  BOOST_TEST(plan.retire.empty());
}

BOOST_AUTO_TEST_CASE(an_address_two_names_give_is_tried_once) {
  auto plan = plan_peers({}, {{"a:1", {"10.0.0.1:1"}}, {"b:1", {"10.0.0.1:1"}}});
  BOOST_TEST((plan.spawn == spawns{{"10.0.0.1:1", "a:1"}}));
}

BOOST_AUTO_TEST_CASE(a_known_address_is_not_tried_again) {
  std::map<std::string, known_peer> known{{"10.0.0.1:1", {"a:1", false}}};
  auto plan = plan_peers(known, {{"a:1", {"10.0.0.1:1"}}});
  BOOST_TEST(plan.spawn.empty());
  BOOST_TEST(plan.retire.empty());
}

BOOST_AUTO_TEST_CASE(an_address_the_name_no_longer_gives_is_retired_unless_its_node_is_up) {
  // A pod replaced behind a headless Service: the old address goes, the new one is tried.
  std::map<std::string, known_peer> known{{"10.0.0.1:1", {"a:1", false}},
                                          {"10.0.0.2:1", {"a:1", true}}};
  auto plan = plan_peers(known, {{"a:1", {"10.0.0.3:1"}}});
  BOOST_TEST((plan.spawn == spawns{{"10.0.0.3:1", "a:1"}}));
  BOOST_TEST((plan.retire == addresses{"10.0.0.1:1"})); // 10.0.0.2 serves: kept until lost
}

BOOST_AUTO_TEST_CASE(a_failed_lookup_retires_nothing_of_its_name) {
  std::map<std::string, known_peer> known{{"10.0.0.1:1", {"a:1", false}},
                                          {"10.0.0.9:1", {"b:1", false}}};
  auto plan = plan_peers(known, {{"a:1", {}}, {"b:1", {"10.0.0.8:1"}}});
  BOOST_TEST((plan.retire == addresses{"10.0.0.9:1"}));
  BOOST_TEST((plan.spawn == spawns{{"10.0.0.8:1", "b:1"}}));
}

BOOST_AUTO_TEST_CASE(an_address_another_name_still_gives_is_kept) {
  std::map<std::string, known_peer> known{{"10.0.0.1:1", {"a:1", false}}};
  auto plan = plan_peers(known, {{"a:1", {"10.0.0.2:1"}}, {"b:1", {"10.0.0.1:1"}}});
  BOOST_TEST(plan.retire.empty());
  BOOST_TEST((plan.spawn == spawns{{"10.0.0.2:1", "a:1"}}));
}

BOOST_AUTO_TEST_SUITE_END()
