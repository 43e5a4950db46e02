#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace triad::bench {

/// The CPU the request metrics and the trace cost, measured by doing their work again apart from
/// the node: the work itself, without the noise of the node's messaging around it. On this
/// project's shared 2-vCPU VMs the node's CPU per request moves more from run to run than these
/// costs are, so a difference of two node runs cannot show them within their bounds.
struct replayed_cost {
  double cpu_us_per_request = 0; ///< CPU of the replaying threads, user and kernel, per request
  std::uint64_t operations = 0;  ///< observations (metrics) or spans (trace) replayed
};

/// Replays the request metrics a node rendered (`metrics_text`, its /metrics after `requests`
/// requests): as many transitions counted, observations of each request histogram (values near
/// each one's mean) and inter-token gaps tallied (one flush per request), by two threads at once
/// as the node's two workers would, into metrics of their own.
replayed_cost replay_request_metrics(const std::string& metrics_text, std::uint64_t requests);

/// Replays the trace a node wrote (`trace_file`, a closed trace-event document, after `requests`
/// requests): every span written again, with its name, category and arguments (built afresh for
/// each, as its writer builds them), on tracks made afresh as each writer makes its own, by two
/// threads at once (each writing the spans of half the tracks) into a new trace log in the same
/// directory (removed after).
replayed_cost replay_trace(const std::filesystem::path& trace_file, std::uint64_t requests);

} // namespace triad::bench
