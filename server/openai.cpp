#include "server/openai.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "devices/tokenizer.hpp"
#include "grammar/json_schema.hpp"
#include "runtime/json_text.hpp"
#include "server/defaults.hpp"

namespace triad {

namespace json = boost::json;

std::string to_json(const api_error& e) {
  json::object err;
  err["message"] = e.message;
  err["type"] = e.type.empty() ? "invalid_request_error" : e.type;
  err["param"] = e.param.empty() ? json::value(nullptr) : json::value(e.param);
  err["code"] = e.code.empty() ? json::value(nullptr) : json::value(e.code);
  return json::serialize(json::object{{"error", std::move(err)}});
}

json::object usage_object(const request_usage& u) {
  return json::object{
      {"prompt_tokens", u.prompt_tokens},
      {"completion_tokens", u.completion_tokens},
      {"total_tokens", u.prompt_tokens + u.completion_tokens},
      {"prompt_tokens_details", json::object{{"cached_tokens", u.cached_tokens}}},
      // triad's own figures (clients that do not know them ignore the key): the tool calls the
      // node ran itself, where the KV waited across them, and the prompt tokens read back from
      // the KV store instead of computed.
      {"triad", json::object{{"server_tool_calls", u.hosted_tool_calls},
                             {"kv_kept_calls", u.kv_kept_calls},
                             {"kv_stored_calls", u.kv_stored_calls},
                             {"store_tokens", u.store_tokens}}},
  };
}

namespace {

// What a JSON value is, for error messages.
std::string kind_of(const json::value& v) {
  switch (v.kind()) {
  case json::kind::null:
    return "null";
  case json::kind::bool_:
    return "a boolean";
  case json::kind::int64:
  case json::kind::uint64:
    return "an integer";
  case json::kind::double_:
    return "a number";
  case json::kind::string:
    return "a string";
  case json::kind::array:
    return "an array";
  case json::kind::object:
    return "an object";
  }
  return "a value";
}

// A short rendering of a value for messages (long strings cut).
std::string shown(const json::value& v) {
  return json_excerpt(v);
}

api_error bad(std::string param, std::string message) {
  api_error e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.message = param.empty() ? message : param + ": " + message;
  e.param = std::move(param);
  return e;
}

api_error wrong_type(const std::string& param, const json::value& v, std::string_view want) {
  return bad(param, "expected " + std::string{want} + ", got " + kind_of(v) + " " + shown(v));
}

// Reads a number (integer or float) into `out`.
bool number(const json::value& v, double& out) {
  if (v.is_int64())
    out = static_cast<double>(v.get_int64());
  else if (v.is_uint64())
    out = static_cast<double>(v.get_uint64());
  else if (v.is_double())
    out = v.get_double();
  else
    return false;
  return std::isfinite(out);
}

// Reads a whole number (1.0 counts) into `out`.
constexpr auto whole = json_whole;

using grammar_or_error = std::variant<std::shared_ptr<const grammar::grammar>, api_error>;

// The grammar for `key`: the one `cache` keeps (when given), else what `make` compiles, kept
// there. `key` holds all that decides the grammar.
template<class Make>
grammar_or_error cached(grammar::grammar_cache* cache, const std::string& key, Make&& make) {
  if (cache != nullptr)
    if (auto kept = cache->find(key))
      return kept;
  grammar_or_error made = make();
  if (auto* g = std::get_if<std::shared_ptr<const grammar::grammar>>(&made);
      g != nullptr && *g != nullptr && cache != nullptr)
    return cache->keep(key, std::move(*g));
  return made;
}

// The key of a grammar of calls: what decides it (`kind`, the call layout, the functions'
// names and parameters, `extra`), as JSON text, so no two differ only in where a part ends.
std::string calls_key(std::string_view kind, const grammar::call_layout& layout,
                      const std::vector<grammar::function_signature>& functions,
                      json::value extra = nullptr) {
  json::array fs;
  for (const auto& f : functions)
    fs.push_back(json::array{json::string(f.name), f.parameters});
  return json::serialize(json::array{
      json::string(kind), json::string(layout.before_all), json::string(layout.before_each),
      json::string(layout.after_each), json::string(layout.between), json::string(layout.after_all),
      json::string(layout.arguments_key), layout.max_calls, layout.newlines_inside, std::move(fs),
      std::move(extra)});
}

// The grammar of a chat request's `response_format`: null for "text", any JSON object for
// "json_object", the schema's documents for "json_schema" (an unsupported keyword is a 400
// naming it). `answer` becomes what the format asks of an answer that may also call tools.
grammar_or_error response_grammar(const json::value& format, grammar::call_alternative& answer,
                                  grammar::grammar_cache* cache) {
  const auto* o = format.if_object();
  const json::value* type = o ? o->if_contains("type") : nullptr;
  if (type == nullptr || !type->is_string())
    return wrong_type("response_format", format,
                      "{\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
  grammar::json_options options;
  options.max_whitespace = defaults::server::json_whitespace;
  const std::string_view t = type->get_string();
  if (t == "text")
    return std::shared_ptr<const grammar::grammar>{};
  answer.what = grammar::call_alternative::kind::json;
  auto any_object = [&]() -> grammar_or_error {
    return std::make_shared<const grammar::grammar>(grammar::any_json_object(options));
  };
  if (t == "json_object")
    return cached(cache, R"(["json_object"])", any_object);
  if (t != "json_schema")
    return bad("response_format.type",
               "'" + std::string{t} + "' is not one of text, json_object, json_schema");
  const auto* spec = o->if_contains("json_schema");
  if (spec == nullptr || !spec->is_object())
    return bad("response_format.json_schema", "expected an object with name and schema");
  const auto* schema = spec->get_object().if_contains("schema");
  if (schema == nullptr || schema->is_null())
    return cached(cache, R"(["json_object"])", any_object);
  answer.schema = *schema;
  return cached(cache, json::serialize(json::array{"schema", *schema}), [&]() -> grammar_or_error {
    auto g = grammar::from_json_schema(*schema, options);
    if (!g)
      return bad("response_format.json_schema.schema", g.error().message);
    return std::make_shared<const grammar::grammar>(std::move(*g));
  });
}

// The grammar of an answer that may call the declared functions (tool_choice auto, and after
// the first call under required or a named function): `answer` (text, or the response_format's
// document) or calls in `format`'s syntax with arguments valid against their parameters. Where
// a control token opens calls and the answer may be text, the grammar is of calls alone and
// `*waits` is set: it holds from that token (token_constraint::free_until_call). A function
// whose parameters go past what the grammar supports takes any object, unless its tool asked
// `strict` (then a 400 naming them). Null where the format has no call syntax triad knows, or
// writes calls in a form the layouts do not give (Mistral v11+).
grammar_or_error calls_or_answer_grammar(const openai_chat& chat,
                                         std::vector<grammar::function_signature> functions,
                                         const std::vector<bool>& strict, const chat_format& format,
                                         grammar::call_alternative answer,
                                         grammar::grammar_cache* cache, bool* waits) {
  const std::size_t calls =
      chat.parallel_tool_calls ? std::min<std::size_t>(chat.request.max_tool_calls, 64) : 1;
  auto layout = call_layout_of(format, calls);
  const bool document = answer.what == grammar::call_alternative::kind::json;
  if (layout && format.calls_beyond_layout() && document)
    return bad("response_format", "a JSON response_format together with tools is not supported "
                                  "for this model: it writes calls as name[ARGS]{...}, which "
                                  "triad cannot constrain yet; send one or the other");
  if (!layout || format.calls_beyond_layout())
    return std::shared_ptr<const grammar::grammar>{};
  const std::string& opening =
      layout->before_all.empty() ? layout->before_each : layout->before_all;
  const bool marked =
      !opening.empty() && static_cast<unsigned char>(opening.front()) >= grammar::call_open_marker;
  if (document && !marked)
    return bad("response_format",
               "a JSON response_format together with tools is not supported for this model: its "
               "calls are bare JSON (Llama 3), so a document could not be told from a call; send "
               "one or the other");
  if (answer.what == grammar::call_alternative::kind::text && marked) {
    answer.what = grammar::call_alternative::kind::none; // text before the call is free
    *waits = true;
  }
  json::array strict_flags(strict.begin(), strict.end());
  const auto key =
      calls_key("auto", *layout, functions,
                json::array{std::move(strict_flags), static_cast<int>(answer.what), answer.schema});
  return cached(cache, key, [&]() -> grammar_or_error {
    grammar::json_options options;
    options.max_whitespace = defaults::server::json_whitespace;
    for (;;) { // each pass frees one function's arguments, or ends
      std::size_t failed = functions.size();
      auto g = grammar::from_tool_calls(functions, *layout, options, &failed, answer);
      if (g)
        return std::make_shared<const grammar::grammar>(std::move(*g));
      if (failed >= functions.size())
        return bad("response_format", g.error().message);
      if (strict[failed])
        return bad("tools[" + std::to_string(failed) + "].function.parameters", g.error().message);
      functions[failed].parameters = json::value{};
    }
  });
}

// The grammar of what tool_choice "required" or a named function asks of the answer: calls, in
// `format`'s syntax, to the declared functions (or the named one), arguments valid against their
// parameters. A schema keyword not supported is a 400 naming the function's parameters.
grammar_or_error tool_choice_grammar(const openai_chat& chat,
                                     const std::vector<grammar::function_signature>& functions,
                                     const chat_format& format, grammar::grammar_cache* cache) {
  const std::size_t calls =
      chat.parallel_tool_calls ? std::min<std::size_t>(chat.request.max_tool_calls, 64) : 1;
  auto layout = call_layout_of(format, calls);
  if (!layout)
    return bad("tool_choice", "the served model has no tool-call syntax triad knows, so '" +
                                  chat.tool_choice + "' cannot be enforced; use auto or none");
  std::vector<grammar::function_signature> chosen;
  for (const auto& f : functions)
    if (chat.tool_choice != "function" || f.name == chat.tool_choice_function)
      chosen.push_back(f);
  return cached(cache, calls_key("calls", *layout, chosen), [&]() -> grammar_or_error {
    grammar::json_options options;
    options.max_whitespace = defaults::server::json_whitespace;
    std::size_t failed = chosen.size();
    auto g = grammar::from_tool_calls(chosen, *layout, options, &failed);
    if (g)
      return std::make_shared<const grammar::grammar>(std::move(*g));
    if (failed < chosen.size()) // name the parameters that failed, by their place in tools
      for (std::size_t i = 0; i < functions.size(); ++i)
        if (functions[i].name == chosen[failed].name)
          return bad("tools[" + std::to_string(i) + "].function.parameters", g.error().message);
    return bad("tool_choice", g.error().message);
  });
}

// A message's content as text: a string, null, or an array of {"type": "text", "text"} parts.
std::variant<std::string, api_error> content_text(const json::value& v, const std::string& p) {
  if (v.is_null())
    return std::string{};
  if (v.is_string())
    return std::string{v.get_string()};
  if (!v.is_array())
    return wrong_type(p, v, "a string, null or an array of text parts");
  std::string out;
  const auto& parts = v.get_array();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto pp = p + "[" + std::to_string(i) + "]";
    const auto* part = parts[i].if_object();
    if (part == nullptr)
      return wrong_type(pp, parts[i], "an object {\"type\": \"text\", \"text\": ...}");
    const auto* type = part->if_contains("type");
    if (type == nullptr || !type->is_string() || type->get_string() != "text")
      return bad(pp + ".type", "only \"text\" parts are supported");
    const auto* text = part->if_contains("text");
    if (text == nullptr || !text->is_string())
      return bad(pp + ".text", "expected a string");
    out += text->get_string();
  }
  return out;
}

// An assistant message's tool_calls, checked and normalised to OpenAI's form with arguments as
// a JSON object: [{"id", "type": "function", "function": {"name", "arguments"}}], as JSON text.
std::variant<std::string, api_error> normalised_calls(const json::value& v, const std::string& p) {
  if (!v.is_array())
    return wrong_type(p, v, "an array of tool calls");
  json::array out;
  const auto& calls = v.get_array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    auto pp = p + "[" + std::to_string(i) + "]";
    const auto* call = calls[i].if_object();
    const json::object* fn = nullptr;
    if (call != nullptr)
      if (const auto* f = call->if_contains("function"))
        fn = f->if_object();
    if (fn == nullptr)
      return bad(pp, "expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    const auto* name = fn->if_contains("name");
    if (name == nullptr || !name->is_string() || name->get_string().empty())
      return bad(pp + ".function.name", "expected a non-empty string");
    json::value args = json::object{};
    if (const auto* a = fn->if_contains("arguments")) {
      if (a->is_string()) {
        boost::system::error_code ec;
        args = json::parse(a->get_string(), ec);
        if (ec || !args.is_object())
          return bad(pp + ".function.arguments", "expected a JSON object encoded as a string");
      } else if (a->is_object()) {
        args = *a;
      } else {
        return wrong_type(pp + ".function.arguments", *a, "a string");
      }
    }
    json::object normal{
        {"type", "function"},
        {"function", json::object{{"name", name->get_string()}, {"arguments", args}}}};
    if (const auto* id = call->if_contains("id"); id && id->is_string())
      normal["id"] = *id;
    out.push_back(std::move(normal));
  }
  return json::serialize(out);
}

// The `triad.script` extension: [{"tokens": N, "tool_call": {"name", "arguments"}}, ...].
std::variant<generation_script, api_error> script_of(const json::value& v) {
  const std::string p = "triad.script";
  if (!v.is_array() || v.get_array().empty())
    return wrong_type(p, v, "a non-empty array of {\"tokens\", \"tool_call\"} turns");
  generation_script script;
  const auto& turns = v.get_array();
  if (turns.size() > 256)
    return bad(p, "at most 256 turns, got " + std::to_string(turns.size()));
  for (std::size_t i = 0; i < turns.size(); ++i) {
    auto pp = p + "[" + std::to_string(i) + "]";
    const auto* t = turns[i].if_object();
    if (t == nullptr)
      return wrong_type(pp, turns[i], "an object");
    script_turn turn;
    std::int64_t n = 0;
    const auto* tokens = t->if_contains("tokens");
    if (tokens == nullptr || !whole(*tokens, n) || n < 0 || n > 65536)
      return bad(pp + ".tokens", "expected an integer 0..65536");
    turn.tokens = static_cast<std::uint32_t>(n);
    if (const auto* call = t->if_contains("tool_call"); call != nullptr && !call->is_null()) {
      const auto* c = call->if_object();
      const json::value* name = c ? c->if_contains("name") : nullptr;
      if (name == nullptr || !name->is_string() || name->get_string().empty())
        return bad(pp + ".tool_call.name", "expected a non-empty string");
      json::value args = json::object{};
      if (const auto* a = c->if_contains("arguments")) {
        if (!a->is_object())
          return wrong_type(pp + ".tool_call.arguments", *a, "an object");
        args = *a;
      }
      turn.call = tool_call_text{std::string{name->get_string()}, json::serialize(args)};
    } else if (i + 1 < turns.size()) {
      return bad(pp + ".tool_call", "every turn but the last ends with a tool call");
    }
    script.turns.push_back(std::move(turn));
  }
  if (script.turns.back().call)
    return bad(p, "the last turn must end the answer (no tool_call)");
  return script;
}

// The body as a JSON object whose `model` names the served model, or the error.
std::variant<json::value, api_error> parse_root(std::string_view body,
                                                std::string_view served_model) {
  boost::system::error_code ec;
  auto doc = json::parse(body, ec);
  if (ec)
    return bad("", "the body is not valid JSON: " + ec.message());
  if (!doc.is_object())
    return bad("", "the body must be a JSON object, got " + kind_of(doc));
  const auto* model = doc.get_object().if_contains("model");
  if (model == nullptr)
    return bad("model", "required");
  if (!model->is_string())
    return wrong_type("model", *model, "a string");
  if (model->get_string() != served_model) {
    api_error e =
        bad("model", "the model '" + std::string{model->get_string()} +
                         "' does not exist; this node serves '" + std::string{served_model} + "'");
    e.status = 404;
    e.code = "model_not_found";
    return e;
  }
  return doc;
}

// The fields chat and plain completions share: stream, stream_options, max_tokens, sampling,
// n, stop, user and the triad extension.
std::optional<api_error> parse_common(const json::object* root, openai_chat& out) {
  auto& req = out.request;
  if (const auto* s = root->if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool())
      return wrong_type("stream", *s, "a boolean");
    out.stream = s->get_bool();
  }
  if (const auto* so = root->if_contains("stream_options"); so && !so->is_null()) {
    if (!so->is_object())
      return wrong_type("stream_options", *so, "an object");
    if (const auto* iu = so->get_object().if_contains("include_usage")) {
      if (!iu->is_bool())
        return wrong_type("stream_options.include_usage", *iu, "a boolean");
      out.include_usage = iu->get_bool();
    }
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const auto* v = root->if_contains(key);
    if (v == nullptr || v->is_null())
      continue;
    std::int64_t n = 0;
    if (!whole(*v, n) || n < 1 || n > 1'000'000)
      return bad(key, "expected an integer 1..1000000, got " + shown(*v));
    req.max_tokens = static_cast<std::uint32_t>(n);
  }
  if (const auto* v = root->if_contains("temperature"); v && !v->is_null()) {
    double t = 0;
    if (!number(*v, t) || t < 0 || t > 2)
      return bad("temperature", "expected a number 0..2, got " + shown(*v));
    req.sampling.temperature = static_cast<float>(t);
  } else {
    req.sampling.temperature = 1.0f; // OpenAI's default
  }
  if (const auto* v = root->if_contains("top_p"); v && !v->is_null()) {
    double p = 0;
    if (!number(*v, p) || p <= 0 || p > 1)
      return bad("top_p", "expected a number 0 < top_p <= 1, got " + shown(*v));
    req.sampling.top_p = static_cast<float>(p);
  }
  if (const auto* v = root->if_contains("top_k"); v && !v->is_null()) {
    std::int64_t k = 0;
    if (!whole(*v, k) || k < 0 || k > 1'000'000)
      return bad("top_k", "expected an integer 0..1000000 (0: all), got " + shown(*v));
    req.sampling.top_k = static_cast<unsigned>(k);
  }
  if (const auto* v = root->if_contains("seed"); v && !v->is_null()) {
    std::int64_t seed = 0;
    if (!whole(*v, seed))
      return bad("seed", "expected an integer, got " + shown(*v));
    req.sampling.seed = static_cast<std::uint64_t>(seed);
  }
  if (const auto* v = root->if_contains("n"); v && !v->is_null()) {
    std::int64_t n = 0;
    if (!whole(*v, n) || n < 1 || n > static_cast<std::int64_t>(defaults::server::max_choices))
      return bad("n", "expected an integer 1.." + std::to_string(defaults::server::max_choices) +
                          ", got " + shown(*v));
    out.n = static_cast<std::size_t>(n);
  }
  if (const auto* v = root->if_contains("stop"); v && !v->is_null()) {
    if (v->is_string()) {
      if (!v->get_string().empty())
        out.stop.emplace_back(v->get_string());
    } else if (v->is_array()) {
      const auto& a = v->get_array();
      if (a.size() > 4)
        return bad("stop", "at most 4 stop strings, got " + std::to_string(a.size()));
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!a[i].is_string())
          return wrong_type("stop[" + std::to_string(i) + "]", a[i], "a string");
        if (!a[i].get_string().empty())
          out.stop.emplace_back(a[i].get_string());
      }
    } else {
      return wrong_type("stop", *v, "a string or an array of strings");
    }
  }
  if (const auto* v = root->if_contains("user"); v && v->is_string())
    req.session = std::string{v->get_string()};

  if (const auto* ext = root->if_contains("triad"); ext && !ext->is_null()) {
    const auto* o = ext->if_object();
    if (o == nullptr)
      return wrong_type("triad", *ext, "an object");
    if (const auto* s = o->if_contains("session"); s && !s->is_null()) {
      if (!s->is_string())
        return wrong_type("triad.session", *s, "a string");
      req.session = std::string{s->get_string()};
    }
    if (const auto* s = o->if_contains("script"); s && !s->is_null()) {
      auto script = script_of(*s);
      if (auto* e = std::get_if<api_error>(&script))
        return *e;
      req.script = std::get<generation_script>(std::move(script));
    }
  }
  return std::nullopt;
}

} // namespace

