#include "kvstore/detail/index_actor.hpp"

#include <array>
#include <unordered_map>

#include <caf/all.hpp>

#include "kvstore/store.hpp"

namespace triad::detail {

namespace {

class index_actor : public homed<kv_index_actor::base> {
public:
  index_actor(caf::actor_config& cfg, std::size_t block_tokens, metrics_registry* metrics,
              std::shared_ptr<kv_directory> directory)
      : homed(cfg)
      , block_tokens_(block_tokens)
      , directory_(std::move(directory)) {
    if (metrics == nullptr)
      return;
    const char* help = "Full blocks of prefix lookups, as hits by tier or misses.";
    for (auto t : {tier::device, tier::host, tier::disk}) {
      auto c = metrics->add_counter("triad_kv_lookup_blocks_total", help,
                                    {{"result", "hit"}, {"tier", std::string{to_string(t)}}});
      if (c)
        hit_metric_[static_cast<std::size_t>(t)] = *c;
    }
    auto c = metrics->add_counter("triad_kv_lookup_blocks_total", help,
                                  {{"result", "miss"}, {"tier", "none"}});
    if (c)
      miss_metric_ = *c;
  }

  behavior_type make_behavior() override {
    return {
        [this](kv_index_put_atom, block_hash hash, block_id id, std::uint8_t t) {
          map_[hash] = {id, static_cast<tier>(t)};
          if (directory_)
            directory_->insert(hash);
        },
        [this](kv_index_erase_atom, block_hash hash, block_id id) {
          auto it = map_.find(hash);
          if (it != map_.end() && it->second.id == id) {
            map_.erase(it);
            if (directory_)
              directory_->erase(hash);
          }
        },
        [this](kv_lookup_atom, std::vector<token>& tokens) -> kv_prefix {
          return find(chain_hashes(tokens, block_tokens_));
        },
        [this](kv_find_atom, std::vector<block_hash>& hashes) -> kv_prefix { return find(hashes); },
        [this](kv_stats_atom) -> std::vector<std::uint64_t> {
          return {hits_[0], hits_[1], hits_[2], misses_};
        },
    };
  }

private:
  // The blocks of `hashes` in order up to the first missing one; each full block of the query
  // counts once, as a hit on its tier or a miss.
  kv_prefix find(const std::vector<block_hash>& hashes) {
    kv_prefix p;
    std::size_t i = 0;
    for (; i < hashes.size(); ++i) {
      auto it = map_.find(hashes[i]);
      if (it == map_.end())
        break;
      p.ids.push_back(it->second.id);
      p.tiers.emplace_back(to_string(it->second.where));
      count_hit(it->second.where);
    }
    p.tokens = i * block_tokens_;
    misses_ += hashes.size() - i;
    if (miss_metric_ != nullptr)
      miss_metric_->inc(static_cast<double>(hashes.size() - i));
    return p;
  }

  struct entry {
    block_id id = 0;
    tier where = tier::device;
  };

  void count_hit(tier t) {
    auto k = static_cast<std::size_t>(t);
    ++hits_[k];
    if (auto* m = hit_metric_[k])
      m->inc();
  }

  std::size_t block_tokens_;
  std::shared_ptr<kv_directory> directory_;
  std::unordered_map<block_hash, entry> map_;
  std::array<std::uint64_t, 3> hits_{};
  std::uint64_t misses_ = 0;
  std::array<counter*, 3> hit_metric_{};
  counter* miss_metric_ = nullptr;
};

} // namespace

kv_index_actor spawn_index_actor(domain& home, std::size_t block_tokens, metrics_registry* metrics,
                                 std::shared_ptr<kv_directory> directory) {
  return home.spawn<index_actor>(block_tokens, metrics, std::move(directory));
}

} // namespace triad::detail
