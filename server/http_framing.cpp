#include "server/http_framing.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/string_body.hpp>

namespace triad {

namespace http = boost::beast::http;

namespace {

api_error framing_error(unsigned status, std::string message) {
  api_error e;
  e.status = status;
  e.message = std::move(message);
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  e.code = status == 501 ? "unsupported_transfer_encoding" : "bad_request";
  return e;
}

} // namespace

std::optional<api_error> check_body_framing(const http::fields& head) {
  const auto fields = head.count(http::field::transfer_encoding);
  if (fields == 0)
    return std::nullopt;
  if (fields > 1)
    return framing_error(400, "more than one Transfer-Encoding field; send one, \"chunked\"");
  const auto value = head[http::field::transfer_encoding];
  const std::string shown{value.data(), value.size()};
  std::vector<std::string> codings;
  for (const auto& coding : http::token_list{value})
    codings.emplace_back(coding.data(), coding.size());
  const bool chunked_last = !codings.empty() && boost::beast::iequals(codings.back(), "chunked");
  if (codings.size() > 1 && chunked_last)
    return framing_error(501, "Transfer-Encoding \"" + shown +
                                  "\": triad decodes no coding but \"chunked\" alone");
  if (!chunked_last) {
    for (const auto& coding : codings)
      if (boost::beast::iequals(coding, "chunked"))
        return framing_error(400, "Transfer-Encoding \"" + shown +
                                      "\": \"chunked\" must be the last coding");
    return framing_error(501, "Transfer-Encoding \"" + shown +
                                  "\" is not supported; send \"chunked\" or Content-Length");
  }
  if (head.count(http::field::content_length) > 0)
    return framing_error(400, "both Transfer-Encoding and Content-Length; send one of them");
  return std::nullopt;
}

api_error read_failure(const boost::system::error_code& ec, std::uint32_t header_limit,
                       std::uint64_t body_limit) {
  if (ec == http::error::header_limit) {
    auto e = framing_error(431, "the request head is larger than " + std::to_string(header_limit) +
                                    " bytes ([server].max_header_bytes)");
    e.code = "request_header_fields_too_large";
    return e;
  }
  if (ec == http::error::body_limit) {
    auto e = framing_error(413, "the request body is larger than " + std::to_string(body_limit) +
                                    " bytes ([limits].max_body_bytes)");
    e.code = "request_too_large";
    return e;
  }
  return framing_error(400, "malformed HTTP request: " + ec.message());
}

std::vector<framed_request> read_requests(std::string_view bytes, std::uint32_t header_limit,
                                          std::uint64_t body_limit) {
  std::vector<framed_request> out;
  // Feeds the parser until `done` holds; false when the bytes end first or it fails.
  auto feed = [&](http::request_parser<http::string_body>& p, auto done) {
    while (!done()) {
      boost::beast::error_code ec;
      auto used = p.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
      bytes.remove_prefix(used);
      if (ec == http::error::need_more && !bytes.empty())
        continue;
      if (ec == http::error::need_more)
        return false;
      if (ec) {
        framed_request r;
        r.error = read_failure(ec, header_limit, body_limit);
        out.push_back(std::move(r));
        return false;
      }
      if (used == 0 && !done())
        return false;
    }
    return true;
  };
  while (!bytes.empty()) {
    http::request_parser<http::string_body> p;
    p.header_limit(header_limit);
    p.body_limit(body_limit);
    if (!feed(p, [&] { return p.is_header_done(); }))
      return out;
    if (auto e = check_body_framing(p.get())) {
      framed_request r;
      r.error = std::move(e);
      out.push_back(std::move(r));
      return out;
    }
    if (!feed(p, [&] { return p.is_done(); }))
      return out;
    auto req = p.release();
    framed_request r;
    r.method = std::string{req.method_string()};
    r.target = std::string{req.target()};
    r.body = std::move(req.body());
    out.push_back(std::move(r));
    if (!req.keep_alive())
      return out;
  }
  return out;
}

} // namespace triad