std::variant<openai_chat, api_error> parse_chat_request(std::string_view body,
                                                        std::string_view served_model,
                                                        const chat_format* format,
                                                        grammar::grammar_cache* grammars) {
  auto doc = parse_root(body, served_model);
  if (auto* e = std::get_if<api_error>(&doc))
    return *e;
  const auto* root = std::get<json::value>(doc).if_object();
  openai_chat out;
  auto& req = out.request;
  std::vector<grammar::function_signature> functions; // of tools, in order
  std::vector<bool> strict;                           // of tools: `strict: true`
  const auto* messages = root->if_contains("messages");
  if (messages == nullptr)
    return bad("messages", "required");
  if (!messages->is_array() || messages->get_array().empty())
    return wrong_type("messages", *messages, "a non-empty array");
  const auto& list = messages->get_array();
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto p = "messages[" + std::to_string(i) + "]";
    const auto* m = list[i].if_object();
    if (m == nullptr)
      return wrong_type(p, list[i], "an object");
    const auto* role = m->if_contains("role");
    if (role == nullptr || !role->is_string())
      return bad(p + ".role", "expected one of system, developer, user, assistant, tool");
    std::string r{role->get_string()};
    if (r == "developer")
      r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return bad(p + ".role", "'" + std::string{role->get_string()} +
                                  "' is not one of system, developer, user, assistant, tool");
    std::string text;
    if (const auto* c = m->if_contains("content")) {
      auto t = content_text(*c, p + ".content");
      if (auto* e = std::get_if<api_error>(&t))
        return *e;
      text = std::get<std::string>(t);
    } else if (r != "assistant") {
      return bad(p + ".content", "required");
    }
    chat_message message{std::move(r), std::move(text)};
    if (message.role == "assistant")
      if (const auto* calls = m->if_contains("tool_calls"); calls && !calls->is_null()) {
        auto normal = normalised_calls(*calls, p + ".tool_calls");
        if (auto* e = std::get_if<api_error>(&normal))
          return *e;
        message.tool_calls_json = std::get<std::string>(std::move(normal));
      }
    if (message.role == "tool")
      if (const auto* id = m->if_contains("tool_call_id"); id && id->is_string())
        message.tool_call_id = std::string{id->get_string()};
    req.messages.push_back(std::move(message));
  }

  if (const auto* tools = root->if_contains("tools"); tools && !tools->is_null()) {
    if (!tools->is_array())
      return wrong_type("tools", *tools, "an array of {\"type\": \"function\", ...}");
    const auto& ts = tools->get_array();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      auto p = "tools[" + std::to_string(i) + "]";
      const auto* t = ts[i].if_object();
      const json::object* fn = nullptr;
      if (t != nullptr)
        if (const auto* f = t->if_contains("function"))
          fn = f->if_object();
      const json::value* name = fn ? fn->if_contains("name") : nullptr;
      if (name == nullptr || !name->is_string() || name->get_string().empty())
        return bad(p + ".function.name", "expected a non-empty string");
      if (std::find(out.tools.begin(), out.tools.end(), name->get_string()) != out.tools.end())
        return bad(p + ".function.name",
                   "'" + std::string{name->get_string()} + "' is declared twice");
      out.tools.emplace_back(name->get_string());
      const json::value* parameters = fn->if_contains("parameters");
      functions.push_back({out.tools.back(), parameters ? *parameters : json::value{}});
      const json::value* is_strict = fn->if_contains("strict");
      if (is_strict != nullptr && !is_strict->is_null() && !is_strict->is_bool())
        return wrong_type(p + ".function.strict", *is_strict, "a boolean");
      strict.push_back(is_strict != nullptr && is_strict->is_bool() && is_strict->get_bool());
    }
    if (!ts.empty())
      req.tools_json = json::serialize(*tools); // for a model's own chat template
  }
  if (const auto* choice = root->if_contains("tool_choice"); choice && !choice->is_null()) {
    if (choice->is_string()) {
      std::string c{choice->get_string()};
      if (c != "none" && c != "auto" && c != "required")
        return bad("tool_choice", "'" + c + "' is not one of none, auto, required");
      out.tool_choice = c;
    } else if (const auto* o = choice->if_object()) {
      const json::value* name = nullptr;
      if (const auto* f = o->if_contains("function"); f && f->is_object())
        name = f->get_object().if_contains("name");
      if (name == nullptr || !name->is_string())
        return bad("tool_choice.function.name", "expected a string");
      out.tool_choice = "function";
      out.tool_choice_function = std::string{name->get_string()};
      if (std::find(out.tools.begin(), out.tools.end(), out.tool_choice_function) ==
          out.tools.end())
        return bad("tool_choice.function.name",
                   "'" + out.tool_choice_function + "' is not a function of this request's tools" +
                       (out.tools.empty() ? " (it declares none)" : ""));
    } else {
      return wrong_type("tool_choice", *choice, "a string or {\"type\": \"function\", ...}");
    }
  }

  if (const auto* v = root->if_contains("logprobs"); v && !v->is_null()) {
    if (!v->is_bool())
      return wrong_type("logprobs", *v, "a boolean");
    req.logprobs = v->get_bool();
  }
  if (const auto* v = root->if_contains("top_logprobs"); v && !v->is_null()) {
    std::int64_t n = 0;
    if (!whole(*v, n) || n < 0 || n > static_cast<std::int64_t>(max_top_logprobs))
      return bad("top_logprobs", "expected an integer 0..20, got " + shown(*v));
    if (!req.logprobs)
      return bad("top_logprobs", "top_logprobs needs logprobs: true");
    req.top_logprobs = static_cast<std::uint8_t>(n);
  }
  if (out.tool_choice == "required" && out.tools.empty())
    return bad("tool_choice", "'required' needs tools to call, and the request declares none");
  if (const auto* v = root->if_contains("parallel_tool_calls"); v && !v->is_null()) {
    if (!v->is_bool())
      return wrong_type("parallel_tool_calls", *v, "a boolean");
    out.parallel_tool_calls = v->get_bool();
    req.parallel_tool_calls = out.parallel_tool_calls;
  }

  grammar::call_alternative answer; // what an answer that may call tools is instead
  answer.what = grammar::call_alternative::kind::text;
  if (const auto* rf = root->if_contains("response_format"); rf && !rf->is_null()) {
    auto g = response_grammar(*rf, answer, grammars);
    if (auto* e = std::get_if<api_error>(&g))
      return *e;
    req.response_grammar = std::get<std::shared_ptr<const grammar::grammar>>(std::move(g));
  }

  if (auto e = parse_common(root, out))
    return *e;
  if (req.response_grammar && req.script)
    return bad("triad.script", "a script forces tokens a response_format would not allow; send "
                               "one or the other");
  if (out.tool_choice == "required" || out.tool_choice == "function") {
    auto g = tool_choice_grammar(out, functions, format ? *format : *byte_chat_format(), grammars);
    if (auto* e = std::get_if<api_error>(&g))
      return *e;
    req.tool_grammar = std::get<std::shared_ptr<const grammar::grammar>>(std::move(g));
    if (req.script)
      return bad("triad.script", "a script forces tokens a tool_choice of '" + out.tool_choice +
                                     "' would not allow; send one or the other");
  }
  // Under auto (and after the first call under required or a named function) the answer is
  // text or the response_format's document, or calls valid against the declared functions. A
  // script forces its own tokens.
  if (!out.tools.empty() && out.tool_choice != "none" && !req.script && req.max_tool_calls > 0) {
    auto g = calls_or_answer_grammar(out, functions, strict, format ? *format : *byte_chat_format(),
                                     answer, grammars, &req.response_grammar_waits_for_call);
    if (auto* e = std::get_if<api_error>(&g))
      return *e;
    if (auto rules = std::get<std::shared_ptr<const grammar::grammar>>(std::move(g)))
      req.response_grammar = std::move(rules);
  }
  req.return_unhosted_calls = true;
  req.declared_tools = out.tools; // only these of the node's hosted tools may run
  if (out.tool_choice == "none") {
    req.max_tool_calls = 0;
    // A script may not force the call the client ruled out.
    if (req.script)
      for (std::size_t i = 0; i < req.script->turns.size(); ++i)
        if (req.script->turns[i].call)
          return bad("triad.script[" + std::to_string(i) + "].tool_call",
                     "the request has tool_choice \"none\"; a script cannot call a tool then");
  }
  return out;
}

