#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/fields.hpp>
#include <boost/system/error_code.hpp>

#include "server/openai.hpp"

namespace triad {

/// Checks how a request head frames its body, before any of the body is read. Accepted: no
/// Transfer-Encoding (the body is Content-Length bytes, or none), or one Transfer-Encoding
/// field whose only coding is `chunked` and no Content-Length. Anything else is the error to
/// answer: 501 for a coding triad does not decode (`gzip`, `xchunked`, `gzip, chunked`), 400 for
/// a framing that is ambiguous (chunked not last, two fields, chunked with Content-Length). The
/// server closes the connection after it, since where the next request starts is unknown: a
/// body served as a second request is request smuggling (RFC 9112 sections 6.1 and 6.3).
std::optional<api_error> check_body_framing(const boost::beast::http::fields& head);

/// The answer to a request Beast could not read: 431 past the head limit, 413 past the body
/// limit (each naming its config key), else 400 naming Beast's reason.
api_error read_failure(const boost::system::error_code& ec, std::uint32_t header_limit,
                       std::uint64_t body_limit);

/// One request as a connection reads it, or the error that ends the connection.
struct framed_request {
  std::string method;             ///< e.g. "POST"
  std::string target;             ///< e.g. "/v1/chat/completions"
  std::string body;               ///< the decoded body
  std::optional<api_error> error; ///< set: the answer, after which the connection closes
};

/// Reads requests from `bytes` as triad-node's connections do (Beast's parser with the head and
/// body limits, check_body_framing after each head) until the bytes end, a request is not
/// keep-alive, or an error, which is the last entry. An incomplete last request is left out.
/// For the fuzz target and tests: the server runs the same steps asynchronously.
std::vector<framed_request> read_requests(std::string_view bytes, std::uint32_t header_limit,
                                          std::uint64_t body_limit);

} // namespace triad
