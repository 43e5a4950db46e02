// Fuzz target for triad-node's request parser: any bytes must give a request or an api_error
// with a status and a message, never a crash, hang or exception; the error body is valid JSON.
// Built as a libFuzzer binary with -DTRIAD_FUZZ=ON (clang), and always as a corpus replayer
// run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/json/parse.hpp>

#include "server/openai.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text{reinterpret_cast<const char*>(data), size};
  auto parsed = triad::parse_chat_request(text, "triad-tiny");
  if (auto* e = std::get_if<triad::api_error>(&parsed)) {
    if (e->message.empty() || e->status < 400 || e->status > 599)
      std::abort();
    boost::system::error_code ec;
    boost::json::parse(triad::to_json(*e), ec);
    if (ec)
      std::abort();
    return 0;
  }
  const auto& chat = std::get<triad::openai_chat>(parsed);
  if (chat.request.messages.empty() || chat.request.max_tokens == 0)
    std::abort();
  triad::utf8_stream u;
  auto out = u.push(text) + u.finish();
  if (out.size() < text.size() / 2) // every byte gives one character or a replacement
    std::abort();
  return 0;
}
