#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include "server/http_server.hpp"
#include "server/openai.hpp"
#include "tests/actors/support.hpp"
#include "tests/scratch_file.hpp"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

struct reply {
  unsigned status = 0;
  std::string body;
  http::fields headers;
  json::value json() const { return json::parse(body); }
};

// A node (tiny cpu devices, the "nap" tool) behind an HTTP server on a free port.
struct server_fixture {
  std::unique_ptr<triad::node> node;
  std::unique_ptr<triad::http_server> server;

  /// `expose_tools`: the node's `[tools].expose_to_all_requests`.
  /// `trace_file`: the node writes traces of the requests that ask there.
  explicit server_fixture(std::string api_key = {}, std::size_t max_concurrent = 64,
                          bool allow_scripts = true, bool expose_tools = false,
                          std::filesystem::path trace_file = {})
      : node(triad::test::start_node(
            {}, [&](triad::node_config& c) { c.tools.expose_to_all_requests = expose_tools; },
            [&](triad::node_options& o) {
              o.trace_file = trace_file;
              o.trace_all_requests = false;
            })) {
    triad::http_server_options o;
    o.server.port = 0;
    o.server.max_header_bytes = 2048;
    o.server.header_timeout_ms = 300;
    o.limits.max_body_bytes = 64 * 1024;
    o.limits.max_concurrent_requests = max_concurrent;
    o.model_id = "triad-tiny";
    o.api_key = std::move(api_key);
    o.server.allow_scripts = allow_scripts;
    auto s = triad::http_server::start(*node, o);
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    server = std::move(*s);
  }

  reply call(http::verb verb, std::string target, std::string body = {},
             std::vector<std::pair<std::string, std::string>> headers = {}) {
    net::io_context io;
    beast::tcp_stream stream{io};
    stream.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), server->port()});
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::content_type, "application/json");
    for (auto& [k, v] : headers)
      req.set(k, v);
    req.body() = std::move(body);
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    beast::error_code ec;
    http::read(stream, buf, parser, ec);
    BOOST_REQUIRE_MESSAGE(!ec, "no answer: " << ec.message());
    auto res = parser.release();
    reply r;
    r.status = res.result_int();
    r.body = res.body();
    r.headers = res.base();
    return r;
  }

  reply chat(std::string body, std::vector<std::pair<std::string, std::string>> headers = {}) {
    return call(http::verb::post, "/v1/chat/completions", std::move(body), std::move(headers));
  }
};

// A chat request; `extra` fields are appended. max_tokens caps a script as it caps any answer,
// so a scripted request gets room for its tool call's tokens.
std::string ask(std::string extra = {}, unsigned max_tokens = 0) {
  if (max_tokens == 0)
    max_tokens = extra.find("\"script\"") != std::string::npos ? 200 : 5;
  return R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hello"}],
             "max_tokens": )" +
         std::to_string(max_tokens) + R"(, "temperature": 0)" + extra + "}";
}

// The `tools` field of a request that declares the node's "nap" tool (only a declared hosted
// tool runs).
const std::string declare_nap =
    R"(, "tools": [{"type": "function", "function": {"name": "nap", "parameters": {"type": "object"}}}])";

