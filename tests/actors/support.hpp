#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "actors/node.hpp"
#include "tests/printers.hpp"
#include "tests/tools/test_support.hpp"

namespace triad::test {

using namespace std::chrono_literals;

/// The embedded default (one cpu prefill and one cpu decode device, tiny preset), unbound so
/// it runs the same on any CI machine, with the "nap" and "flood" tools; `tweak` changes the
/// config further before the node starts, `tweak_options` its options.
inline std::unique_ptr<triad::node>
start_node(triad::orchestration_options o = {},
           const std::function<void(triad::node_config&)>& tweak = {},
           const std::function<void(triad::node_options&)>& tweak_options = {}) {
  auto config = triad::default_config();
  config.topology.bind_threads = false;
  for (auto& d : config.devices)
    d.memory_mib = 256;
  config.orchestration = o;
  if (tweak)
    tweak(config);
  triad::node_options opts;
  opts.tools = triad::test::sleeper_registry();
  if (tweak_options)
    tweak_options(opts);
  auto n = triad::node::start(config, opts);
  BOOST_REQUIRE_MESSAGE(n.has_value(), (n ? "" : n.error().message));
  return std::move(*n);
}

/// Collects one request's events until it ends.
struct recorder {
  std::mutex m;
  std::condition_variable cv;
  std::vector<triad::request_event> events;
  bool ended = false;

  triad::request_callback callback() {
    return [this](const triad::request_event& e) {
      std::lock_guard<std::mutex> g{m};
      events.push_back(e);
      if (e.kind == triad::request_event::done || e.kind == triad::request_event::error) {
        ended = true;
        cv.notify_all();
      }
    };
  }
  const triad::request_event& wait() {
    std::unique_lock<std::mutex> l{m};
    BOOST_REQUIRE_MESSAGE(cv.wait_for(l, 120s, [&] { return ended; }), "request did not end");
    return events.back();
  }
  std::size_t count(triad::request_event::kind_t k) {
    std::lock_guard<std::mutex> g{m};
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [k](const auto& e) { return e.kind == k; }));
  }
};

} // namespace triad::test
