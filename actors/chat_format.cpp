#include "actors/chat_format.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "jinja/template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace triad {

namespace {

// -- the byte format --

class byte_format final : public chat_format {
public:
  expected<std::vector<token>> prompt(const std::vector<chat_message>& messages,
                                      const std::string&) const override {
    return render_prompt(messages);
  }
  expected<std::vector<token>> turn(const std::vector<chat_message>& messages) const override {
    return render_turn(messages);
  }
  expected<std::vector<token>> tool_result(std::string_view output) const override {
    return render_tool_result(output);
  }
  std::vector<token> raw(std::string_view text) const override {
    std::vector<token> out{tokenizer::bos};
    tokenizer{}.encode_to(out, text, false);
    return out;
  }
  expected<std::vector<token>> script(const generation_script& s) const override {
    return script_tokens(s);
  }
  std::string piece(token t) const override { return tokenizer{}.decode(t); }
  bool ends(token t) const override { return t == tokenizer::eos; }
  std::vector<token> end_tokens() const override { return {tokenizer::eos}; }
  call_syntax syntax() const override { return call_syntax::tagged; }
  std::optional<token> call_start() const override { return tokenizer::tool_call_start; }
  std::optional<token> call_end() const override { return tokenizer::tool_call_end; }
  bool control(token t) const override { return tokenizer::is_special(t); }
  bool continues_calls() const override { return true; }
  std::size_t known_tokens() const override { return tokenizer::first_unused; }
  bool text_token(token t) const override { return t >= 0 && t < 256; }
};

// -- a model file's format --

namespace json = boost::json;

// Spellings that end a turn in the families triad serves, where the vocabulary has them as
// control tokens (llama.cpp's end-of-generation set does the same).
constexpr std::string_view turn_ends[] = {"<|im_end|>",      "<|eot_id|>",    "<|eom_id|>",
                                          "<|end_of_text|>", "<|endoftext|>", "</s>"};

class model_format final : public chat_format {
public:
  model_format(std::unique_ptr<model_tokenizer> tok, jinja::jinja_template tmpl)
      : tok_(std::move(tok))
      , template_(std::move(tmpl)) {
    const auto& v = tok_->vocabulary();
    std::optional<token> mistral_open, python_tag;
    bool args_token = false;
    auto spelling = [&](std::optional<token> id) {
      return id ? v.tokens[static_cast<std::size_t>(*id)] : std::string{};
    };
    bos_ = spelling(v.bos);
    eos_ = spelling(v.eos);
    for (auto id : {v.eos, v.eot})
      if (id)
        ends_.push_back(*id);
    for (std::size_t id = 0; id < v.tokens.size(); ++id) {
      const auto& t = v.tokens[id];
      const bool control = v.kinds[id] == token_kind::control;
      if (control)
        for (auto e : turn_ends)
          if (t == e &&
              std::find(ends_.begin(), ends_.end(), static_cast<token>(id)) == ends_.end())
            ends_.push_back(static_cast<token>(id));
      if (t == "<tool_call>")
        call_start_ = static_cast<token>(id);
      if (t == "</tool_call>")
        call_end_ = static_cast<token>(id);
      if (t == "[TOOL_CALLS]")
        mistral_open = static_cast<token>(id);
      if (t == "<|python_tag|>")
        python_tag = static_cast<token>(id);
      if (t == "[ARGS]")
        args_token = true;
    }
    // The family's call syntax, from the tokens its vocabulary has for it.
    if (call_start_ && call_end_) {
      syntax_ = call_syntax::tagged;
    } else {
      call_start_.reset();
      call_end_.reset();
      if (mistral_open) {
        syntax_ = call_syntax::mistral;
        call_start_ = mistral_open;
        named_calls_ = args_token;
      } else if (python_tag) {
        syntax_ = call_syntax::llama3;
        call_start_ = python_tag;
      }
    }
    turn_end_ = v.eot ? *v.eot : v.eos ? *v.eos : ends_.empty() ? token{0} : ends_.front();
    filler_ = tok_->encode("a", false).front();
  }

  // The template's context, as Hugging Face's apply_chat_template builds it.
  expected<std::string> render(const std::vector<chat_message>& messages,
                               const std::string& tools_json) const {
    json::array list;
    for (const auto& m : messages) {
      json::object o{{"role", m.role}, {"content", m.content}};
      if (!m.tool_calls_json.empty()) {
        boost::system::error_code ec;
        auto calls = json::parse(m.tool_calls_json, ec);
        if (!ec)
          o["tool_calls"] = std::move(calls);
      }
      if (!m.tool_call_id.empty())
        o["tool_call_id"] = m.tool_call_id;
      list.push_back(std::move(o));
    }
    json::object ctx{{"messages", std::move(list)},
                     {"add_generation_prompt", true},
                     {"bos_token", bos_},
                     {"eos_token", eos_}};
    if (!tools_json.empty()) {
      boost::system::error_code ec;
      auto tools = json::parse(tools_json, ec);
      if (!ec && tools.is_array() && !tools.get_array().empty())
        ctx["tools"] = std::move(tools);
    }
    return template_.render(jinja::value::from_json(ctx));
  }

