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

/// Reads one call site's text as the model writes it, byte by byte, and tells as soon as each is
/// certain the name of each call and the pieces of its arguments' JSON, so a call streams to the
/// client as it is written (OpenAI's tool_call deltas). Calls are the objects at the site's top
/// level (between tags, after `[TOOL_CALLS]` in an array, or separated by ';'); a call's pieces
/// start once its name is read, and only arguments written as an object stream (a string of
/// JSON waits for the parsed call). The pieces are the model's own text: concatenated, one
/// call's are its arguments object as written.
class call_scanner {
public:
  /// What some bytes completed of one call.
  struct piece {
    std::size_t call = 0;  ///< the call's index in the site, from 0
    std::string name;      ///< the call's name, on its first piece only
    std::string arguments; ///< the next bytes of its arguments (may be empty on the first)
  };

  /// Takes the next bytes of the site; returns the pieces they completed, in order.
  std::vector<piece> push(std::string_view bytes);
  /// Forgets the site (the model began it over).
  void reset() { *this = call_scanner{}; }

private:
  void byte(char c, std::vector<piece>& out);
  void flush(std::vector<piece>& out);

  // The site's top level, a call's object, its members, and what the bytes are.
  std::size_t calls_ = 0;           // calls begun
  std::size_t depth_ = 0;           // nesting of '{' and '[' inside the current call (0: between)
  bool in_string_ = false;          // inside a JSON string
  bool escaped_ = false;            // the byte after a backslash in one
  bool at_key_ = false;             // a member's key comes next (depth 1)
  bool at_value_ = false;           // a member's value comes next (depth 1, after ':')
  std::string text_;                // the key or name string being read, as written
  bool reading_ = false;            // text_ collects a key or the name
  std::string key_;                 // the member whose value is read (name, arguments, parameters)
  std::optional<std::string> name_; // the current call's name, once read
  bool announced_ = false;          // the current call's first piece went out
  bool in_arguments_ = false;       // the arguments object is being written
  std::size_t arguments_depth_ = 0; // depth_ at which it closes
  std::string arguments_;           // its bytes so far
  std::size_t sent_ = 0;            // of them, those told
};

/// The text of `calls` as a model of `syntax` writes them (the inverse of parse_tool_calls): the
/// JSON between the tags for tagged (one call), the objects for llama3, the array for mistral.
std::string write_tool_calls(call_syntax syntax, const std::vector<tool_call_text>& calls);

} // namespace triad
