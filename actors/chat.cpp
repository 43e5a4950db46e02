#include "actors/chat.hpp"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/serializer.hpp>
#include <boost/json/stream_parser.hpp>

namespace triad {

namespace {

// How deep a call's JSON may nest: as deep as a grammar of its arguments lets a model write it
// (tool_choice), not Boost.JSON's default 32.
boost::json::parse_options call_parsing() {
  boost::json::parse_options o;
  o.max_depth = 1024;
  return o;
}

void append(std::vector<token>& out, std::string_view text) {
  tokenizer{}.encode_to(out, text, false); // message text never makes special tokens
}

// Appends the JSON text of `v`, read through a stack buffer instead of built as a string.
void append_json(std::vector<token>& out, const boost::json::object& v) {
  boost::json::serializer sr;
  sr.reset(&v);
  char buffer[256];
  while (!sr.done())
    append(out, sr.read(buffer, sizeof buffer));
}

} // namespace

namespace {

// An assistant message's tool calls (an OpenAI tool_calls array) as the model writes them,
// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` each, as message text.
void append_calls(std::vector<token>& out, const std::string& calls_json) {
  if (calls_json.empty())
    return;
  boost::system::error_code ec;
  auto calls = boost::json::parse(calls_json, ec);
  if (ec || !calls.is_array())
    return;
  for (const auto& c : calls.get_array()) {
    const auto* fn = c.is_object() ? c.get_object().if_contains("function") : nullptr;
    if (fn == nullptr || !fn->is_object())
      continue;
    const auto& f = fn->get_object();
    boost::json::object call;
    if (const auto* name = f.if_contains("name"))
      call["name"] = *name;
    if (const auto* args = f.if_contains("arguments"))
      call["arguments"] = *args;
    append(out, "<tool_call>");
    append_json(out, call);
    append(out, "</tool_call>");
  }
}

void append_messages(std::vector<token>& out, const std::vector<chat_message>& messages) {
  std::size_t size = out.size() + 16; // and "assistant:\n" after them
  for (const auto& m : messages)
    size += m.role.size() + m.content.size() + 5;
  out.reserve(size);
  for (const auto& m : messages) {
    append(out, m.role);
    append(out, ":\n");
    if (m.role == "tool") {
      out.push_back(tokenizer::tool_response_start);
      append(out, m.content);
      out.push_back(tokenizer::tool_response_end);
    } else {
      append(out, m.content);
      append_calls(out, m.tool_calls_json);
    }
    append(out, "\n");
  }
}

} // namespace

std::vector<token> render_prompt(const std::vector<chat_message>& messages) {
  std::vector<token> out{tokenizer::bos};
  append_messages(out, messages);
  append(out, "assistant:\n");
  return out;
}

std::vector<token> render_turn(const std::vector<chat_message>& messages) {
  std::vector<token> out;
  append(out, "\n");
  append_messages(out, messages);
  append(out, "assistant:\n");
  return out;
}

std::vector<token> render_tool_result(std::string_view output) {
  std::vector<token> out;
  out.reserve(output.size() + 24); // the output and its frame: one allocation
  append(out, "\ntool:\n");
  out.push_back(tokenizer::tool_response_start);
  append(out, output);
  out.push_back(tokenizer::tool_response_end);
  append(out, "\nassistant:\n");
  return out;
}

std::vector<token> script_tokens(const generation_script& script) {
  static constexpr std::string_view filler = "the agent thinks about the next step. ";
  std::vector<token> out;
  std::size_t size = 1;
  for (const auto& turn : script.turns)
    size += turn.tokens +
            (turn.call ? 32 + turn.call->name.size() + turn.call->arguments_json.size() : 0);
  out.reserve(size);
  for (const auto& turn : script.turns) {
    for (std::uint32_t i = 0; i < turn.tokens; ++i)
      out.push_back(static_cast<unsigned char>(filler[i % filler.size()]));
    if (turn.call) {
      out.push_back(tokenizer::tool_call_start);
      // A call's JSON is short: its tree lives in this buffer (the heap beyond it).
      unsigned char buffer[1024];
      boost::json::monotonic_resource arena{buffer, sizeof buffer};
      boost::json::object call{&arena};
      call["name"] = turn.call->name;
      std::error_code ec;
      auto args = boost::json::parse(turn.call->arguments_json, ec, &arena);
      call["arguments"] = ec ? boost::json::value(turn.call->arguments_json, &arena) : args;
      append_json(out, call);
      out.push_back(tokenizer::tool_call_end);
    }
  }
  out.push_back(tokenizer::eos);
  return out;
}

expected<void> check_context(std::size_t prompt, std::uint32_t max_tokens, std::size_t context) {
  if (prompt + max_tokens <= context)
    return {};
  return make_error(errc::exhausted,
                    "the prompt is " + std::to_string(prompt) +
                        " tokens (after the chat template) and max_tokens is " +
                        std::to_string(max_tokens) + ": " + std::to_string(prompt + max_tokens) +
                        " tokens, more than the model's context of " + std::to_string(context) +
                        "; shorten the prompt or lower max_tokens");
}

std::optional<std::string> fit_tool_result(std::string_view output, std::size_t room) {
  const std::size_t overhead = render_tool_result("").size();
  if (render_tool_result(output).size() <= room)
    return std::string{output};
  // Byte tokens: each byte of text is one token, so the cut is exact.
  const std::string note = "\n[triad: tool output truncated to fit the model's context: " +
                           std::to_string(output.size()) + " bytes, first ";
  const std::size_t fixed = overhead + note.size() + 20 + 8; // digits of the count, " shown]"
  if (room < fixed)
    return std::nullopt;
  std::size_t keep = std::min(output.size(), room - fixed);
  // Never cut a UTF-8 sequence: back off over continuation bytes.
  while (keep > 0 && keep < output.size() &&
         (static_cast<unsigned char>(output[keep]) & 0xC0) == 0x80)
    --keep;
  return std::string{output.substr(0, keep)} + note + std::to_string(keep) + " shown]";
}

std::uint32_t script_length(const generation_script& script) {
  return static_cast<std::uint32_t>(script_tokens(script).size());
}

namespace {

// A call object: {"name": "...", "arguments" | "parameters": {...} or a JSON string of one}.
expected<tool_call_text> call_of(const boost::json::value& v, bool need_arguments = false) {
  if (!v.is_object())
    return make_error(errc::invalid_argument,
                      "tool call must be a JSON object {\"name\": ..., \"arguments\": {...}}");
  const auto& o = v.as_object();
  auto* name = o.if_contains("name");
  if (name == nullptr || !name->is_string() || name->as_string().empty())
    return make_error(errc::invalid_argument, "tool call has no \"name\" string");
  tool_call_text out;
  out.name = std::string{name->as_string()};
  auto* args = o.if_contains("arguments");
  if (args == nullptr)
    args = o.if_contains("parameters"); // Llama 3's spelling
  if (args == nullptr && need_arguments)
    return make_error(errc::invalid_argument,
                      "tool call has no \"parameters\" (or \"arguments\") object");
  if (args == nullptr) {
    out.arguments_json = "{}";
  } else if (args->is_object()) {
    out.arguments_json = boost::json::serialize(*args);
  } else if (args->is_string()) { // some models write the arguments as a JSON string
    std::error_code ec;
    auto inner = boost::json::parse(args->as_string(), ec, {}, call_parsing());
    if (ec || !inner.is_object())
      return make_error(errc::invalid_argument,
                        "tool call \"arguments\" is a string that is not a JSON object");
    out.arguments_json = boost::json::serialize(inner);
  } else {
    return make_error(errc::invalid_argument, "tool call \"arguments\" must be a JSON object");
  }
  return out;
}

bool json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

} // namespace

expected<tool_call_text> parse_tool_call(std::string_view text) {
  std::error_code ec;
  // A call is short: its parsed tree lives in this buffer (spilling to the heap when longer),
  // not in one allocation per node.
  unsigned char buffer[2048];
  boost::json::monotonic_resource arena{buffer, sizeof buffer};
  auto v = boost::json::parse(text, ec, &arena, call_parsing());
  if (ec)
    return make_error(errc::invalid_argument, "tool call is not valid JSON: " + ec.message());
  return call_of(v);
}

std::string_view to_string(call_syntax s) {
  switch (s) {
  case call_syntax::tagged:
    return "hermes";
  case call_syntax::llama3:
    return "llama3";
  case call_syntax::mistral:
    return "mistral";
  case call_syntax::none:
    break;
  }
  return "none";
}

expected<std::vector<tool_call_text>> parse_tool_calls(call_syntax syntax, std::string_view text,
                                                       bool need_arguments) {
  std::vector<tool_call_text> out;
  switch (syntax) {
  case call_syntax::none:
    return make_error(errc::unsupported, "the model has no tool-call syntax triad knows");
  case call_syntax::tagged: {
    auto call = parse_tool_call(text);
    if (!call)
      return call.error();
    out.push_back(std::move(*call));
    return out;
  }
  case call_syntax::llama3: {
    // One or more objects, separated by ';' (and white space).
    std::size_t at = 0;
    while (true) {
      while (at < text.size() && (json_space(text[at]) || (!out.empty() && text[at] == ';')))
        ++at;
      if (at == text.size())
        break;
      boost::json::stream_parser p{{}, call_parsing()};
      std::error_code ec;
      const auto used = p.write_some(text.data() + at, text.size() - at, ec);
      if (!ec && !p.done())
        p.finish(ec);
      if (ec || !p.done())
        return make_error(errc::invalid_argument, "tool call is not valid JSON" +
                                                      (ec ? ": " + ec.message() : std::string{}));
      auto call = call_of(p.release(), need_arguments);
      if (!call)
        return call.error();
      out.push_back(std::move(*call));
      at += used;
    }
    if (out.empty())
      return make_error(errc::invalid_argument, "tool call is empty");
    return out;
  }
  case call_syntax::mistral: {
    const auto start = text.find_first_not_of(" \t\r\n");
    if (start != std::string_view::npos && text[start] != '[' && text[start] != '{') {
      // The newer form (Mistral's v11+ tokenizers): name[ARGS]{...}, each further call after
      // another [TOOL_CALLS] (a [CALL_ID]id between name and [ARGS] where the model writes one).
      constexpr std::string_view next = "[TOOL_CALLS]", args = "[ARGS]", id = "[CALL_ID]";
      std::string_view rest = text.substr(start);
      while (!rest.empty()) {
        const auto end = rest.find(next);
        const auto part = rest.substr(0, end);
        rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + next.size());
        const auto at = part.find(args);
        if (at == std::string_view::npos)
          return make_error(errc::invalid_argument,
                            "a [TOOL_CALLS] call must be name[ARGS]{...} or a JSON array");
        auto name = part.substr(0, std::min(at, part.find(id)));
        while (!name.empty() && (name.back() == ' ' || name.back() == '\n'))
          name.remove_suffix(1);
        std::error_code ec;
        auto arguments =
            boost::json::parse(part.substr(at + args.size()), ec, {}, call_parsing());
        if (ec)
          return make_error(errc::invalid_argument,
                            "tool call [ARGS] are not valid JSON: " + ec.message());
        auto call =
            call_of(boost::json::object{{"name", name}, {"arguments", std::move(arguments)}});
        if (!call)
          return call.error();
        out.push_back(std::move(*call));
      }
      return out;
    }
    std::error_code ec;
    auto v = boost::json::parse(text, ec, {}, call_parsing());
    if (ec)
      return make_error(errc::invalid_argument, "tool calls are not valid JSON: " + ec.message());
    if (v.is_object()) {
      auto call = call_of(v);
      if (!call)
        return call.error();
      out.push_back(std::move(*call));
      return out;
    }
    if (!v.is_array() || v.as_array().empty())
      return make_error(errc::invalid_argument,
                        "[TOOL_CALLS] must be followed by a non-empty JSON array of calls");
    for (const auto& c : v.as_array()) {
      auto call = call_of(c);
      if (!call)
        return call.error();
      out.push_back(std::move(*call));
    }
    return out;
  }
  }
  return out;
}

