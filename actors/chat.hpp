#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devices/tokenizer.hpp"
#include "runtime/error.hpp"

namespace triad {

/// One message of a conversation, OpenAI-style roles: "system", "user", "assistant", "tool".
struct chat_message {
  std::string role;    ///< who speaks
  std::string content; ///< what was said (for "tool": the tool's output)
  /// assistant: its tool calls, an OpenAI `tool_calls` array as JSON text; empty: none.
  std::string tool_calls_json = {};
  /// tool: the id of the call it answers; empty: none given.
  std::string tool_call_id = {};
};

/// A tool call as the model writes it between `<tool_call>` and `</tool_call>`: a JSON object
/// `{"name": "...", "arguments": {...}}` (the Hermes/Qwen convention).
struct tool_call_text {
  std::string name;           ///< the tool's name
  std::string arguments_json; ///< its arguments, a JSON object as text
};

/// One turn of a generation script: `tokens` ordinary tokens, then (when `call` is set) a tool
/// call in the model's own syntax; the last turn ends with EOS instead.
struct script_turn {
  std::uint32_t tokens = 0;           ///< ordinary tokens before the call (or before EOS)
  std::optional<tool_call_text> call; ///< the call this turn ends with, if any
};

/// Forces what a random-weight model says, for benchmarks and tests (the agentic analogue of
/// `ignore_eos` + `max_tokens`): every token is still computed on the device; only its choice
/// is forced.
struct generation_script {
  std::vector<script_turn> turns; ///< in order; tool results come between turns
};

/// The prompt of a conversation: BOS, then each message as "<role>:\n<content>\n" (a tool's
/// output wrapped in <tool_response> ... </tool_response>), then "assistant:\n", the cue for the
/// model to answer.
std::vector<token> render_prompt(const std::vector<chat_message>& messages);

/// The tokens new messages add to a conversation that ended (after EOS): a newline, each
/// message as render_prompt writes it, then "assistant:\n".
std::vector<token> render_turn(const std::vector<chat_message>& messages);

/// The tokens a tool's output adds to a conversation that stopped at `</tool_call>`: the
/// output as a "tool" message, then the assistant's cue again.
std::vector<token> render_tool_result(std::string_view output);

/// The tokens a script makes the model generate, turn after turn: filler text, each call as
/// `<tool_call>{"name": ..., "arguments": ...}</tool_call>`, EOS after the last turn.
std::vector<token> script_tokens(const generation_script& script);

/// Whether a prompt of `prompt` tokens (after the chat template) plus up to `max_tokens`
/// generated ones fits a model context of `context` tokens; else errc::exhausted naming
/// the numbers. Work that cannot fit is refused before any compute.
expected<void> check_context(std::size_t prompt, std::uint32_t max_tokens, std::size_t context);

/// A tool's output cut to at most `room` tokens once rendered (render_tool_result), with a note
/// to the model saying how much was left out; the whole output when it fits. Empty optional
/// when not even the note fits.
std::optional<std::string> fit_tool_result(std::string_view output, std::size_t room);

/// The tokens `script` forces: the max_tokens a request needs to run all of it (a request's
/// max_tokens caps its script as it caps any answer).
std::uint32_t script_length(const generation_script& script);

/// Parses the text between `<tool_call>` and `</tool_call>`. A malformed call is an error
/// whose message is fit to show the model ("tool call is not valid JSON: ...").
expected<tool_call_text> parse_tool_call(std::string_view text);

/// How a model family writes its tool calls (what its chat template teaches it; llama.cpp's
/// chat parsers know the same families).
enum class call_syntax : std::uint8_t {
  none,    ///< no syntax triad knows: what the model writes is text
  tagged,  ///< `<tool_call>{"name", "arguments"}</tool_call>`, one per pair of tokens (Hermes,
           ///< Qwen 2/2.5/3, the byte format)
  llama3,  ///< Llama 3.1+: the answer is `{"name", "parameters"}` (after `<|python_tag|>` or
           ///< not), up to the end of the turn; several are separated by ';'
  mistral, ///< Mistral: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}` up to the
           ///< end of the answer, or (v11+ tokenizers) `name[ARGS]{...}` per `[TOOL_CALLS]`
};

/// The name of `s` ("none", "hermes", "llama3", "mistral"), for messages and logs.
std::string_view to_string(call_syntax s);

/// Parses the text of one call site in `syntax`: for tagged the text between the tags, for
/// llama3 the answer (after `<|python_tag|>` when it came), for mistral what follows
/// `[TOOL_CALLS]`. Arguments may be under "arguments" or "parameters", as an object or a JSON
/// string of one; with `need_arguments` a call without either is not one (a Llama 3 answer
/// that merely starts with '{' is a call only when it has them, as llama.cpp reads it).
/// Errors name what is wrong, fit to show the model or the client.
expected<std::vector<tool_call_text>> parse_tool_calls(call_syntax syntax, std::string_view text,
                                                       bool need_arguments = false);

/// The text of `calls` as a model of `syntax` writes them (the inverse of parse_tool_calls): the
/// JSON between the tags for tagged (one call), the objects for llama3, the array for mistral.
std::string write_tool_calls(call_syntax syntax, const std::vector<tool_call_text>& calls);

} // namespace triad
