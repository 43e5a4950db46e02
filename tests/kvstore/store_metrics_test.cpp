#include <string>

#include <boost/test/unit_test.hpp>

#include "kvstore/detail/store_metrics.hpp"

namespace {

using triad::tier;

constexpr std::size_t block_bytes = 4096;

bool has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(store_metrics)

BOOST_AUTO_TEST_CASE(every_event_is_counted_in_the_snapshot_without_a_registry) {
  triad::detail::store_metrics m{nullptr, block_bytes};
  BOOST_TEST(!m.exported());
  m.put_shared();
  m.refused_busy();
  m.refused_busy();
  m.evicted();
  m.demoted();
  m.promoted();
  m.pin_expired();
  m.pin_ended();
  m.checksum_failed();
  m.dropped_damaged();
  m.actor_spawned();
  m.moved(tier::host, tier::disk, 0.001);
  m.held({1, 2, 3}); // no gauges: nothing happens
  triad::kv_store_stats s;
  m.fill(s);
  BOOST_TEST(s.puts_shared == 1u);
  BOOST_TEST(s.busy == 2u);
  BOOST_TEST(s.evictions == 1u);
  BOOST_TEST(s.demotions == 1u);
  BOOST_TEST(s.promotions == 1u);
  BOOST_TEST(s.pin_expiries == 1u);
  BOOST_TEST(s.pins_ended == 1u);
  BOOST_TEST(s.checksum_failures == 1u);
  BOOST_TEST(s.dropped_damaged == 1u);
  BOOST_TEST(s.actors_spawned == 1u);
  BOOST_TEST(s.transfers == 1u);
  BOOST_TEST(s.bytes_moved == block_bytes);
}

BOOST_AUTO_TEST_CASE(the_snapshot_leaves_pools_blocks_and_disk_damage_to_the_store) {
  triad::detail::store_metrics m{nullptr, block_bytes};
  triad::kv_store_stats s;
  s.blocks = 7;
  s.disk_damaged_on_open = 2;
  m.fill(s);
  BOOST_TEST(s.blocks == 7u);
  BOOST_TEST(s.disk_damaged_on_open == 2u);
  BOOST_TEST(s.pools.empty());
}

BOOST_AUTO_TEST_CASE(a_move_counts_its_bytes_and_its_time_by_path) {
  triad::metrics_registry registry;
  triad::detail::store_metrics m{&registry, block_bytes};
  BOOST_TEST(m.exported());
  m.moved(tier::host, tier::disk, 0.001);
  m.moved(tier::host, tier::disk, 0.002);
  m.moved(tier::disk, tier::device, 0.003);
  auto text = registry.render();
  BOOST_TEST(has(text, R"(triad_kv_bytes_moved_total{path="host->disk"} 8192)"));
  BOOST_TEST(has(text, R"(triad_kv_bytes_moved_total{path="disk->device"} 4096)"));
  BOOST_TEST(has(text, R"(triad_kv_transfer_seconds_count{path="host->disk"} 2)"));
}

BOOST_AUTO_TEST_CASE(events_with_a_metric_count_it_too) {
  triad::metrics_registry registry;
  triad::detail::store_metrics m{&registry, block_bytes};
  m.evicted();
  m.demoted();
  m.demoted();
  m.promoted();
  m.pin_expired();
  m.pin_ended();
  m.pin_ended();
  m.checksum_failed();
  auto text = registry.render();
  BOOST_TEST(has(text, "triad_kv_evictions_total 1"));
  BOOST_TEST(has(text, "triad_kv_demotions_total 2"));
  BOOST_TEST(has(text, "triad_kv_promotions_total 1"));
  BOOST_TEST(has(text, "triad_kv_pin_expiries_total 1"));
  BOOST_TEST(has(text, "triad_kv_pins_ended_total 2"));
  BOOST_TEST(has(text, "triad_kv_checksum_failures_total 1"));
}

BOOST_AUTO_TEST_CASE(blocks_held_set_the_block_and_byte_gauges_of_each_tier) {
  triad::metrics_registry registry;
  triad::detail::store_metrics m{&registry, block_bytes};
  m.held({1, 2, 3});
  auto text = registry.render();
  BOOST_TEST(has(text, R"(triad_kv_blocks{tier="device"} 1)"));
  BOOST_TEST(has(text, R"(triad_kv_blocks{tier="disk"} 3)"));
  BOOST_TEST(has(text, R"(triad_kv_bytes{tier="host"} 8192)"));
  m.held({0, 0, 0});
  BOOST_TEST(has(registry.render(), R"(triad_kv_blocks{tier="disk"} 0)"));
}

BOOST_AUTO_TEST_CASE(each_tiers_budget_is_a_gauge) {
  triad::metrics_registry registry;
  triad::detail::store_metrics m{&registry, block_bytes};
  m.budget({0, 1 << 20, 4 << 20});
  auto text = registry.render();
  BOOST_TEST(has(text, R"(triad_kv_budget_bytes{tier="device"} 0)"));
  BOOST_TEST(has(text, R"(triad_kv_budget_bytes{tier="host"} 1048576)"));
  BOOST_TEST(has(text, R"(triad_kv_budget_bytes{tier="disk"} 4194304)"));
}

BOOST_AUTO_TEST_SUITE_END()