std::string write_tool_calls(call_syntax syntax, const std::vector<tool_call_text>& calls) {
  namespace json = boost::json;
  auto object = [&](const tool_call_text& c, std::string_view key) {
    std::error_code ec;
    auto args = json::parse(c.arguments_json, ec);
    return json::object{{"name", c.name},
                        {key, ec ? json::value(c.arguments_json) : std::move(args)}};
  };
  std::string out;
  switch (syntax) {
  case call_syntax::none:
    break;
  case call_syntax::tagged:
    if (!calls.empty())
      out = json::serialize(object(calls.front(), "arguments"));
    break;
  case call_syntax::llama3:
    for (const auto& c : calls) {
      if (!out.empty())
        out += "; ";
      out += json::serialize(object(c, "parameters"));
    }
    break;
  case call_syntax::mistral: {
    json::array list;
    for (const auto& c : calls)
      list.push_back(object(c, "arguments"));
    out = json::serialize(list);
    break;
  }
  }
  return out;
}

// -- call_scanner --

std::vector<call_scanner::piece> call_scanner::push(std::string_view bytes) {
  std::vector<piece> out;
  for (char c : bytes)
    byte(c, out);
  flush(out);
  return out;
}

void call_scanner::flush(std::vector<piece>& out) {
  if (calls_ == 0 || !name_ || (announced_ && sent_ == arguments_.size()))
    return;
  piece p;
  p.call = calls_ - 1;
  if (!announced_)
    p.name = *name_;
  announced_ = true;
  p.arguments = arguments_.substr(sent_);
  sent_ = arguments_.size();
  out.push_back(std::move(p));
}

