#include "server/http_server.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "actors/node.hpp"
#include "runtime/cpu_time.hpp"
#include "server/http_framing.hpp"
#include "server/openai.hpp"
#include "server/responses.hpp"

namespace triad {

bool is_loopback(std::string_view address) noexcept {
  std::string text{address};
  unsigned char v4[4];
  if (::inet_pton(AF_INET, text.c_str(), v4) == 1)
    return v4[0] == 127;
  unsigned char v6[16];
  if (::inet_pton(AF_INET6, text.c_str(), v6) != 1)
    return false;
  static constexpr unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(v6, one, 16) == 0 || (std::memcmp(v6, mapped, 12) == 0 && v6[12] == 127);
}

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

namespace {

// The endpoint label of a request target: the served path it names (/v1/traces/{id} as
// /v1/traces), or "other" (a bounded set, whatever clients send).
std::string_view endpoint_of(std::string_view target) {
  auto path = target.substr(0, target.find('?'));
  if (path.starts_with("/v1/traces/"))
    return "/v1/traces";
  for (std::string_view served : {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                  "/v1/models", "/metrics", "/health", "/ready"})
    if (path == served)
      return served;
  return "other";
}

// Counts of answered requests by status and endpoint, for /metrics.
struct http_metrics {
  metrics_registry* registry = nullptr;
  std::mutex m;
  std::map<std::pair<unsigned, std::string_view>, counter*> by_status;
  gauge* active = nullptr;

  void answered(unsigned status, std::string_view endpoint) {
    if (registry == nullptr)
      return;
    counter* c = nullptr;
    {
      std::lock_guard<std::mutex> g{m};
      auto& slot = by_status[{status, endpoint}];
      if (slot == nullptr)
        if (auto r = registry->add_counter(
                "triad_http_responses_total",
                "HTTP responses sent, by status and endpoint (the path served, or other).",
                {{"status", std::to_string(status)}, {"endpoint", std::string{endpoint}}}))
          slot = *r;
      c = slot;
    }
    if (c != nullptr)
      c->inc();
  }
};

// Server state shared by the connections.
struct shared_state {
  node* n = nullptr;
  http_server_options options;
  std::atomic<bool> accepting{true};
  std::atomic<std::size_t> active{0};
  std::atomic<std::uint64_t> next_call{0};
  std::mutex post_m; // guards `stopped` against posts racing the io_context's end
  bool stopped = false;
  std::mutex idle_m;
  std::condition_variable idle_cv;
  http_metrics metrics;

  void begin() {
    ++active;
    if (metrics.active != nullptr)
      metrics.active->set(static_cast<double>(active.load()));
  }
  void end() {
    --active;
    if (metrics.active != nullptr)
      metrics.active->set(static_cast<double>(active.load()));
    std::lock_guard<std::mutex> g{idle_m};
    idle_cv.notify_all();
  }
};

// One HTTP connection: reads requests one at a time and answers each.
class connection : public std::enable_shared_from_this<connection> {
public:
  connection(tcp::socket socket, std::shared_ptr<shared_state> state)
      : stream_(std::move(socket))
      , state_(std::move(state)) {}