std::variant<openai_chat, api_error> parse_completion_request(std::string_view body,
                                                              std::string_view served_model) {
  auto doc = parse_root(body, served_model);
  if (auto* e = std::get_if<api_error>(&doc))
    return *e;
  const auto* root = std::get<json::value>(doc).if_object();
  openai_chat out;
  out.completion = true;
  out.request.max_tokens = 16; // OpenAI's default for completions
  const auto* prompt = root->if_contains("prompt");
  if (prompt == nullptr)
    return bad("prompt", "required");
  if (prompt->is_string()) {
    out.request.raw_prompt = std::string{prompt->get_string()};
  } else if (prompt->is_array() && prompt->get_array().size() == 1 &&
             prompt->get_array()[0].is_string()) {
    out.request.raw_prompt = std::string{prompt->get_array()[0].get_string()};
  } else {
    return wrong_type("prompt", *prompt, "a string (or an array of one string)");
  }
  if (const auto* v = root->if_contains("logprobs"); v && !v->is_null()) {
    std::int64_t n = 0;
    if (!whole(*v, n) || n < 0 || n > 5)
      return bad("logprobs", "expected an integer 0..5 (alternatives per token), got " + shown(*v));
    out.request.logprobs = true;
    out.request.top_logprobs = static_cast<std::uint8_t>(n);
  }
  for (const char* key : {"echo", "suffix", "best_of"}) {
    const auto* v = root->if_contains(key);
    if (v == nullptr || v->is_null() || (v->is_bool() && !v->get_bool()) ||
        (std::string_view{key} == "best_of" && v->is_int64() && v->get_int64() == 1))
      continue;
    return bad(key, "not supported by this node, got " + shown(*v));
  }
  if (auto e = parse_common(root, out))
    return *e;
  out.request.max_tool_calls = 0; // a completion has no tools
  out.request.declared_tools.emplace();
  return out;
}

