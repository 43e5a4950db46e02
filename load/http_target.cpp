#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <concurrentqueue/concurrentqueue.h>

#include "load/detail/sse.hpp"
#include "load/target.hpp"
#include "runtime/cpu_time.hpp"

namespace triad::load {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

namespace {

// The JSON body of a chat completion request.
std::string body_of(const call_spec& spec, const std::string& model) {
  json::array messages;
  for (const auto& m : spec.messages) {
    json::object o{{"role", m.role}, {"content", m.content}};
    if (!m.tool_name.empty()) {
      if (m.content.empty())
        o["content"] = nullptr;
      o["tool_calls"] = json::array{json::object{
          {"id", m.tool_call_id},
          {"type", "function"},
          {"function", json::object{{"name", m.tool_name}, {"arguments", m.tool_arguments}}}}};
    }
    if (m.role == "tool")
      o["tool_call_id"] = m.tool_call_id;
    messages.push_back(std::move(o));
  }
  json::object body{{"model", model},
                    {"messages", std::move(messages)},
                    {"max_tokens", spec.max_tokens},
                    {"stream", spec.stream}};
  if (spec.stream)
    body["stream_options"] = json::object{{"include_usage", true}};
  if (!spec.tools.empty()) {
    json::array tools;
    for (const auto& t : spec.tools)
      tools.push_back(json::object{
          {"type", "function"},
          {"function",
           json::object{{"name", t}, {"parameters", json::object{{"type", "object"}}}}}});
    body["tools"] = std::move(tools);
  }
  json::object ext;
  if (!spec.session.empty())
    ext["session"] = spec.session;
  if (!spec.script.empty()) {
    json::array script;
    for (const auto& s : spec.script) {
      json::object step{{"tokens", s.tokens}};
      if (!s.tool.empty())
        step["tool_call"] =
            json::object{{"name", s.tool},
                         {"arguments", s.arguments.empty() ? json::value(json::object{})
                                                           : json::parse(s.arguments)}};
      script.push_back(std::move(step));
    }
    ext["script"] = std::move(script);
  }
  if (!ext.empty())
    body["triad"] = std::move(ext);
  return json::serialize(body);
}

struct url_parts {
  std::string host, port, prefix;
};

expected<url_parts> split_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    return make_error(errc::invalid_argument, "--url " + url +
                                                  ": only http:// URLs are supported (e.g. "
                                                  "http://127.0.0.1:8080/v1)");
  auto rest = url.substr(scheme.size());
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  url_parts p;
  p.prefix = slash == std::string::npos ? "/v1" : rest.substr(slash);
  while (!p.prefix.empty() && p.prefix.back() == '/')
    p.prefix.pop_back();
  auto colon = authority.rfind(':');
  if (colon == std::string::npos || authority.empty() || authority.back() == ']') {
    p.host = authority;
    p.port = "80";
  } else {
    p.host = authority.substr(0, colon);
    p.port = authority.substr(colon + 1);
  }
  if (!p.host.empty() && p.host.front() == '[' && p.host.back() == ']')
    p.host = p.host.substr(1, p.host.size() - 2);
  if (p.host.empty())
    return make_error(errc::invalid_argument, "--url " + url + ": no host");
  return p;
}

class http_target;

// One request on one connection.
class exchange : public std::enable_shared_from_this<exchange> {
public:
  /// A call not yet on a connection: its parser and buffers are made here, ahead of the send
  /// (a prepared call is built this way while the pacer has time to spare).
  exchange(http_target& owner, std::shared_ptr<const std::string> wire, call_callback done)
      : owner_(owner)
      , wire_(std::move(wire))
      , done_(std::move(done)) {
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    // Chunked bodies (event streams) come here as they arrive instead of into the string body.
    on_chunk_ = [this](std::uint64_t, std::string_view data, beast::error_code&) {
      on_chunk(data);
      return data.size();
    };
    parser_.on_chunk_body(on_chunk_);
  }
  exchange(const exchange&) = delete; // the parser keeps a pointer to on_chunk_, bound to this
  exchange& operator=(const exchange&) = delete;

