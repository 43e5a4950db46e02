#include "actors/config.hpp"

namespace triad {

namespace {

constexpr options::enum_name<kv_policy> kv_policy_names[] = {
    {"discard", kv_policy::discard},
    {"pin", kv_policy::pin},
    {"demote", kv_policy::demote},
};
constexpr options::enum_name<layout> layout_names[] = {
    {"three_stage", layout::three_stage},
    {"monolithic", layout::monolithic},
};
constexpr options::enum_name<schedule_policy> schedule_policy_names[] = {
    {"fcfs", schedule_policy::fcfs},
    {"plas", schedule_policy::plas},
};
constexpr options::enum_name<tool_overflow_policy> tool_overflow_names[] = {
    {"truncate", tool_overflow_policy::truncate},
    {"fail", tool_overflow_policy::fail},
};
constexpr options::enum_name<device_failure_policy> device_failure_names[] = {
    {"retry", device_failure_policy::retry},
    {"fail", device_failure_policy::fail},
};

// orchestration_options' initializers must be the defaults:: names.
static_assert(options::name_of(kv_policy_names, orchestration_options{}.kv) ==
              defaults::orchestration::kv);
static_assert(options::name_of(layout_names, orchestration_options{}.device_layout) ==
              defaults::orchestration::device_layout);
static_assert(options::name_of(schedule_policy_names, orchestration_options{}.schedule) ==
              defaults::orchestration::schedule);
static_assert(options::name_of(tool_overflow_names, orchestration_options{}.tool_result_overflow) ==
              defaults::orchestration::tool_result_overflow);
static_assert(options::name_of(device_failure_names, orchestration_options{}.device_failure) ==
              defaults::orchestration::device_failure);

} // namespace

std::string_view to_string(kv_policy value) noexcept {
  return options::name_of(kv_policy_names, value);
}

std::string_view to_string(layout value) noexcept {
  return options::name_of(layout_names, value);
}

std::string_view to_string(schedule_policy value) noexcept {
  return options::name_of(schedule_policy_names, value);
}

std::string_view to_string(tool_overflow_policy value) noexcept {
  return options::name_of(tool_overflow_names, value);
}

std::string_view to_string(device_failure_policy value) noexcept {
  return options::name_of(device_failure_names, value);
}

const options::section<orchestration_options>& orchestration_section() {
  using c = orchestration_options;
  static const options::section<c> section{
      "orchestration",
      false,
      {
          options::choice("kv", &c::kv, kv_policy_names,
                          "where a request's KV stays while its tools run"),
          options::choice("layout", &c::device_layout, layout_names, "how devices are used"),
          options::choice("schedule", &c::schedule, schedule_policy_names,
                          "which waiting request gets a freed device slot"),
          options::integer("max_waiting", &c::max_waiting, {0, 1'000'000},
                           "requests that may wait for devices at once"),
          options::integer("retry_after_ms", &c::retry_after, {1, 600'000},
                           "what a refusal tells the caller to wait"),
          options::integer("tool_deadline_ms", &c::tool_deadline, {1, 86'400'000},
                           "how long one tool call may run"),
          options::integer("device_slots", &c::device_slots, {0, 65'536},
                           "requests one device serves at once; 0 = its admission bound"),
          options::choice("device_failure", &c::device_failure, device_failure_names,
                          "what happens to a failed device's requests"),
          options::choice("tool_result_overflow", &c::tool_result_overflow, tool_overflow_names,
                          "a tool output that would overflow the model's context"),
          options::integer("max_device_retries", &c::max_device_retries, {0, 16},
                           "moves to another device per request after failures"),
          options::integer("busy_backoff_ms", &c::busy_backoff, {1, 60'000},
                           "how often a busy device is tried again"),
          options::integer("pin_ttl_min_ms", &c::pin_ttl_min, {1, 86'400'000},
                           "shortest time a pinned KV stays on its device during a tool call"),
          options::integer("pin_ttl_max_ms", &c::pin_ttl_max, {1, 86'400'000},
                           "longest time a pinned KV stays on its device during a tool call"),
      },
      [](options::table& t, c& out) {
        // Either may be given alone (the other is its default); neither may be invalid.
        const auto min = t.state_of("pin_ttl_min_ms"), max = t.state_of("pin_ttl_max_ms");
        if (min != options::state::invalid && max != options::state::invalid &&
            (min == options::state::valid || max == options::state::valid) &&
            out.pin_ttl_min > out.pin_ttl_max)
          t.fail(min == options::state::valid ? "pin_ttl_min_ms" : "pin_ttl_max_ms",
                 "pin_ttl_min_ms " + std::to_string(out.pin_ttl_min.count()) +
                     " is more than pin_ttl_max_ms " + std::to_string(out.pin_ttl_max.count()),
                 "pin_ttl_min_ms <= pin_ttl_max_ms");
      },
  };
  return section;
}

const options::section<limits_config>& limits_section() {
  using c = limits_config;
  static const options::section<c> section{
      "limits",
      false,
      {
          options::integer("max_concurrent_requests", &c::max_concurrent_requests, {1, 1'000'000},
                           "requests the node serves at once"),
          options::integer("max_body_bytes", &c::max_body_bytes, {1, std::int64_t{1} << 30},
                           "largest request body accepted"),
          options::integer("queue_timeout_ms", &c::queue_timeout_ms, {0, 86'400'000},
                           "how long a request may wait for a device; 0 = no limit"),
          options::integer("request_timeout_ms", &c::request_timeout_ms, {0, 86'400'000},
                           "how long an admitted request may take in all; 0 = no limit"),
      },
      {},
  };
  return section;
}

} // namespace triad
