// Fuzz target for the node config parser: any bytes must give a config or an error value,
// never a crash, hang or exception; an accepted config must survive to_toml and parse back
// equal. Built as a libFuzzer binary with -DTRIAD_FUZZ=ON (clang), and always as a corpus
// replayer run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "actors/node_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text{reinterpret_cast<const char*>(data), size};
  auto parsed = triad::parse_config(text, "fuzz.toml");
  if (!parsed) {
    if (parsed.error().message.empty())
      std::abort();
    return 0;
  }
  auto again = triad::parse_config(triad::to_toml(*parsed), "round-trip.toml");
  if (!again || !(*again == *parsed))
    std::abort();
  return 0;
}