  /// Puts the call on `stream` (an idle keep-alive connection when `reused`, else a new one)
  /// and starts it.
  void start(std::unique_ptr<beast::tcp_stream> stream, bool reused);

private:
  void connect();
  void write(std::size_t from);
  void read();
  void on_chunk(std::string_view data);
  void finish(bool keep);
  void fail(std::string kind, std::string message);

  http_target& owner_;
  std::unique_ptr<beast::tcp_stream> stream_;
  bool reused_ = false;
  bool got_bytes_ = false;
  std::shared_ptr<const std::string> wire_; // the request as bytes, head and body
  call_callback done_;
  beast::flat_buffer buffer_;
  std::function<std::size_t(std::uint64_t, std::string_view, beast::error_code&)> on_chunk_;
  http::response_parser<http::string_body> parser_;
  detail::sse_reader sse_;
  call_result result_;
};

// A GET of `path` (under the URL's prefix) on a connection of its own, waiting for the answer:
// for the few requests around a run (the model's name, traces), not the load itself.
expected<http::response<http::string_body>> get_now(const http_target_options& options,
                                                    const url_parts& parts,
                                                    const tcp::resolver::results_type& endpoints,
                                                    const std::string& path) {
  // Asynchronous operations under one 10 s expiry: a server that stalls cannot hang the caller
  // (the stream's timeouts apply to asynchronous operations only).
  net::io_context io;
  beast::tcp_stream s{io};
  s.expires_after(std::chrono::seconds{10});
  http::request<http::empty_body> req{http::verb::get, parts.prefix + path, 11};
  req.set(http::field::host, parts.host);
  if (!options.api_key.empty())
    req.set(http::field::authorization, "Bearer " + options.api_key);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 << 20); // a long request's trace runs to megabytes
  boost::system::error_code ec;
  const char* step = "connect";
  s.async_connect(endpoints, [&](boost::system::error_code e, const tcp::endpoint&) {
    if ((ec = e))
      return;
    step = "write";
    http::async_write(s, req, [&](boost::system::error_code e, std::size_t) {
      if ((ec = e))
        return;
      step = "read";
      http::async_read(s, buf, parser, [&](boost::system::error_code e, std::size_t) { ec = e; });
    });
  });
  io.run();
  if (ec)
    return make_error(errc::io_error,
                      std::string{step == std::string_view{"connect"}
                                      ? "cannot connect: "
                                      : "GET " + parts.prefix + path + " failed (" + step + "): "} +
                          ec.message());
  return parser.release();
}

// The message and code of an OpenAI-shaped error body, or the body's start (a proxy's page).
std::pair<std::string, std::string> error_message(const std::string& body) {
  boost::system::error_code ec;
  auto j = json::parse(body, ec);
  if (!ec && j.is_object())
    if (const auto* e = j.get_object().if_contains("error"); e && e->is_object())
      if (const auto* m = e->get_object().if_contains("message"); m && m->is_string()) {
        std::string code;
        if (const auto* c = e->get_object().if_contains("code"); c && c->is_string())
          code = std::string{c->get_string()};
        return {std::string{m->get_string()}, code};
      }
  return {body.size() > 200 ? body.substr(0, 200) + "..." : body, {}};
}

class http_target final : public target {
public:
  http_target(http_target_options o, url_parts p, tcp::resolver::results_type endpoints)
      : options_(std::move(o))
      , url_(std::move(p))
      , endpoints_(std::move(endpoints))
      , work_(io_.get_executor()) {
    for (std::size_t i = 0; i < std::max<std::size_t>(1, options_.threads); ++i)
      threads_.emplace_back([this] {
        ::prctl(PR_SET_TIMERSLACK, 1UL); // timers fire on time, not up to 50 us late
        name_this_thread("load.io");
        io_.run();
      });
  }

  ~http_target() override {
    work_.reset();
    std::unique_ptr<beast::tcp_stream> s;
    while (idle_.try_dequeue(s))
      s.reset();
    io_.stop();
    for (auto& t : threads_)
      t.join();
  }

  std::unique_ptr<prepared_call> prepare(call_spec spec, call_callback done) override {
    auto body = body_of(spec, options_.model);
    auto wire = std::make_shared<std::string>();
    wire->reserve(head_.size() + 64 + body.size());
    *wire += head_;
    if (spec.trace)
      *wire += "x-triad-trace: 1\r\n";
    *wire += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    *wire += body;
    return std::make_unique<prepared>(*this, std::move(wire), std::move(done));
  }

