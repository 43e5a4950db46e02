#include <charconv>
#include <limits>
#include <mutex>

#include "actors/node.hpp"
#include "load/target.hpp"
#include "server/openai.hpp"

namespace triad::load {

namespace {

class inproc_target final : public target {
public:
  inproc_target(std::unique_ptr<node> owned, node* n, std::string model)
      : owned_(std::move(owned))
      , node_(n)
      , model_(std::move(model)) {}

  ~inproc_target() override {
    if (owned_)
      owned_->stop();
  }

  std::unique_ptr<prepared_call> prepare(call_spec spec, call_callback done) override {
    return std::make_unique<prepared>(*node_, request_of(spec), std::move(done));
  }

  expected<std::string> trace_of(const std::string& request_id) override {
    std::uint64_t id = 0;
    auto [end, ec] = std::from_chars(request_id.data(), request_id.data() + request_id.size(), id);
    if (ec != std::errc{} || end != request_id.data() + request_id.size())
      return make_error(errc::invalid_argument, "request id '" + request_id + "' is not a number");
    return node_->request_trace(id);
  }

  std::string describe() const override { return "inproc " + model_; }
  std::string model() const override { return model_; }

private:
  // The node's request for `spec`: tool calls of earlier answers back in the model's markers,
  // the script as the node's own.
  static chat_request request_of(const call_spec& spec) {
    chat_request req;
    req.session = spec.session;
    req.max_tokens = spec.max_tokens;
    req.return_unhosted_calls = true;
    req.trace = spec.trace;
    for (const auto& m : spec.messages) {
      std::string content = m.content;
      if (!m.tool_name.empty())
        content += "<tool_call>{\"name\":\"" + m.tool_name +
                   "\",\"arguments\":" + (m.tool_arguments.empty() ? "{}" : m.tool_arguments) +
                   "}</tool_call>";
      req.messages.push_back({m.role, std::move(content)});
    }
    if (!spec.script.empty()) {
      generation_script s;
      for (const auto& step : spec.script) {
        script_turn t;
        t.tokens = step.tokens;
        if (!step.tool.empty())
          t.call = tool_call_text{step.tool, step.arguments.empty() ? "{}" : step.arguments};
        s.turns.push_back(std::move(t));
      }
      req.script = std::move(s);
    }
    return req;
  }

  // A request built ahead; send() submits it.
  class prepared final : public prepared_call {
  public:
    prepared(node& n, chat_request req, call_callback done)
        : node_(n)
        , req_(std::move(req))
        , done_(std::move(done)) {}

    void send() override;

  private:
    node& node_;
    chat_request req_;
    call_callback done_;
  };

  std::unique_ptr<node> owned_; // the node, when the target started it
  node* node_;
  std::string model_;
};

void inproc_target::prepared::send() {
  // The request actor reports on one thread at a time, in order.
  struct state {
    call_result r;
    answer_text text;
    call_callback done;
    bool traced = false;
  };
  auto st = std::make_shared<state>();
  st->traced = req_.trace;
  st->done = std::move(done_);
  st->r.sent = clock_type::now();
  node_.submit(std::move(req_), [st](const request_event& ev) {
    auto& r = st->r;
    switch (ev.kind) {
    case request_event::token:
      r.token_times.push_back(clock_type::now());
      r.content += st->text.push(ev);
      return;
    case request_event::tool_call:
      if (!r.tool_name.empty())
        return; // a parallel call: the first is the one the harness answers, as over HTTP
      r.tool_name = ev.tool_name;
      r.tool_arguments = ev.arguments_json;
      r.tool_call_id = call_id(ev.request, 0);
      return;
    case request_event::tool_result: // a tool the node ran itself
      r.tool_name.clear();
      return;
    case request_event::state:
    case request_event::tool_call_delta: // the whole call follows
      return;
    case request_event::done:
    case request_event::error:
      break;
    }
    r.ended = clock_type::now();
    if (st->traced && ev.request != 0) // 0: refused before it had an id
      r.request_id = std::to_string(ev.request);
    r.prompt_tokens = ev.usage.prompt_tokens;
    r.completion_tokens = ev.usage.completion_tokens;
    r.cached_tokens = ev.usage.cached_tokens;
    r.node = {ev.usage.hosted_tool_calls, ev.usage.kv_kept_calls, ev.usage.kv_stored_calls,
              ev.usage.store_tokens};
    if (ev.kind == request_event::done) {
      r.ok = true;
      r.content += st->text.finish();
      r.finish_reason = openai_finish_reason(ev.finish);
      if (r.finish_reason != "tool_calls")
        r.tool_name.clear();
    } else {
      r.ok = false;
      r.error_kind = to_string(ev.code);
      r.error = ev.message;
    }
    auto cb = std::move(st->done);
    cb(std::move(r));
  });
}

} // namespace

expected<std::unique_ptr<target>> make_inproc_target(const node_config& config,
                                                     const std::filesystem::path& trace_file) {
  node_options options;
  options.trace_file = trace_file;
  options.trace_all_requests = false; // the calls that ask
  // Every sampled call's trace is fetched after the run: keep them all (up to the trace log's
  // byte budget).
  options.kept_request_traces = std::numeric_limits<std::size_t>::max();
  auto n = node::start(config, options);
  if (!n)
    return make_error(n.error().code, "--inproc: the node did not start: " + n.error().message);
  auto* raw = n->get();
  return std::unique_ptr<target>{new inproc_target(std::move(*n), raw, raw->model().served_name)};
}

std::unique_ptr<target> make_inproc_target(node& n, std::string model) {
  return std::unique_ptr<target>{new inproc_target(nullptr, &n, std::move(model))};
}

} // namespace triad::load
