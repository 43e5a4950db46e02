#include "load/mock_server.hpp"

#include <atomic>
#include <charconv>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace triad::load {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct mock_server::impl {
  mock_options options;
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::atomic<std::size_t> open{0}, peak{0};
  std::atomic<std::uint64_t> answered{0}, accepted{0};

  void stream_opened() {
    auto now = ++open;
    auto p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }

  void accept();
};

namespace {

// The value of `"key": <integer>` in a small JSON body, or `fallback` (the mock does not parse
// JSON properly on purpose: it must cost next to nothing).
std::uint32_t int_field(std::string_view body, std::string_view key, std::uint32_t fallback) {
  auto at = body.find(key);
  if (at == std::string_view::npos)
    return fallback;
  at = body.find(':', at + key.size());
  if (at == std::string_view::npos)
    return fallback;
  ++at;
  while (at < body.size() && body[at] == ' ')
    ++at;
  std::uint32_t v = fallback;
  std::from_chars(body.data() + at, body.data() + body.size(), v);
  return v;
}

class mock_connection : public std::enable_shared_from_this<mock_connection> {
public:
  mock_connection(tcp::socket s, mock_server::impl& owner)
      : stream_(std::move(s))
      , timer_(stream_.get_executor())
      , owner_(owner) {}

  void read() {
    req_ = {};
    http::async_read(stream_, buffer_, req_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec)
                         return;
                       self->answer();
                     });
  }

private:
  void answer() {
    std::string_view target{req_.target().data(), req_.target().size()};
    if (req_.method() == http::verb::get && target.ends_with("/models"))
      return send_body(R"({"object":"list","data":[{"id":"mock","object":"model"}]})");
    if (req_.method() != http::verb::post || !target.ends_with("/chat/completions"))
      return send_body(R"({"error":{"message":"not found","type":"invalid_request_error"}})",
                       http::status::not_found);
    const auto& body = req_.body();
    tokens_ = std::min(int_field(body, "\"max_tokens\"", 16), owner_.options.max_tokens);
    if (tokens_ == 0)
      tokens_ = 1;
    if (body.find("\"stream\":true") == std::string::npos &&
        body.find("\"stream\": true") == std::string::npos)
      return send_body(
          R"({"id":"m","object":"chat.completion","model":"mock","choices":[{"index":0,"message":{"role":"assistant","content":")" +
          std::string(tokens_, 'x') +
          R"("},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":)" +
          std::to_string(tokens_) + R"(,"total_tokens":)" + std::to_string(tokens_ + 1) + "}}");
    owner_.stream_opened();
    head_.emplace(http::status::ok, req_.version());
    head_->set(http::field::content_type, "text/event-stream");
    head_->keep_alive(req_.keep_alive());
    head_->chunked(true);
    sr_.emplace(*head_);
    sent_ = 0;
    http::async_write_header(stream_, *sr_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               if (ec)
                                 return self->closed();
                               self->next_token();
                             });
  }

  void next_token() {
    if (sent_ == tokens_) {
      wire_ = "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},"
              "\"finish_reason\":\"length\"}]}\n\ndata: {\"object\":\"chat.completion.chunk\","
              "\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":" +
              std::to_string(tokens_) + "}}\n\ndata: [DONE]\n\n";
      net::async_write(stream_, http::make_chunk(net::buffer(wire_)),
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         if (ec)
                           return self->closed();
                         // Counted before the last bytes go out: the client may have the
                         // whole answer before this write's handler runs.
                         ++self->owner_.answered;
                         net::async_write(self->stream_, http::make_chunk_last(),
                                          [self](beast::error_code ec2, std::size_t) {
                                            --self->owner_.open;
                                            if (!ec2 && self->req_.keep_alive())
                                              self->read();
                                          });
                       });
      return;
    }
    auto write_token = [self = shared_from_this()] {
      self->wire_ = "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
                    "\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
      ++self->sent_;
      net::async_write(self->stream_, http::make_chunk(net::buffer(self->wire_)),
                       [self](beast::error_code ec, std::size_t) {
                         if (ec)
                           return self->closed();
                         self->next_token();
                       });
    };
    if (owner_.options.token_interval.count() == 0 || sent_ == 0)
      return write_token();
    timer_.expires_after(owner_.options.token_interval);
    timer_.async_wait([write_token](beast::error_code ec) {
      if (!ec)
        write_token();
    });
  }

  void closed() { --owner_.open; }

  void send_body(std::string body, http::status status = http::status::ok) {
    auto res = std::make_shared<http::response<http::string_body>>(status, req_.version());
    res->set(http::field::content_type, "application/json");
    res->keep_alive(req_.keep_alive());
    res->body() = std::move(body);
    res->prepare_payload();
    ++owner_.answered; // before the bytes go out, as in next_token
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (!ec && res->keep_alive())
                          self->read();
                      });
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  mock_server::impl& owner_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> sr_;
  std::uint32_t tokens_ = 0, sent_ = 0;
  std::string wire_;
};

} // namespace

void mock_server::impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket s) {
    if (!acceptor.is_open())
      return;
    if (!ec) {
      ++accepted;
      beast::error_code ignore;
      s.set_option(tcp::no_delay(true), ignore);
      std::make_shared<mock_connection>(std::move(s), *this)->read();
    }
    accept();
  });
}

mock_server::mock_server(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}

mock_server::~mock_server() {
  net::post(impl_->io, [p = impl_.get()] {
    beast::error_code ignore;
    p->acceptor.close(ignore);
  });
  impl_->io.stop();
  for (auto& t : impl_->threads)
    t.join();
}

expected<std::unique_ptr<mock_server>> mock_server::start(mock_options options) {
  auto p = std::make_unique<impl>();
  p->options = options;
  beast::error_code ec;
  tcp::endpoint ep{net::ip::make_address("127.0.0.1"), 0};
  p->acceptor.open(ep.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(ep, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(errc::io_error, "mock server: cannot listen on 127.0.0.1: " + ec.message());
  p->accept();
  for (std::size_t i = 0; i < std::max<std::size_t>(1, options.threads); ++i)
    p->threads.emplace_back([io = &p->io] { io->run(); });
  return std::unique_ptr<mock_server>{new mock_server(std::move(p))};
}

std::uint16_t mock_server::port() const noexcept {
  return impl_->acceptor.local_endpoint().port();
}
std::size_t mock_server::open_streams() const noexcept {
  return impl_->open.load();
}
std::size_t mock_server::peak_streams() const noexcept {
  return impl_->peak.load();
}
std::uint64_t mock_server::accepted() const noexcept {
  return impl_->accepted.load();
}
bool mock_server::await_accepted(std::uint64_t n, std::chrono::milliseconds timeout) const {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (accepted() < n) {
    if (std::chrono::steady_clock::now() >= until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return true;
}
std::uint64_t mock_server::answered() const noexcept {
  return impl_->answered.load();
}

} // namespace triad::load
