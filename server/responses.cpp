#include "server/responses.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace triad {

namespace {

namespace json = boost::json;

api_error bad(std::string param, std::string message) {
  api_error e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.message = param + ": " + message;
  e.param = std::move(param);
  return e;
}

// A message's content as chat content: a string, or its text parts' texts joined.
std::variant<json::value, api_error> content_of(const json::value& v, const std::string& p) {
  if (v.is_string() || v.is_null())
    return v;
  if (!v.is_array())
    return bad(p, "expected a string or an array of input_text parts");
  std::string text;
  const auto& parts = v.get_array();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto pp = p + "[" + std::to_string(i) + "]";
    const auto* o = parts[i].if_object();
    const json::value* type = o ? o->if_contains("type") : nullptr;
    if (type == nullptr || !type->is_string() ||
        (type->get_string() != "input_text" && type->get_string() != "output_text" &&
         type->get_string() != "text"))
      return bad(pp + ".type", "only input_text and output_text parts are supported");
    const auto* t = o->if_contains("text");
    if (t == nullptr || !t->is_string())
      return bad(pp + ".text", "expected a string");
    text += t->get_string();
  }
  return json::value(text);
}

// A string field of an item.
std::variant<std::string, api_error> text_field(const json::object& o, const char* key,
                                                const std::string& p) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_string())
    return bad(p + "." + key, "expected a string");
  return std::string{v->get_string()};
}

} // namespace

