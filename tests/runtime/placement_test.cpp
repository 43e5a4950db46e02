#include <algorithm>
#include <map>
#include <set>

#include <boost/test/unit_test.hpp>

#include "actors/node_config.hpp"
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

triad::device_config sim_device(std::string name) {
  auto d = device(std::move(name));
  d.backend = triad::device_backend::sim;
  return d;
}

triad::device_config cpu_device(std::string name, std::optional<unsigned> domain,
                                std::size_t compute_cores = 0) {
  auto d = device(std::move(name), {}, domain);
  d.compute_cores = compute_cores;
  return d;
}

bool has_note(const triad::plan& p, const std::string& part) {
  for (const auto& n : p.notes)
    if (n.find(part) != std::string::npos)
      return true;
  return false;
}

// Checks the compute sets of a plan's cpu devices: inside their domain, the driver core in the
// set, compute_cpus the PUs of compute_cores, sets of one domain disjoint when the domain has
// as many cores as cpu devices, and every cpu of an active domain used by compute, workers or
// tools.
void check_compute_sets(const triad::topology_info& topo, const triad::plan& p,
                        const triad::node_config& config) {
  std::map<unsigned, std::size_t> cpu_devices;
  for (std::size_t i = 0; i < p.devices.size(); ++i)
    if (config.devices[i].backend == triad::device_backend::cpu)
      ++cpu_devices[p.devices[i].domain];
  std::map<unsigned, std::set<unsigned>> used;      // per domain: cpus someone runs on
  std::map<unsigned, std::set<unsigned>> computing; // per domain: compute cores so far
  for (std::size_t i = 0; i < p.devices.size(); ++i) {
    const auto& d = p.devices[i];
    if (config.devices[i].backend != triad::device_backend::cpu) {
      BOOST_TEST(d.compute_cores.empty());
      BOOST_TEST(d.compute_cpus.empty());
      for (auto pu : topo.cores[d.driver_core].pus)
        used[d.domain].insert(pu);
      continue;
    }
    BOOST_TEST_REQUIRE(!d.compute_cores.empty(), d.name << " has no compute cores");
    BOOST_TEST(d.driver_core == d.compute_cores.front());
    BOOST_TEST(d.driver_cpu == topo.cores[d.driver_core].pus.front());
    std::vector<unsigned> pus;
    for (auto core : d.compute_cores) {
      BOOST_TEST(topo.cores[core].domain == d.domain, d.name << ": core " << core);
      if (topo.domains[d.domain].cores.size() >= cpu_devices[d.domain])
        BOOST_TEST(computing[d.domain].insert(core).second,
                   d.name << ": core " << core << " in two compute sets");
      pus.insert(pus.end(), topo.cores[core].pus.begin(), topo.cores[core].pus.end());
    }
    std::sort(pus.begin(), pus.end());
    BOOST_TEST(d.compute_cpus == pus);
    used[d.domain].insert(pus.begin(), pus.end());
  }
  for (const auto& dp : p.domains) {
    if (!dp.active())
      continue;
    auto& u = used[dp.domain];
    u.insert(dp.worker_cpus.begin(), dp.worker_cpus.end());
    u.insert(dp.tool_cpus.begin(), dp.tool_cpus.end());
    const auto& cpus = topo.domains[dp.domain].cpus;
    BOOST_TEST((std::vector<unsigned>(u.begin(), u.end()) == cpus),
               "domain " << dp.domain << " leaves cpus unused");
  }
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
  // A sim device: its driver keeps a core of its own, the highest.
  auto p = triad::make_plan(topo.info(), config_with({sim_device("a")}, 1));
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

BOOST_AUTO_TEST_CASE(cpu_devices_in_one_domain_split_its_free_cores) {
  // Domain 0 (orchestration) keeps core 0 for workers; tools go to domain 1.
  auto topo = synthetic("pack:2 numa:2 core:16 pu:2");
  auto c = config_with({cpu_device("a", 0), cpu_device("b", 0)});
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  check_compute_sets(topo.info(), *p, c);
  const auto& a = p->devices[0];
  const auto& b = p->devices[1];
  BOOST_TEST(a.compute_cores.size() == 8u); // 15 free cores: the remainder to the first
  BOOST_TEST(a.compute_cores.front() == 8u);
  BOOST_TEST(a.compute_cores.back() == 15u);
  BOOST_TEST(b.compute_cores.size() == 7u);
  BOOST_TEST(b.compute_cores.front() == 1u);
  BOOST_TEST(b.driver_core == 1u);
  BOOST_TEST(a.compute_cpus.size() == 16u); // two PUs per core
  BOOST_TEST(!a.shared_core);
  BOOST_TEST(p->domains[0].worker_cpus == topo.info().cores[0].pus);
  BOOST_TEST(p->domains[0].tool_cpus.empty());
  BOOST_TEST(p->notes.empty());
}

BOOST_AUTO_TEST_CASE(cpu_devices_in_two_domains_each_get_their_domains_free_cores) {
  // Automatic domains: a in 0 (orchestration, one core for workers), b in 1 (one tool core).
  auto topo = synthetic("pack:2 numa:2 core:16 pu:2");
  auto c = config_with({device("a"), device("b")});
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  check_compute_sets(topo.info(), *p, c);
  const auto& a = p->devices[0];
  const auto& b = p->devices[1];
  BOOST_TEST(a.domain == 0u);
  BOOST_TEST(b.domain == 1u);
  BOOST_TEST(a.compute_cores.size() == 15u);
  BOOST_TEST(a.compute_cores.front() == 1u);
  BOOST_TEST(b.compute_cores.size() == 15u);
  BOOST_TEST(b.compute_cores.front() == 17u); // core 16 runs tools
  BOOST_TEST(p->domains[1].tool_cpus == topo.info().cores[16].pus);
  // Domain 1 has no core left for its workers: they share the tool core.
  BOOST_TEST(p->domains[1].worker_cpus == topo.info().cores[16].pus);
  BOOST_TEST(has_note(*p, "domain 1: actor workers share cpus with tool processes"));
}

BOOST_AUTO_TEST_CASE(two_cores_and_the_default_devices_compute_on_a_core_each_overlapping) {
  // This machine: two cores, the default prefill and decode cpu devices and one tool core.
  auto topo = synthetic("numa:1 core:2 pu:1");
  auto c = triad::default_config();
  c.tools.cores = 1;
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  check_compute_sets(topo.info(), *p, c);
  BOOST_TEST(p->devices[0].compute_cores == std::vector<unsigned>{1});
  BOOST_TEST(p->devices[1].compute_cores == std::vector<unsigned>{0});
  BOOST_TEST(p->domains[0].tool_cpus == std::vector<unsigned>{0});
  BOOST_TEST(p->domains[0].worker_cpus == (std::vector<unsigned>{0, 1}));
  BOOST_TEST(p->domains[0].worker_threads == 1u);
  BOOST_TEST(has_note(*p, "compute sets span all of its 2 cores and overlap actor workers, "
                          "tool processes"));
}

BOOST_AUTO_TEST_CASE(more_cpu_devices_than_cores_share_cores_round_robin_and_the_plan_says_so) {
  auto topo = synthetic("numa:1 core:2 pu:1");
  auto c = config_with({device("a"), device("b"), device("c")});
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  check_compute_sets(topo.info(), *p, c);
  BOOST_TEST(p->devices[0].compute_cores == std::vector<unsigned>{1});
  BOOST_TEST(p->devices[1].compute_cores == std::vector<unsigned>{0});
  BOOST_TEST(p->devices[2].compute_cores == std::vector<unsigned>{1});
  BOOST_TEST(p->devices[0].shares_with == std::vector<std::string>{"c"});
  BOOST_TEST(has_note(*p, "compute sets share cores round-robin: a, c on core 1"));
}

BOOST_AUTO_TEST_CASE(an_explicit_compute_cores_is_honoured_and_automatic_devices_take_the_rest) {
  auto topo = synthetic("pack:2 numa:2 core:16 pu:2");
  auto c = config_with({cpu_device("a", 0, 4), cpu_device("b", 0)});
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  check_compute_sets(topo.info(), *p, c);
  BOOST_TEST(p->devices[0].compute_cores == (std::vector<unsigned>{12, 13, 14, 15}));
  BOOST_TEST(p->devices[0].compute_cpus.size() == 8u);
  BOOST_TEST(p->devices[1].compute_cores.size() == 11u); // 15 free cores less a's 4
  BOOST_TEST(p->devices[1].compute_cores.front() == 1u);

  // Explicit sets alone leave the rest of the domain to the workers.
  c = config_with({cpu_device("a", 0, 2)});
  p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE(p.has_value());
  check_compute_sets(topo.info(), *p, c);
  BOOST_TEST(p->devices[0].compute_cores == (std::vector<unsigned>{14, 15}));
  BOOST_TEST(p->domains[0].worker_cpus.size() == 28u);
}

BOOST_AUTO_TEST_CASE(compute_cores_beyond_the_domains_cores_is_an_error_naming_the_key) {
  auto topo = synthetic("pack:2 numa:2 core:16 pu:2");
  auto p = triad::make_plan(topo.info(), config_with({cpu_device("a", 1, 17)}));
  BOOST_REQUIRE(!p);
  BOOST_TEST(p.error().code == triad::errc::invalid_argument);
  BOOST_TEST(p.error().message.find("devices[0] ('a').compute_cores = 17") != std::string::npos,
             p.error().message);
  BOOST_TEST(p.error().message.find("16 cores of its domain 1") != std::string::npos);
  BOOST_TEST(p.error().message.find("allowed: 0..16") != std::string::npos);
  // All of the domain's cores is allowed, overlapping workers and tools with a note.
  auto c = config_with({cpu_device("a", 0, 16)});
  auto all = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE(all.has_value());
  check_compute_sets(topo.info(), *all, c);
  BOOST_TEST(all->devices[0].compute_cores.size() == 16u);
  BOOST_TEST(has_note(*all, "overlap actor workers"));
}

BOOST_AUTO_TEST_CASE(cpu_devices_leave_sim_drivers_their_cores) {
  auto topo = synthetic("numa:1 core:8 pu:1");
  auto c = config_with({sim_device("s"), device("a")});
  auto p = triad::make_plan(topo.info(), c);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  check_compute_sets(topo.info(), *p, c);
  BOOST_TEST(p->devices[0].driver_core == 7u);
  BOOST_TEST(p->devices[1].compute_cores == (std::vector<unsigned>{2, 3, 4, 5, 6}));
  BOOST_TEST(p->domains[0].tool_cpus == std::vector<unsigned>{0});
  BOOST_TEST(p->domains[0].worker_cpus == std::vector<unsigned>{1});
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