// The data lines of an event stream.
std::vector<std::string> events_of(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    auto end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(http_api)

BOOST_AUTO_TEST_CASE(a_request_that_asks_for_its_trace_gets_its_id_and_fetches_the_trace) {
  const triad::test::scratch_file scratch{"triad-http-trace"};
  const auto& path = scratch.path;
  {
    server_fixture f{{}, 64, true, false, path};
    // Not asked: no id header, and nothing kept.
    auto plain = f.chat(ask(R"(, "stream": true)"));
    BOOST_REQUIRE_EQUAL(plain.status, 200u);
    BOOST_TEST((plain.headers.find("x-triad-request-id") == plain.headers.end()));
    for (bool stream : {false, true}) {
      auto r = f.chat(ask(stream ? R"(, "stream": true)" : ""), {{"x-triad-trace", "1"}});
      BOOST_REQUIRE_EQUAL(r.status, 200u);
      auto id = r.headers.find("x-triad-request-id");
      BOOST_REQUIRE(id != r.headers.end());
      auto t = f.call(http::verb::get, "/v1/traces/" + std::string{id->value()});
      BOOST_REQUIRE_EQUAL(t.status, 200u);
      auto doc = t.json().as_object();
      BOOST_TEST(doc.at("otherData").at("request").as_int64() ==
                 std::stoll(std::string{id->value()}));
      BOOST_TEST(doc.at("otherData").at("spans").as_int64() > 3);
      BOOST_TEST(t.body.find("\"name\":\"request\"") != std::string::npos); // its root span
    }
    // A streamed answer of two choices (the second starts once the first's prompt is
    // prefilled, before the stream's head goes out with the first token): the head names both
    // requests, and each has its trace.
    auto two = f.chat(ask(R"(, "stream": true, "n": 2)"), {{"x-triad-trace", "1"}});
    BOOST_REQUIRE_EQUAL(two.status, 200u);
    auto head = two.headers.find("x-triad-request-id");
    BOOST_REQUIRE(head != two.headers.end());
    const std::string ids{head->value()};
    std::stringstream each{ids};
    std::size_t traced = 0;
    for (std::string id; std::getline(each, id, ',');) {
      BOOST_TEST(f.call(http::verb::get, "/v1/traces/" + id).status == 200u, id);
      ++traced;
    }
    BOOST_TEST(traced == 2u);
    auto bad = f.call(http::verb::get, "/v1/traces/abc");
    BOOST_TEST(bad.status == 400u);
    BOOST_TEST(bad.body.find("abc") != std::string::npos);
    auto gone = f.call(http::verb::get, "/v1/traces/999999");
    BOOST_TEST(gone.status == 404u);
    BOOST_TEST(gone.body.find("no trace of request 999999") != std::string::npos);
  }
  std::filesystem::remove(path);
  // A node that writes no traces says how to have them.
  server_fixture f;
  auto off = f.call(http::verb::get, "/v1/traces/1");
  BOOST_TEST(off.status == 404u);
  BOOST_TEST(off.body.find("--trace") != std::string::npos);
  BOOST_TEST(off.body.find("tracing_off") != std::string::npos); // its code: none will come
}

BOOST_AUTO_TEST_CASE(a_completion_answers_with_the_message_and_usage) {
  server_fixture f;
  auto r = f.chat(ask());
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  auto j = r.json().as_object();
  BOOST_TEST(j.at("object").as_string() == "chat.completion");
  auto& choice = j.at("choices").as_array().at(0).as_object();
  BOOST_TEST(choice.at("finish_reason").as_string() == "length");
  BOOST_TEST(choice.at("message").at("role").as_string() == "assistant");
  BOOST_TEST(choice.at("message").at("content").is_string());
  BOOST_TEST(j.at("usage").at("completion_tokens").as_int64() == 5);
  BOOST_TEST(j.at("usage").at("total_tokens").as_int64() ==
             j.at("usage").at("prompt_tokens").as_int64() + 5);
}

BOOST_AUTO_TEST_CASE(a_streamed_completion_sends_chunks_usage_and_done) {
  server_fixture f;
  auto r = f.chat(ask(R"(, "stream": true, "stream_options": {"include_usage": true})"));
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  BOOST_TEST(r.headers[http::field::content_type] == "text/event-stream");
  auto events = events_of(r.body);
  BOOST_REQUIRE(events.size() >= 4u);
  BOOST_TEST(events.back() == "[DONE]");
  auto first = json::parse(events.front()).as_object();
  BOOST_TEST(first.at("choices").at(0).at("delta").at("role").as_string() == "assistant");
  auto usage = json::parse(events[events.size() - 2]).as_object();
  BOOST_TEST(usage.at("choices").as_array().empty());
  BOOST_TEST(usage.at("usage").at("completion_tokens").as_int64() == 5);
  auto finish = json::parse(events[events.size() - 3]).as_object();
  BOOST_TEST(finish.at("choices").at(0).at("finish_reason").as_string() == "length");
  for (std::size_t i = 0; i + 1 < events.size(); ++i)
    BOOST_TEST(json::parse(events[i]).as_object().at("object").as_string() ==
               "chat.completion.chunk");
}

BOOST_AUTO_TEST_CASE(a_plain_completion_answers_with_text_streamed_or_not) {
  server_fixture f;
  auto body = R"({"model": "triad-tiny", "prompt": "int main() {", "max_tokens": 4,
                  "temperature": 0)";
  auto r = f.call(http::verb::post, "/v1/completions", std::string{body} + "}");
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  auto j = r.json().as_object();
  BOOST_TEST(j.at("object").as_string() == "text_completion");
  auto text = std::string{j.at("choices").at(0).at("text").as_string()};
  BOOST_TEST(j.at("usage").at("completion_tokens").as_int64() == 4);
  auto s = f.call(http::verb::post, "/v1/completions", std::string{body} + R"(, "stream": true})");
  BOOST_REQUIRE_EQUAL(s.status, 200u);
  std::string streamed;
  for (const auto& e : events_of(s.body))
    if (e != "[DONE]")
      streamed += json::parse(e).at("choices").at(0).at("text").as_string();
  BOOST_TEST(streamed == text);
}

BOOST_AUTO_TEST_CASE(a_call_to_a_tool_the_node_does_not_host_goes_back_to_the_client) {
  server_fixture f;
  auto r = f.chat(ask(R"(, "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    "triad": {"script": [{"tokens": 2, "tool_call": {"name": "get_weather",
      "arguments": {"city": "Oslo"}}}, {"tokens": 2}]})"));
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  auto choice = r.json().at("choices").at(0).as_object();
  BOOST_TEST(choice.at("finish_reason").as_string() == "tool_calls");
  auto call = choice.at("message").at("tool_calls").at(0).as_object();
  BOOST_TEST(call.at("function").at("name").as_string() == "get_weather");
  BOOST_TEST(json::parse(call.at("function").at("arguments").as_string()) ==
             json::parse(R"({"city": "Oslo"})"));
}

BOOST_AUTO_TEST_CASE(a_call_to_a_hosted_tool_runs_on_the_node_and_generation_goes_on) {
  server_fixture f;
  auto r = f.chat(ask(declare_nap + R"(, "triad": {"script": [{"tokens": 2, "tool_call": {"name": "nap",
      "arguments": {"ms": 5}}}, {"tokens": 3}]})"));
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  auto j = r.json().as_object();
  BOOST_TEST(j.at("choices").at(0).at("finish_reason").as_string() == "stop");
  auto ran = j.at("triad").at("server_tool_calls").at(0).as_object();
  BOOST_TEST(ran.at("name").as_string() == "nap");
  BOOST_TEST(ran.at("result").as_string() == "rested");
  // The usage says the node ran it and where the KV waited meanwhile.
  auto node = j.at("usage").at("triad").as_object();
  BOOST_TEST(node.at("server_tool_calls").as_int64() == 1);
  BOOST_TEST(node.at("kv_kept_calls").as_int64() + node.at("kv_stored_calls").as_int64() == 1);
}