std::string utf8_stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  std::size_t i = 0;
  while (i < pending_.size()) {
    auto c = static_cast<unsigned char>(pending_[i]);
    std::size_t len = c < 0x80           ? 1
                      : (c >> 5) == 0x6  ? 2
                      : (c >> 4) == 0xe  ? 3
                      : (c >> 3) == 0x1e ? 4
                                         : 0;
    if (len == 0 || (len == 2 && c < 0xc2) || (len == 4 && c > 0xf4)) {
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    if (i + len > pending_.size()) {
      // Check what is there so far; wait for the rest if it could still be valid.
      bool ok = true;
      for (std::size_t k = i + 1; k < pending_.size(); ++k)
        ok = ok && (static_cast<unsigned char>(pending_[k]) & 0xc0) == 0x80;
      if (ok)
        break;
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    bool ok = true;
    for (std::size_t k = 1; k < len; ++k)
      ok = ok && (static_cast<unsigned char>(pending_[i + k]) & 0xc0) == 0x80;
    if (ok && len == 3) { // no overlongs, no surrogates
      auto c1 = static_cast<unsigned char>(pending_[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
    }
    if (ok && len == 4) {
      auto c1 = static_cast<unsigned char>(pending_[i + 1]);
      ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (!ok) {
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    out.append(pending_, i, len);
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string answer_text::push(const request_event& ev) {
  return ev.content ? utf8_.push(ev.text) : std::string{};
}

std::string_view openai_finish_reason(finish_reason reason) noexcept {
  switch (reason) {
  case finish_reason::length:
    return "length";
  case finish_reason::tool_calls:
    return "tool_calls";
  case finish_reason::stop:
  case finish_reason::tool_calls_limit:
    break;
  }
  return "stop";
}

api_error error_of(const request_event& ev) {
  api_error e;
  e.message = ev.message;
  const std::uint32_t retry = ev.retry_ms != 0 ? ev.retry_ms : 1000;
  auto set = [&](unsigned status, const char* code, std::uint32_t retry_ms = 0,
                 const char* type = nullptr) {
    e.status = status;
    e.code = code;
    e.retry_ms = retry_ms;
    e.type = type != nullptr ? type : status >= 500 ? "server_error" : "invalid_request_error";
  };
  switch (ev.code) {
  case errc::exhausted:
    set(400, "context_length_exceeded");
    break;
  case errc::invalid_argument:
    set(400, "invalid_request");
    break;
  case errc::overloaded:
    set(429, "rate_limit_exceeded", retry, "rate_limit_error");
    break;
  case errc::stopped:
    set(503, "draining", retry);
    break;
  case errc::busy:
    set(503, "queue_timeout", retry);
    break;
  case errc::unavailable:
    set(503, "no_device", retry);
    break;
  case errc::timed_out:
    set(504, "request_timeout");
    break;
  default:
    set(500, "generation_failed");
    break;
  }
  return e;
}

// -- completion_stream --

namespace {

// A hosted call as the `triad` extension lists it (its result added once it ran).
json::object hosted_call(const request_event& call) {
  return json::object{{"name", call.tool_name}, {"arguments", call.arguments_json}};
}

} // namespace

completion_stream::completion_stream(completion_options options)
    : options_(std::move(options)) {
  for (const auto& s : options_.stop)
    hold_back_ = std::max(hold_back_, s.size() - 1);
}

completion_output completion_stream::on_event(const request_event& ev) {
  completion_output out;
  if (finished_)
    return out;
  switch (ev.kind) {
  case request_event::state:
    break;
  case request_event::tool_result:
    // A hosted call ran: it and its result go under the triad extension.
    if (!unanswered_.empty()) {
      auto call = hosted_call(unanswered_.front());
      call["result"] = ev.tool_output;
      server_calls_.push_back(std::move(call));
      unanswered_.erase(unanswered_.begin());
      if (options_.stream) { // the text before it, then the call and its result
        if (!role_sent_ && !options_.completion) {
          role_sent_ = true;
          add_event(chunk(json::object{{"role", "assistant"}, {"content", ""}}, nullptr), out);
        }
        flush(false, out); // all but what may start a stop string
        auto event = chunk(json::object{}, nullptr);
        event["choices"] = json::array{};
        auto ran = server_calls_.back().as_object();
        ran["index"] = server_calls_.size() - 1;
        event["triad"] = json::object{{"server_tool_call", std::move(ran)}};
        add_event(event, out);
      }
    }
    break;
  case request_event::token:
    on_token(ev, out);
    break;
  case request_event::tool_call_delta:
    if (options_.stream && !options_.completion)
      on_call_delta(ev, out);
    break;
  case request_event::tool_call:
    // Until its result arrives it may be the client's to run (the request then ends with
    // "tool_calls"); a hosted one is followed by its result.
    unanswered_.push_back(ev);
    break;
  case request_event::done: {
    usage_ = ev.usage;
    content_ += answer_.finish();
    auto finish = openai_finish_reason(ev.finish);
    if (finish == "tool_calls" || finish == "length") { // calls a model file's answer made
      client_calls_ = std::move(unanswered_);
    } else {
      for (const auto& call : unanswered_) // hosted calls the request ended before running
        server_calls_.push_back(hosted_call(call));
    }
    unanswered_.clear();
    complete(finish, out);
    break;
  }
  case request_event::error:
    if (ev.code == errc::cancelled && stopped_by_string_) { // the cancel a stop string asked
      usage_ = ev.usage;
      complete("stop", out);
      break;
    }
    finished_ = out.finished = true;
    usage_ = ev.usage;
    if (started_ && options_.last_chunks) // mid-stream: an error event, then the end
      out.bytes = "data: " + to_json(error_of(ev)) + "\n\ndata: [DONE]\n\n";
    else
      out.error = error_of(ev); // before any byte, or one choice of several: the set answers
    break;
  }
  return out;
}

void completion_stream::on_token(const request_event& ev, completion_output& out) {
  if (stopped_by_string_)
    return;
  if (options_.logprobs && ev.content && ev.logprob)
    logprobs_.push_back({ev.text, *ev.logprob, ev.top_logprobs, content_.size()});
  auto text = answer_.push(ev);
  if (text.empty())
    return;
  content_ += text;
  for (const auto& s : options_.stop) {
    auto from =
        content_.size() > text.size() + s.size() ? content_.size() - text.size() - s.size() : 0;
    auto at = content_.find(s, from);
    if (at != std::string::npos) {
      content_.resize(at);
      // Tokens whose text starts in the stop string are not in the answer, nor their logprobs.
      while (!logprobs_.empty() && logprobs_.back().offset >= at)
        logprobs_.pop_back();
      logprobs_sent_ = std::min(logprobs_sent_, logprobs_.size());
      stopped_by_string_ = true;
      out.cancel = true; // the request ends with "cancelled", answered as stop
      break;
    }
  }
  if (options_.stream)
    flush(false, out);
}

// A piece of a call the client will run, streamed as the model writes it: the first with the
// call's id and name, the next with the arguments' next bytes (OpenAI's tool_call deltas).
void completion_stream::on_call_delta(const request_event& ev, completion_output& out) {
  if (stopped_by_string_)
    return;
  flush(true, out); // the text before the call (no stop string reaches into a call)
  const std::size_t index = ev.call_index;
  json::object call;
  call["index"] = index;
  if (index >= streamed_calls_.size()) { // the call's first piece
    streamed_calls_.resize(index + 1);
    call["id"] = call_id(options_.request, index);
    call["type"] = "function";
    call["function"] = json::object{{"name", ev.tool_name}, {"arguments", ev.arguments_json}};
  } else {
    call["function"] = json::object{{"arguments", ev.arguments_json}};
  }
  streamed_calls_[index] += ev.arguments_json;
  add_event(chunk(json::object{{"tool_calls", json::array{std::move(call)}}}, nullptr), out);
}

void completion_stream::add_event(const json::object& o, completion_output& out) {
  out.bytes += "data: " + json::serialize(o) + "\n\n";
  started_ = true;
}

// Streams the content not yet sent (all of it at the end; before that, all but the last
// hold_back_ bytes, which could be the start of a stop string).
void completion_stream::flush(bool all, completion_output& out) {
  if (!started_ && !all && content_.size() <= hold_back_)
    return;
  auto limit =
      all ? content_.size() : (content_.size() > hold_back_ ? content_.size() - hold_back_ : 0);
  if (!role_sent_ && !options_.completion) {
    role_sent_ = true;
    add_event(chunk(json::object{{"role", "assistant"}, {"content", ""}}, nullptr), out);
  }
  started_ = true;
  if (limit > streamed_) {
    // Only what is complete UTF-8 is in content_, so any cut is at a character boundary but
    // hold_back_ may split one: back up to a boundary.
    while (limit > streamed_ && limit < content_.size() &&
           (static_cast<unsigned char>(content_[limit]) & 0xc0) == 0x80)
      --limit;
    auto piece = content_.substr(streamed_, limit - streamed_);
    streamed_ = limit;
    if (!piece.empty()) {
      auto event = chunk(json::object{{"content", piece}}, nullptr);
      if (options_.logprobs) { // the tokens whose text starts in what is sent
        std::size_t upto = logprobs_sent_;
        while (upto < logprobs_.size() && (all || logprobs_[upto].offset < streamed_))
          ++upto;
        event["choices"].as_array()[0].as_object()["logprobs"] =
            logprobs_json(logprobs_sent_, upto);
        logprobs_sent_ = upto;
      }
      add_event(event, out);
    }
  }
}

// The log probabilities of content tokens [from, to): chat's {"content": [{token, logprob,
// bytes, top_logprobs}]}, or a completion's {tokens, token_logprobs, top_logprobs,
// text_offset}; null where the request did not ask.
json::value completion_stream::logprobs_json(std::size_t from, std::size_t to) const {
  if (!options_.logprobs)
    return nullptr;
  // A token may hold part of a character: its text as valid UTF-8, its bytes as they are.
  auto text_of = [](const std::string& bytes) {
    utf8_stream u;
    auto t = u.push(bytes);
    return t + u.finish();
  };
  auto bytes_of = [](const std::string& bytes) {
    json::array a;
    for (char c : bytes)
      a.push_back(static_cast<unsigned char>(c));
    return a;
  };
  if (options_.completion) {
    json::array tokens, token_logprobs, top, offsets;
    for (std::size_t i = from; i < to; ++i) {
      const auto& e = logprobs_[i];
      tokens.push_back(json::string(text_of(e.bytes)));
      token_logprobs.push_back(e.logprob);
      json::object alternatives;
      for (const auto& a : e.top) // the likelier of two alike texts stays
        alternatives.emplace(text_of(a.text), a.logprob);
      top.push_back(std::move(alternatives));
      offsets.push_back(e.offset);
    }
    return json::object{{"tokens", std::move(tokens)},
                        {"token_logprobs", std::move(token_logprobs)},
                        {"top_logprobs", std::move(top)},
                        {"text_offset", std::move(offsets)}};
  }
  json::array content;
  for (std::size_t i = from; i < to; ++i) {
    const auto& e = logprobs_[i];
    json::array alternatives;
    for (const auto& a : e.top)
      alternatives.push_back(json::object{
          {"token", text_of(a.text)}, {"logprob", a.logprob}, {"bytes", bytes_of(a.text)}});
    content.push_back(json::object{{"token", text_of(e.bytes)},
                                   {"logprob", e.logprob},
                                   {"bytes", bytes_of(e.bytes)},
                                   {"top_logprobs", std::move(alternatives)}});
  }
  return json::object{{"content", std::move(content)}};
}

void completion_stream::complete(std::string_view finish, completion_output& out) {
  finished_ = out.finished = true;
  if (!options_.stream) {
    json::object choice{{"index", options_.index}, {"finish_reason", finish}};
    if (options_.completion)
      choice["text"] = content_;
    else
      choice["message"] = message_json();
    choice["logprobs"] = logprobs_json(0, logprobs_.size());
    json::object body{
        {"id", options_.id},
        {"object", options_.completion ? "text_completion" : "chat.completion"},
        {"created", options_.created},
        {"model", options_.model},
        {"choices", json::array{std::move(choice)}},
        {"usage", usage_object(usage_)},
    };
    if (!server_calls_.empty())
      body["triad"] = json::object{
          {"server_tool_calls", json::array(server_calls_.begin(), server_calls_.end())}};
    out.bytes = json::serialize(body);
    return;
  }
  flush(true, out);
  if (!client_calls_.empty()) {
    // The calls, less what streamed as written: a streamed call's arguments are the model's
    // text, so only what they lack of the parsed call's (nothing, once written whole) follows.
    json::array calls;
    for (std::size_t i = 0; i < client_calls_.size(); ++i) {
      if (i >= streamed_calls_.size()) {
        calls.push_back(call_json(client_calls_[i], i, true));
        continue;
      }
      const auto& whole = client_calls_[i].arguments_json;
      if (!whole.starts_with(streamed_calls_[i]) || whole.size() == streamed_calls_[i].size())
        continue;
      calls.push_back(json::object{
          {"index", i},
          {"function", json::object{{"arguments", whole.substr(streamed_calls_[i].size())}}}});
    }
    if (!calls.empty())
      add_event(chunk(json::object{{"tool_calls", std::move(calls)}}, nullptr), out);
  }
  add_event(chunk(json::object{}, json::value(finish)), out);
  if (!options_.last_chunks)
    return; // one choice of several: the set ends the stream
  if (options_.include_usage) {
    auto last = chunk(json::object{}, nullptr);
    last["choices"] = json::array{};
    last["usage"] = usage_object(usage_);
    add_event(last, out);
  }
  out.bytes += "data: [DONE]\n\n";
}

// One streamed event: a chat chunk with `delta`, or for a plain completion a text_completion
// carrying delta's content as `text`.
json::object completion_stream::chunk(json::object delta, json::value finish) const {
  if (options_.completion) {
    const auto* text = delta.if_contains("content");
    return json::object{
        {"id", options_.id},
        {"object", "text_completion"},
        {"created", options_.created},
        {"model", options_.model},
        {"choices", json::array{json::object{{"index", options_.index},
                                             {"text", text ? *text : json::value("")},
                                             {"logprobs", nullptr},
                                             {"finish_reason", finish}}}},
    };
  }
  return json::object{
      {"id", options_.id},
      {"object", "chat.completion.chunk"},
      {"created", options_.created},
      {"model", options_.model},
      {"choices", json::array{json::object{{"index", options_.index},
                                           {"delta", std::move(delta)},
                                           {"logprobs", nullptr},
                                           {"finish_reason", finish}}}},
  };
}

std::string call_id(std::uint64_t request, std::size_t index) {
  static constexpr std::string_view digits =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  // 62^9 ids: the request's number and the call's index (below 64) in base 62, so distinct
  // calls of a run never share one.
  std::uint64_t n = (request % 211'516'977'285'368ULL) << 6 | (index & 63);
  std::string out(9, '0');
  for (auto it = out.rbegin(); it != out.rend(); ++it, n /= 62)
    *it = digits[n % 62];
  return out;
}

json::object completion_stream::call_json(const request_event& call, std::size_t index,
                                          bool delta) const {
  json::object o{
      {"id", call_id(options_.request, index)},
      {"type", "function"},
      {"function", json::object{{"name", call.tool_name}, {"arguments", call.arguments_json}}}};
  if (delta)
    o["index"] = index;
  return o;
}

json::array completion_stream::client_calls_json(bool delta) const {
  json::array out;
  for (std::size_t i = 0; i < client_calls_.size(); ++i)
    out.push_back(call_json(client_calls_[i], i, delta));
  return out;
}

json::object completion_stream::message_json() const {
  json::object msg{{"role", "assistant"}};
  // With calls, white space alone (what a model writes between them) is no content.
  const bool blank = content_.find_first_not_of(" \t\r\n") == std::string::npos;
  msg["content"] = blank && !client_calls_.empty() ? json::value(nullptr) : json::value(content_);
  if (!client_calls_.empty())
    msg["tool_calls"] = client_calls_json(false);
  return msg;
}

std::string utf8_stream::finish() {
  std::string out = pending_.empty() ? "" : "\xef\xbf\xbd";
  pending_.clear();
  return out;
}

// -- completion_set --

completion_set::completion_set(completion_options options, std::size_t n)
    : options_(std::move(options)),
      ended_(std::max<std::size_t>(n, 1), false),
      bodies_(ended_.size()),
      usage_(ended_.size()),
      remaining_(ended_.size()) {
  for (std::size_t i = 0; i < ended_.size(); ++i) {
    auto o = options_;
    o.index = i;
    o.last_chunks = ended_.size() == 1;
    choices_.emplace_back(std::move(o));
  }
}

completion_output completion_set::on_event(std::size_t choice, const request_event& ev) {
  if (choices_.size() == 1)
    return choices_[0].on_event(ev);
  completion_output out;
  if (finished_ || choice >= choices_.size() || ended_[choice])
    return out;
  auto part = choices_[choice].on_event(ev);
  out.cancel = part.cancel;
  if (part.error) { // one choice failed: so does the answer
    finished_ = out.finished = true;
    out.cancel_others = true;
    if (started_)
      out.bytes = "data: " + to_json(*part.error) + "\n\ndata: [DONE]\n\n";
    else
      out.error = std::move(part.error);
    return out;
  }
  if (options_.stream && !part.bytes.empty()) {
    started_ = true;
    out.bytes = std::move(part.bytes);
  }
  if (!part.finished)
    return out;
  ended_[choice] = true;
  usage_[choice] = choices_[choice].usage();
  if (!options_.stream)
    bodies_[choice] = json::parse(part.bytes);
  if (--remaining_ > 0)
    return out;
  finished_ = out.finished = true;
  // The prompt once (the first choice's: the others found its pages cached), the completions
  // of all.
  request_usage total = usage_[0];
  json::array per_choice;
  for (std::size_t i = 0; i < usage_.size(); ++i) {
    if (i > 0) {
      total.completion_tokens += usage_[i].completion_tokens;
      total.tool_calls += usage_[i].tool_calls;
      total.hosted_tool_calls += usage_[i].hosted_tool_calls;
      total.kv_kept_calls += usage_[i].kv_kept_calls;
      total.kv_stored_calls += usage_[i].kv_stored_calls;
      total.store_tokens += usage_[i].store_tokens;
    }
    per_choice.push_back(json::object{{"completion_tokens", usage_[i].completion_tokens},
                                      {"cached_tokens", usage_[i].cached_tokens}});
  }
  auto usage = usage_object(total);
  usage["triad"].as_object()["choices"] = std::move(per_choice);
  if (options_.stream) {
    if (options_.include_usage)
      out.bytes += "data: " +
                   json::serialize(json::object{{"id", options_.id},
                                                {"object", options_.completion
                                                               ? "text_completion"
                                                               : "chat.completion.chunk"},
                                                {"created", options_.created},
                                                {"model", options_.model},
                                                {"choices", json::array{}},
                                                {"usage", std::move(usage)}}) +
                   "\n\n";
    out.bytes += "data: [DONE]\n\n";
    return out;
  }
  auto body = bodies_[0].as_object();
  json::array choices, server_calls;
  for (std::size_t i = 0; i < bodies_.size(); ++i) {
    const auto& b = bodies_[i].as_object();
    choices.push_back(b.at("choices").at(0));
    if (const auto* ext = b.if_contains("triad"))
      for (const auto& call : ext->at("server_tool_calls").as_array()) {
        auto c = call.as_object();
        c["choice"] = i;
        server_calls.push_back(std::move(c));
      }
  }
  body["choices"] = std::move(choices);
  body["usage"] = std::move(usage);
  if (server_calls.empty())
    body.erase("triad");
  else
    body["triad"] = json::object{{"server_tool_calls", std::move(server_calls)}};
  out.bytes = json::serialize(body);
  return out;
}

} // namespace triad
