#include "kvstore/detail/store_metrics.hpp"

namespace triad::detail {

store_metrics::store_metrics(metrics_registry* registry, std::size_t block_bytes)
    : registry_(registry)
    , block_bytes_(block_bytes) {
  if (registry_ == nullptr)
    return;
  auto c = [&](const char* name, const char* help) -> counter* {
    auto r = registry_->add_counter(name, help);
    return r ? *r : nullptr;
  };
  evictions_metric_ = c("triad_kv_evictions_total", "KV blocks dropped for space.");
  demotions_metric_ = c("triad_kv_demotions_total", "KV blocks moved a tier down.");
  promotions_metric_ = c("triad_kv_promotions_total", "KV blocks moved into a device pool.");
  expiries_metric_ = c("triad_kv_pin_expiries_total", "KV pins that reached their deadline.");
  ended_metric_ = c("triad_kv_pins_ended_total",
                    "KV pins their holder ended before their deadline (a request that let go of "
                    "its kept blocks, from this node or another).");
  checksum_metric_ =
      c("triad_kv_checksum_failures_total", "KV copies or reads that failed their check.");
  for (auto t : {tier::device, tier::host, tier::disk}) {
    auto lbl = labels{{"tier", std::string{to_string(t)}}};
    auto b = registry_->add_gauge("triad_kv_blocks", "KV blocks held, by tier.", lbl);
    auto y = registry_->add_gauge("triad_kv_bytes", "KV block bytes held, by tier.", lbl);
    if (b && y)
      tier_gauges_[static_cast<std::size_t>(t)] = {*b, *y};
  }
}

void store_metrics::device_pages(const std::string& device, std::uint64_t n) {
  if (registry_ == nullptr)
    return;
  auto it = device_pages_.find(device);
  if (it == device_pages_.end()) {
    auto g = registry_->add_gauge(
        "triad_kv_device_pages",
        "Pages in a device's own memory (its prefix cache) that KV store blocks stand for.",
        {{"device", device}});
    it = device_pages_.emplace(device, g ? *g : nullptr).first;
  }
  if (it->second != nullptr)
    it->second->set(static_cast<double>(n));
}

// -- events --

void store_metrics::evicted() noexcept {
  ++evictions_;
  bump(evictions_metric_);
}

void store_metrics::demoted() noexcept {
  ++demotions_;
  bump(demotions_metric_);
}

void store_metrics::promoted() noexcept {
  ++promotions_;
  bump(promotions_metric_);
}

void store_metrics::pin_expired() noexcept {
  ++pin_expiries_;
  bump(expiries_metric_);
}

void store_metrics::pin_ended() noexcept {
  ++pins_ended_;
  bump(ended_metric_);
}

void store_metrics::checksum_failed() noexcept {
  ++checksum_failures_;
  bump(checksum_metric_);
}

void store_metrics::moved(tier from, tier to, double seconds) {
  ++transfers_;
  bytes_moved_ += block_bytes_;
  if (registry_ == nullptr)
    return;
  auto path = std::string{to_string(from)} + "->" + std::string{to_string(to)};
  auto& slot = paths_[path];
  if (slot.first == nullptr) {
    auto b = registry_->add_counter("triad_kv_bytes_moved_total", "KV block bytes moved, by path.",
                                    {{"path", path}});
    auto h = registry_->add_histogram("triad_kv_transfer_seconds", "KV block moves, by path.",
                                      default_duration_buckets(), {{"path", path}});
    if (!b || !h)
      return;
    slot = {*b, *h};
  }
  slot.first->inc(static_cast<double>(block_bytes_));
  slot.second->observe(seconds);
}

void store_metrics::held(const std::array<std::uint64_t, 3>& blocks) {
  for (std::size_t t = 0; t < blocks.size(); ++t)
    if (tier_gauges_[t].first != nullptr) {
      tier_gauges_[t].first->set(static_cast<double>(blocks[t]));
      tier_gauges_[t].second->set(static_cast<double>(blocks[t] * block_bytes_));
    }
}

void store_metrics::budget(const std::array<std::uint64_t, 3>& bytes) {
  if (registry_ == nullptr)
    return;
  for (auto t : {tier::device, tier::host, tier::disk})
    if (auto g = registry_->add_gauge("triad_kv_budget_bytes", "KV bytes a tier may hold.",
                                      {{"tier", std::string{to_string(t)}}}))
      (*g)->set(static_cast<double>(bytes[static_cast<std::size_t>(t)]));
}

// -- snapshot --

void store_metrics::fill(kv_store_stats& s) const {
  s.puts_shared = puts_shared_;
  s.bytes_moved = bytes_moved_;
  s.transfers = transfers_;
  s.demotions = demotions_;
  s.promotions = promotions_;
  s.evictions = evictions_;
  s.pin_expiries = pin_expiries_;
  s.pins_ended = pins_ended_;
  s.checksum_failures = checksum_failures_;
  s.dropped_damaged = dropped_damaged_;
  s.busy = busy_;
  s.actors_spawned = actors_spawned_;
  s.lent = lent_;
}

} // namespace triad::detail
