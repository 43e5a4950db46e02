#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "actors/request.hpp"

namespace triad {

/// Starts a turn of a session: `(turn_atom, turn_request, request_callback)` -> the request's id
/// (std::uint64_t), or an error when a turn is running, a limit is reached or the node drains.
/// The callback receives the turn's events as submit's callback does.
using turn_atom = caf::atom_constant<caf::atom("turn")>;
/// Asks a session what it holds and received: `(session_info_atom)` -> session_info.
using session_info_atom = caf::atom_constant<caf::atom("sessinfo")>;

/// What one agent session is, and may do.
struct session_options {
  std::string name; ///< the session's name: PLAS accounts its service by it
  /// The messages every conversation of the session starts with (a system prompt).
  std::vector<chat_message> preamble;
  std::uint32_t max_turns = defaults::orchestration::session_max_turns; ///< turns in all
  /// Tokens the conversation may reach; a turn starting beyond it is refused.
  std::uint64_t max_tokens = defaults::orchestration::session_max_tokens;
  /// Keep the conversation's KV (in this session, in host memory) from one turn to the next, so
  /// a turn prefills only its new message; false: every turn recomputes the whole conversation.
  bool keep_kv = true;
};

/// One turn: the user's message and how to answer it.
struct turn_request {
  chat_message message{"user", {}};                                       ///< what the user says
  std::uint32_t max_tokens = defaults::orchestration::max_tokens;         ///< completion tokens
  std::uint32_t max_tool_calls = defaults::orchestration::max_tool_calls; ///< calls in the turn
  sampling_params sampling;                                               ///< token choice
  std::optional<generation_script> script; ///< forced output for benchmarks and tests
};

/// A session's history and the service it received.
struct session_info {
  std::string name;                    ///< its name
  std::uint32_t turns = 0;             ///< turns completed
  bool busy = false;                   ///< a turn is running
  std::vector<chat_message> history;   ///< preamble, then each turn's messages and tool results
  std::uint64_t context_tokens = 0;    ///< tokens of the conversation so far
  std::uint64_t cached_tokens = 0;     ///< tokens whose KV the session holds for the next turn
  std::uint64_t prefill_tokens = 0;    ///< attained service: tokens prefilled for it
  std::uint64_t completion_tokens = 0; ///< attained service: tokens generated for it
  std::uint32_t tool_calls = 0;        ///< tool calls made
  /// Attained service in time: submit to end of its requests, less waiting for devices and
  /// tools (the time they held devices).
  double device_s = 0;
};

/// Submits a request on the session's behalf (the node's submit).
using submit_function = std::function<request_handle(chat_request, request_callback)>;

/// Spawns the actor of one agent session in `home`: it keeps the conversation (messages, and the
/// tokens and KV where the last turn ended), runs one turn at a time through `submit`, and adds
/// up the service each turn received.
caf::actor spawn_session(domain& home, session_options options, submit_function submit);

} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::turn_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::request_callback)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::session_info)
