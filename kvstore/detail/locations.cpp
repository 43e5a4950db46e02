#include "kvstore/detail/locations.hpp"

namespace triad::detail {

locations::locations(std::vector<std::unique_ptr<memory_pool>> pools, std::vector<bool> peer_access,
                     std::unique_ptr<disk_pool> disk, std::size_t block_bytes)
    : pools_(std::move(pools))
    , peer_access_(std::move(peer_access))
    , disk_(std::move(disk))
    , block_bytes_(block_bytes) {
  peer_access_.resize(pools_.size(), false);
}

// -- lookups --

tier locations::tier_of(location loc) const {
  return loc.on_disk() ? tier::disk : pools_[loc.index()]->kind();
}

std::string locations::name_of(location loc) const {
  return loc.on_disk() ? "disk" : pools_[loc.index()]->name();
}

bool locations::has_room(location loc) const {
  if (loc.on_disk())
    return disk_ && disk_blocks_ < disk_->capacity();
  return pools_[loc.index()]->used() < pools_[loc.index()]->capacity();
}

std::optional<location> locations::find(std::string_view name) const {
  for (std::size_t i = 0; i < pools_.size(); ++i)
    if (pools_[i]->name() == name)
      return location::of_pool(i);
  return std::nullopt;
}

std::string locations::names(std::optional<tier> kind) const {
  std::string s;
  for (auto& p : pools_)
    if (!kind || p->kind() == *kind)
      s += (s.empty() ? "" : ", ") + p->name();
  return s.empty() ? "none" : s;
}

location locations::first_host() const {
  for (std::size_t i = 0; i < pools_.size(); ++i)
    if (pools_[i]->kind() == tier::host)
      return location::of_pool(i);
  return location::of_pool(0);
}

std::optional<location> locations::demote_target(location from, bool indexed) const {
  if (from.on_disk())
    return std::nullopt;
  if (pools_[from.index()]->kind() == tier::device) {
    std::optional<location> any;
    for (std::size_t i = 0; i < pools_.size(); ++i) {
      if (pools_[i]->kind() != tier::host || !has_room(location::of_pool(i)))
        continue;
      if (pools_[i]->domain() == pools_[from.index()]->domain())
        return location::of_pool(i);
      if (!any)
        any = location::of_pool(i);
    }
    return any;
  }
  // A host pool near a device gives way to the home one (NUMA arenas of the domain nearest the
  // device, then the orchestration domain), then to the disk.
  if (const auto home = first_host(); home != from && tier_of(home) == tier::host && has_room(home))
    return home;
  if (indexed && has_room(location::disk()))
    return location::disk();
  return std::nullopt;
}

bool locations::direct(location from, location to) const {
  bool from_device = !from.on_disk() && is_device(from);
  bool to_device = is_device(to);
  return !from_device || !to_device ||
         pools_[from.index()]->domain() == pools_[to.index()]->domain() ||
         (peer_access_[from.index()] && peer_access_[to.index()]);
}

std::optional<location> locations::staging_for(location to) const {
  std::optional<location> stage;
  for (std::size_t i = 0; i < pools_.size(); ++i)
    if (pools_[i]->kind() == tier::host &&
        (!stage || pools_[i]->domain() == pools_[to.index()]->domain()))
      stage = location::of_pool(i);
  return stage;
}

// -- places --

slot_id locations::take(location loc) {
  if (loc.on_disk()) {
    ++disk_blocks_;
    return 0;
  }
  return *pools_[loc.index()]->allocate();
}

void locations::give_back(location loc, slot_id slot, block_hash hash) {
  if (loc.on_disk()) {
    disk_->erase(hash);
    --disk_blocks_;
  } else {
    pools_[loc.index()]->free(slot);
  }
}

block_location locations::in_memory(location loc, slot_id slot) const {
  block_location where;
  where.kind = pools_[loc.index()]->kind();
  where.size = block_bytes_;
  where.memory = pools_[loc.index()]->bytes(slot);
  return where;
}

block_location locations::on_disk(disk_entry meta) const {
  block_location where;
  where.kind = tier::disk;
  where.size = block_bytes_;
  where.disk = disk_.get();
  meta.path = disk_->path_of(meta.hash);
  where.meta = std::make_shared<const disk_entry>(std::move(meta));
  return where;
}

// -- usage --

std::array<std::uint64_t, 3> locations::blocks_by_tier() const {
  std::array<std::uint64_t, 3> n{};
  for (auto& p : pools_)
    n[static_cast<std::size_t>(p->kind())] += p->used();
  n[static_cast<std::size_t>(tier::disk)] = disk_blocks_;
  return n;
}

std::vector<kv_pool_stats> locations::pool_stats() const {
  std::vector<kv_pool_stats> s;
  for (auto& p : pools_)
    s.push_back({p->name(), std::string{to_string(p->kind())}, p->used(), p->capacity()});
  if (disk_)
    s.push_back({"disk", "disk", disk_blocks_, disk_->capacity()});
  return s;
}

} // namespace triad::detail