  ~connection() {
    if (in_request_ && !finished_) { // gone with its answer unfinished (server stopping)
      cancel_all();
      state_->end();
    }
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

private:
  using request_t = http::request<http::string_body>;

  // ---- reading -----------------------------------------------------------------------------

  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(state_->options.server.max_header_bytes));
    parser_->body_limit(state_->options.limits.max_body_bytes);
    // The first request must arrive whole within the header timeout; a kept-alive connection
    // gets the idle timeout for its next one.
    const auto& o = state_->options.server;
    stream_.expires_after(
        std::chrono::milliseconds{served_ == 0 ? o.header_timeout_ms : o.idle_timeout_ms});
    endpoint_ = "other"; // until a whole request is read (a failed read answers for "other")
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec)
                                return self->on_read(ec);
                              self->read_body();
                            });
  }

  // The head is in: a client that asked to be told to go on (curl does, for bodies over 1 KiB)
  // is told before the body is read, instead of waiting a second for nothing.
  void read_body() {
    auto on_body = [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_read(ec);
    };
    const auto& head = parser_->get();
    // A body framed any way but Content-Length or chunked alone is refused before it is read,
    // and the connection closed: where the next request would start is unknown.
    if (auto e = check_body_framing(head))
      return fail(*e, false);
    auto expect = head[http::field::expect];
    if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
      static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(go_on.data(), go_on.size()),
                       [self = shared_from_this(), on_body](beast::error_code ec, std::size_t) {
                         if (ec)
                           return self->close();
                         http::async_read(self->stream_, self->buffer_, *self->parser_, on_body);
                       });
      return;
    }
    http::async_read(stream_, buffer_, *parser_, on_body);
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::eof)
      return close();
    if (ec)
      return fail(read_failure(ec,
                               static_cast<std::uint32_t>(state_->options.server.max_header_bytes),
                               state_->options.limits.max_body_bytes),
                  false);
    stream_.expires_never();
    req_ = parser_->release();
    endpoint_ = endpoint_of(req_.target());
    ++served_;
    route();
  }

  // ---- routing -----------------------------------------------------------------------------

  static api_error error(unsigned status, std::string message, std::string code = {},
                         std::string type = {}) {
    api_error e;
    e.status = status;
    e.message = std::move(message);
    e.code = std::move(code);
    e.type = type.empty() ? (status >= 500 ? "server_error" : "invalid_request_error") : type;
    return e;
  }

  void route() {
    auto target = std::string{req_.target()};
    auto path = target.substr(0, target.find('?'));
    auto method = req_.method();
    auto only = [&](http::verb v, const char* allow) {
      if (method == v)
        return true;
      auto e = error(405,
                     "method " + std::string{req_.method_string()} + " is not allowed on " + path +
                         "; allowed: " + allow,
                     "method_not_allowed");
      fail(e, req_.keep_alive(), allow);
      return false;
    };
    if (path == "/health") {
      if (only(http::verb::get, "GET"))
        send_text(200, "application/json", R"({"status":"ok"})");
      return;
    }
    if (path == "/ready") {
      if (!only(http::verb::get, "GET"))
        return;
      // A node that routes to other nodes' devices is ready once one of them has joined.
      const auto* cluster = state_->n->cluster();
      if (!state_->accepting.load())
        fail(error(503, "the node is draining", "draining"), false);
      else if (cluster != nullptr && state_->n->cluster_port() == 0 && cluster->peers_up() == 0)
        fail(error(503, "no device node has joined yet ([cluster].peers)", "no_devices"), false);
      else
        send_text(200, "application/json", R"({"status":"ready"})");
      return;
    }
    if (path == "/metrics") {
      if (only(http::verb::get, "GET"))
        send_text(200, std::string{metrics_registry::content_type}, state_->n->metrics().render());
      return;
    }
    constexpr std::string_view traces_prefix = "/v1/traces/";
    const bool trace_path = path.starts_with(traces_prefix);
    bool api = path == "/v1/models" || path == "/v1/chat/completions" ||
               path == "/v1/completions" || path == "/v1/responses" || trace_path;
    if (!api) {
      fail(error(
               404,
               "no such endpoint: " + path +
                   "; served: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, "
                   "GET /v1/models, GET /v1/traces/{request id}, "
                   "GET /metrics, "
                   "GET /health, GET /ready",
               "not_found"),
           req_.keep_alive());
      return;
    }
    if (!authorized()) {
      fail(error(401, "missing or wrong bearer token (send 'Authorization: Bearer <key>')",
                 "invalid_api_key", "authentication_error"),
           req_.keep_alive());
      return;
    }
    if (path == "/v1/models") {
      if (only(http::verb::get, "GET"))
        send_text(200, "application/json", models_json());
      return;
    }
    if (trace_path) {
      if (only(http::verb::get, "GET"))
        send_trace(path.substr(traces_prefix.size()));
      return;
    }
    if (only(http::verb::post, "POST"))
      generate(path == "/v1/completions" ? api_kind::completions
               : path == "/v1/responses" ? api_kind::responses
                                         : api_kind::chat);
  }

  // GET /v1/traces/{id}: the spans of a request that asked for its trace (x-triad-trace: 1; its
  // id came in the x-triad-request-id header), as a Chrome trace-event document.
  void send_trace(std::string_view id_text) {
    std::uint64_t id = 0;
    auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (ec != std::errc{} || end != id_text.data() + id_text.size() || id == 0)
      return fail(error(400,
                        "request id '" + std::string{id_text} +
                            "' is not a request id: a positive integer, as the "
                            "x-triad-request-id response header gives it",
                        "invalid_request_id"),
                  req_.keep_alive());
    auto doc = state_->n->request_trace(id);
    if (!doc) // tracing off (unsupported), or this request's trace not kept
      return fail(error(404, doc.error().message,
                        doc.error().code == errc::unsupported ? "tracing_off" : "trace_not_found"),
                  req_.keep_alive());
    send_text(200, "application/json", std::move(*doc));
  }

  bool authorized() const {
    const auto& key = state_->options.api_key;
    if (key.empty())
      return true;
    auto it = req_.find(http::field::authorization);
    if (it == req_.end())
      return false;
    std::string_view value{it->value().data(), it->value().size()};
    if (value.size() != 7 + key.size() || value.substr(0, 7) != "Bearer ")
      return false;
    // Compared in constant time.
    unsigned char diff = 0;
    for (std::size_t i = 0; i < key.size(); ++i)
      diff |= static_cast<unsigned char>(value[7 + i] ^ key[i]);
    return diff == 0;
  }

  std::string models_json() const {
    return json::serialize(json::object{
        {"object", "list"},
        {"data", json::array{json::object{{"id", state_->options.model_id},
                                          {"object", "model"},
                                          {"created", std::time(nullptr)},
                                          {"owned_by", "triad"}}}},
    });
  }

  // ---- chat completions --------------------------------------------------------------------

  // The three ways to ask for a generation.
  enum class api_kind { chat, completions, responses };

  // A chat completion, a plain one, or a response (the Responses API, translated to a chat
  // request: responses.hpp).
  void generate(api_kind kind) {
    if (!state_->accepting.load())
      return fail(error(503, "the node is draining: no new requests", "draining"), false);
    const bool completion = kind == api_kind::completions;
    std::variant<openai_chat, api_error> parsed = api_error{};
    if (kind == api_kind::responses) {
      auto translated = responses_to_chat(req_.body());
      if (auto* e = std::get_if<api_error>(&translated))
        return fail(*e, req_.keep_alive());
      const auto& r = std::get<responses_request>(translated);
      parsed = parse_chat_request(r.chat_body, state_->options.model_id, &state_->n->format(),
                                  &state_->n->grammars());
      if (auto* e = std::get_if<api_error>(&parsed)) { // in the Responses request's terms
        const auto param = responses_param(e->param, r.origins);
        if (!e->param.empty() && e->message.starts_with(e->param))
          e->message = param + e->message.substr(e->param.size());
        e->param = param;
      }
    } else if (completion) {
      parsed = parse_completion_request(req_.body(), state_->options.model_id);
    } else {
      parsed = parse_chat_request(req_.body(), state_->options.model_id, &state_->n->format(),
                                  &state_->n->grammars());
    }
    if (auto* e = std::get_if<api_error>(&parsed))
      return fail(*e, req_.keep_alive());
    chat_ = std::get<openai_chat>(std::move(parsed));
    // Asks for this request's trace (where the node writes traces of asked requests only).
    trace_asked_ = false;
    if (auto h = req_.find("x-triad-trace"); h != req_.end() && h->value() == "1")
      chat_.request.trace = trace_asked_ = true;
    if (chat_.request.script && !state_->options.server.allow_scripts) {
      auto e = error(400,
                     "triad.script is off on this node: forced output is for benchmarks and "
                     "tests ([server].allow_scripts = true, or triad-node --allow-scripts)",
                     "scripts_not_allowed");
      e.param = "triad.script";
      return fail(e, req_.keep_alive());
    }
    if (state_->active.load() >= state_->options.limits.max_concurrent_requests) {
      auto e = error(429,
                     "too many concurrent requests (" +
                         std::to_string(state_->options.limits.max_concurrent_requests) +
                         ", [limits].max_concurrent_requests); retry after 1 s",
                     "rate_limit_exceeded", "rate_limit_error");
      e.retry_ms = 1000;
      return fail(e, req_.keep_alive());
    }
    state_->begin();
    in_request_ = true;
    keep_alive_ = req_.keep_alive();
    completion_options answer;
    answer.completion = chat_.completion;
    answer.stream = stream_answer_ = chat_.stream;
    answer.include_usage = chat_.include_usage;
    answer.stop = chat_.stop;
    answer.logprobs = chat_.request.logprobs;
    answer.id =
        (completion ? "cmpl-" : "chatcmpl-") + std::to_string(state_->next_call.fetch_add(1) + 1);
    answer.created = std::time(nullptr);
    answer.model = state_->options.model_id;
    response_.reset();
    if (kind == api_kind::responses)
      response_.emplace(answer, chat_.stream); // its id "resp_N" from answer's "chatcmpl-N"
    answer_.emplace(std::move(answer), chat_.n); // before any event: they come later
    ++answer_serial_; // events of an earlier answer's requests, still coming, are dropped
    handles_.assign(chat_.n, request_handle{});
    forked_ = chat_.n == 1;
    // n > 1: the first choice goes alone; the others start once its prompt is prefilled
    // (fork()), so they find its KV pages in the prefix cache.
    submit_choice(0, chat_.n == 1 ? std::move(chat_.request) : chat_.request);
    watch_disconnect();
  }

  // Starts choice `i` of the answer. Its events come on its actor's thread and go to this
  // connection's strand. They hold the connection weakly (a connection that is gone cancels its
  // requests as it goes), and are not posted once the server stopped. The callback holds no
  // executor: the request actor may drop it after the server's io_context is gone, and a strand
  // must not outlive that.
  void submit_choice(std::size_t i, chat_request request) {
    std::weak_ptr<connection> weak = shared_from_this();
    request.sampling.seed += i; // each choice its own random stream
    const auto serial = answer_serial_;
    handles_[i] = state_->n->submit(
        std::move(request), [weak, i, serial, state = state_](const request_event& ev) {
          std::lock_guard<std::mutex> g{state->post_m};
          if (state->stopped)
            return;
          if (auto self = weak.lock())
            net::post(self->stream_.get_executor(), [weak, i, serial, ev] {
              if (auto alive = weak.lock(); alive && alive->answer_serial_ == serial)
                alive->on_event(i, ev);
            });
        });
    answer_->set_request(i, handles_[i].id);
    if (response_)
      response_->set_request(handles_[i].id);
  }

  // The other choices of an answer with n > 1, once the first one's prompt is prefilled (its
  // first token came) or it ended.
  void fork() {
    if (forked_ || finished_ || client_gone_)
      return;
    forked_ = true;
    for (std::size_t i = 1; i < handles_.size(); ++i)
      submit_choice(i, chat_.request);
  }

  void cancel_all() {
    for (const auto& h : handles_)
      state_->n->cancel(h);
  }

  // A client that closes its connection while its answer is generated cancels the request.
  // The watch is what holds the connection while the request runs (the request's events hold
  // it weakly), so it goes on until the answer is done: after a wake-up with nothing to read
  // (readiness can be reported spuriously), and, while a pipelined request waits in the socket
  // for the next read, by looking again every `pipelined_recheck`.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](
                                                            beast::error_code ec) {
      if (!self->in_request_ || self->finished_)
        return;
      char probe;
      auto n = ::recv(self->stream_.socket().native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
      bool nothing = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      if (ec || n == 0 || (n < 0 && !nothing)) {
        self->client_gone_ = true;
        self->cancel_all();
        return;
      }
      if (nothing)
        return self->watch_disconnect();
      self->recheck_.expires_after(defaults::server::pipelined_recheck);
      self->recheck_.async_wait([self](beast::error_code e) {
        if (!e)
          self->watch_disconnect();
      });
    });
  }

  // The request's events become the answer (completion_stream); the connection sends it.
  void on_event(std::size_t choice, const request_event& ev) {
    if (finished_ || !answer_)
      return;
    const bool by_string =
        response_ ? response_->stopped_by_string() : answer_->stopped_by_string(choice);
    if (ev.kind == request_event::error && client_gone_ && !by_string) {
      finished_ = true; // nobody to answer
      cancel_all();
      state_->end();
      return close();
    }
    if (choice == 0 && ev.kind != request_event::state && ev.kind != request_event::error)
      fork(); // its prompt is prefilled (or it ended): the others find its pages cached
    auto out = response_ ? response_->on_event(ev) : answer_->on_event(choice, ev);
    if (out.cancel) // a stop string matched: the choice ends with "stop"
      state_->n->cancel(handles_[choice]);
    if (out.cancel_others)
      cancel_all();
    if (out.finished) {
      finished_ = true;
      state_->end();
    }
    if (out.error)
      return fail(*out.error, keep_alive_);
    if (!stream_answer_) {
      if (out.finished)
        send_text(200, "application/json", std::move(out.bytes), true);
      return;
    }
    const bool any = !out.bytes.empty();
    if (any)
      queue_chunk(std::move(out.bytes));
    if (out.finished)
      end_stream_ = true;
    if (any || out.finished || headers_sent_)
      pump();
  }

  // ---- writing -----------------------------------------------------------------------------

  void queue_chunk(std::string s) { outbox_.push_back(std::move(s)); }

  // Writes the stream head once, then the queued chunks one write at a time (chunks queued
  // while a write is under way go together in the next).
  void pump() {
    if (writing_)
      return;
    if (!headers_sent_) {
      headers_sent_ = true;
      writing_ = true;
      head_.emplace(http::status::ok, req_.version());
      head_->set(http::field::content_type, "text/event-stream");
      head_->set(http::field::cache_control, "no-cache");
      set_request_ids(*head_);
      head_->keep_alive(keep_alive_);
      head_->chunked(true);
      head_sr_.emplace(*head_);
      http::async_write_header(stream_, *head_sr_,
                               [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 self->writing_ = false;
                                 if (ec)
                                   return self->on_write_failed();
                                 self->pump();
                               });
      return;
    }
    if (outbox_.empty()) {
      if (end_stream_ && !ended_) {
        ended_ = true;
        writing_ = true;
        net::async_write(stream_, http::make_chunk_last(),
                         [self = shared_from_this()](beast::error_code ec, std::size_t) {
                           self->writing_ = false;
                           self->state_->metrics.answered(200, self->endpoint_);
                           if (ec)
                             return self->close();
                           self->next_request();
                         });
      }
      return;
    }
    wire_.clear();
    for (auto& s : outbox_)
      wire_ += s;
    outbox_.clear();
    writing_ = true;
    net::async_write(stream_, http::make_chunk(net::buffer(wire_)),
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->writing_ = false;
                       if (ec)
                         return self->on_write_failed();
                       self->pump();
                     });
  }

  void on_write_failed() {
    client_gone_ = true;
    if (!finished_)
      cancel_all(); // their error events end them
    close();
  }

  // A request that asked for its trace learns the node's ids of its choices' requests, to fetch
  // their traces with GET /v1/traces/{id}.
  template<class Response>
  void set_request_ids(Response& res) const {
    if (!trace_asked_)
      return;
    std::string ids;
    for (const auto& h : handles_)
      if (h.id != 0)
        ids += (ids.empty() ? "" : ",") + std::to_string(h.id);
    if (!ids.empty())
      res.set("x-triad-request-id", ids);
  }

  // `answer`: a generation's answer (it carries the request ids when a trace was asked for).
  void send_text(unsigned status, std::string content_type, std::string body, bool answer = false) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), req_.version());
    res->set(http::field::content_type, content_type);
    if (answer)
      set_request_ids(*res);
    res->keep_alive(req_.keep_alive() && state_->accepting.load());
    res->body() = std::move(body);
    res->prepare_payload();
    write(res, status);
  }

  void fail(const api_error& e, bool keep_alive, const char* allow = nullptr) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(e.status), req_.version() == 0 ? 11 : req_.version());
    res->set(http::field::content_type, "application/json");
    if (e.retry_ms != 0)
      res->set(http::field::retry_after, std::to_string((e.retry_ms + 999) / 1000));
    if (allow != nullptr)
      res->set(http::field::allow, allow);
    res->keep_alive(keep_alive && state_->accepting.load());
    if (in_request_) // a generation that asked for its trace fails: its trace tells why
      set_request_ids(*res);
    res->body() = to_json(e);
    res->prepare_payload();
    write(res, e.status);
  }

  void write(std::shared_ptr<http::response<http::string_body>> res, unsigned status) {
    state_->metrics.answered(status, endpoint_);
    bool keep = res->keep_alive();
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, keep](beast::error_code ec, std::size_t) {
                        if (ec || !keep)
                          return self->close();
                        self->next_request();
                      });
  }

  void next_request() {
    if (!state_->accepting.load() || !keep_alive_ok())
      return close();
    in_request_ = false;
    finished_ = false;
    headers_sent_ = end_stream_ = ended_ = false;
    client_gone_ = false;
    answer_.reset();
    response_.reset();
    head_sr_.reset();
    head_.reset();
    read();
  }

  bool keep_alive_ok() const { return !in_request_ || keep_alive_; }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  net::steady_timer recheck_{stream_.get_executor()}; // see watch_disconnect
  std::shared_ptr<shared_state> state_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  request_t req_;
  std::uint64_t served_ = 0;
  // The generation being answered.
  openai_chat chat_;
  std::vector<request_handle> handles_;  // one request per choice
  bool forked_ = true;                   // the choices past the first have started
  bool trace_asked_ = false;             // the request asked for its trace (x-triad-trace: 1)
  std::string_view endpoint_ = "other";  // the request's, for the responses metric
  std::optional<completion_set> answer_; // the events as an OpenAI answer
  std::optional<response_stream> response_; // or as a Responses API answer
  std::uint64_t answer_serial_ = 0;      // which answer the connection gives now
  bool stream_answer_ = false;              // as server-sent events
  bool in_request_ = false, finished_ = false, keep_alive_ = true, client_gone_ = false;
  // Streaming output.
  bool headers_sent_ = false, writing_ = false, end_stream_ = false, ended_ = false;
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> head_sr_;
  std::deque<std::string> outbox_;
  std::string wire_;
};

} // namespace