BOOST_AUTO_TEST_CASE(a_hosted_tool_the_request_did_not_declare_never_runs) {
  server_fixture f;
  const std::string call = R"(, "triad": {"script": [{"tokens": 2, "tool_call": {"name": "nap",
      "arguments": {"ms": 5}}}, {"tokens": 3}]})";
  for (const std::string& tools :
       {std::string{}, std::string{R"(, "tools": [{"type": "function", "function":
           {"name": "get_weather", "parameters": {"type": "object"}}}])"}}) {
    auto r = f.chat(ask(tools + call));
    BOOST_REQUIRE_EQUAL(r.status, 200u);
    auto j = r.json().as_object();
    // The call goes back to the client, as a call to any tool the node does not host.
    BOOST_TEST(j.at("choices").at(0).at("finish_reason").as_string() == "tool_calls");
    auto returned = j.at("choices").at(0).at("message").at("tool_calls").at(0);
    BOOST_TEST(returned.at("function").at("name").as_string() == "nap");
    BOOST_TEST(!j.contains("triad")); // nothing ran on the node
    BOOST_TEST(j.at("usage").at("triad").at("server_tool_calls").as_int64() == 0);
  }
}

BOOST_AUTO_TEST_CASE(a_node_that_exposes_its_tools_runs_them_undeclared) {
  server_fixture f{{}, 64, true, true};
  auto r = f.chat(ask(R"(, "triad": {"script": [{"tokens": 2, "tool_call": {"name": "nap",
      "arguments": {"ms": 5}}}, {"tokens": 3}]})"));
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  auto j = r.json().as_object();
  BOOST_TEST(j.at("choices").at(0).at("finish_reason").as_string() == "stop");
  BOOST_TEST(j.at("triad").at("server_tool_calls").at(0).at("name").as_string() == "nap");
}

BOOST_AUTO_TEST_CASE(a_stop_string_ends_the_answer_before_it) {
  server_fixture f;
  // Scripted tokens are printable bytes; stop at the second character of the answer.
  auto first = f.chat(ask(R"(, "triad": {"script": [{"tokens": 6}]})"));
  auto text = std::string{first.json().at("choices").at(0).at("message").at("content").as_string()};
  BOOST_REQUIRE(text.size() >= 3u);
  auto stop = text.substr(1, 1);
  auto r = f.chat(ask(R"(, "stop": ")" + stop + R"(", "triad": {"script": [{"tokens": 6}]})"));
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  auto choice = r.json().at("choices").at(0).as_object();
  BOOST_TEST(choice.at("finish_reason").as_string() == "stop");
  auto got = std::string{choice.at("message").at("content").as_string()};
  BOOST_TEST(got == text.substr(0, text.find(stop)));
}

BOOST_AUTO_TEST_CASE(bad_requests_get_the_right_status_and_an_openai_error_body) {
  server_fixture f;
  auto error_of = [](const reply& r) { return r.json().at("error").as_object(); };
  auto bad_json = f.chat("{\"model\": ");
  BOOST_TEST(bad_json.status == 400u);
  BOOST_TEST(error_of(bad_json).at("type").as_string() == "invalid_request_error");
  auto wrong_type = f.chat(ask(R"(, "max_tokens": "many")"));
  BOOST_TEST(wrong_type.status == 400u);
  BOOST_TEST(error_of(wrong_type).at("param").as_string() == "max_tokens");
  auto unknown = f.call(http::verb::get, "/v2/everything");
  BOOST_TEST(unknown.status == 404u);
  auto method = f.call(http::verb::get, "/v1/chat/completions");
  BOOST_TEST(method.status == 405u);
  BOOST_TEST(method.headers[http::field::allow] == "POST");
  auto huge = f.chat(ask(R"(, "pad": ")" + std::string(70 * 1024, 'x') + "\""));
  BOOST_TEST(huge.status == 413u);
  auto big_head = f.chat(ask(), {{"X-Padding", std::string(4096, 'y')}});
  BOOST_TEST(big_head.status == 431u);
  // The node is unaffected.
  BOOST_TEST(f.chat(ask()).status == 200u);
  BOOST_TEST(f.call(http::verb::get, "/health").status == 200u);
}

BOOST_AUTO_TEST_CASE(a_client_that_expects_100_continue_is_told_to_go_on) {
  server_fixture f;
  net::io_context io;
  tcp::socket s{io};
  s.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), f.server->port()});
  auto body = ask();
  net::write(s, net::buffer("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                            "Content-Type: application/json\r\nExpect: 100-continue\r\n"
                            "Content-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n"));
  beast::flat_buffer buf;
  http::response_parser<http::empty_body> interim;
  http::read_header(s, buf, interim); // sent before the body, as curl waits for it
  BOOST_TEST(interim.get().result_int() == 100);
  net::write(s, net::buffer(body));
  http::response<http::string_body> res;
  http::read(s, buf, res);
  BOOST_TEST(res.result_int() == 200);
}

BOOST_AUTO_TEST_CASE(a_request_pipelined_behind_one_being_answered_is_answered_after_it) {
  server_fixture f;
  net::io_context io;
  tcp::socket s{io};
  s.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), f.server->port()});
  auto request = [](const std::string& body) {
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  // The first takes a while (a hosted tool naps); the second arrives while it runs and waits
  // in the socket.
  auto slow = ask(declare_nap + R"(, "triad": {"script": [{"tokens": 1, "tool_call": {"name": "nap",
      "arguments": {"ms": 300}}}, {"tokens": 1}]})");
  net::write(s, net::buffer(request(slow)));
  while (f.server->active() == 0)
    std::this_thread::sleep_for(5ms);
  net::write(s, net::buffer(request(ask())));
  beast::flat_buffer buf;
  for (int i = 0; i < 2; ++i) {
    http::response<http::string_body> res;
    http::read(s, buf, res);
    BOOST_TEST(res.result_int() == 200);
  }
}

