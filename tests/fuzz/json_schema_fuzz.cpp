// Fuzz target for the JSON Schema compiler (grammar/): any JSON a client sends as a schema must
// give a grammar or an error with a message, never a crash, hang or exception; a grammar's
// matcher takes a few bytes without failing. Built as a libFuzzer binary with -DTRIAD_FUZZ=ON
// (clang), and always as a corpus replayer run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include <boost/json/parse.hpp>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text{reinterpret_cast<const char*>(data), size};
  boost::system::error_code ec;
  const auto schema = boost::json::parse(text, ec);
  if (ec)
    return 0;
  auto g = triad::grammar::from_json_schema(schema);
  if (!g) {
    if (g.error().message.empty())
      std::abort();
    return 0;
  }
  triad::grammar::matcher m{std::make_shared<const triad::grammar::grammar>(std::move(*g))};
  for (char c : std::string_view{"{\"a\":[1,\"x\",true,null]}"})
    if (!m.accept(static_cast<unsigned char>(c)))
      break;
  return 0;
}