  void warm(std::size_t connections) override {
    for (std::size_t i = 0; i < connections; ++i) {
      auto s = new_stream();
      if (connect_now(*s))
        return;
      give_back(std::move(s));
    }
  }

  expected<std::string> trace_of(const std::string& request_id) override {
    auto res = get_now(options_, url_, endpoints_, "/traces/" + request_id);
    if (!res)
      return make_error(errc::io_error, options_.url + ": " + res.error().message);
    if (res->result_int() != 200) {
      auto [message, code] = error_message(res->body());
      // tracing_off: the node writes no traces at all (no later request will have one).
      const auto kind = code == "tracing_off"      ? errc::unsupported
                        : res->result_int() == 404 ? errc::not_found
                                                   : errc::io_error;
      return make_error(kind, "GET " + url_.prefix + "/traces/" + request_id + ": HTTP " +
                                  std::to_string(res->result_int()) + ": " + message);
    }
    return std::move(res->body());
  }

  std::string describe() const override { return options_.url; }
  net::io_context* single_thread_io() override { return threads_.size() == 1 ? &io_ : nullptr; }
  std::string model() const override { return options_.model; }

  // Runs the exchange on an idle connection, or a new one (`fresh`: always a new one).
  void start(std::shared_ptr<exchange> x, bool fresh) {
    std::unique_ptr<beast::tcp_stream> stream;
    if (!fresh)
      idle_.try_dequeue(stream);
    bool reused = stream != nullptr;
    if (!reused)
      stream = new_stream();
    x->start(std::move(stream), reused);
  }

  // Runs the request on an idle connection, or a new one (`fresh`: always a new one).
  void start(std::shared_ptr<const std::string> wire, call_callback done, bool fresh) {
    start(std::make_shared<exchange>(*this, std::move(wire), std::move(done)), fresh);
  }

  void give_back(std::unique_ptr<beast::tcp_stream> s) { idle_.enqueue(std::move(s)); }

  // Connects `s` from the calling thread (blocking; a socket nothing else uses yet), without
  // Nagle's delay (best effort, as on the I/O thread); the connect's error, if any.
  beast::error_code connect_now(beast::tcp_stream& s) const {
    beast::error_code ec, ignore;
    s.connect(endpoints_, ec);
    if (!ec)
      s.socket().set_option(tcp::no_delay(true), ignore);
    return ec;
  }

  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  // Whether the caller is one of the target's I/O threads.
  bool on_io_thread() const {
    auto me = std::this_thread::get_id();
    return std::any_of(threads_.begin(), threads_.end(),
                       [&](const std::thread& t) { return t.get_id() == me; });
  }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

private:
  // A new connection's stream: on the one I/O thread, or on a strand of the several.
  std::unique_ptr<beast::tcp_stream> new_stream() {
    return threads_.size() == 1 ? std::make_unique<beast::tcp_stream>(io_.get_executor())
                                : std::make_unique<beast::tcp_stream>(net::make_strand(io_));
  }

  // A request serialised ahead; send() starts it from the calling thread.
  class prepared final : public prepared_call {
  public:
    prepared(http_target& owner, std::shared_ptr<const std::string> wire, call_callback done)
        : owner_(owner)
        , exchange_(std::make_shared<exchange>(owner, std::move(wire), std::move(done))) {}

    void send() override { owner_.start(std::move(exchange_), false); }

  private:
    http_target& owner_;
    std::shared_ptr<exchange> exchange_;
  };

  // The request head every call shares (Content-Length follows per call).
  static std::string head_of(const http_target_options& o, const url_parts& u) {
    std::string h = "POST " + u.prefix + "/chat/completions HTTP/1.1\r\nHost: " + u.host +
                    "\r\nContent-Type: application/json\r\n";
    if (!o.api_key.empty())
      h += "Authorization: Bearer " + o.api_key + "\r\n";
    return h;
  }

  http_target_options options_;
  url_parts url_;
  std::string head_ = head_of(options_, url_);
  tcp::resolver::results_type endpoints_;
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  // Idle keep-alive connections. Lock-free: the pacer takes them at real-time priority, and a
  // lock the I/O thread held while preempted would stall it for a time slice.
  moodycamel::ConcurrentQueue<std::unique_ptr<beast::tcp_stream>> idle_;
};