std::variant<responses_request, api_error> responses_to_chat(std::string_view body) {
  boost::system::error_code ec;
  auto doc = json::parse(body, ec);
  if (ec)
    return bad("body", "not valid JSON: " + ec.message());
  if (!doc.is_object())
    return bad("body", "expected a JSON object");
  const auto& root = doc.get_object();
  responses_request out;
  json::object chat;
  json::array messages;
  for (const char* refused : {"previous_response_id", "conversation", "background", "prompt"})
    if (const auto* v = root.if_contains(refused); v && !v->is_null())
      return bad(refused, "not supported: this node keeps no responses; send the whole input");
  if (const auto* v = root.if_contains("instructions"); v && !v->is_null()) {
    if (!v->is_string())
      return bad("instructions", "expected a string");
    messages.push_back(json::object{{"role", "system"}, {"content", *v}});
    out.origins.emplace_back("instructions");
  }
  const auto* input = root.if_contains("input");
  if (input == nullptr)
    return bad("input", "required");
  if (input->is_string()) {
    messages.push_back(json::object{{"role", "user"}, {"content", *input}});
    out.origins.emplace_back("input");
  } else if (input->is_array()) {
    const auto& items = input->get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto p = "input[" + std::to_string(i) + "]";
      const auto* o = items[i].if_object();
      if (o == nullptr)
        return bad(p, "expected an object (a message, function_call or function_call_output)");
      std::string type = "message";
      if (const auto* t = o->if_contains("type")) {
        if (!t->is_string())
          return bad(p + ".type", "expected a string");
        type = std::string{t->get_string()};
      }
      if (type == "message") {
        const auto* role = o->if_contains("role");
        if (role == nullptr || !role->is_string() ||
            (role->get_string() != "system" && role->get_string() != "developer" &&
             role->get_string() != "user" && role->get_string() != "assistant"))
          return bad(p + ".role", "expected one of system, developer, user, assistant");
        const auto* c = o->if_contains("content");
        if (c == nullptr)
          return bad(p + ".content", "required");
        auto content = content_of(*c, p + ".content");
        if (auto* e = std::get_if<api_error>(&content))
          return *e;
        messages.push_back(
            json::object{{"role", *role}, {"content", std::get<json::value>(std::move(content))}});
        out.origins.push_back(p);
      } else if (type == "function_call") {
        auto id = text_field(*o, "call_id", p);
        auto name = text_field(*o, "name", p);
        auto arguments = text_field(*o, "arguments", p);
        for (auto* f : {&id, &name, &arguments})
          if (auto* e = std::get_if<api_error>(f))
            return *e;
        json::object call{{"id", std::get<std::string>(id)},
                          {"type", "function"},
                          {"function", json::object{{"name", std::get<std::string>(name)},
                                                    {"arguments", std::get<std::string>(arguments)}}}};
        // Calls one after another are one assistant message's.
        if (!messages.empty() && messages.back().as_object().contains("tool_calls") &&
            out.origins.back().starts_with("input[") &&
            messages.back().as_object().at("content").is_null()) {
          messages.back().as_object()["tool_calls"].as_array().push_back(std::move(call));
        } else {
          messages.push_back(json::object{{"role", "assistant"},
                                          {"content", nullptr},
                                          {"tool_calls", json::array{std::move(call)}}});
          out.origins.push_back(p);
        }
      } else if (type == "function_call_output") {
        auto id = text_field(*o, "call_id", p);
        if (auto* e = std::get_if<api_error>(&id))
          return *e;
        const auto* output = o->if_contains("output");
        if (output == nullptr)
          return bad(p + ".output", "required");
        auto content = content_of(*output, p + ".output");
        if (auto* e = std::get_if<api_error>(&content))
          return *e;
        messages.push_back(json::object{{"role", "tool"},
                                        {"tool_call_id", std::get<std::string>(id)},
                                        {"content", std::get<json::value>(std::move(content))}});
        out.origins.push_back(p);
      } else {
        return bad(p + ".type", "'" + type +
                                    "' is not one of message, function_call, function_call_output");
      }
    }
  } else {
    return bad("input", "expected a string or an array of items");
  }
  chat["messages"] = std::move(messages);
  if (const auto* tools = root.if_contains("tools"); tools && !tools->is_null()) {
    if (!tools->is_array())
      return bad("tools", "expected an array of {\"type\": \"function\", \"name\", ...}");
    json::array converted;
    const auto& ts = tools->get_array();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const auto p = "tools[" + std::to_string(i) + "]";
      const auto* t = ts[i].if_object();
      const json::value* type = t ? t->if_contains("type") : nullptr;
      if (type == nullptr || !type->is_string() || type->get_string() != "function")
        return bad(p + ".type", "only function tools are supported (hosted tools are the node's "
                                "own: declare them by name as functions)");
      json::object fn;
      for (const char* key : {"name", "description", "parameters", "strict"})
        if (const auto* v = t->if_contains(key))
          fn[key] = *v;
      converted.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(converted);
  }
  if (const auto* choice = root.if_contains("tool_choice"); choice && !choice->is_null()) {
    if (const auto* o = choice->if_object()) {
      const json::value* type = o->if_contains("type");
      if (type == nullptr || !type->is_string() || type->get_string() != "function")
        return bad("tool_choice.type", "only {\"type\": \"function\", \"name\": ...} is supported");
      const json::value* name = o->if_contains("name");
      if (name == nullptr || !name->is_string())
        return bad("tool_choice.name", "expected a string");
      chat["tool_choice"] =
          json::object{{"type", "function"}, {"function", json::object{{"name", *name}}}};
    } else {
      chat["tool_choice"] = *choice;
    }
  }
  if (const auto* text = root.if_contains("text"); text && !text->is_null()) {
    const auto* o = text->if_object();
    if (o == nullptr)
      return bad("text", "expected an object with format");
    if (const auto* format = o->if_contains("format"); format && !format->is_null()) {
      const auto* f = format->if_object();
      const json::value* type = f ? f->if_contains("type") : nullptr;
      if (type == nullptr || !type->is_string())
        return bad("text.format.type", "expected one of text, json_object, json_schema");
      if (type->get_string() == "json_schema") {
        json::object spec;
        for (const char* key : {"name", "schema", "strict", "description"})
          if (const auto* v = f->if_contains(key))
            spec[key] = *v;
        chat["response_format"] =
            json::object{{"type", "json_schema"}, {"json_schema", std::move(spec)}};
      } else {
        chat["response_format"] = json::object{{"type", *type}};
      }
    }
  }
  // The rest as chat-completions has it.
  for (const auto& [from, to] : std::initializer_list<std::pair<const char*, const char*>>{
           {"model", "model"},
           {"max_output_tokens", "max_tokens"},
           {"temperature", "temperature"},
           {"top_p", "top_p"},
           {"parallel_tool_calls", "parallel_tool_calls"},
           {"stream", "stream"},
           {"user", "user"},
           {"triad", "triad"}})
    if (const auto* v = root.if_contains(from))
      chat[to] = *v;
  chat["stream_options"] = json::object{{"include_usage", true}};
  out.chat_body = json::serialize(chat);
  return out;
}

std::string responses_param(const std::string& chat_param,
                            const std::vector<std::string>& origins) {
  auto starts = [&](std::string_view prefix) { return chat_param.starts_with(prefix); };
  if (starts("messages[")) {
    const auto close = chat_param.find(']');
    const auto k = std::stoul(chat_param.substr(9, close - 9));
    const auto rest = chat_param.substr(close + 1);
    const auto origin = k < origins.size() ? origins[k] : std::string{"input"};
    if (origin == "input" || origin == "instructions") // a whole field, not an item
      return origin;
    if (rest == ".tool_call_id")
      return origin + ".call_id";
    return origin + rest;
  }
  if (chat_param == "max_tokens")
    return "max_output_tokens";
  if (starts("response_format.json_schema"))
    return "text.format" + chat_param.substr(27);
  if (starts("response_format"))
    return "text.format" + chat_param.substr(15);
  if (chat_param == "messages")
    return "input";
  if (chat_param == "tool_choice.function.name")
    return "tool_choice.name";
  if (starts("tools[")) {
    const auto at = chat_param.find("].function");
    if (at != std::string::npos)
      return chat_param.substr(0, at + 1) + chat_param.substr(at + 10);
  }
  return chat_param;
}