BOOST_AUTO_TEST_CASE(
    a_body_in_a_transfer_coding_triad_does_not_decode_is_refused_and_never_served) {
  // Smuggling: a body framed by a coding the server does not decode must not be read as the
  // next request on the connection. One 501, then the connection closes.
  for (std::string coding : {"gzip", "xchunked"}) {
    server_fixture f;
    net::io_context io;
    tcp::socket s{io};
    s.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), f.server->port()});
    net::write(s, net::buffer("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                              "Transfer-Encoding: " +
                              coding + "\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string all;
    beast::error_code ec;
    char chunk[4096];
    while (!ec) {
      auto n = s.read_some(net::buffer(chunk), ec);
      all.append(chunk, n);
    }
    BOOST_TEST_INFO(coding << ": " << all);
    BOOST_TEST(all.starts_with("HTTP/1.1 501"));
    BOOST_TEST_INFO(coding << ": " << all);
    BOOST_TEST(all.find("HTTP/1.1", 1) == std::string::npos); // no second answer
    BOOST_TEST(all.find(coding) != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_script_is_refused_unless_the_node_allows_scripts) {
  server_fixture f{{}, 64, false};
  auto r = f.chat(ask(R"(, "triad": {"script": [{"tokens": 3}]})"));
  BOOST_TEST(r.status == 400u);
  BOOST_TEST(r.json().at("error").at("param").as_string() == "triad.script");
  BOOST_TEST(r.body.find("allow_scripts") != std::string::npos);
  BOOST_TEST(f.chat(ask()).status == 200u); // the rest is served
}

BOOST_AUTO_TEST_CASE(a_script_never_outruns_max_tokens) {
  server_fixture f;
  auto r = f.chat(ask(R"(, "triad": {"script": [{"tokens": 40}]})", 5));
  BOOST_REQUIRE(r.status == 200u);
  BOOST_TEST(r.json().at("usage").at("completion_tokens").as_int64() == 5);
  BOOST_TEST(r.json().at("choices").at(0).at("finish_reason").as_string() == "length");
}

BOOST_AUTO_TEST_CASE(a_prompt_past_the_context_is_a_400_naming_both_numbers) {
  server_fixture f;
  auto r = f.chat(R"({"model": "triad-tiny", "max_tokens": 100,
    "messages": [{"role": "user", "content": ")" +
                  std::string(5000, 'a') + R"("}]})");
  BOOST_TEST(r.status == 400u);
  BOOST_TEST(r.json().at("error").at("code").as_string() == "context_length_exceeded");
  BOOST_TEST(r.body.find("max_tokens is 100") != std::string::npos, r.body);
  BOOST_TEST(r.body.find("context of 4096") != std::string::npos, r.body);
  BOOST_TEST(f.chat(ask()).status == 200u);
}

BOOST_AUTO_TEST_CASE(with_an_api_key_the_api_needs_the_bearer_token) {
  server_fixture f{"sekret"};
  auto none = f.chat(ask());
  BOOST_TEST(none.status == 401u);
  BOOST_TEST(none.json().at("error").at("type").as_string() == "authentication_error");
  BOOST_TEST(f.chat(ask(), {{"Authorization", "Bearer wrong!"}}).status == 401u);
  BOOST_TEST(f.chat(ask(), {{"Authorization", "Bearer sekret"}}).status == 200u);
  BOOST_TEST(f.call(http::verb::get, "/health").status == 200u); // probes need no token
}

BOOST_AUTO_TEST_CASE(a_client_that_sends_its_head_too_slowly_is_disconnected) {
  server_fixture f;
  net::io_context io;
  tcp::socket s{io};
  s.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), f.server->port()});
  net::write(s, net::buffer(std::string{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"}));
  char c;
  beast::error_code ec;
  auto start = std::chrono::steady_clock::now();
  s.read_some(net::buffer(&c, 1), ec); // blocks until the server closes (header_timeout 300 ms)
  BOOST_TEST((ec == net::error::eof || ec == net::error::connection_reset));
  BOOST_TEST((std::chrono::steady_clock::now() - start < 20s));
  BOOST_TEST(f.chat(ask()).status == 200u);
}

BOOST_AUTO_TEST_CASE(past_the_concurrency_limit_requests_get_429_with_retry_after) {
  server_fixture f{{}, 1};
  auto slow = std::async(std::launch::async, [&] {
    return f.chat(ask(declare_nap + R"(, "triad": {"script": [{"tokens": 1, "tool_call": {"name": "nap",
        "arguments": {"ms": 1500}}}, {"tokens": 1}]})"));
  });
  while (f.server->active() == 0)
    std::this_thread::sleep_for(5ms);
  auto refused = f.chat(ask());
  BOOST_TEST(refused.status == 429u);
  BOOST_TEST(refused.headers[http::field::retry_after] == "1");
  BOOST_TEST(refused.json().at("error").at("type").as_string() == "rate_limit_error");
  BOOST_TEST(slow.get().status == 200u); // the accepted one completes
}

