#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/chat.hpp"
#include "devices/factory.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/error.hpp"

namespace triad {

/// How the served model's conversations become tokens and its tokens text: the byte format of
/// the random presets (chat.hpp), or a model file's own tokenizer and chat template. A request
/// reaches its model only through this, so one node serves either without knowing which.
class chat_format {
public:
  /// Formats are shared through the base.
  virtual ~chat_format() = default;

  /// The prompt of a conversation, ending with the assistant's cue; `tools_json` is the
  /// request's `tools` array as JSON text (empty: none), which the model's template renders.
  /// Errors: the template refused the conversation (raise_exception), with its message.
  virtual expected<std::vector<token>> prompt(const std::vector<chat_message>& messages,
                                              const std::string& tools_json) const = 0;
  /// The tokens new messages add after a conversation that ended (agent sessions).
  virtual expected<std::vector<token>> turn(const std::vector<chat_message>& messages) const = 0;
  /// The tokens a hosted tool's output adds after the model's call; unsupported where the
  /// format cannot continue a call (the call then goes back to the client).
  virtual expected<std::vector<token>> tool_result(std::string_view output) const = 0;
  /// A plain completion's prompt (bos where the model wants one, then the text's tokens).
  virtual std::vector<token> raw(std::string_view text) const = 0;
  /// The tokens a generation script forces. The byte format runs turn after turn, tool results
  /// between them; a model file's format writes one answer: every turn's filler tokens, then
  /// all the script's calls in the model's own syntax, then the end of the turn (its format
  /// returns calls to the client, so there is no later turn). Errors: a model with no call
  /// syntax asked to call.
  virtual expected<std::vector<token>> script(const generation_script& script) const = 0;

  /// The bytes of one token (a character may span tokens).
  virtual std::string piece(token t) const = 0;
  /// Whether `t` ends the answer (eos, end of turn).
  virtual bool ends(token t) const = 0;
  /// Every token that ends the answer, for the devices' stop check.
  virtual std::vector<token> end_tokens() const = 0;
  /// How the model writes tool calls (none: calls are text).
  virtual call_syntax syntax() const = 0;
  /// The token that opens a tool call in the model's syntax, where it has one (`<tool_call>`,
  /// `[TOOL_CALLS]`, `<|python_tag|>`); a Llama 3 call may also open with '{' as the answer's
  /// first text.
  virtual std::optional<token> call_start() const = 0;
  /// The token that closes one call (`</tool_call>`); none where a call runs to the end of the
  /// answer (Llama 3, Mistral).
  virtual std::optional<token> call_end() const = 0;
  /// Whether `t` is a control token (never part of the answer's text).
  virtual bool control(token t) const = 0;
  /// Whether tool outputs can be fed back (tool_result works).
  virtual bool continues_calls() const = 0;
  /// Whether the model writes calls in a form call_layout_of does not give (Mistral's v11+
  /// tokenizers: `name[ARGS]{...}`), so a grammar of calls would force another form on it.
  virtual bool calls_beyond_layout() const { return false; }
  /// Ids the tokenizer knows (0..n-1); ids past them up to the model's vocabulary are unused.
  virtual std::size_t known_tokens() const = 0;
  /// Whether `t` is a token of text (a piece or a byte; not a control, unknown, unused or
  /// added token): what a constrained answer may be written with.
  virtual bool text_token(token t) const = 0;
};

/// The model's vocabulary of `vocab` ids as the bytes each token adds to the answer (only text
/// tokens: control, unknown, unused and added tokens and the end tokens add none; the tokens
/// that open and close a tool call add their marker byte), with its end tokens: what the token
/// masks of a response_format or a tool_choice are computed over.
std::shared_ptr<const grammar::token_index> answer_vocabulary(const chat_format& format,
                                                              std::size_t vocab);

/// How `format`'s model writes tool calls, for a grammar of them (grammar::from_tool_calls):
/// its call tokens as marker bytes (answer_vocabulary gives them those bytes), up to
/// `max_calls` calls in one answer (one where the format stops at each call to run it). None
/// where the model has no call syntax triad knows.
std::optional<grammar::call_layout> call_layout_of(const chat_format& format,
                                                   std::size_t max_calls);

/// The byte format of the random presets (render_prompt, render_turn, render_tool_result); one
/// instance, shared.
std::shared_ptr<const chat_format> byte_chat_format();

/// The format of `model`: the byte format for a preset; for a model file its tokenizer
/// (tokenizer.ggml.*) and chat template (tokenizer.chat_template, or the file at
/// `template_path`), which is parsed and tried on a one-message conversation here, so a
/// template triad cannot render fails at start, naming the file and the problem. The prompt
/// refuses client text (messages, tool calls, tools) that spells a control token.
expected<std::shared_ptr<const chat_format>>
make_chat_format(const model_source& model, const std::string& template_path = {});

} // namespace triad