  // Client text may not spell the model's control tokens: the rendered prompt is tokenized
  // with them, so "<|im_start|>" in a message would start a turn the client forged.
  expected<void> check_client_text(const std::vector<chat_message>& messages,
                                   const std::string& tools_json) const {
    auto check = [&](std::string_view text, const std::string& where) -> expected<void> {
      if (auto id = tok_->control_in(text))
        return make_error(errc::invalid_argument,
                          where + " spells the model's control token '" +
                              tok_->vocabulary().tokens[static_cast<std::size_t>(*id)] +
                              "'; control tokens cannot come from client text");
      return {};
    };
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const auto& m = messages[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      for (auto [text, field] : {std::pair{&m.content, ".content"},
                                 {&m.tool_calls_json, ".tool_calls"},
                                 {&m.tool_call_id, ".tool_call_id"}})
        if (auto ok = check(*text, at + field); !ok)
          return ok;
    }
    return check(tools_json, "tools");
  }

  expected<std::vector<token>> prompt(const std::vector<chat_message>& messages,
                                      const std::string& tools_json) const override {
    if (auto ok = check_client_text(messages, tools_json); !ok)
      return ok.error();
    auto text = render(messages, tools_json);
    if (!text)
      return text.error();
    // The rendered template spells its control tokens; a bos it does not write is added, as
    // llama.cpp does for models that want one.
    std::vector<token> out;
    const auto& v = tok_->vocabulary();
    if (v.add_bos && v.bos && !(text->starts_with(bos_) && !bos_.empty()))
      out.push_back(*v.bos);
    tok_->encode_to(out, *text, true);
    return out;
  }

  expected<std::vector<token>> turn(const std::vector<chat_message>&) const override {
    return make_error(errc::invalid_argument,
                      "agent sessions continue conversations of the random presets only; with a "
                      "model file, send the whole conversation each turn");
  }

  expected<std::vector<token>> tool_result(std::string_view) const override {
    return make_error(errc::unsupported,
                      "hosted tools are not run for model files yet; the call is returned");
  }

  std::vector<token> raw(std::string_view text) const override {
    std::vector<token> out;
    const auto& v = tok_->vocabulary();
    if (v.add_bos && v.bos)
      out.push_back(*v.bos);
    tok_->encode_to(out, text, true);
    return out;
  }

  expected<std::vector<token>> script(const generation_script& s) const override {
    std::vector<token> out;
    std::vector<tool_call_text> calls;
    for (const auto& turn : s.turns) {
      out.insert(out.end(), turn.tokens, filler_);
      if (turn.call)
        calls.push_back(*turn.call);
    }
    if (!calls.empty()) {
      switch (syntax_) {
      case call_syntax::none:
        return make_error(errc::invalid_argument,
                          "the model file's vocabulary has no tool-call syntax triad knows "
                          "(<tool_call>, [TOOL_CALLS] or <|python_tag|> tokens); a script "
                          "cannot make it call a tool");
      case call_syntax::tagged:
        for (const auto& c : calls) {
          out.push_back(*call_start_);
          tok_->encode_to(out, write_tool_calls(syntax_, {c}), false);
          out.push_back(*call_end_);
        }
        break;
      case call_syntax::llama3: // as its template asks: the JSON alone
        tok_->encode_to(out, write_tool_calls(syntax_, calls), false);
        break;
      case call_syntax::mistral:
        out.push_back(*call_start_);
        tok_->encode_to(out, write_tool_calls(syntax_, calls), false);
        break;
      }
    }
    out.push_back(turn_end_);
    return out;
  }

  std::string piece(token t) const override { return tok_->decode(t); }
  bool ends(token t) const override {
    return std::find(ends_.begin(), ends_.end(), t) != ends_.end();
  }
  std::vector<token> end_tokens() const override { return ends_; }
  call_syntax syntax() const override { return syntax_; }
  std::optional<token> call_start() const override { return call_start_; }
  std::optional<token> call_end() const override { return call_end_; }
  bool control(token t) const override {
    const auto& v = tok_->vocabulary();
    return t >= 0 && static_cast<std::size_t>(t) < v.kinds.size() &&
           v.kinds[static_cast<std::size_t>(t)] == token_kind::control;
  }
  bool continues_calls() const override { return false; }
  bool calls_beyond_layout() const override { return named_calls_; }
  std::size_t known_tokens() const override { return tok_->vocabulary().tokens.size(); }
  bool text_token(token t) const override {
    const auto& v = tok_->vocabulary();
    if (t < 0 || static_cast<std::size_t>(t) >= v.kinds.size())
      return false;
    const auto k = v.kinds[static_cast<std::size_t>(t)];
    return k == token_kind::normal || k == token_kind::byte;
  }

private:
  std::unique_ptr<model_tokenizer> tok_;
  jinja::jinja_template template_;
  std::string bos_, eos_;
  std::vector<token> ends_;
  std::optional<token> call_start_, call_end_;
  call_syntax syntax_ = call_syntax::none;
  bool named_calls_ = false; // Mistral v11+: name[ARGS]{...}
  token turn_end_ = 0; // what a script's answer ends with
  token filler_ = 0;   // what a script's filler tokens are
};

} // namespace