BOOST_AUTO_TEST_CASE(far_above_capacity_every_request_gets_exactly_one_answer) {
  server_fixture f{{}, 2};
  // 24 clients at once against 2 concurrent slots: each gets one complete answer, 200 or 429.
  std::vector<std::future<reply>> replies;
  for (int i = 0; i < 24; ++i)
    replies.push_back(std::async(std::launch::async, [&] {
      return f.chat(ask(declare_nap + R"(, "triad": {"script": [{"tokens": 1, "tool_call": {"name": "nap",
          "arguments": {"ms": 200}}}, {"tokens": 1}]})"));
    }));
  std::size_t ok = 0, refused = 0;
  for (auto& r : replies) {
    BOOST_REQUIRE(r.wait_for(120s) == std::future_status::ready); // none hangs
    auto got = r.get();
    if (got.status == 200) {
      ++ok;
      BOOST_TEST(got.json().at("choices").at(0).at("finish_reason").as_string() == "stop");
    } else {
      ++refused;
      BOOST_TEST(got.status == 429u);
      BOOST_TEST(!got.headers[http::field::retry_after].empty());
    }
  }
  BOOST_TEST(ok >= 2u);
  BOOST_TEST(refused >= 1u);
  BOOST_TEST(ok + refused == 24u);
  // The last answer can reach its client just before its request actor has ended.
  for (int i = 0; i < 1000 && f.node->in_flight() != 0; ++i)
    std::this_thread::sleep_for(10ms);
  BOOST_TEST(f.node->in_flight() == 0u);
  BOOST_TEST(f.server->active() == 0u);
}

BOOST_AUTO_TEST_CASE(a_drain_finishes_the_requests_in_flight_and_takes_no_new_ones) {
  server_fixture f;
  auto slow = std::async(std::launch::async, [&] {
    return f.chat(ask(declare_nap + R"(, "triad": {"script": [{"tokens": 1, "tool_call": {"name": "nap",
        "arguments": {"ms": 500}}}, {"tokens": 2}]})"));
  });
  while (f.server->active() == 0)
    std::this_thread::sleep_for(5ms);
  f.server->stop_accepting();
  BOOST_TEST(f.node->drain(60s));
  BOOST_TEST(f.server->wait_idle(60s));
  auto r = slow.get();
  BOOST_TEST(r.status == 200u); // finished, not cut off
  net::io_context io;
  tcp::socket s{io};
  beast::error_code ec;
  s.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), f.server->port()}, ec);
  BOOST_TEST(ec == net::error::connection_refused); // no longer listening
}

BOOST_AUTO_TEST_CASE(a_client_that_disconnects_cancels_its_request) {
  server_fixture f;
  {
    net::io_context io;
    beast::tcp_stream stream{io};
    stream.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), f.server->port()});
    http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
    req.set(http::field::host, "localhost");
    req.body() = ask(declare_nap + R"(, "stream": true, "triad": {"script": [{"tokens": 1, "tool_call":
        {"name": "nap", "arguments": {"ms": 30000}}}, {"tokens": 1}]})");
    req.prepare_payload();
    http::write(stream, req);
    while (f.node->in_flight() == 0)
      std::this_thread::sleep_for(5ms);
  } // closed here, while the tool naps
  for (int i = 0; i < 1000 && f.node->in_flight() != 0; ++i)
    std::this_thread::sleep_for(10ms);
  BOOST_TEST(f.node->in_flight() == 0u);
  for (int i = 0; i < 1000 && f.server->active() != 0; ++i)
    std::this_thread::sleep_for(10ms);
  BOOST_TEST(f.server->active() == 0u);
}

BOOST_AUTO_TEST_CASE(models_metrics_and_readiness_are_served) {
  server_fixture f;
  auto models = f.call(http::verb::get, "/v1/models");
  BOOST_TEST(models.status == 200u);
  BOOST_TEST(models.json().at("data").at(0).at("id").as_string() == "triad-tiny");
  f.chat(ask());
  auto metrics = f.call(http::verb::get, "/metrics");
  BOOST_TEST(metrics.status == 200u);
  BOOST_TEST(metrics.headers[http::field::content_type] ==
             "text/plain; version=0.0.4; charset=utf-8");
  // By status and endpoint: the models listing and the completion, each counted once.
  BOOST_TEST(
      metrics.body.find("triad_http_responses_total{status=\"200\",endpoint=\"/v1/models\"} 1") !=
      std::string::npos);
  BOOST_TEST(
      metrics.body.find(
          "triad_http_responses_total{status=\"200\",endpoint=\"/v1/chat/completions\"} 1") !=
      std::string::npos);
  BOOST_TEST(metrics.body.find("triad_request_transitions_total") != std::string::npos);
  BOOST_TEST(f.call(http::verb::get, "/ready").status == 200u);
  f.server->stop_accepting();
  BOOST_TEST(f.server->wait_idle(1s)); // nothing in flight: a drain ends at once
}

BOOST_AUTO_TEST_CASE(a_json_schema_response_format_makes_the_answer_valid_against_it) {
  // The tiny random model, greedy and sampled: the masks leave it only the schema's documents,
  // and the end of the answer once one is complete.
  server_fixture f;
  const std::string format = R"(, "response_format": {"type": "json_schema", "json_schema":
      {"name": "reading", "strict": true, "schema": {"type": "object",
       "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"},
                      "level": {"enum": [1, 2, null]}},
       "required": ["unit", "ok", "level"], "additionalProperties": false}}})";
  for (const char* sampling : {R"(, "temperature": 0)", R"(, "temperature": 1.5, "seed": 7)"}) {
    auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
                        "max_tokens": 200)" +
                    std::string{sampling} + format + "}");
    BOOST_REQUIRE_EQUAL(r.status, 200u);
    const auto reply = r.json();
    const auto& choice = reply.at("choices").at(0);
    BOOST_TEST(choice.at("finish_reason").as_string() == "stop");
    const std::string content{choice.at("message").at("content").as_string()};
    boost::system::error_code ec;
    const auto doc = json::parse(content, ec);
    BOOST_REQUIRE_MESSAGE(!ec, "not JSON: " << content);
    const auto& o = doc.as_object();
    BOOST_TEST(o.size() == 3u, content);
    const auto unit = o.at("unit").as_string();
    BOOST_TEST((unit == "celsius" || unit == "fahrenheit"), content);
    BOOST_TEST(o.at("ok").is_bool(), content);
    BOOST_TEST((o.at("level").is_null() || o.at("level").is_int64()), content);
  }
}

