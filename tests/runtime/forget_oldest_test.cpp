#include <cstdint>
#include <map>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "runtime/forget_oldest.hpp"

namespace {

// A map of `stamps.size()` entries, key i stamped stamps[i].
std::map<int, std::uint64_t> stamped(const std::vector<std::uint64_t>& stamps) {
  std::map<int, std::uint64_t> m;
  for (std::size_t i = 0; i < stamps.size(); ++i)
    m[static_cast<int>(i)] = stamps[i];
  return m;
}

const auto stamp_of = [](std::uint64_t v) { return v; };

} // namespace

BOOST_AUTO_TEST_CASE(the_least_recently_used_half_is_forgotten) {
  auto m = stamped({5, 1, 7, 3, 8, 2});
  triad::forget_oldest_half(m, stamp_of);
  BOOST_TEST(m.size() == 3u);
  for (const auto& [k, v] : m)
    BOOST_TEST(v >= 5u); // 5, 7 and 8 stay
}

BOOST_AUTO_TEST_CASE(a_median_stamp_many_share_still_forgets_at_least_half) {
  auto m = stamped({1, 2, 2, 2, 3, 3});
  triad::forget_oldest_half(m, stamp_of);
  BOOST_TEST(m.size() <= 3u);
  for (const auto& [k, v] : m)
    BOOST_TEST(v == 3u); // the newest stay
  auto same = stamped({4, 4, 4, 4});
  triad::forget_oldest_half(same, stamp_of);
  BOOST_TEST(same.size() <= 2u);
}
