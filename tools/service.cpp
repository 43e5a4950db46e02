#include "tools/service.hpp"

#include <caf/all.hpp>

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

namespace {

// Supervises one tool call: asks the executors in turn, starting at `first`, until one accepts,
// then waits for its reply up to the deadline, reports to the owner once, and exits.
class invocation_actor : public homed_actor {
public:
  invocation_actor(caf::actor_config& cfg, tool_invocation call, caf::actor owner,
                   std::vector<caf::actor> executors, std::size_t first,
                   std::shared_ptr<tool_service::counters> counters)
      : homed_actor(cfg)
      , call_(std::move(call))
      , owner_(std::move(owner))
      , executors_(std::move(executors))
      , next_(first)
      , counters_(std::move(counters))
      , start_(std::chrono::steady_clock::now()) {}

  caf::behavior make_behavior() override {
    monitor(owner_);
    set_down_handler([this](const caf::down_msg& down) {
      if (down.source == owner_.address())
        quit(); // nobody is left to tell; the tool process ends under its own limits
    });
    ask_next();
    return {[](caf::ok_atom) {}}; // all work happens in response handlers
  }

  // Drops the handles this actor holds, so a pending request's promise (which holds this
  // actor) cannot keep it and the executors alive in a cycle.
  void on_exit() override {
    executors_.clear();
    owner_ = nullptr;
  }

private:
  void ask_next() {
    if (tried_ == executors_.size()) {
      counters_->inc(counters_->busy);
      tool_reply busy;
      busy.busy = true;
      busy.content =
          "busy: all " + std::to_string(executors_.size()) + " tool domains are full; retry later";
      finish(std::move(busy));
      return;
    }
    auto& executor = executors_[(next_ + tried_) % executors_.size()];
    ++tried_;
    auto left = call_.deadline - std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - start_);
    if (left.count() <= 0) {
      finish_timed_out();
      return;
    }
    // The executor answers a timeout itself once the deadline has passed: no timer per call.
    request(executor, caf::infinite, tool_call_atom::value, call_.name, call_.arguments_json,
            static_cast<std::int64_t>(left.count()))
        .then(
            [this](tool_reply& reply) {
              if (reply.busy) {
                ask_next();
                return;
              }
              counters_->inc(reply.ok ? counters_->succeeded : counters_->failed);
              finish(std::move(reply));
            },
            [this](caf::error& err) {
              if (err == caf::sec::request_timeout)
                finish_timed_out();
              else
                finish_failed("tool '" + call_.name +
                              "': its executor went away: " + system().render(err));
            });
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
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    send(owner_, tool_result_atom::value, call_.id, std::move(reply));
    // The owner would otherwise send this (then dead) actor a down message when it exits.
    demonitor(owner_);
    quit();
  }

  tool_invocation call_;
  caf::actor owner_;
  std::vector<caf::actor> executors_;
  std::size_t next_;
  std::size_t tried_ = 0;
  std::shared_ptr<tool_service::counters> counters_;
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
    auto ex = spawn_tool_executor(**home, tools, o);
    if (!ex)
      return ex.error();
    service->domains_.push_back({*home, std::move(*ex)});
  }
  if (service->domains_.empty())
    return make_error(errc::invalid_argument,
                      "tool service: the plan reserves no tool cpus in any domain");
  return service;
}

tool_service::~tool_service() {
  for (auto& d : domains_)
    caf::anon_send_exit(d.executor, caf::exit_reason::user_shutdown);
}

caf::actor tool_service::invoke(tool_invocation call, caf::actor owner) {
  counters_->inc(counters_->started);
  auto first = next_.fetch_add(1, std::memory_order_relaxed) % domains_.size();
  std::vector<caf::actor> executors;
  for (auto& d : domains_)
    executors.push_back(d.executor);
  return domains_[first].home->spawn<invocation_actor>(std::move(call), std::move(owner),
                                                       std::move(executors), first, counters_);
}

std::vector<unsigned> tool_service::domain_ids() const {
  std::vector<unsigned> ids;
  for (auto& d : domains_)
    ids.push_back(d.home->id());
  return ids;
}

} // namespace triad