BOOST_AUTO_TEST_CASE(a_json_object_response_format_closes_the_object_within_max_tokens) {
  // A random model's string would run past a small max_tokens; near the end of the budget the
  // masks leave only the shortest way to close it, so the answer is a whole object anyway.
  server_fixture f;
  for (unsigned max_tokens : {3u, 12u, 60u})
    for (const char* sampling : {R"(, "temperature": 0)", R"(, "temperature": 1.5, "seed": 2)"}) {
      auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
                          "response_format": {"type": "json_object"}, "max_tokens": )" +
                      std::to_string(max_tokens) + sampling + "}");
      BOOST_REQUIRE_EQUAL(r.status, 200u);
      const auto reply = r.json();
      const auto& choice = reply.at("choices").at(0);
      const std::string content{choice.at("message").at("content").as_string()};
      BOOST_TEST_CONTEXT(max_tokens << " " << sampling << ": " << content) {
        BOOST_TEST(choice.at("finish_reason").as_string() == "stop");
        boost::system::error_code ec;
        BOOST_TEST(json::parse(content, ec).is_object());
      }
    }
}

namespace {

// Two functions the node does not host, whose arguments a random model finishes quickly (enums,
// booleans, nothing): get_weather and get_time.
const std::string forecast_tools = R"(, "tools": [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
       "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "wind": {"type": "boolean"}},
       "required": ["unit", "wind"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
       "properties": {}, "additionalProperties": false}}}])";

// The calls of a reply that ended with tool_calls, each checked against forecast_tools.
std::vector<std::string> forecast_calls(const json::value& reply) {
  const auto& choice = reply.at("choices").at(0);
  BOOST_TEST(choice.at("finish_reason").as_string() == "tool_calls", json::serialize(reply));
  std::vector<std::string> names;
  for (const auto& call : choice.at("message").at("tool_calls").as_array()) {
    const std::string name{call.at("function").at("name").as_string()};
    const std::string text{call.at("function").at("arguments").as_string()};
    boost::system::error_code ec;
    const auto args = json::parse(text, ec);
    BOOST_REQUIRE_MESSAGE(!ec && args.is_object(), "arguments are not an object: " << text);
    const auto& o = args.as_object();
    if (name == "get_weather") {
      BOOST_TEST(o.size() == 2u, text);
      const auto unit = o.at("unit").as_string();
      BOOST_TEST((unit == "celsius" || unit == "fahrenheit"), text);
      BOOST_TEST(o.at("wind").is_bool(), text);
    } else {
      BOOST_TEST(name == "get_time");
      BOOST_TEST(o.empty(), text);
    }
    names.push_back(name);
  }
  return names;
}

} // namespace

BOOST_AUTO_TEST_CASE(tool_choice_required_makes_a_random_model_call_a_declared_tool) {
  server_fixture f;
  for (const char* sampling :
       {R"(, "temperature": 0)", R"(, "temperature": 1.5, "seed": 3)", R"(, "seed": 11)"}) {
    auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
                        "max_tokens": 300, "tool_choice": "required")" +
                    std::string{sampling} + forecast_tools + "}");
    BOOST_REQUIRE_EQUAL(r.status, 200u);
    BOOST_TEST(forecast_calls(r.json()).size() == 1u); // the byte format stops at each call
  }
}

BOOST_AUTO_TEST_CASE(a_named_tool_choice_calls_exactly_that_function) {
  server_fixture f;
  for (const char* name : {"get_time", "get_weather"})
    for (const char* sampling : {R"(, "temperature": 0)", R"(, "temperature": 1.2, "seed": 5)"}) {
      auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
                          "max_tokens": 300, "tool_choice": {"type": "function", "function":
                          {"name": ")" +
                      std::string{name} + "\"}}" + sampling + forecast_tools + "}");
      BOOST_REQUIRE_EQUAL(r.status, 200u);
      const auto names = forecast_calls(r.json());
      BOOST_REQUIRE_EQUAL(names.size(), 1u);
      BOOST_TEST(names[0] == name);
    }
}

BOOST_AUTO_TEST_CASE(tool_choice_required_runs_a_declared_hosted_tool_then_answers_freely) {
  server_fixture f;
  auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
      "max_tokens": 300, "temperature": 0, "tool_choice": "required", "tools": [{"type":
      "function", "function": {"name": "nap", "parameters": {"type": "object", "properties":
      {"ms": {"enum": [1, 2]}}, "required": ["ms"], "additionalProperties": false}}}]})");
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  const auto reply = r.json();
  const auto& ran = reply.at("triad").at("server_tool_calls").at(0);
  BOOST_TEST(ran.at("name").as_string() == "nap");
  const auto args = json::parse(ran.at("arguments").as_string());
  BOOST_TEST((args.at("ms") == json::value(1) || args.at("ms") == json::value(2)));
  BOOST_TEST(reply.at("choices").at(0).at("finish_reason").as_string() != "tool_calls");
  // Text or calls after the result: the model goes on writing (the call grammar still held
  // would have left it nothing but its end).
  BOOST_TEST(!reply.at("choices").at(0).at("message").at("content").as_string().empty(),
             json::serialize(reply));
}

