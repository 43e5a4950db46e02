#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include "runtime/config.hpp"
#include "runtime/error.hpp"
#include "runtime/homed_actor.hpp"
#include "runtime/placement.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// The id of the domain whose actor system started the calling thread, or -1 for any other
/// thread. Lets tests and metrics see where an actor actually ran.
int current_domain() noexcept;

namespace detail {
/// CAF 0.17's spawn points the calling thread's logger at the spawning system and keeps a
/// reference to it, so a domain thread that spawns into another domain would keep that domain's
/// system from ever finishing its destructor. Drops the thread's logger pointer again (domain
/// workers run without one: see runtime/detail/scheduler.cpp).
void restore_thread_logger() noexcept;
} // namespace detail

/// One NUMA domain at run time: a CAF actor system whose threads are bound to the domain's
/// worker cpus (on the real machine) and the actors spawned into it.
class domain {
public:
  /// Starts the domain's actor system; threads bind to `cpus` when `topo` is given.
  domain(unsigned id, std::vector<unsigned> cpus, const topology* topo,
         const scheduler_config& sched);
  domain(const domain&) = delete;
  domain& operator=(const domain&) = delete;
  /// Stops the domain (see stop()).
  ~domain();

  /// The NUMA domain id.
  unsigned id() const noexcept { return id_; }
  /// "domain<id>".
  const std::string& name() const noexcept { return name_; }
  /// The PUs its threads bind to.
  const std::vector<unsigned>& cpus() const noexcept { return cpus_; }
  /// Whether its threads are bound to those PUs (real machine only).
  bool bound() const noexcept { return bound_; }
  /// Threads whose binding failed (0 when binding succeeded or was not asked for).
  std::size_t bind_failures() const noexcept { return bind_failures_->load(); }
  /// The domain's actor system.
  caf::actor_system& system() noexcept { return *system_; }

  /// Spawns a class-based actor into this domain; it is stopped by stop().
  template<class Impl, class... Ts>
  auto spawn(Ts&&... xs) {
    auto handle = system_->spawn<Impl>(std::forward<Ts>(xs)...);
    detail::restore_thread_logger();
    track(caf::actor_cast<caf::strong_actor_ptr>(handle));
    return handle;
  }

  /// Spawns a function-based actor into this domain (use `homed_actor*` as its self type to
  /// keep it home); it is stopped by stop().
  template<caf::spawn_options Os = caf::no_spawn_options, class F, class... Ts>
  auto spawn(F fun, Ts&&... xs) {
    auto handle = system_->spawn<Os>(std::move(fun), std::forward<Ts>(xs)...);
    detail::restore_thread_logger();
    track(caf::actor_cast<caf::strong_actor_ptr>(handle));
    return handle;
  }

  /// Actors spawned here that stop() will still tell to exit: the running ones, and finished
  /// ones not yet pruned (at most twice the running ones, or `tracked_prune_min`).
  std::size_t tracked();

  /// Sends an exit to every actor spawned through this domain and waits up to `deadline` for
  /// all of the system's actors to finish. Returns the actors still running at the deadline.
  std::size_t stop(std::chrono::milliseconds deadline);

private:
  void track(const caf::strong_actor_ptr& ptr);

  unsigned id_;
  std::string name_;
  std::vector<unsigned> cpus_;
  bool bound_ = false;
  std::shared_ptr<std::atomic<std::size_t>> bind_failures_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::mutex tracked_mutex_;
  std::vector<caf::actor_addr> tracked_; // spawned here; finished ones pruned as it grows
  std::size_t prune_at_ = defaults::scheduler::tracked_prune_min; // size of the next pruning
  bool stopped_ = false;
};

/// All domains of a node, one per active domain of the plan.
class domain_set {
public:
  /// Starts one actor system per active domain of `p`. `topo` must outlive the set; threads
  /// are bound only when it is this machine and `sched.bind_threads` allows.
  static expected<std::unique_ptr<domain_set>>
  start(const topology& topo, const plan& p, const scheduler_config& sched, bool bind_threads);
  domain_set(const domain_set&) = delete;
  domain_set& operator=(const domain_set&) = delete;
  /// Stops all domains (stop()).
  ~domain_set();

  /// The domain with this id, or an error naming the ids there are.
  expected<domain*> find(unsigned id);
  /// The domain with this name: "domain<id>", "orchestration" (the first orchestration domain),
  /// "tools" (the first tool domain) or "device:<name>" (the domain of that device).
  expected<domain*> find(std::string_view name);
  /// The first orchestration domain.
  domain& orchestration() { return *orchestration_; }
  /// All running domains, by id.
  const std::vector<std::unique_ptr<domain>>& all() const noexcept { return domains_; }

  /// Spawns a class-based actor into the named domain.
  template<class Impl, class... Ts>
  auto spawn_in(std::string_view domain_name, Ts&&... xs)
      -> expected<decltype(std::declval<domain&>().template spawn<Impl>(std::forward<Ts>(xs)...))> {
    auto d = find(domain_name);
    if (!d)
      return d.error();
    return (*d)->template spawn<Impl>(std::forward<Ts>(xs)...);
  }

  /// Orderly shutdown: stops every domain (actors exit, then systems join), orchestration last.
  /// Returns the number of actors that did not finish before `deadline` (per domain).
  std::size_t stop(std::chrono::milliseconds deadline = std::chrono::seconds{10});

private:
  domain_set(plan p)
      : plan_(std::move(p)) {}

  plan plan_;
  std::vector<std::unique_ptr<domain>> domains_;
  domain* orchestration_ = nullptr;
  bool stopped_ = false;
};

} // namespace triad
