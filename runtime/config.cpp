#include "runtime/config.hpp"

namespace triad {

namespace {

constexpr options::enum_name<topology_source> topology_source_names[] = {
    {"machine", topology_source::machine},
    {"xml", topology_source::xml},
    {"synthetic", topology_source::synthetic},
};

constexpr std::string_view xml_allowed = "path of an hwloc XML file (format 2.0)";
constexpr std::string_view synthetic_allowed =
    "an hwloc synthetic description such as \"pack:2 numa:3 core:43 pu:2\"";

/// `xml` and `synthetic` are required by their source and refused by the others.
void check_topology(options::table& t, topology_config& out) {
  if (t.state_of("source") == options::state::invalid)
    return; // the checks below depend on a known source
  const std::string source_text = options::quote(to_string(out.source));
  const auto check = [&](std::string_view key, topology_source needs, std::string_view allowed) {
    const std::string needs_text = options::quote(to_string(needs));
    if (out.source == needs && !t.has(key))
      t.fail_missing(key, " (required when topology.source = " + needs_text + ")", allowed);
    else if (out.source != needs && t.has(key))
      t.fail(key,
             "only allowed when topology.source = " + needs_text +
                 " (topology.source = " + source_text + ")",
             "no " + std::string{key} + " key, or topology.source = " + needs_text);
  };
  check("xml", topology_source::xml, xml_allowed);
  check("synthetic", topology_source::synthetic, synthetic_allowed);
}

bool not_empty(const std::string& value) {
  return !value.empty();
}

} // namespace

std::string_view to_string(topology_source value) noexcept {
  return options::name_of(topology_source_names, value);
}

const options::section<topology_config>& topology_section() {
  using c = topology_config;
  static const options::section<c> section{
      "topology",
      false,
      {
          options::choice("source", &c::source, topology_source_names,
                          "where the node learns its machine's layout"),
          options::text<c>("xml", &c::xml, std::string{xml_allowed},
                           "the hwloc XML file (source = \"xml\"), relative to the config file",
                           true)
              .written_if([](const c& s) { return not_empty(s.xml); }),
          options::text<c>("synthetic", &c::synthetic, std::string{synthetic_allowed},
                           "the hwloc synthetic description (source = \"synthetic\")", true)
              .written_if([](const c& s) { return not_empty(s.synthetic); }),
          options::boolean("bind_threads", &c::bind_threads,
                           "pin domain and driver threads to their cpus (source = \"machine\")"),
      },
      check_topology,
  };
  return section;
}

const options::section<scheduler_config>& scheduler_section() {
  using c = scheduler_config;
  static const options::section<c> section{
      "scheduler",
      false,
      {
          options::domain_ids("orchestration_domains", &c::orchestration_domains,
                              "NUMA domains hosting the orchestration actors; [] = automatic"),
          options::integer("threads_per_domain", &c::threads_per_domain, {0, 1024},
                           "CAF workers per domain; 0 = the placement plan's count"),
          options::integer("moderate_sleep_us", &c::moderate_sleep, {0, 1'000'000},
                           "sleep between an idle worker's second round of polls"),
          options::integer("poll_attempts", &c::poll_attempts, {1, 100'000'000},
                           "polls of an idle worker before it sleeps"),
          options::boolean("virtual_time", &c::virtual_time,
                           "jump the node's clock over idle gaps (simulation faster than real "
                           "time); false = real time"),
      },
      {},
  };
  return section;
}

} // namespace triad