BOOST_AUTO_TEST_CASE(a_response_format_with_tools_answers_its_document_or_valid_calls) {
  server_fixture f;
  std::size_t documents = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 200, "temperature": 1.3, "seed": )" +
                    std::to_string(seed) +
                    R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "r",
        "strict": true, "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"], "additionalProperties": false}}})" +
                    forecast_tools + "}");
    BOOST_REQUIRE_EQUAL(r.status, 200u);
    const auto reply = r.json();
    const auto& choice = reply.at("choices").at(0);
    if (choice.at("finish_reason").as_string() == "tool_calls") {
      BOOST_TEST(!forecast_calls(reply).empty());
      continue;
    }
    const std::string content{choice.at("message").at("content").as_string()};
    boost::system::error_code ec;
    const auto doc = json::parse(content, ec);
    BOOST_REQUIRE_MESSAGE(!ec && doc.is_object(), "not the document: " << content);
    BOOST_TEST(doc.as_object().size() == 1u, content);
    BOOST_TEST(doc.at("ok").is_bool(), content);
    ++documents;
  }
  BOOST_TEST_MESSAGE(documents << " of 6 answers were the document, the others calls");
  // One response_format grammar and one of it or calls for the six: compiled for the first,
  // found kept by the other five.
  const auto metrics = f.call(http::verb::get, "/metrics").body;
  BOOST_TEST(metrics.find("triad_grammar_cache_hits_total 10\n") != std::string::npos, metrics);
  BOOST_TEST(metrics.find("triad_grammar_cache_grammars 2\n") != std::string::npos, metrics);
}

BOOST_AUTO_TEST_CASE(under_auto_a_random_model_writes_text_or_valid_calls) {
  // Text is free; from the token that opens a call, the grammar of calls holds: without it a
  // random model's calls are malformed and come back as text.
  server_fixture f;
  std::size_t calls = 0;
  for (int seed = 1; seed <= 24; ++seed) {
    auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 200, "temperature": 2, "seed": )" +
                    std::to_string(seed) + forecast_tools + "}");
    BOOST_REQUIRE_EQUAL(r.status, 200u);
    const auto reply = r.json();
    if (reply.at("choices").at(0).at("finish_reason").as_string() == "tool_calls")
      calls += forecast_calls(reply).size();
  }
  BOOST_TEST_MESSAGE(calls << " valid calls in 24 answers");
  BOOST_TEST(calls >= 1u);
}

BOOST_AUTO_TEST_CASE(a_streamed_call_arrives_in_pieces_as_the_model_writes_it) {
  server_fixture f;
  auto r = f.chat(R"({"model": "triad-tiny", "messages": [{"role": "user", "content": "Hi"}],
      "max_tokens": 300, "temperature": 0, "stream": true, "tool_choice": {"type": "function",
      "function": {"name": "get_weather"}})" +
                  forecast_tools + "}");
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  std::string arguments, finish, id;
  std::size_t pieces = 0, named = 0;
  for (const auto& e : events_of(r.body)) {
    if (e == "[DONE]")
      continue;
    const auto chunk = json::parse(e);
    const auto& choice = chunk.at("choices").at(0);
    if (const auto* f = choice.as_object().if_contains("finish_reason"); f && f->is_string())
      finish = f->as_string();
    const auto* calls = choice.at("delta").as_object().if_contains("tool_calls");
    if (calls == nullptr)
      continue;
    for (const auto& c : calls->as_array()) {
      BOOST_TEST(c.at("index").as_int64() == 0);
      const auto& fn = c.at("function").as_object();
      if (const auto* name = fn.if_contains("name")) { // the first piece: id, type and name
        ++named;
        BOOST_TEST(name->as_string() == "get_weather");
        id = c.at("id").as_string();
        BOOST_TEST(c.at("type").as_string() == "function");
      } else {
        BOOST_TEST(!c.as_object().contains("id"));
      }
      arguments += fn.at("arguments").as_string();
      ++pieces;
    }
  }
  BOOST_TEST(named == 1u);
  BOOST_TEST(!id.empty());
  BOOST_TEST(pieces > 5u, pieces << " pieces"); // as written, not whole at the end
  BOOST_TEST(finish == "tool_calls");
  // Joined, the pieces are the arguments: valid against get_weather's parameters.
  const auto args = json::parse(arguments);
  BOOST_TEST(args.as_object().size() == 2u, arguments);
  BOOST_TEST(
      (args.at("unit") == json::value("celsius") || args.at("unit") == json::value("fahrenheit")),
      arguments);
  BOOST_TEST(args.at("wind").is_bool(), arguments);
}

