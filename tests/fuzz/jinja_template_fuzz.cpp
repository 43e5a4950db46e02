// Fuzz target for the Jinja engine: any template text must parse to a program or give an error
// naming a line, and a parsed program must render with a small chat context or give an error;
// never a crash, a hang or unbounded memory. Built as a libFuzzer binary with -DTRIAD_FUZZ=ON
// (clang), and always as a corpus replayer run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/json/parse.hpp>

#include "jinja/template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view source{reinterpret_cast<const char*>(data), size};
  auto t = triad::jinja::jinja_template::parse(source);
  if (!t) {
    if (t.error().message.empty())
      std::abort();
    return 0;
  }
  static const auto context = triad::jinja::value::from_json(boost::json::parse(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
          "add_generation_prompt": true, "bos_token": "<s>"})"));
  auto out = t->render(context);
  if (!out && out.error().message.empty())
    std::abort();
  return 0;
}