std::shared_ptr<const chat_format> byte_chat_format() {
  static const auto shared = std::make_shared<const byte_format>();
  return shared;
}

expected<std::shared_ptr<const chat_format>> make_chat_format(const model_source& model,
                                                              const std::string& template_path) {
  if (!model.from_file())
    return byte_chat_format();
  const std::string& source = model.file->source();
  std::string template_override;
  if (!template_path.empty()) {
    std::ifstream in{template_path, std::ios::binary};
    if (!in)
      return make_error(errc::not_found,
                        "[model].chat_template: cannot read '" + template_path + "'");
    template_override.assign(std::istreambuf_iterator<char>{in}, {});
  }
  auto v = vocab::from_gguf(*model.file);
  if (!v)
    return v.error();
  if (v->tokens.size() > model.shape.vocab)
    return make_error(errc::parse_error, "GGUF file '" + source + "': the tokenizer has " +
                                             std::to_string(v->tokens.size()) +
                                             " tokens, the model's embedding " +
                                             std::to_string(model.shape.vocab));
  std::string text = template_override.empty() ? v->chat_template : std::move(template_override);
  if (text.empty())
    return make_error(errc::invalid_argument,
                      "GGUF file '" + source +
                          "' has no tokenizer.chat_template; give one with --chat-template FILE "
                          "([model].chat_template)");
  auto tok = make_tokenizer(std::move(*v));
  if (!tok)
    return make_error(tok.error().code, "GGUF file '" + source + "': " + tok.error().message);
  const std::string origin = template_path.empty() ? "'" + source + "'" : "'" + template_path + "'";
  auto tmpl = jinja::jinja_template::parse(text);
  if (!tmpl)
    return make_error(tmpl.error().code, "the chat template of " + origin +
                                             " cannot be parsed: " + tmpl.error().message);
  auto format = std::make_shared<model_format>(std::move(*tok), std::move(*tmpl));
  // Tried once now, so a template triad cannot render stops the start, not a request.
  if (auto tried = format->render({{"user", "Hello"}}, {}); !tried)
    return make_error(tried.error().code,
                      "the chat template of " + origin +
                          " fails on a one-message conversation: " + tried.error().message);
  return std::shared_ptr<const chat_format>{std::move(format)};
}

std::shared_ptr<const grammar::token_index> answer_vocabulary(const chat_format& format,
                                                              std::size_t vocab) {
  std::vector<std::string> bytes(vocab);
  const std::size_t known = std::min(vocab, format.known_tokens());
  for (std::size_t t = 0; t < known; ++t) {
    const auto id = static_cast<token>(t);
    if (format.text_token(id) && !format.ends(id))
      bytes[t] = format.piece(id);
    // A byte no UTF-8 text has (0xF8.. are the call tokens' markers): no grammar allows it.
    if (std::any_of(bytes[t].begin(), bytes[t].end(),
                    [](char c) { return static_cast<unsigned char>(c) >= 0xf8; }))
      bytes[t].clear();
  }
  if (format.syntax() != call_syntax::none) {
    const auto mark = [&](std::optional<token> t, unsigned char marker) {
      if (t && *t >= 0 && static_cast<std::size_t>(*t) < vocab)
        bytes[static_cast<std::size_t>(*t)] = std::string(1, static_cast<char>(marker));
    };
    mark(format.call_start(), grammar::call_open_marker);
    mark(format.call_end(), grammar::call_close_marker);
  }
  std::vector<std::uint32_t> ends;
  for (auto t : format.end_tokens())
    ends.push_back(static_cast<std::uint32_t>(t));
  return std::make_shared<const grammar::token_index>(std::move(bytes), std::move(ends));
}

std::optional<grammar::call_layout> call_layout_of(const chat_format& format,
                                                   std::size_t max_calls) {
  const std::string open(1, static_cast<char>(grammar::call_open_marker));
  const std::string close(1, static_cast<char>(grammar::call_close_marker));
  grammar::call_layout l;
  l.max_calls = std::max<std::size_t>(format.continues_calls() ? 1 : max_calls, 1);
  switch (format.syntax()) {
  case call_syntax::none:
    return std::nullopt;
  case call_syntax::tagged: // <tool_call>{..}</tool_call>, a newline between calls
    l.before_each = open;
    l.after_each = close;
    l.between += '\n';
    l.newlines_inside = true;
    return l;
  case call_syntax::llama3: // {"name": .., "parameters": {..}}; {..}
    l.arguments_key = std::string{"parameters"};
    l.between.append("; ");
    return l;
  case call_syntax::mistral: // [TOOL_CALLS][{..}, {..}]
    l.before_all = open;
    l.before_all += '[';
    l.between.append(", ");
    l.after_all += ']';
    return l;
  }
  return std::nullopt;
}

} // namespace triad