void call_scanner::byte(char c, std::vector<piece>& out) {
  const bool white = c == ' ' || c == '\t' || c == '\r' || c == '\n';
  if (depth_ == 0) { // between calls: only an object begins one
    if (c == '{') {
      depth_ = 1;
      ++calls_;
      at_key_ = true;
      at_value_ = false;
      name_.reset();
      announced_ = false;
      in_arguments_ = false;
      arguments_.clear();
      sent_ = 0;
    }
    return;
  }
  if (in_arguments_)
    arguments_ += c;
  if (in_string_) {
    if (reading_)
      text_ += c;
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
      if (reading_) {
        reading_ = false;
        std::error_code ec;
        auto v = boost::json::parse(text_, ec);
        const std::string read = !ec && v.is_string() ? std::string{v.as_string()} : std::string{};
        if (at_key_) {
          key_ = read;
          at_key_ = false;
        } else if (key_ == "name" && !read.empty()) {
          name_ = read;
          flush(out); // the name alone, then the arguments as they come
        }
      }
    }
    return;
  }
  if (white)
    return;
  if (depth_ == 1 && at_value_) { // a member's value begins
    at_value_ = false;
    if (c == '{' && (key_ == "arguments" || key_ == "parameters") && !in_arguments_ &&
        arguments_.empty()) {
      in_arguments_ = true;
      arguments_depth_ = 1;
      arguments_ += c;
    }
    if (c == '"' && key_ == "name") {
      reading_ = true;
      text_.assign(1, '"');
    }
  } else if (depth_ == 1 && at_key_ && c == '"') {
    reading_ = true;
    text_.assign(1, '"');
  }
  switch (c) {
  case '"':
    in_string_ = true;
    break;
  case '{':
  case '[':
    ++depth_;
    break;
  case '}':
  case ']':
    --depth_;
    if (in_arguments_ && depth_ == arguments_depth_)
      in_arguments_ = false;
    if (depth_ == 0)
      flush(out); // the call's last bytes
    break;
  case ':':
    if (depth_ == 1)
      at_value_ = true;
    break;
  case ',':
    if (depth_ == 1)
      at_key_ = true;
    break;
  default:
    break;
  }
}

} // namespace triad
