#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvstore/detail/locations.hpp"
#include "tests/printers.hpp"

namespace {

using triad::tier;
using triad::detail::location;

constexpr std::size_t block_bytes = 4096;

struct temp_dir {
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("triad-kv-locations-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
  static inline int counter = 0;
};

// One pool: {name, tier, domain, blocks, peer access}.
using pool_spec = std::tuple<std::string, tier, unsigned, std::size_t, bool>;

// Pools of `block_bytes` blocks, and a disk tier of `disk_blocks` under `dir` (none when 0).
triad::detail::locations make(std::vector<pool_spec> specs, std::size_t disk_blocks = 0,
                              const std::filesystem::path& dir = {}) {
  std::vector<std::unique_ptr<triad::memory_pool>> pools;
  std::vector<bool> peer;
  for (auto& [name, kind, domain, blocks, peer_access] : specs) {
    auto p =
        triad::memory_pool::create(name, kind, domain, block_bytes, blocks * block_bytes, nullptr);
    BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
    pools.push_back(std::move(*p));
    peer.push_back(peer_access);
  }
  std::unique_ptr<triad::disk_pool> disk;
  if (disk_blocks > 0) {
    auto d = triad::disk_pool::open(dir, 4, block_bytes, disk_blocks * (block_bytes + 512));
    BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
    disk = std::move(*d);
  }
  return triad::detail::locations{std::move(pools), std::move(peer), std::move(disk), block_bytes};
}

// Fills the pool at `loc` to the last slot.
void fill(triad::detail::locations& places, location loc) {
  while (places.has_room(loc))
    places.take(loc);
}

} // namespace

BOOST_AUTO_TEST_SUITE(locations)

BOOST_AUTO_TEST_CASE(a_pool_is_found_by_its_name_and_nothing_else_is) {
  auto places = make({{"gpu0", tier::device, 0, 2, false}, {"host0", tier::host, 0, 2, false}});
  auto host = places.find("host0");
  BOOST_REQUIRE(host.has_value());
  BOOST_TEST(host->index() == 1u);
  BOOST_TEST(places.name_of(*host) == "host0");
  BOOST_TEST(!places.find("disk").has_value());
  BOOST_TEST(places.name_of(location::disk()) == "disk");
}

BOOST_AUTO_TEST_CASE(pool_names_are_listed_by_tier_or_all) {
  auto places = make({{"gpu0", tier::device, 0, 2, false},
                      {"host0", tier::host, 0, 2, false},
                      {"gpu1", tier::device, 1, 2, false}});
  BOOST_TEST(places.names() == "gpu0, host0, gpu1");
  BOOST_TEST(places.names(tier::device) == "gpu0, gpu1");
  BOOST_TEST(places.names(tier::disk) == "none");
}

BOOST_AUTO_TEST_CASE(a_table_entry_per_pool_and_one_for_the_disk_first) {
  auto places = make({{"gpu0", tier::device, 0, 2, false}, {"host0", tier::host, 0, 2, false}});
  BOOST_TEST(places.entries() == 3u);
  BOOST_TEST(location::disk().entry() == 0u);
  BOOST_TEST(location::of_pool(1).entry() == 2u);
}

BOOST_AUTO_TEST_CASE(taking_every_slot_leaves_no_room_and_giving_one_back_makes_room) {
  auto places = make({{"host0", tier::host, 0, 2, false}});
  auto host = location::of_pool(0);
  auto a = places.take(host);
  auto b = places.take(host);
  BOOST_TEST(a != b);
  BOOST_TEST(!places.has_room(host));
  places.give_back(host, a, 0);
  BOOST_TEST(places.has_room(host));
}

BOOST_AUTO_TEST_CASE(a_store_without_a_disk_tier_has_no_room_on_disk) {
  auto places = make({{"host0", tier::host, 0, 2, false}});
  BOOST_TEST(!places.has_room(location::disk()));
  BOOST_TEST(places.pool_stats().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_device_block_goes_down_to_a_host_pool_of_its_own_domain_first) {
  auto places = make({{"host0", tier::host, 0, 2, false},
                      {"gpu1", tier::device, 1, 2, false},
                      {"host1", tier::host, 1, 2, false}});
  auto t = places.demote_target(location::of_pool(1), false);
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(places.name_of(*t) == "host1");
}

BOOST_AUTO_TEST_CASE(a_device_block_goes_to_the_first_host_pool_with_room_when_its_own_is_full) {
  auto places = make({{"host0", tier::host, 0, 2, false},
                      {"gpu1", tier::device, 1, 2, false},
                      {"host1", tier::host, 1, 2, false}});
  fill(places, location::of_pool(2));
  auto t = places.demote_target(location::of_pool(1), false);
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(places.name_of(*t) == "host0");
  fill(places, location::of_pool(0));
  BOOST_TEST(!places.demote_target(location::of_pool(1), false).has_value());
}

BOOST_AUTO_TEST_CASE(only_content_addressed_host_blocks_go_down_to_the_disk) {
  temp_dir dir;
  auto places = make({{"host0", tier::host, 0, 2, false}}, 4, dir.path);
  auto host = location::of_pool(0);
  auto t = places.demote_target(host, true);
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(t->on_disk());
  BOOST_TEST(!places.demote_target(host, false).has_value());
  BOOST_TEST(!places.demote_target(location::disk(), true).has_value()); // the lowest tier
}

BOOST_AUTO_TEST_CASE(disk_places_are_counted_and_reported_last) {
  temp_dir dir;
  auto places = make({{"host0", tier::host, 0, 2, false}}, 4, dir.path);
  places.take(location::disk());
  places.take(location::of_pool(0));
  BOOST_TEST(places.disk_blocks() == 1u);
  auto by_tier = places.blocks_by_tier();
  BOOST_TEST(by_tier[static_cast<std::size_t>(tier::host)] == 1u);
  BOOST_TEST(by_tier[static_cast<std::size_t>(tier::disk)] == 1u);
  auto stats = places.pool_stats();
  BOOST_REQUIRE(stats.size() == 2u);
  BOOST_TEST(stats.back().name == "disk");
  BOOST_TEST(stats.back().blocks == 1u);
}

BOOST_AUTO_TEST_CASE(device_to_device_across_domains_is_staged_unless_both_have_peer_access) {
  auto places = make({{"gpu0", tier::device, 0, 2, false},
                      {"gpu1", tier::device, 1, 2, false},
                      {"gpu2", tier::device, 1, 2, true},
                      {"gpu3", tier::device, 0, 2, true},
                      {"host0", tier::host, 0, 2, false}});
  auto gpu = [](std::size_t i) { return location::of_pool(i); };
  BOOST_TEST(!places.direct(gpu(0), gpu(1)));              // across domains, no peer access
  BOOST_TEST(!places.direct(gpu(0), gpu(2)));              // only one side has it
  BOOST_TEST(places.direct(gpu(3), gpu(2)));               // both have it
  BOOST_TEST(places.direct(gpu(1), gpu(2)));               // the same domain
  BOOST_TEST(places.direct(location::of_pool(4), gpu(1))); // host to device
  BOOST_TEST(places.direct(location::disk(), gpu(1)));     // disk to device
}

BOOST_AUTO_TEST_CASE(a_staged_copy_goes_through_a_host_pool_of_the_targets_domain) {
  auto places = make({{"host0", tier::host, 0, 2, false},
                      {"gpu0", tier::device, 0, 2, false},
                      {"host1", tier::host, 1, 2, false},
                      {"gpu1", tier::device, 1, 2, false}});
  auto into_gpu1 = places.staging_for(location::of_pool(3));
  BOOST_REQUIRE(into_gpu1.has_value());
  BOOST_TEST(places.name_of(*into_gpu1) == "host1");
  auto into_gpu0 = places.staging_for(location::of_pool(1));
  BOOST_REQUIRE(into_gpu0.has_value());
  BOOST_TEST(places.name_of(*into_gpu0) == "host0");
}

BOOST_AUTO_TEST_CASE(a_staged_copy_goes_through_the_first_host_pool_when_its_domain_has_none) {
  auto places = make({{"gpu0", tier::device, 0, 2, false},
                      {"host1", tier::host, 1, 2, false},
                      {"host2", tier::host, 2, 2, false},
                      {"gpu3", tier::device, 3, 2, false}});
  auto stage = places.staging_for(location::of_pool(3));
  BOOST_REQUIRE(stage.has_value());
  BOOST_TEST(places.name_of(*stage) == "host1");
  auto no_host = make({{"gpu0", tier::device, 0, 2, false}, {"gpu1", tier::device, 1, 2, false}});
  BOOST_TEST(!no_host.staging_for(location::of_pool(1)).has_value());
}

BOOST_AUTO_TEST_CASE(the_first_host_pool_is_the_first_pool_when_there_is_none) {
  auto places = make({{"gpu0", tier::device, 0, 2, false}, {"host1", tier::host, 1, 2, false}});
  BOOST_TEST(places.first_host().index() == 1u);
  auto devices = make({{"gpu0", tier::device, 0, 2, false}});
  BOOST_TEST(devices.first_host().index() == 0u);
}

BOOST_AUTO_TEST_CASE(memory_places_name_their_slot_and_disk_places_their_file) {
  temp_dir dir;
  auto places = make({{"host0", tier::host, 0, 2, false}}, 4, dir.path);
  auto host = location::of_pool(0);
  auto slot = places.take(host);
  auto mem = places.in_memory(host, slot);
  BOOST_TEST((mem.kind == tier::host));
  BOOST_TEST(mem.size == block_bytes);
  BOOST_TEST(mem.memory.size() == block_bytes);
  auto file = places.on_disk(triad::disk_entry{42, 0, {1, 2, 3, 4}, 7, {}});
  BOOST_TEST((file.kind == tier::disk));
  BOOST_REQUIRE(file.meta != nullptr);
  BOOST_TEST(file.meta->path == places.disk()->path_of(42));
  BOOST_TEST(file.meta->checksum == 7u);
}

BOOST_AUTO_TEST_SUITE_END()