void exchange::start(std::unique_ptr<beast::tcp_stream> stream, bool reused) {
  stream_ = std::move(stream);
  reused_ = reused;
  result_.new_connection = !reused;
  beast::error_code ec;
  if (!reused_) {
    if (owner_.on_io_thread()) {
      net::dispatch(stream_->get_executor(), [self = shared_from_this()] { self->connect(); });
      return;
    }
    // Another thread (the runner's pacer) sends now rather than wait for the I/O thread: it
    // connects itself.
    if (ec = owner_.connect_now(*stream_); ec) {
      net::dispatch(stream_->get_executor(), [self = shared_from_this(), ec] {
        self->fail("connect", "cannot connect: " + ec.message());
      });
      return;
    }
  }
  // The request goes to the socket at once, from the calling thread (the runner's pacer sends
  // at the intended time without waiting for the I/O thread); what the socket does not take
  // now, and the answer, go on on the connection's thread. Nothing else uses an idle
  // connection, and the pool's queue orders this use after the last one.
  result_.sent = clock_type::now();
  auto& socket = stream_->socket();
  if (!socket.non_blocking()) // set once per connection: each setting is a system call
    socket.non_blocking(true, ec);
  std::size_t n = ec ? 0 : socket.write_some(net::buffer(*wire_), ec);
  if (ec == net::error::would_block || ec == net::error::try_again)
    ec = {};
  if (ec) {
    net::dispatch(stream_->get_executor(), [self = shared_from_this(), ec] {
      self->fail("write", "sending the request failed: " + ec.message());
    });
    return;
  }
  net::dispatch(stream_->get_executor(), [self = shared_from_this(), n] { self->write(n); });
}

void exchange::connect() {
  stream_->expires_after(owner_.timeout());
  stream_->async_connect(owner_.endpoints(),
                         [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
                           if (ec)
                             return self->fail("connect", "cannot connect: " + ec.message());
                           beast::error_code ignore;
                           self->stream_->socket().set_option(tcp::no_delay(true), ignore);
                           self->result_.sent = clock_type::now();
                           self->write(0);
                         });
}

// Writes the request from byte `from` on (the bytes before it are already sent), then reads.
// `sent` is stamped where the first byte is handed to the socket.
void exchange::write(std::size_t from) {
  stream_->expires_after(owner_.timeout());
  if (from >= wire_->size())
    return read();
  net::async_write(*stream_, net::buffer(*wire_) + from,
                   [self = shared_from_this()](beast::error_code ec, std::size_t) {
                     if (ec)
                       return self->fail("write", "sending the request failed: " + ec.message());
                     self->read();
                   });
}

void exchange::read() {
  http::async_read_some(*stream_, buffer_, parser_,
                        [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                          if (n > 0)
                            self->got_bytes_ = true;
                          if (ec)
                            return self->fail(ec == beast::error::timeout ? "timeout" : "read",
                                              "reading the answer failed: " + ec.message());
                          if (!self->parser_.is_done())
                            return self->read();
                          self->finish(self->parser_.get().keep_alive());
                        });
}

void exchange::on_chunk(std::string_view data) {
  sse_.feed(data, clock_type::now());
}

void exchange::finish(bool keep) {
  const auto& res = parser_.get();
  result_.ended = clock_type::now();
  // The node's request id: digits only (it names files and links; anything else is dropped).
  if (auto id = res.find("x-triad-request-id"); id != res.end()) {
    std::string_view v{id->value().data(), id->value().size()};
    v = v.substr(0, v.find(',')); // n > 1: the first choice's
    if (!v.empty() && v.size() <= 20 && v.find_first_not_of("0123456789") == std::string_view::npos)
      result_.request_id = std::string{v};
  }
  if (res.result_int() != 200) {
    std::string message = res.body();
    std::string code;
    boost::system::error_code ec;
    auto j = json::parse(message, ec);
    if (!ec && j.is_object())
      if (const auto* e = j.get_object().if_contains("error"); e && e->is_object()) {
        if (const auto* m = e->get_object().if_contains("message"); m && m->is_string())
          message = std::string{m->get_string()};
        if (const auto* c = e->get_object().if_contains("code"); c && c->is_string())
          code = std::string{c->get_string()};
      }
    // The status and, where the server gives one, its error code: "http_400:scripts_not_allowed".
    result_.error_kind =
        "http_" + std::to_string(res.result_int()) + (code.empty() ? "" : ":" + code);
    result_.error = message;
  } else if (parser_.chunked() || res[http::field::content_type].starts_with("text/event-stream")) {
    if (!parser_.chunked()) // an event stream sent with Content-Length
      sse_.feed(res.body(), result_.ended);
    sse_.finish_into(result_);
  } else {
    detail::read_completion(res.body(), result_);
    result_.token_times.assign(result_.completion_tokens, result_.ended);
  }
  if (keep && res.result_int() < 500)
    owner_.give_back(std::move(stream_));
  else
    stream_->close();
  auto done = std::move(done_);
  done(std::move(result_));
}