BOOST_AUTO_TEST_CASE(logprobs_are_the_models_and_greedy_picks_the_most_likely) {
  server_fixture f;
  auto r = f.chat(ask(R"(, "logprobs": true, "top_logprobs": 3)", 6));
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  const auto reply = r.json();
  const auto& choice = reply.at("choices").at(0);
  const auto& content = choice.at("logprobs").at("content").as_array();
  BOOST_TEST(content.size() == 6u); // every generated token is content here
  std::string text;
  for (const auto& e : content) {
    const double lp = e.at("logprob").to_number<double>();
    BOOST_TEST(lp <= 0.0);
    const auto& top = e.at("top_logprobs").as_array();
    BOOST_REQUIRE(top.size() == 3u);
    double prev = 0, mass = 0;
    for (std::size_t k = 0; k < top.size(); ++k) {
      const double alt = top[k].at("logprob").to_number<double>();
      if (k > 0)
        BOOST_TEST(alt <= prev);
      prev = alt;
      mass += std::exp(alt);
    }
    BOOST_TEST(mass <= 1.0 + 1e-6);
    // temperature 0: the token chosen is the most likely one.
    BOOST_TEST(lp == top[0].at("logprob").to_number<double>(), boost::test_tools::tolerance(1e-6));
    for (const auto& b : e.at("bytes").as_array())
      text += static_cast<char>(b.as_int64());
  }
  // The tokens' bytes are the answer (as valid UTF-8, like the content).
  triad::utf8_stream utf8;
  text = utf8.push(text) + utf8.finish();
  BOOST_TEST(text == std::string{choice.at("message").at("content").as_string()});
  // A plain completion: OpenAI's legacy shape.
  auto plain = f.call(http::verb::post, "/v1/completions",
                      R"({"model": "triad-tiny", "prompt": "ab", "max_tokens": 3, "logprobs": 2,
                          "temperature": 0})");
  BOOST_REQUIRE_EQUAL(plain.status, 200u);
  const auto lp = plain.json().at("choices").at(0).at("logprobs");
  // One entry per token of the text (a control token the model wrote has none).
  const auto entries = lp.at("tokens").as_array().size();
  BOOST_TEST(entries >= 1u);
  BOOST_TEST(entries <= 3u);
  BOOST_TEST(lp.at("token_logprobs").as_array().size() == entries);
  BOOST_TEST(lp.at("text_offset").as_array().size() == entries);
  BOOST_TEST(lp.at("top_logprobs").at(0).as_object().size() <= 2u);
}

BOOST_AUTO_TEST_CASE(n_choices_share_the_prompts_kv_and_each_answers) {
  server_fixture f;
  const std::string long_prompt(120, 'q'); // several KV pages of byte tokens
  const std::string body = R"({"model": "triad-tiny", "messages": [{"role": "user", "content": ")" +
                           long_prompt + R"("}], "max_tokens": 8, "n": 3, "temperature": 1.5)";
  auto r = f.chat(body + "}");
  BOOST_REQUIRE_EQUAL(r.status, 200u);
  const auto reply = r.json();
  const auto& choices = reply.at("choices").as_array();
  BOOST_REQUIRE(choices.size() == 3u);
  std::set<std::string> answers;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    BOOST_TEST(choices[i].at("index").as_int64() == static_cast<std::int64_t>(i));
    BOOST_TEST(choices[i].at("finish_reason").as_string() == "length");
    answers.insert(std::string{choices[i].at("message").at("content").as_string()});
  }
  BOOST_TEST(answers.size() > 1u); // each choice its own random stream
  const auto& usage = reply.at("usage");
  BOOST_TEST(usage.at("completion_tokens").as_int64() == 24);
  const auto& per = usage.at("triad").at("choices").as_array();
  BOOST_REQUIRE(per.size() == 3u);
  // The later choices started once the first one's prompt was prefilled: its full pages
  // were in the prefix cache for them.
  for (std::size_t i = 1; i < per.size(); ++i)
    BOOST_TEST(per[i].at("cached_tokens").as_int64() >= 64, json::serialize(usage));

  // Streamed: each choice's chunks by index, one usage chunk, one [DONE].
  auto s = f.chat(body + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  BOOST_REQUIRE_EQUAL(s.status, 200u);
  std::map<std::int64_t, std::string> finish;
  std::size_t usage_chunks = 0, done = 0;
  for (const auto& e : events_of(s.body)) {
    if (e == "[DONE]") {
      ++done;
      continue;
    }
    const auto chunk = json::parse(e);
    if (chunk.as_object().contains("usage") && !chunk.at("usage").is_null()) {
      ++usage_chunks;
      BOOST_TEST(chunk.at("usage").at("completion_tokens").as_int64() == 24);
    }
    for (const auto& c : chunk.at("choices").as_array())
      if (!c.at("finish_reason").is_null())
        finish[c.at("index").as_int64()] = std::string{c.at("finish_reason").as_string()};
  }
  BOOST_TEST(finish.size() == 3u);
  BOOST_TEST(usage_chunks == 1u);
  BOOST_TEST(done == 1u);
  BOOST_TEST(f.chat(ask(R"(, "n": 17)")).status == 400u);
}

BOOST_AUTO_TEST_CASE(a_response_format_the_node_cannot_enforce_is_a_400_naming_it) {
  server_fixture f;
  auto pattern = f.chat(ask(R"(, "response_format": {"type": "json_schema", "json_schema":
      {"name": "x", "schema": {"type": "string", "not": {"const": "a"}}}})"));
  BOOST_TEST(pattern.status == 400u);
  BOOST_TEST(pattern.body.find("'not'") != std::string::npos, pattern.body);
  BOOST_TEST(pattern.json().at("error").at("param").as_string() ==
             "response_format.json_schema.schema");
  auto type = f.chat(ask(R"(, "response_format": {"type": "xml"})"));
  BOOST_TEST(type.status == 400u);
  BOOST_TEST(type.body.find("'xml' is not one of text, json_object, json_schema") !=
                 std::string::npos,
             type.body);
  auto with_script = f.chat(ask(R"(, "response_format": {"type": "json_object"},
      "triad": {"script": [{"tokens": 3}]})"));
  BOOST_TEST(with_script.status == 400u);
  BOOST_TEST(with_script.body.find("triad.script") != std::string::npos, with_script.body);
  BOOST_TEST(f.chat(ask(R"(, "response_format": {"type": "text"})")).status == 200u);
}

BOOST_AUTO_TEST_SUITE_END()
