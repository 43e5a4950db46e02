#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "runtime/memory.hpp"
#include "tests/printers.hpp"

BOOST_AUTO_TEST_SUITE(memory)

BOOST_AUTO_TEST_CASE(mimalloc_serves_malloc_in_this_process) {
  auto info = triad::process_allocator();
  BOOST_TEST(info.name == "mimalloc");
  BOOST_TEST(info.version > 0);
#ifdef TRIAD_SANITIZE
  BOOST_TEST(!info.malloc_is_mimalloc); // ASan's interceptors own malloc in sanitizer builds
#else
  BOOST_TEST(info.malloc_is_mimalloc);
#endif
}

BOOST_AUTO_TEST_CASE(buffers_are_page_aligned_zeroed_and_counted) {
  auto a = triad::arena::create(0, 1 << 20, nullptr);
  BOOST_REQUIRE(a.has_value());
  {
    auto buf = (*a)->allocate(100000);
    BOOST_REQUIRE(buf.has_value());
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(buf->data()) % 4096 == 0u);
    BOOST_TEST(std::all_of(buf->data(), buf->data() + buf->size(),
                           [](std::byte b) { return b == std::byte{0}; }));
    std::memset(buf->data(), 0xab, buf->size());
    auto s = (*a)->stats();
    BOOST_TEST(s.in_use_bytes == 100000u);
    BOOST_TEST(s.allocations == 1u);
    BOOST_TEST(!s.numa_bound);
  }
  auto s = (*a)->stats();
  BOOST_TEST(s.in_use_bytes == 0u);
  BOOST_TEST(s.peak_bytes == 100000u);
  BOOST_TEST(s.releases == 1u);
}

BOOST_AUTO_TEST_CASE(a_full_arena_answers_exhausted_and_does_not_grow) {
  auto a = triad::arena::create(0, 10000, nullptr);
  BOOST_REQUIRE(a.has_value());
  auto first = (*a)->allocate(8000);
  BOOST_REQUIRE(first.has_value());
  auto second = (*a)->allocate(4000);
  BOOST_REQUIRE(!second);
  BOOST_TEST(second.error().code == triad::errc::exhausted);
  BOOST_TEST(second.error().message.find("2000 of 10000 free") != std::string::npos);
  BOOST_TEST((*a)->stats().refusals == 1u);
  BOOST_TEST((*a)->stats().in_use_bytes == 8000u);
  auto moved = std::move(*first);
  BOOST_TEST((*a)->stats().in_use_bytes == 8000u);
  moved = triad::arena_buffer{};
  BOOST_TEST((*a)->stats().in_use_bytes == 0u);
  BOOST_TEST((*a)->allocate(4000).has_value());
}

BOOST_AUTO_TEST_CASE(concurrent_allocations_never_exceed_capacity) {
  // One thread alone holds up to 5 buffers of at least 3 pages: more than the capacity.
  constexpr std::uint64_t capacity = 12 * 4096;
  auto a = triad::arena::create(0, capacity, nullptr);
  BOOST_REQUIRE(a.has_value());
  std::atomic<std::uint64_t> max_seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      std::vector<triad::arena_buffer> held;
      for (int i = 0; i < 2000; ++i) {
        if (auto b = (*a)->allocate(4096 * (3 + i % 5)))
          held.push_back(std::move(*b));
        auto used = (*a)->stats().in_use_bytes;
        auto prev = max_seen.load();
        while (used > prev && !max_seen.compare_exchange_weak(prev, used)) {
        }
        if (held.size() > 4)
          held.erase(held.begin());
      }
    });
  for (auto& t : threads)
    t.join();
  auto s = (*a)->stats();
  BOOST_TEST(max_seen.load() <= capacity);
  BOOST_TEST(s.peak_bytes <= capacity);
  BOOST_TEST(s.in_use_bytes == 0u);
  BOOST_TEST(s.allocations == s.releases);
  BOOST_TEST(s.refusals > 0u);
}

BOOST_AUTO_TEST_CASE(arenas_on_this_machine_bind_to_their_node) {
  auto topo = triad::topology::load_machine();
  BOOST_REQUIRE(topo.has_value());
  auto a = triad::arena::create(topo->info().domains.front().id, 1 << 24, &*topo);
  BOOST_REQUIRE(a.has_value());
  auto buf = (*a)->allocate(1 << 22);
  BOOST_REQUIRE_MESSAGE(buf.has_value(), (buf ? "" : buf.error().message));
  std::memset(buf->data(), 1, buf->size());
  BOOST_TEST((*a)->stats().numa_bound);
}

BOOST_AUTO_TEST_CASE(bad_requests_are_errors) {
  BOOST_TEST(!triad::arena::create(0, 0, nullptr));
  auto a = triad::arena::create(0, 100, nullptr);
  BOOST_REQUIRE(a.has_value());
  auto zero = (*a)->allocate(0);
  BOOST_REQUIRE(!zero);
  BOOST_TEST(zero.error().code == triad::errc::invalid_argument);
  auto topo = triad::topology::load_synthetic("numa:2 core:1 pu:1");
  BOOST_REQUIRE(topo.has_value());
  auto missing = triad::arena::create(5, 100, &*topo);
  BOOST_REQUIRE(!missing);
  BOOST_TEST(missing.error().message.find("domain 5") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