// -- response_stream --

namespace {

completion_options inner_options(completion_options o) {
  o.stream = true;
  o.include_usage = true;
  return o;
}

} // namespace

response_stream::response_stream(completion_options options, bool stream)
    : options_(std::move(options))
    , stream_(stream)
    , chat_(inner_options(options_)) {
  id_ = "resp_" + options_.id.substr(options_.id.find('-') + 1);
}

void response_stream::emit(std::string type, json::object fields, completion_output& out) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  if (stream_)
    out.bytes += "event: " + type + "\ndata: " + json::serialize(fields) + "\n\n";
}

json::object response_stream::response_json(std::string_view status) const {
  json::object r{{"id", id_},
                 {"object", "response"},
                 {"created_at", options_.created},
                 {"status", status},
                 {"model", options_.model},
                 {"output", output_},
                 {"error", nullptr},
                 {"incomplete_details", nullptr}};
  if (status == "incomplete")
    r["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
  if (!usage_.empty())
    r["usage"] = usage_;
  return r;
}

void response_stream::close_text(completion_output& out) {
  if (!text_open_)
    return;
  text_open_ = false;
  const auto index = output_.size();
  const json::object part{{"type", "output_text"},
                          {"text", text_},
                          {"annotations", json::array{}},
                          {"logprobs", json::array{}}};
  emit("response.output_text.done",
       {{"item_id", "msg_" + id_.substr(5)},
        {"output_index", index},
        {"content_index", 0},
        {"text", text_},
        {"logprobs", json::array{}}},
       out);
  emit("response.content_part.done",
       {{"item_id", "msg_" + id_.substr(5)}, {"output_index", index}, {"content_index", 0},
        {"part", part}},
       out);
  json::object item{{"type", "message"},
                    {"id", "msg_" + id_.substr(5)},
                    {"status", "completed"},
                    {"role", "assistant"},
                    {"content", json::array{part}}};
  emit("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
  output_.push_back(std::move(item));
}

// The answer's text: a message item opened by its first text that is not white space alone
// (white space before calls is no message; `force`: the answer ends in it).
void response_stream::add_text(std::string_view text, completion_output& out, bool force) {
  if (!text_open_) {
    if (!force && text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      blank_ += text;
      return;
    }
    close_calls(out);
    text_open_ = true;
    text_.clear();
    const json::object item{{"type", "message"},
                            {"id", "msg_" + id_.substr(5)},
                            {"status", "in_progress"},
                            {"role", "assistant"},
                            {"content", json::array{}}};
    emit("response.output_item.added", {{"output_index", output_.size()}, {"item", item}}, out);
    emit("response.content_part.added",
         {{"item_id", "msg_" + id_.substr(5)},
          {"output_index", output_.size()},
          {"content_index", 0},
          {"part",
           json::object{{"type", "output_text"}, {"text", ""}, {"annotations", json::array{}}}}},
         out);
    text = std::string_view{blank_ += text};
  }
  text_ += text;
  emit("response.output_text.delta",
       {{"item_id", "msg_" + id_.substr(5)},
        {"output_index", output_.size()},
        {"content_index", 0},
        {"delta", text},
        {"logprobs", json::array{}}},
       out);
  blank_.clear();
}

// The calls being written are done: each with its arguments, in the order they began (a
// call's last pieces may come after the next one began).
void response_stream::close_calls(completion_output& out) {
  for (auto& [index, call] : calls_) {
    auto& item = output_[call.output_index].as_object();
    emit("response.function_call_arguments.done",
         {{"item_id", item.at("id")},
          {"output_index", call.output_index},
          {"name", item.at("name")},
          {"arguments", call.arguments}},
         out);
    item["arguments"] = call.arguments;
    item["status"] = "completed";
    emit("response.output_item.done", {{"output_index", call.output_index}, {"item", item}}, out);
  }
  calls_.clear();
}

void response_stream::on_chunk(const json::object& chunk, completion_output& out) {
  if (const auto* u = chunk.if_contains("usage"); u && u->is_object()) {
    const auto& c = u->as_object();
    usage_ = json::object{
        {"input_tokens", c.at("prompt_tokens")},
        {"input_tokens_details",
         json::object{{"cached_tokens", c.at("prompt_tokens_details").at("cached_tokens")}}},
        {"output_tokens", c.at("completion_tokens")},
        {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
        {"total_tokens", c.at("total_tokens")}};
    if (const auto* t = c.if_contains("triad"))
      usage_["triad"] = *t;
  }
  if (const auto* ext = chunk.if_contains("triad")) // a call the node ran
    emit("triad.server_tool_call", {{"call", ext->at("server_tool_call")}}, out);
  const auto* choices = chunk.if_contains("choices");
  if (choices == nullptr || choices->as_array().empty())
    return;
  const auto& choice = choices->as_array()[0].as_object();
  const auto& delta = choice.at("delta").as_object();
  if (const auto* c = delta.if_contains("content"); c && c->is_string() && !c->as_string().empty())
    add_text(c->as_string(), out);
  if (const auto* calls = delta.if_contains("tool_calls"); calls && calls->is_array()) {
    blank_.clear(); // white space before calls is no message
    close_text(out);
    for (const auto& c : calls->as_array()) {
      const auto& call = c.as_object();
      const auto& fn = call.at("function").as_object();
      const auto index = call.at("index").to_number<std::int64_t>();
      if (const auto* id = call.if_contains("id")) { // a call begins: its item, in the output
        const std::string call_id{id->as_string()};
        json::object item{{"type", "function_call"}, {"id", "fc_" + call_id},
                          {"call_id", call_id},      {"name", fn.at("name")},
                          {"arguments", ""},         {"status", "in_progress"}};
        emit("response.output_item.added", {{"output_index", output_.size()}, {"item", item}}, out);
        calls_[index] = open_call{output_.size(), {}};
        output_.push_back(std::move(item));
      }
      const auto* piece = fn.if_contains("arguments");
      auto open = calls_.find(index);
      if (open == calls_.end() || piece == nullptr || piece->as_string().empty())
        continue;
      open->second.arguments += piece->as_string();
      emit("response.function_call_arguments.delta",
           {{"item_id", output_[open->second.output_index].at("id")},
            {"output_index", open->second.output_index},
            {"delta", *piece}},
           out);
    }
  }
  if (const auto* f = choice.if_contains("finish_reason"); f && f->is_string())
    finish_ = std::string{f->as_string()};
}

completion_output response_stream::on_event(const request_event& ev) {
  completion_output out;
  if (finished_)
    return out;
  // Not streamed, an error (not the end a stop string asked for) is the HTTP error chat gives,
  // whenever it comes.
  if (!stream_ && ev.kind == request_event::error &&
      !(ev.code == errc::cancelled && chat_.stopped_by_string())) {
    finished_ = out.finished = true;
    out.error = error_of(ev);
    return out;
  }
  auto inner = chat_.on_event(ev);
  out.cancel = inner.cancel;
  if (inner.error) { // before any byte of the chat stream, and of ours: an HTTP error
    finished_ = out.finished = true;
    out.error = std::move(inner.error);
    return out;
  }
  if (!created_ && (!inner.bytes.empty() || inner.finished)) {
    created_ = true;
    emit("response.created", {{"response", response_json("in_progress")}}, out);
    emit("response.in_progress", {{"response", response_json("in_progress")}}, out);
  }
  // The chat stream's events, read back.
  std::size_t at = 0;
  const auto& bytes = inner.bytes;
  while ((at = bytes.find("data: ", at)) != std::string::npos) {
    const auto end = bytes.find("\n\n", at);
    const auto data = bytes.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]")
      continue;
    const auto chunk = json::parse(data);
    if (const auto* e = chunk.as_object().if_contains("error")) { // failed mid-stream
      finished_ = out.finished = true;
      auto r = response_json("failed");
      r["error"] = *e;
      emit("response.failed", {{"response", r}}, out);
      if (!stream_)
        out.bytes = json::serialize(r);
      return out;
    }
    on_chunk(chunk.as_object(), out);
  }
  if (!inner.finished)
    return out;
  finished_ = out.finished = true;
  if (!blank_.empty() && !text_open_ && output_.empty()) // the whole answer was white space
    add_text({}, out, true);
  close_text(out);
  close_calls(out);
  const auto status = finish_ == "length" ? "incomplete" : "completed";
  auto r = response_json(status);
  if (stream_)
    emit(finish_ == "length" ? "response.incomplete" : "response.completed", {{"response", r}},
         out);
  else
    out.bytes = json::serialize(r);
  return out;
}

} // namespace triad
