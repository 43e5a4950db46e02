#include "tools/service.hpp"
#include "runtime/node_clock.hpp"

#include <mutex>

#include <caf/all.hpp>

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::tool_invocation)

namespace triad {

struct tool_service::counters {
  counter* started = nullptr;   // invocations spawned
  counter* succeeded = nullptr; // the tool ran and answered ok
  counter* failed = nullptr;    // refused as invalid, failed in the tool, or timed out
  counter* busy = nullptr;      // every tool domain refused
  histogram* seconds = nullptr; // from spawn to result

  void inc(counter* c) {
    if (c != nullptr)
      c->inc();
  }
};

// Idle invocation actors, by tool domain, shared by the service and its invocations: an
// invocation that has reported goes back here for the next call into its domain, so a call
// costs a message instead of an actor's spawn and exit (about 2 us of CPU each, and a wake-up
// of CAF's clock thread, which every exiting actor tells to drop its timeouts).
struct tool_service::idle_invocations {
  std::mutex mutex;
  std::vector<std::vector<caf::actor>> by_domain;

  // An idle invocation of domain `d`, or none.
  caf::actor take(std::size_t d) {
    std::lock_guard guard{mutex};
    auto& idle = by_domain[d];
    if (idle.empty())
      return nullptr;
    auto a = std::move(idle.back());
    idle.pop_back();
    return a;
  }

  // Keeps `a` for the next call into domain `d`; false when enough are idle there already.
  bool put_back(std::size_t d, caf::actor a) {
    std::lock_guard guard{mutex};
    auto& idle = by_domain[d];
    if (idle.size() >= defaults::tool_invocation::idle_per_domain)
      return false;
    idle.push_back(std::move(a));
    return true;
  }

  // Drops every idle handle (their actors are stopped with their domains).
  void clear() {
    std::lock_guard guard{mutex};
    for (auto& idle : by_domain)
      idle.clear();
  }
};

namespace {

// Starts an idle invocation on a call: `(invoke_atom, tool_invocation, caf::actor owner,
// std::size_t first)`.
using invoke_atom = caf::atom_constant<caf::atom("toolinv")>;

// Supervises tool calls, one at a time: submits the call to the executors in turn, starting at
// `first`, until one accepts; the executor's worker sends the result straight here (past the
// deadline, the executor sends a timeout instead). Reports to the owner once, and goes back to
// its domain's idle invocations for the next call (or exits when enough are idle).
class invocation_actor : public homed_actor {
public:
  invocation_actor(caf::actor_config& cfg, tool_invocation call, caf::actor owner,
                   std::vector<std::shared_ptr<tool_executor>> executors, std::size_t first,
                   std::shared_ptr<tool_service::counters> counters,
                   std::shared_ptr<tool_service::idle_invocations> idle)
      : homed_actor(cfg)
      , call_(std::move(call))
      , owner_(std::move(owner))
      , executors_(std::move(executors))
      , home_(first)
      , counters_(std::move(counters))
      , idle_(std::move(idle)) {}

  caf::behavior make_behavior() override {
    set_down_handler([this](const caf::down_msg& down) {
      if (down.source == owner_.address())
        quit(); // nobody is left to tell; the tool process ends under its own limits
    });
    begin(home_);
    return {
        [this](invoke_atom, tool_invocation& call, caf::actor& owner, std::size_t first) {
          call_ = std::move(call);
          owner_ = std::move(owner);
          begin(first);
        },
        [this](tool_result_atom, std::uint64_t ticket, tool_reply& reply) {
          if (ticket != ticket_ || !owner_)
            return; // the result of a call that has ended already
          if (reply.timed_out) {
            finish_timed_out();
            return;
          }
          counters_->inc(reply.ok ? counters_->succeeded : counters_->failed);
          finish(std::move(reply));
        },
    };
  }

  // Drops the handles this actor holds, so nothing it holds keeps the executors alive.
  void on_exit() override {
    executors_.clear();
    owner_ = nullptr;
    idle_ = nullptr;
  }

private:
  void begin(std::size_t first) {
    start_ = node_clock::now();
    monitor(owner_);
    submit_from(first);
  }

  // Submits the call to the executors in turn, starting at `first`, until one accepts; answers
  // busy when all are full.
  void submit_from(std::size_t first) {
    auto deadline = start_ + call_.deadline;
    std::size_t stopped = 0;
    for (std::size_t tried = 0; tried < executors_.size(); ++tried) {
      auto& executor = executors_[(first + tried) % executors_.size()];
      if (node_clock::now() >= deadline) {
        finish_timed_out();
        return;
      }
      tool_submission s{
          call_.name, call_.arguments_json, deadline,      caf::actor_cast<caf::actor>(this),
          ++ticket_,  call_.trace,          call_.trace_id};
      auto r = executor->submit(s);
      if (r == submit_result::accepted)
        return; // the result or a timeout comes as tool_result_atom
      stopped += r == submit_result::stopped;
    }
    if (stopped == executors_.size()) { // not busy: no executor will take calls again
      finish_failed("tool '" + call_.name + "': every tool executor has stopped");
      return;
    }
    counters_->inc(counters_->busy);
    tool_reply busy;
    busy.busy = true;
    busy.content =
        "busy: all " + std::to_string(executors_.size()) + " tool domains are full; retry later";
    finish(std::move(busy));
  }