void exchange::fail(std::string kind, std::string message) {
  // A kept-alive connection the server closed while idle: try once more on a new one.
  if (reused_ && !got_bytes_ && (kind == "write" || kind == "read")) {
    stream_->close();
    owner_.start(wire_, std::move(done_), true);
    return;
  }
  stream_->close();
  result_.ok = false;
  result_.error_kind = std::move(kind);
  result_.error = std::move(message);
  result_.ended = clock_type::now();
  auto done = std::move(done_);
  done(std::move(result_));
}

// `url` split and its host looked up; errors say `what` (the URL as the caller names it).
expected<std::pair<url_parts, tcp::resolver::results_type>> locate(const std::string& url,
                                                                   const std::string& what) {
  auto parts = split_url(url);
  if (!parts)
    return parts.error();
  net::io_context io;
  tcp::resolver resolver{io};
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(parts->host, parts->port, ec);
  if (ec)
    return make_error(errc::not_found, what + ": cannot resolve " + parts->host + ":" +
                                           parts->port + ": " + ec.message());
  return std::pair{std::move(*parts), std::move(endpoints)};
}

} // namespace

expected<std::string> http_get(const std::string& url) {
  auto where = locate(url, url);
  if (!where)
    return where.error();
  auto r = get_now({}, where->first, where->second, "");
  if (!r)
    return make_error(r.error().code, url + ": " + r.error().message);
  if (r->result_int() != 200)
    return make_error(errc::io_error, url + ": HTTP " + std::to_string(r->result_int()));
  return std::move(r->body());
}

std::optional<double> metric_sample(std::string_view text, std::string_view series) {
  for (std::size_t at = 0; at < text.size();) {
    auto end = text.find('\n', at);
    auto line = text.substr(at, end == std::string_view::npos ? text.npos : end - at);
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ')
      return std::stod(std::string{line.substr(series.size() + 1)});
    if (end == std::string_view::npos)
      break;
    at = end + 1;
  }
  return std::nullopt;
}

expected<std::unique_ptr<target>> make_http_target(http_target_options options) {
  auto where = locate(options.url, "--url " + options.url);
  if (!where)
    return where.error();
  auto* parts = &where->first;
  auto& endpoints = where->second;
  boost::system::error_code ec;
  if (options.model.empty()) {
    // Ask the server which model it serves.
    auto res = get_now(options, *parts, endpoints, "/models");
    if (!res)
      return make_error(errc::io_error, "--url " + options.url + ": " + res.error().message);
    if (res->result_int() != 200)
      return make_error(errc::io_error, "--url " + options.url + ": GET /models failed (HTTP " +
                                            std::to_string(res->result_int()) + "); give --model");
    auto j = json::parse(res->body(), ec);
    const json::value* id = nullptr;
    if (!ec && j.is_object())
      if (const auto* data = j.get_object().if_contains("data"); data && data->is_array() &&
                                                                 !data->get_array().empty() &&
                                                                 data->get_array()[0].is_object())
        id = data->get_array()[0].get_object().if_contains("id");
    if (id == nullptr || !id->is_string())
      return make_error(errc::parse_error,
                        "--url " + options.url + ": GET /models gave no model id; give --model");
    options.model = std::string{id->get_string()};
  }
  return std::unique_ptr<target>{new http_target(std::move(options), std::move(*parts), endpoints)};
}

} // namespace triad::load
