#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "kvstore/block.hpp"
#include "runtime/domains.hpp"

namespace triad::detail {

/// The store's record of the pages in the devices' own memory (their prefix caches): one block
/// per page, with its id, identity (chain hash, parent, tokens), device, last use and checksum
/// (known once the device first lent it). Pure bookkeeping: the store gives each block its
/// actor and ends it; the bytes stay with the device, which lends them on a read.
class resident_pages {
public:
  /// One page's block.
  struct page {
    block_id id = 0;
    block_hash hash = 0;
    block_hash parent = 0;
    std::vector<token> tokens; ///< its own tokens (page_tokens)
    std::string device;
    caf::actor actor; ///< the block's actor, in the device's domain
    std::chrono::steady_clock::time_point last_use;
    std::uint64_t checksum = 0; ///< 0 until the device first lent it
  };

  /// A device the store keeps blocks for.
  struct device {
    caf::actor_addr owner;  ///< lends the pages (weak: the store keeps no device alive)
    domain* home = nullptr; ///< where its pages' block actors live
  };

  /// Notes a device; a second join of the same name replaces the first (its pages end first).
  void join(const std::string& name, device d) {
    devices_[name] = d;
    count_.emplace(name, 0);
  }
  /// The device named `name`, or null.
  const device* find_device(const std::string& name) const {
    auto it = devices_.find(name);
    return it == devices_.end() ? nullptr : &it->second;
  }
  /// Forgets a device (its pages must have ended).
  void leave(const std::string& name) {
    devices_.erase(name);
    count_.erase(name);
  }

  /// The block of `hash` on `device`, or null.
  page* find(const std::string& device, block_hash hash) {
    auto it = by_device_.find(key{device, hash});
    return it == by_device_.end() ? nullptr : &pages_.at(it->second);
  }
  /// The block `id`, or null.
  page* find(block_id id) {
    auto it = pages_.find(id);
    return it == pages_.end() ? nullptr : &it->second;
  }
  /// Adds a page's block (its device must not hold the hash already).
  page& add(page p) {
    auto id = p.id;
    by_device_[key{p.device, p.hash}] = id;
    ++count_[p.device];
    return pages_[id] = std::move(p);
  }
  /// Ends a block; returns it (its actor to retire), or nothing when unknown.
  std::optional<page> remove(block_id id) {
    auto it = pages_.find(id);
    if (it == pages_.end())
      return std::nullopt;
    page out = std::move(it->second);
    pages_.erase(it);
    by_device_.erase(key{out.device, out.hash});
    if (auto c = count_.find(out.device); c != count_.end() && c->second > 0)
      --c->second;
    return out;
  }
  /// The ids of `device`'s blocks.
  std::vector<block_id> of_device(const std::string& device) const {
    std::vector<block_id> out;
    for (auto it = by_device_.lower_bound(key{device, 0});
         it != by_device_.end() && it->first.device == device; ++it)
      out.push_back(it->second);
    return out;
  }

  /// The tokens of block `id`'s chain from the first page through its own, and its page
  /// number; nothing when a page before it is no longer on its device (the chain cannot be
  /// named to the device).
  std::optional<std::pair<std::vector<token>, std::uint64_t>> chain_of(block_id id) const {
    auto it = pages_.find(id);
    if (it == pages_.end())
      return std::nullopt;
    std::vector<const page*> path{&it->second};
    while (path.back()->parent != root_hash) {
      auto up = by_device_.find(key{path.back()->device, path.back()->parent});
      if (up == by_device_.end())
        return std::nullopt;
      path.push_back(&pages_.at(up->second));
    }
    std::vector<token> tokens;
    for (auto p = path.rbegin(); p != path.rend(); ++p)
      tokens.insert(tokens.end(), (*p)->tokens.begin(), (*p)->tokens.end());
    return std::pair{std::move(tokens), static_cast<std::uint64_t>(path.size() - 1)};
  }

  /// Blocks by device, for the store's stats.
  std::vector<std::pair<std::string, std::uint64_t>> counts() const {
    return {count_.begin(), count_.end()};
  }
  /// Blocks of `device`.
  std::uint64_t count(const std::string& device) const {
    auto it = count_.find(device);
    return it == count_.end() ? 0 : it->second;
  }
  /// Blocks in all.
  std::size_t size() const noexcept { return pages_.size(); }

private:
  struct key {
    std::string device;
    block_hash hash = 0;
    bool operator<(const key& o) const {
      return device != o.device ? device < o.device : hash < o.hash;
    }
  };
  std::map<std::string, device> devices_;
  std::unordered_map<block_id, page> pages_;
  std::map<key, block_id> by_device_;
  std::map<std::string, std::uint64_t> count_; // blocks by device
};

} // namespace triad::detail
