#include "runtime/domains.hpp"

#include "runtime/detail/scheduler.hpp"

#include <caf/logger.hpp>

#include <algorithm>
#include <thread>

#include <caf/actor_cast.hpp>
#include <caf/actor_registry.hpp>
#include <caf/exit_reason.hpp>
#include <caf/thread_hook.hpp>

namespace triad {

namespace {

thread_local int current_domain_id = -1;

// Marks every thread of a domain's actor system with its domain id and, on the real machine,
// binds it to the domain's worker cpus.
class domain_thread_hook : public caf::thread_hook {
public:
  domain_thread_hook(int id, const topology* topo, std::vector<unsigned> cpus,
                     std::shared_ptr<std::atomic<std::size_t>> failures)
      : id_(id)
      , topo_(topo)
      , cpus_(std::move(cpus))
      , failures_(std::move(failures)) {}

  void init(caf::actor_system&) override {}

  void thread_started() override {
    current_domain_id = id_;
    if (topo_ != nullptr && !topo_->bind_this_thread(cpus_))
      failures_->fetch_add(1);
  }

  void thread_terminates() override { current_domain_id = -1; }

private:
  int id_;
  const topology* topo_;
  std::vector<unsigned> cpus_;
  std::shared_ptr<std::atomic<std::size_t>> failures_;
};

} // namespace

int current_domain() noexcept {
  return current_domain_id;
}

namespace detail {

void restore_thread_logger() noexcept {
  caf::logger::set_current_actor_system(nullptr);
}

} // namespace detail

domain::domain(unsigned id, std::vector<unsigned> cpus, const topology* topo,
               const scheduler_config& sched)
    : id_(id)
    , name_("domain" + std::to_string(id))
    , cpus_(std::move(cpus))
    , bound_(topo != nullptr)
    , bind_failures_(std::make_shared<std::atomic<std::size_t>>(0))
    , config_(std::make_unique<caf::actor_system_config>()) {
  auto threads = sched.threads_per_domain != 0 ? sched.threads_per_domain : cpus_.size();
  config_->set("scheduler.max-threads", threads);
  config_->add_thread_hook<domain_thread_hook>(static_cast<int>(id_), topo, cpus_, bind_failures_);
  detail::idle_policy idle{sched.poll_attempts, sched.moderate_sleep};
  config_->module_factories.push_back(
      [idle](caf::actor_system& sys) { return detail::make_domain_scheduler(sys, idle); });
  system_ = std::make_unique<caf::actor_system>(*config_);
}

domain::~domain() {
  stop(std::chrono::seconds{10});
}

void domain::track(const caf::strong_actor_ptr& ptr) {
  if (ptr == nullptr)
    return;
  // Running actors seen while pruning, released after the lock: the last reference to an
  // actor may go with them, and its destruction must not run under the lock.
  std::vector<caf::strong_actor_ptr> alive;
  std::lock_guard guard{tracked_mutex_};
  if (tracked_.size() >= prune_at_) {
    // An address keeps its actor's memory (CAF frees an actor's storage with its last weak
    // reference): drop the finished ones, each time the list has doubled since the last pass.
    std::erase_if(tracked_, [&](const caf::actor_addr& a) {
      auto p = caf::actor_cast<caf::strong_actor_ptr>(a);
      if (p == nullptr)
        return true;
      alive.push_back(std::move(p));
      return false;
    });
    prune_at_ = std::max(defaults::scheduler::tracked_prune_min, 2 * tracked_.size());
  }
  tracked_.push_back(caf::actor_cast<caf::actor_addr>(ptr));
}

std::size_t domain::tracked() {
  std::lock_guard guard{tracked_mutex_};
  return tracked_.size();
}

std::size_t domain::stop(std::chrono::milliseconds deadline) {
  if (stopped_)
    return 0;
  stopped_ = true;
  std::vector<caf::actor_addr> tracked;
  {
    std::lock_guard guard{tracked_mutex_};
    tracked.swap(tracked_);
  }
  for (const auto& addr : tracked)
    if (auto ptr = caf::actor_cast<caf::strong_actor_ptr>(addr))
      caf::anon_send_exit(ptr, caf::exit_reason::user_shutdown);
  auto until = std::chrono::steady_clock::now() + deadline;
  auto& registry = system_->registry();
  while (registry.running() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  auto left = registry.running();
  // Actors nobody stopped must not hang the process: give up waiting for them.
  if (left > 0)
    system_->await_actors_before_shutdown(false);
  system_.reset();
  return left;
}

expected<std::unique_ptr<domain_set>> domain_set::start(const topology& topo, const plan& p,
                                                        const scheduler_config& sched,
                                                        bool bind_threads) {
  std::unique_ptr<domain_set> set{new domain_set(p)};
  const topology* binder = bind_threads && topo.info().is_this_machine ? &topo : nullptr;
  for (const auto& dp : p.domains) {
    if (!dp.active())
      continue;
    if (dp.worker_cpus.empty())
      return make_error(errc::invalid_argument,
                        "plan gives domain " + std::to_string(dp.domain) + " no worker cpus");
    auto threads = sched;
    if (threads.threads_per_domain == 0) // the plan's count
      threads.threads_per_domain = dp.worker_threads;
    set->domains_.push_back(std::make_unique<domain>(dp.domain, dp.worker_cpus, binder, threads));
    if (dp.orchestration && set->orchestration_ == nullptr)
      set->orchestration_ = set->domains_.back().get();
  }
  if (set->orchestration_ == nullptr)
    return make_error(errc::invalid_argument, "plan has no orchestration domain");
  return set;
}

domain_set::~domain_set() {
  stop();
}

expected<domain*> domain_set::find(unsigned id) {
  for (auto& d : domains_)
    if (d->id() == id)
      return d.get();
  std::string have;
  for (auto& d : domains_)
    have += (have.empty() ? "" : ", ") + d->name();
  return make_error(errc::not_found, "no running domain with id " + std::to_string(id) +
                                         "; running domains: " + have);
}

expected<domain*> domain_set::find(std::string_view name) {
  if (name == "orchestration")
    return orchestration_;
  if (name == "tools") {
    for (const auto& dp : plan_.domains)
      if (!dp.tool_cpus.empty())
        return find(dp.domain);
    return make_error(errc::not_found, "the plan has no tool domain");
  }
  if (name.starts_with("device:")) {
    auto dev = name.substr(7);
    if (const auto* p = plan_.find_device(dev))
      return find(p->domain);
    return make_error(errc::not_found, "no device named '" + std::string{dev} + "' in the plan");
  }
  for (auto& d : domains_)
    if (d->name() == name)
      return d.get();
  std::string have;
  for (auto& d : domains_)
    have += d->name() + ", ";
  return make_error(errc::not_found, "no domain named '" + std::string{name} + "'; allowed: " +
                                         have + "orchestration, tools, device:<name>");
}

std::size_t domain_set::stop(std::chrono::milliseconds deadline) {
  if (stopped_)
    return 0;
  stopped_ = true;
  std::size_t left = 0;
  // Devices and tools first, orchestration (which talks to them) last.
  for (auto it = domains_.rbegin(); it != domains_.rend(); ++it)
    if (it->get() != orchestration_)
      left += (*it)->stop(deadline);
  if (orchestration_ != nullptr)
    left += orchestration_->stop(deadline);
  return left;
}

} // namespace triad
