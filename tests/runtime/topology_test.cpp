#include <algorithm>
#include <set>

#include <boost/test/unit_test.hpp>

#include "runtime/topology.hpp"
#include "tests/printers.hpp"
#include "tests/runtime/test_support.hpp"

using triad::test::topology_file;

namespace {

triad::topology load(const std::string& name) {
  auto topo = triad::topology::load_xml(topology_file(name));
  BOOST_REQUIRE_MESSAGE(topo.has_value(), (topo ? "" : topo.error().message));
  return std::move(topo).value();
}

// Every PU lies in exactly one domain and every core's PUs in its own domain.
void check_consistent(const triad::topology_info& info) {
  std::set<unsigned> seen;
  unsigned total = 0;
  for (const auto& d : info.domains) {
    BOOST_TEST(std::is_sorted(d.cpus.begin(), d.cpus.end()));
    for (auto cpu : d.cpus)
      BOOST_TEST(seen.insert(cpu).second, "cpu " << cpu << " in two domains");
    total += static_cast<unsigned>(d.cpus.size());
    for (auto core : d.cores) {
      BOOST_REQUIRE_LT(core, info.cores.size());
      BOOST_TEST(info.cores[core].domain == d.id);
      for (auto pu : info.cores[core].pus)
        BOOST_TEST(std::binary_search(d.cpus.begin(), d.cpus.end(), pu));
    }
  }
  BOOST_TEST(total == info.pu_count);
}

} // namespace

BOOST_AUTO_TEST_SUITE(topology)

BOOST_AUTO_TEST_CASE(dgx2_has_two_domains_and_sixteen_gpus_each_local_to_its_node) {
  auto topo = load("nvidia-dgx2.xml");
  const auto& info = topo.info();
  BOOST_TEST(info.domains.size() == 2u);
  BOOST_TEST(info.devices.size() == 16u);
  check_consistent(info);
  std::size_t on_node[2] = {0, 0};
  for (const auto& dev : info.devices) {
    BOOST_TEST(dev.kind == triad::device_kind::gpu);
    BOOST_TEST(dev.name.rfind("nvml", 0) == 0u);
    BOOST_TEST(dev.local_domains.size() == 1u);
    BOOST_REQUIRE_LT(dev.domain, 2u);
    ++on_node[dev.domain];
    BOOST_TEST(!dev.pci_bus_id.empty());
  }
  // hwloc places nvml0..7 under package 0 / node 0 and nvml8..15 under node 1.
  BOOST_TEST(on_node[0] == 8u);
  BOOST_TEST(on_node[1] == 8u);
  BOOST_TEST(info.find_device("nvml0")->domain == 0u);
  BOOST_TEST(info.find_device("nvml15")->domain == 1u);
  BOOST_TEST(!info.is_this_machine);
}

BOOST_AUTO_TEST_CASE(two_socket_host_with_one_gpu_sees_smt_siblings_and_the_gpu_locality) {
  auto topo = load("32em64t-2n8c2t-pci-normalio.xml");
  const auto& info = topo.info();
  check_consistent(info);
  BOOST_TEST(info.domains.size() == 2u);
  BOOST_TEST(info.cores.size() == 16u);
  BOOST_TEST(info.pu_count == 32u);
  for (const auto& core : info.cores)
    BOOST_TEST(core.pus.size() == 2u);
  const auto* cuda = info.find_device("cuda0");
  BOOST_REQUIRE(cuda != nullptr);
  BOOST_TEST(cuda->kind == triad::device_kind::coproc);
  BOOST_TEST(cuda->subtype == "CUDA");
  BOOST_TEST(cuda->domain == 1u);
  // Every OS device of the same PCI function reports the same nearest domain.
  for (const auto& dev : info.devices)
    if (dev.pci_bus_id == cuda->pci_bus_id)
      BOOST_TEST(dev.domain == cuda->domain);
}

BOOST_AUTO_TEST_CASE(ninety_six_core_host_has_four_domains_of_24_cores) {
  auto topo = load("96em64t-4n4d3ca2co-pci.xml");
  const auto& info = topo.info();
  check_consistent(info);
  BOOST_TEST(info.domains.size() == 4u);
  for (const auto& d : info.domains)
    BOOST_TEST(d.cores.size() == 24u);
  BOOST_TEST(info.devices.size() >= 1u);
}

BOOST_AUTO_TEST_CASE(host_with_24_domains_has_no_accelerators) {
  auto topo = load("192em64t-24n8c2t.xml");
  const auto& info = topo.info();
  check_consistent(info);
  BOOST_TEST(info.domains.size() == 24u);
  BOOST_TEST(info.cores.size() == 192u);
  BOOST_TEST(info.pu_count == 384u);
  BOOST_TEST(info.devices.empty());
  for (const auto& d : info.domains)
    BOOST_TEST(d.memory_bytes > 0u);
}

BOOST_AUTO_TEST_CASE(synthetic_snc3_host_has_six_domains) {
  auto topo = triad::topology::load_synthetic("pack:2 numa:3 core:43 pu:2");
  BOOST_REQUIRE(topo.has_value());
  const auto& info = topo->info();
  check_consistent(info);
  BOOST_TEST(info.domains.size() == 6u);
  BOOST_TEST(info.cores.size() == 258u);
  BOOST_TEST(info.pu_count == 516u);
  BOOST_TEST(info.domains[0].package == 0u);
  BOOST_TEST(info.domains[5].package == 1u);
  for (const auto& d : info.domains)
    BOOST_TEST(d.cores.size() == 43u);
  BOOST_TEST(info.devices.empty());
}

BOOST_AUTO_TEST_CASE(this_machine_loads_with_at_least_one_domain_and_binds) {
  auto topo = triad::topology::load_machine();
  BOOST_REQUIRE(topo.has_value());
  const auto& info = topo->info();
  check_consistent(info);
  BOOST_TEST(info.is_this_machine);
  BOOST_TEST(!info.domains.empty());
  BOOST_TEST(info.pu_count >= 1u);
  auto bound = topo->bind_this_thread(info.domains.front().cpus);
  BOOST_TEST(bound.has_value());
}

BOOST_AUTO_TEST_CASE(binding_to_a_file_topology_is_refused) {
  auto topo = triad::topology::load_synthetic("numa:2 core:2 pu:1");
  BOOST_REQUIRE(topo.has_value());
  auto bound = topo->bind_this_thread({0});
  BOOST_REQUIRE(!bound);
  BOOST_TEST(bound.error().code == triad::errc::unsupported);
}

BOOST_AUTO_TEST_CASE(missing_xml_file_is_an_error_naming_the_path) {
  auto topo = triad::topology::load_xml("/nonexistent/topo.xml");
  BOOST_REQUIRE(!topo);
  BOOST_TEST(topo.error().code == triad::errc::not_found);
  BOOST_TEST(topo.error().message.find("/nonexistent/topo.xml") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(malformed_synthetic_string_is_an_error_naming_it) {
  auto topo = triad::topology::load_synthetic("pack:two numa:x");
  BOOST_REQUIRE(!topo);
  BOOST_TEST(topo.error().code == triad::errc::parse_error);
  BOOST_TEST(topo.error().message.find("pack:two numa:x") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
