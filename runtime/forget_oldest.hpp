#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace triad {

/// Bounds a map whose entries are stamped with when they were last used (`stamp` reads an
/// entry's value): forgets the least recently used half, at least. Entries stamped alike go
/// together: when fewer than half are older than the median stamp, every entry stamped with it
/// goes too.
template<class Map, class Stamp>
void forget_oldest_half(Map& map, Stamp stamp) {
  if (map.empty())
    return;
  std::vector<std::uint64_t> lasts;
  lasts.reserve(map.size());
  for (const auto& [k, v] : map)
    lasts.push_back(stamp(v));
  auto mid = lasts.begin() + static_cast<std::ptrdiff_t>(lasts.size() / 2);
  std::nth_element(lasts.begin(), mid, lasts.end());
  const auto cut = *mid;
  const auto half = map.size() / 2;
  if (std::erase_if(map, [cut, &stamp](const auto& kv) { return stamp(kv.second) < cut; }) < half)
    std::erase_if(map, [cut, &stamp](const auto& kv) { return stamp(kv.second) <= cut; });
}

} // namespace triad
