#include "load/detail/sse.hpp"

#include <cmath>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

namespace triad::load::detail {

namespace json = boost::json;

namespace {

std::string_view str(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string_view{v->get_string()} : std::string_view{};
}

std::uint64_t count(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_number())
    return 0;
  auto d = v->to_number<double>();
  return d > 0 ? static_cast<std::uint64_t>(d) : 0;
}

void read_usage(const json::object& u, std::uint64_t& prompt, std::uint64_t& completion,
                std::uint64_t& cached, node_usage& node) {
  prompt = count(u, "prompt_tokens");
  completion = count(u, "completion_tokens");
  if (const auto* d = u.if_contains("prompt_tokens_details"); d && d->is_object())
    cached = count(d->get_object(), "cached_tokens");
  if (const auto* t = u.if_contains("triad"); t && t->is_object()) {
    const auto& o = t->get_object();
    node.server_tool_calls = count(o, "server_tool_calls");
    node.kv_kept_calls = count(o, "kv_kept_calls");
    node.kv_stored_calls = count(o, "kv_stored_calls");
    node.store_tokens = count(o, "store_tokens");
  }
}

} // namespace

void sse_reader::feed(std::string_view bytes, clock_type::time_point at) {
  pending_.append(bytes);
  std::size_t start = 0;
  for (;;) {
    auto end = pending_.find("\n\n", start);
    auto crlf = pending_.find("\r\n\r\n", start);
    std::size_t sep = 2;
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
      end = crlf;
      sep = 4;
    }
    if (end == std::string::npos)
      break;
    std::string_view ev{pending_.data() + start, end - start};
    // Each line "data: ..." of the event; other fields (event:, id:, comments) are ignored.
    std::size_t line_start = 0;
    std::string data;
    while (line_start <= ev.size()) {
      auto nl = ev.find('\n', line_start);
      auto line = ev.substr(line_start, nl == std::string_view::npos ? ev.npos : nl - line_start);
      if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ')
          line.remove_prefix(1);
        if (!data.empty())
          data += '\n';
        data.append(line);
      }
      if (nl == std::string_view::npos)
        break;
      line_start = nl + 1;
    }
    if (!data.empty())
      event(data, at);
    start = end + sep;
  }
  pending_.erase(0, start);
}

void sse_reader::event(std::string_view payload, clock_type::time_point at) {
  if (payload == "[DONE]") {
    done_ = true;
    return;
  }
  boost::system::error_code ec;
  auto j = json::parse(payload, ec);
  if (ec || !j.is_object()) {
    if (error_.empty())
      error_ = "an event is not a JSON object: " + std::string{payload.substr(0, 80)};
    return;
  }
  const auto& o = j.get_object();
  if (const auto* e = o.if_contains("error"); e && e->is_object()) {
    error_ = std::string{str(e->get_object(), "message")};
    if (error_.empty())
      error_ = "an error event";
    return;
  }
  if (const auto* u = o.if_contains("usage"); u && u->is_object()) {
    read_usage(u->get_object(), prompt_, completion_, cached_, node_);
    usage_ = true;
  }
  const auto* choices = o.if_contains("choices");
  if (choices == nullptr || !choices->is_array() || choices->get_array().empty())
    return;
  const auto* c = choices->get_array()[0].if_object();
  if (c == nullptr)
    return;
  std::size_t bytes = 0;
  if (auto f = str(*c, "finish_reason"); !f.empty())
    finish_ = f;
  if (auto t = str(*c, "text"); !t.empty()) { // a plain completion chunk
    content_ += t;
    bytes += t.size();
  }
  if (const auto* d = c->if_contains("delta"); d && d->is_object()) {
    const auto& delta = d->get_object();
    auto text = str(delta, "content");
    content_ += text;
    bytes += text.size();
    if (const auto* calls = delta.if_contains("tool_calls"); calls && calls->is_array())
      for (const auto& call : calls->get_array()) {
        // The first call of an answer is the one the harness answers (the others of a
        // parallel answer would need a turn of their own).
        if (!call.is_object())
          continue;
        if (const auto* index = call.get_object().if_contains("index");
            index && index->is_int64() && index->get_int64() != 0)
          continue;
        if (auto id = str(call.get_object(), "id"); !id.empty())
          tool_id_ = id;
        if (const auto* fn = call.get_object().if_contains("function"); fn && fn->is_object()) {
          auto name = str(fn->get_object(), "name");
          auto args = str(fn->get_object(), "arguments");
          tool_name_ += name;
          tool_args_ += args;
          bytes += name.size() + args.size();
        }
      }
  }
  if (bytes > 0)
    pieces_.push_back({at, bytes});
}

void sse_reader::finish_into(call_result& r) {
  r.content = std::move(content_);
  r.finish_reason = finish_;
  r.tool_name = tool_name_;
  r.tool_arguments = tool_args_;
  r.tool_call_id = tool_id_;
  r.prompt_tokens = prompt_;
  r.cached_tokens = cached_;
  r.node = node_;
  std::size_t total = 0;
  for (const auto& p : pieces_)
    total += p.bytes;
  r.completion_tokens = usage_ ? completion_ : pieces_.size();
  // Spread the tokens over the chunks in proportion to their text (cumulative rounding, so
  // they add up); a chunk carrying k tokens gives k arrival times.
  r.token_times.clear();
  if (!pieces_.empty() && r.completion_tokens > 0) {
    std::size_t seen = 0;
    std::uint64_t given = 0;
    for (const auto& p : pieces_) {
      seen += p.bytes;
      auto upto = usage_ ? static_cast<std::uint64_t>(
                               std::llround(static_cast<double>(r.completion_tokens) *
                                            static_cast<double>(seen) / static_cast<double>(total)))
                         : given + 1;
      for (; given < upto; ++given)
        r.token_times.push_back(p.at);
    }
  }
  if (!error_.empty()) {
    r.ok = false;
    r.error_kind = "stream_error";
    r.error = error_;
  } else if (!done_) {
    r.ok = false;
    r.error_kind = "protocol";
    r.error = "the event stream ended without data: [DONE]";
  } else {
    r.ok = true;
  }
}

void read_completion(std::string_view body, call_result& r) {
  boost::system::error_code ec;
  auto j = json::parse(body, ec);
  if (ec || !j.is_object()) {
    r.ok = false;
    r.error_kind = "protocol";
    r.error = "the answer is not a JSON object";
    return;
  }
  const auto& o = j.get_object();
  if (const auto* u = o.if_contains("usage"); u && u->is_object())
    read_usage(u->get_object(), r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.node);
  if (const auto* choices = o.if_contains("choices"); choices && choices->is_array() &&
                                                      !choices->get_array().empty() &&
                                                      choices->get_array()[0].is_object()) {
    const auto& c = choices->get_array()[0].get_object();
    r.finish_reason = str(c, "finish_reason");
    r.content = str(c, "text");
    if (const auto* m = c.if_contains("message"); m && m->is_object()) {
      r.content = str(m->get_object(), "content");
      if (const auto* calls = m->get_object().if_contains("tool_calls");
          calls && calls->is_array() && !calls->get_array().empty() &&
          calls->get_array()[0].is_object()) {
        const auto& call = calls->get_array()[0].get_object();
        r.tool_call_id = str(call, "id");
        if (const auto* fn = call.if_contains("function"); fn && fn->is_object()) {
          r.tool_name = str(fn->get_object(), "name");
          r.tool_arguments = str(fn->get_object(), "arguments");
        }
      }
    }
  }
  r.ok = true;
}

} // namespace triad::load::detail
