#include <map>
#include <set>

#include <boost/test/unit_test.hpp>

#include "runtime/placement.hpp"
#include "tests/printers.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

triad::topology synthetic(const std::string& desc) {
  auto topo = triad::topology::load_synthetic(desc);
  BOOST_REQUIRE(topo.has_value());
  return std::move(topo).value();
}

triad::device_config device(std::string name, std::string topology_device = {},
                            std::optional<unsigned> domain = {}) {
  triad::device_config d;
  d.name = std::move(name);
  d.topology_device = std::move(topology_device);
  d.domain = domain;
  return d;
}

triad::node_config config_with(std::vector<triad::device_config> devices, unsigned tool_cores = 1) {
  triad::node_config c;
  c.devices = std::move(devices);
  c.tools.cores = tool_cores;
  return c;
}

} // namespace

BOOST_AUTO_TEST_SUITE(placement)

BOOST_AUTO_TEST_CASE(dgx2_gpus_drive_from_their_own_domain) {
  auto topo = triad::topology::load_xml(triad::test::topology_file("nvidia-dgx2.xml"));
  BOOST_REQUIRE(topo.has_value());
  auto config = config_with({device("g0", "nvml0"), device("g15", "nvml15")});
  auto p = triad::make_plan(topo->info(), config);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  BOOST_TEST(p->find_device("g0")->domain == 0u);
  BOOST_TEST(p->find_device("g15")->domain == 1u);
  for (const auto& d : p->devices) {
    BOOST_TEST(!d.shared_core);
    BOOST_TEST(topo->info().cores[d.driver_core].domain == d.domain);
  }
}