struct http_server::impl {
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::shared_ptr<shared_state> state = std::make_shared<shared_state>();
  std::vector<std::thread> threads;
  std::uint16_t port = 0;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  void accept() {
    acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket s) {
      if (ec == net::error::operation_aborted || !acceptor.is_open())
        return;
      if (!ec)
        std::make_shared<connection>(std::move(s), state)->start();
      accept();
    });
  }
};

http_server::http_server(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}

http_server::~http_server() {
  stop();
}

expected<std::unique_ptr<http_server>> http_server::start(node& n, http_server_options options) {
  auto p = std::make_unique<impl>();
  p->state->n = &n;
  p->state->metrics.registry = &n.metrics();
  if (auto g = n.metrics().add_gauge("triad_http_active_requests",
                                     "Generation requests being answered over HTTP."))
    p->state->metrics.active = *g;
  auto where = options.server.listen + ":" + std::to_string(options.server.port);
  boost::system::error_code ec;
  auto address = net::ip::make_address(options.server.listen, ec);
  if (ec)
    return make_error(errc::invalid_argument,
                      "server: listen = \"" + options.server.listen + "\" is not an IP address");
  tcp::endpoint endpoint{address, options.server.port};
  p->acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(endpoint, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(errc::io_error, "server: cannot listen on " + where + ": " + ec.message());
  p->port = p->acceptor.local_endpoint().port();
  p->state->options = std::move(options);
  p->work.emplace(p->io.get_executor());
  p->accept();
  for (std::size_t i = 0; i < p->state->options.server.threads; ++i)
    p->threads.emplace_back([io = &p->io, i] {
      name_this_thread("http." + std::to_string(i));
      io->run();
    });
  return std::unique_ptr<http_server>{new http_server(std::move(p))};
}

std::uint16_t http_server::port() const noexcept {
  return impl_->port;
}

void http_server::stop_accepting() {
  impl_->state->accepting = false;
  net::post(impl_->io, [p = impl_.get()] {
    boost::system::error_code ec;
    p->acceptor.close(ec);
  });
}

bool http_server::wait_idle(std::chrono::milliseconds deadline) {
  std::unique_lock<std::mutex> l{impl_->state->idle_m};
  return impl_->state->idle_cv.wait_for(l, deadline,
                                        [this] { return impl_->state->active.load() == 0; });
}

std::size_t http_server::active() const noexcept {
  return impl_->state->active.load();
}

void http_server::stop() {
  if (!impl_ || impl_->threads.empty())
    return;
  stop_accepting();
  {
    std::lock_guard<std::mutex> g{impl_->state->post_m};
    impl_->state->stopped = true;
  }
  impl_->work.reset();
  impl_->io.stop();
  for (auto& t : impl_->threads)
    t.join();
  impl_->threads.clear();
}

} // namespace triad
