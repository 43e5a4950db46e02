#include <string>

#include <boost/beast/http/fields.hpp>
#include <boost/test/unit_test.hpp>

#include "server/http_framing.hpp"

namespace http = boost::beast::http;

namespace {

// The framing check on a head with these fields.
std::optional<triad::api_error>
check(std::initializer_list<std::pair<http::field, const char*>> f) {
  http::fields head;
  for (auto& [name, value] : f)
    head.insert(name, value);
  return triad::check_body_framing(head);
}

constexpr auto te = http::field::transfer_encoding;
constexpr auto cl = http::field::content_length;

} // namespace

BOOST_AUTO_TEST_SUITE(http_framing)

BOOST_AUTO_TEST_CASE(content_length_or_chunked_alone_is_accepted) {
  BOOST_TEST(!check({}));
  BOOST_TEST(!check({{cl, "12"}}));
  BOOST_TEST(!check({{te, "chunked"}}));
  BOOST_TEST(!check({{te, "Chunked"}}));
}

BOOST_AUTO_TEST_CASE(a_coding_triad_does_not_decode_is_501) {
  for (const char* value : {"gzip", "xchunked", "chunkedx", "identity", "gzip, chunked"}) {
    auto e = check({{te, value}});
    BOOST_TEST_INFO(value);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST(e->status == 501u);
    BOOST_TEST(e->message.find(value) != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(an_ambiguous_framing_is_400) {
  auto not_last = check({{te, "chunked, gzip"}});
  BOOST_REQUIRE(not_last.has_value());
  BOOST_TEST(not_last->status == 400u);
  auto both = check({{te, "chunked"}, {cl, "5"}});
  BOOST_REQUIRE(both.has_value());
  BOOST_TEST(both->status == 400u);
  BOOST_TEST(both->message.find("Content-Length") != std::string::npos);
  auto twice = check({{te, "chunked"}, {te, "chunked"}});
  BOOST_REQUIRE(twice.has_value());
  BOOST_TEST(twice->status == 400u);
}

BOOST_AUTO_TEST_CASE(a_body_behind_a_refused_coding_is_never_read_as_a_request) {
  const std::string bytes = "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip"
                            "\r\n\r\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
  auto got = triad::read_requests(bytes, 4096, 65536);
  BOOST_REQUIRE(got.size() == 1u);
  BOOST_REQUIRE(got[0].error.has_value());
  BOOST_TEST(got[0].error->status == 501u);
}

BOOST_AUTO_TEST_CASE(pipelined_and_chunked_requests_are_read_in_order) {
  const std::string bytes = "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}"
                            "POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                            "GET /c HTTP/1.1\r\nHost: a\r\n\r\n";
  auto got = triad::read_requests(bytes, 4096, 65536);
  BOOST_REQUIRE(got.size() == 3u);
  BOOST_TEST(got[0].target == "/a");
  BOOST_TEST(got[0].body == "{}");
  BOOST_TEST(got[1].target == "/b");
  BOOST_TEST(got[1].body == "abcde");
  BOOST_TEST(got[2].method == "GET");
  BOOST_TEST(!got[2].error.has_value());
}

BOOST_AUTO_TEST_CASE(limits_answer_431_and_413) {
  auto head = triad::read_requests("GET / HTTP/1.1\r\nHost: " + std::string(200, 'a') + "\r\n\r\n",
                                   64, 65536);
  BOOST_REQUIRE(head.size() == 1u);
  BOOST_REQUIRE(head[0].error.has_value());
  BOOST_TEST(head[0].error->status == 431u);
  auto body = triad::read_requests("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n" +
                                       std::string(100, 'x'),
                                   4096, 10);
  BOOST_REQUIRE(body.size() == 1u);
  BOOST_REQUIRE(body[0].error.has_value());
  BOOST_TEST(body[0].error->status == 413u);
  BOOST_TEST(body[0].error->message.find("[limits].max_body_bytes") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
