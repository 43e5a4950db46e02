#include "actors/router.hpp"

#include <deque>

#include <caf/all.hpp>

#include "runtime/homed_actor.hpp"

namespace triad {

namespace {

bool qualifies(device_role role, route_stage stage) {
  switch (stage) {
  case route_stage::prefill:
    return role != device_role::decode;
  case route_stage::decode:
    return role != device_role::prefill;
  case route_stage::any:
    return role == device_role::both;
  }
  return false;
}

class router_actor : public homed_actor {
public:
  router_actor(caf::actor_config& cfg, std::vector<routed_device> devices,
               orchestration_options options)
      : homed_actor(cfg)
      , options_(std::move(options)) {
    for (auto& d : devices)
      devices_.push_back({std::move(d), 0, false});
  }

  caf::behavior make_behavior() override {
    return {
        [this](route_atom, route_order& order) -> caf::result<route_reply> {
          if (!any_qualifies(order.stage))
            return route_reply{false, {}, {}, "no device serves this stage", 0};
          if (auto* d = pick(order.stage); d != nullptr && waiting_.empty())
            return grant(*d);
          if (waiting_.size() >= options_.max_waiting) {
            auto ms = static_cast<std::uint32_t>(options_.retry_after.count());
            return route_reply{false,
                               {},
                               {},
                               "overloaded: " + std::to_string(waiting_.size()) +
                                   " requests wait for devices; retry after " + std::to_string(ms) +
                                   " ms",
                               ms};
          }
          auto promise = make_response_promise<route_reply>();
          waiting_.push_back({std::move(order), promise, next_order_++});
          serve();
          return promise;
        },
        [this](release_atom, std::string& name) {
          if (auto* d = find(name)) {
            if (d->used > 0)
              --d->used;
            d->said_busy = false;
          }
          serve();
        },
        [this](device_busy_atom, std::string& name) {
          if (auto* d = find(name))
            d->said_busy = true;
        },
    };
  }

  void on_exit() override {
    for (auto& w : waiting_)
      w.promise.deliver(route_reply{false, {}, {}, "the node is stopping", 0});
    waiting_.clear();
  }

private:
  struct device {
    routed_device info;
    std::size_t used;
    bool said_busy;
  };
  struct waiter {
    route_order order;
    caf::response_promise promise;
    std::uint64_t arrival;
  };

  device* find(const std::string& name) {
    for (auto& d : devices_)
      if (d.info.name == name)
        return &d;
    return nullptr;
  }

  bool any_qualifies(route_stage stage) const {
    for (const auto& d : devices_)
      if (qualifies(d.info.role, stage))
        return true;
    return false;
  }

  // The qualifying device with the most free slots; ties go to the first in config order.
  device* pick(route_stage stage) {
    device* best = nullptr;
    for (auto& d : devices_) {
      if (!qualifies(d.info.role, stage) || d.said_busy || d.used >= d.info.slots)
        continue;
      if (best == nullptr || d.info.slots - d.used > best->info.slots - best->used)
        best = &d;
    }
    return best;
  }

  route_reply grant(device& d) {
    ++d.used;
    return route_reply{true, d.info.actor, d.info.name, {}, 0};
  }

  // Hands free slots to waiting requests: in arrival order (FCFS), or the least attained
  // service first (PLAS, ties in arrival order). A waiter whose stage has no free device stays.
  void serve() {
    for (;;) {
      auto best = waiting_.end();
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        if (pick(it->order.stage) == nullptr)
          continue;
        if (best == waiting_.end())
          best = it;
        else if (options_.schedule == schedule_policy::plas &&
                 it->order.attained < best->order.attained)
          best = it;
        if (options_.schedule == schedule_policy::fcfs)
          break;
      }
      if (best == waiting_.end())
        return;
      auto reply = grant(*pick(best->order.stage));
      best->promise.deliver(std::move(reply));
      waiting_.erase(best);
    }
  }

  orchestration_options options_;
  std::vector<device> devices_;
  std::deque<waiter> waiting_;
  std::uint64_t next_order_ = 0;
};

} // namespace

caf::actor spawn_router(domain& home, std::vector<routed_device> devices,
                        orchestration_options options) {
  return home.spawn<router_actor>(std::move(devices), std::move(options));
}

} // namespace triad