BOOST_AUTO_TEST_CASE(drivers_get_distinct_cores_while_cores_allow) {
  auto topo = synthetic("pack:2 numa:3 core:43 pu:2");
  std::vector<triad::device_config> devs;
  for (unsigned i = 0; i < 12; ++i)
    devs.push_back(device(std::string{"d"}.append(std::to_string(i)), {}, i % 6));
  auto p = triad::make_plan(topo.info(), config_with(devs));
  BOOST_REQUIRE(p.has_value());
  std::set<unsigned> cores;
  for (const auto& d : p->devices) {
    BOOST_TEST(cores.insert(d.driver_core).second, "core " << d.driver_core << " used twice");
    BOOST_TEST(!d.shared_core);
    BOOST_TEST(d.shares_with.empty());
    BOOST_TEST(topo.info().cores[d.driver_core].domain == d.domain);
    BOOST_TEST(d.driver_cpu == topo.info().cores[d.driver_core].pus.front());
  }
  for (const auto& n : p->notes)
    BOOST_TEST(n.find("share core") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(drivers_share_the_least_loaded_core_when_they_must_and_the_plan_says_so) {
  auto topo = synthetic("numa:1 core:2 pu:1");
  auto p = triad::make_plan(topo.info(),
                            config_with({device("a"), device("b"), device("c"), device("d")}));
  BOOST_REQUIRE(p.has_value());
  std::map<unsigned, int> load;
  for (const auto& d : p->devices) {
    ++load[d.driver_core];
    BOOST_TEST(d.shared_core);
    BOOST_TEST(d.shares_with.size() == 1u);
  }
  BOOST_TEST(load.size() == 2u);
  BOOST_TEST(load[0] == 2);
  BOOST_TEST(load[1] == 2);
  bool noted = false;
  for (const auto& n : p->notes)
    noted = noted || n.find("share core") != std::string::npos;
  BOOST_TEST(noted);
}

BOOST_AUTO_TEST_CASE(orchestration_defaults_to_the_first_domain_and_tools_prefer_others) {
  auto topo = synthetic("pack:2 numa:1 core:4 pu:1");
  auto p = triad::make_plan(topo.info(), config_with({}, 2));
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(p->domains[0].orchestration);
  BOOST_TEST(!p->domains[1].orchestration);
  BOOST_TEST(p->domains[0].tool_cpus.empty());
  BOOST_TEST(p->domains[1].tool_cpus.size() == 2u);
  BOOST_TEST(p->orchestration_domain().domain == 0u);
}

BOOST_AUTO_TEST_CASE(workers_avoid_driver_and_tool_cpus_when_any_remain) {
  auto topo = synthetic("numa:1 core:4 pu:1");
  auto p = triad::make_plan(topo.info(), config_with({device("a")}, 1));
  BOOST_REQUIRE(p.has_value());
  const auto& dom = p->domains[0];
  auto driver = p->devices[0].driver_cpu;
  BOOST_TEST(driver == 3u);
  BOOST_TEST(dom.tool_cpus == std::vector<unsigned>{0});
  BOOST_TEST(dom.worker_cpus == (std::vector<unsigned>{1, 2}));
  BOOST_TEST(dom.worker_threads == 2u); // one per worker cpu
}

BOOST_AUTO_TEST_CASE(workers_that_only_have_driver_cpus_run_as_one_thread) {
  // Two cores, a driver on each: the workers share them with the drivers, and a second worker
  // would only take turns with the first and the drivers.
  auto topo = synthetic("numa:1 core:2 pu:1");
  auto p = triad::make_plan(topo.info(), config_with({device("a"), device("b")}, 1));
  BOOST_REQUIRE(p.has_value());
  const auto& dom = p->domains[0];
  BOOST_TEST(dom.worker_cpus == (std::vector<unsigned>{0, 1}));
  BOOST_TEST(dom.worker_threads == 1u);
  bool noted = false;
  for (const auto& n : p->notes)
    noted = noted || n.find("one worker thread") != std::string::npos;
  BOOST_TEST(noted);
}

BOOST_AUTO_TEST_CASE(a_device_the_topology_lacks_is_an_error_naming_it) {
  auto topo = triad::topology::load_xml(triad::test::topology_file("nvidia-dgx2.xml"));
  BOOST_REQUIRE(topo.has_value());
  auto p = triad::make_plan(topo->info(), config_with({device("gpu", "nvml99")}));
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().code == triad::errc::not_found);
  BOOST_TEST(p.error().message.find("devices[0]") != std::string::npos);
  BOOST_TEST(p.error().message.find("nvml99") != std::string::npos);
  BOOST_TEST(p.error().message.find("nvml15") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(zero_tool_cores_is_an_error) {
  auto topo = synthetic("numa:2 core:2 pu:1");
  auto p = triad::make_plan(topo.info(), config_with({}, 0));
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().message.find("tools.cores = 0") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(more_tool_cores_than_the_tool_domains_have_is_an_error) {
  auto topo = synthetic("numa:2 core:2 pu:1");
  auto p = triad::make_plan(topo.info(), config_with({}, 5));
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().message.find("tools.cores = 5") != std::string::npos);
  BOOST_TEST(p.error().message.find("1..4") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_unknown_domain_is_an_error_naming_the_key) {
  auto topo = synthetic("numa:2 core:2 pu:1");
  auto c = config_with({device("a", {}, 7)});
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().message.find("devices[0] ('a').domain") != std::string::npos);
  BOOST_TEST(p.error().message.find("domain 7") != std::string::npos);
  c = config_with({});
  c.scheduler.orchestration_domains = {3};
  p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().message.find("scheduler.orchestration_domains") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(duplicate_device_names_are_an_error) {
  auto topo = synthetic("numa:1 core:4 pu:1");
  auto p = triad::make_plan(topo.info(), config_with({device("x"), device("x")}));
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().message.find("'x' is used twice") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(planning_is_pure_same_inputs_same_plan) {
  auto topo = synthetic("pack:2 numa:3 core:43 pu:2");
  auto c = config_with({device("a"), device("b"), device("c")}, 3);
  auto p1 = triad::make_plan(topo.info(), c);
  auto p2 = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE(p1 && p2);
  BOOST_REQUIRE(p1->devices.size() == p2->devices.size());
  for (std::size_t i = 0; i < p1->devices.size(); ++i) {
    BOOST_TEST(p1->devices[i].domain == p2->devices[i].domain);
    BOOST_TEST(p1->devices[i].driver_core == p2->devices[i].driver_core);
  }
  // Automatic devices spread round-robin over the domains.
  BOOST_TEST(p1->devices[0].domain == 0u);
  BOOST_TEST(p1->devices[1].domain == 1u);
  BOOST_TEST(p1->devices[2].domain == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
