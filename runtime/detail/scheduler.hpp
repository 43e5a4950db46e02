#pragma once

#include <chrono>
#include <cstddef>

#include <caf/actor_system.hpp>

namespace triad::detail {

/// How a domain scheduler's idle workers wait.
struct idle_policy {
  /// Polls of the ready count (each followed by a CPU pause) before a worker looks further.
  std::size_t polls = 1;
  /// When above 0: after the polls, as many more, each followed by a sleep this long, before the
  /// worker blocks until work arrives.
  std::chrono::microseconds moderate_sleep{0};
};

/// The scheduler module of a domain's actor system (installed through
/// `actor_system_config::module_factories`): `max-threads` workers taking actors from one
/// lock-free queue (moodycamel) counted by a semaphore that only makes a system call when a
/// worker sleeps. It replaces CAF 0.17's work-stealing coordinator, whose every enqueue from
/// another thread takes the target worker's mutex, allocates a queue node and, per resume, runs
/// a dynamic_cast for its logger. The printer actor is CAF's own, and so is the clock thread's
/// clock, told only of the ending actors that set a timeout.
caf::actor_system::module* make_domain_scheduler(caf::actor_system& sys, idle_policy idle);

} // namespace triad::detail
