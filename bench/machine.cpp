#include "bench/machine.hpp"

#include <atomic>
#include <chrono>
#include <thread>

namespace triad::bench {

double thread_pingpong_us(std::size_t rounds) {
  alignas(64) std::atomic<std::size_t> ping{0};
  alignas(64) std::atomic<std::size_t> pong{0};
  std::thread peer([&] {
    for (std::size_t i = 1; i <= rounds; ++i) {
      while (ping.load(std::memory_order_acquire) != i) {
      }
      pong.store(i, std::memory_order_release);
    }
  });
  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 1; i <= rounds; ++i) {
    ping.store(i, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != i) {
    }
  }
  std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
  peer.join();
  return us.count() / static_cast<double>(rounds);
}

} // namespace triad::bench