  void finish_timed_out() {
    finish_failed("tool '" + call_.name + "' did not answer within " +
                  std::to_string(call_.deadline.count()) + " ms");
  }

  void finish_failed(std::string message) {
    counters_->inc(counters_->failed);
    tool_reply r;
    r.content = std::move(message);
    finish(std::move(r));
  }

  void finish(tool_reply reply) {
    if (counters_->seconds != nullptr)
      counters_->seconds->observe(
          std::chrono::duration<double>(node_clock::now() - start_).count());
    // The owner would otherwise send this actor a down message when it exits.
    demonitor(owner_);
    auto owner = std::move(owner_);
    auto id = call_.id;
    owner_ = nullptr;
    call_ = {};
    // Idle again before the owner hears: its next call can find this actor (a call that comes
    // now waits in the mailbox until this handler is done).
    bool kept = idle_ != nullptr && idle_->put_back(home_, caf::actor_cast<caf::actor>(this));
    send(owner, tool_result_atom::value, id, std::move(reply));
    if (!kept)
      quit();
  }

  tool_invocation call_;
  caf::actor owner_;
  std::vector<std::shared_ptr<tool_executor>> executors_;
  std::size_t home_;         // the tool domain it lives in (index into the service's domains)
  std::uint64_t ticket_ = 0; // the current submission's id (results of others are dropped)
  std::shared_ptr<tool_service::counters> counters_;
  std::shared_ptr<tool_service::idle_invocations> idle_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace

expected<std::unique_ptr<tool_service>>
tool_service::start(domain_set& domains, const plan& p, const topology& topo,
                    std::shared_ptr<const tool_registry> tools, const tools_config& config,
                    metrics_registry* metrics) {
  if (tools == nullptr)
    return make_error(errc::invalid_argument, "tool service: no registry");
  std::unique_ptr<tool_service> service{new tool_service};
  service->tools_ = tools;
  service->counters_ = std::make_shared<counters>();
  service->idle_ = std::make_shared<idle_invocations>();
  if (metrics != nullptr) {
    auto& c = *service->counters_;
    auto add = [&](counter*& slot, std::string_view outcome) -> expected<void> {
      auto m = metrics->add_counter("triad_tool_invocations_total",
                                    "Tool invocations by outcome (started, ok, failed, busy).",
                                    {{"outcome", std::string{outcome}}});
      if (!m)
        return m.error();
      slot = *m;
      return {};
    };
    for (auto [slot, outcome] : {std::pair{&c.started, "started"},
                                 {&c.succeeded, "ok"},
                                 {&c.failed, "failed"},
                                 {&c.busy, "busy"}})
      if (auto ok = add(*slot, outcome); !ok)
        return ok.error();
    auto h = metrics->add_histogram("triad_tool_invocation_seconds",
                                    "Tool invocations from start to result.",
                                    default_duration_buckets());
    if (!h)
      return h.error();
    c.seconds = *h;
  }
  for (const auto& d : p.domains) {
    if (d.tool_cpus.empty())
      continue;
    auto home = domains.find(d.domain);
    if (!home)
      return home.error();
    tool_executor_options o;
    o.concurrency = d.tool_cpus.size();
    o.queue_capacity = config.queue_capacity;
    o.cpus = d.tool_cpus;
    o.topo = topo.info().is_this_machine ? &topo : nullptr;
    auto ex = tool_executor::start(**home, tools, o);
    if (!ex)
      return ex.error();
    service->domains_.push_back({*home, std::move(*ex)});
  }
  if (service->domains_.empty())
    return make_error(errc::invalid_argument,
                      "tool service: the plan reserves no tool cpus in any domain");
  service->idle_->by_domain.resize(service->domains_.size());
  return service;
}

tool_service::~tool_service() {
  idle_->clear();
  for (auto& d : domains_)
    caf::anon_send_exit(d.executor->actor(), caf::exit_reason::user_shutdown);
}

caf::actor tool_service::invoke(tool_invocation call, caf::actor owner) {
  counters_->inc(counters_->started);
  auto first = next_.fetch_add(1, std::memory_order_relaxed) % domains_.size();
  if (auto idle = idle_->take(first)) {
    caf::anon_send(idle, invoke_atom::value, std::move(call), std::move(owner), first);
    return idle;
  }
  std::vector<std::shared_ptr<tool_executor>> executors;
  for (auto& d : domains_)
    executors.push_back(d.executor);
  return domains_[first].home->spawn<invocation_actor>(
      std::move(call), std::move(owner), std::move(executors), first, counters_, idle_);
}

std::vector<unsigned> tool_service::domain_ids() const {
  std::vector<unsigned> ids;
  for (auto& d : domains_)
    ids.push_back(d.home->id());
  return ids;
}

} // namespace triad
