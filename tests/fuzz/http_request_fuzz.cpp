// Fuzz target for how triad-node's connections read requests (Beast's parser, the head and body
// limits, and triad's framing check): any bytes must give requests and at most one error, the
// last, with a status and an OpenAI-shaped JSON body; never a crash, hang or exception, and
// never more body bytes than were sent. Built as a libFuzzer binary with -DTRIAD_FUZZ=ON
// (clang), and always as a corpus replayer run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/json/parse.hpp>

#include "server/http_framing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes{reinterpret_cast<const char*>(data), size};
  auto requests = triad::read_requests(bytes, 4096, 1 << 16);
  std::size_t body_bytes = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.error) {
      if (i + 1 != requests.size() || r.error->message.empty() || r.error->status < 400 ||
          r.error->status > 599)
        std::abort();
      boost::system::error_code ec;
      boost::json::parse(triad::to_json(*r.error), ec);
      if (ec)
        std::abort();
      continue;
    }
    if (r.method.empty())
      std::abort();
    body_bytes += r.body.size();
  }
  if (body_bytes > size)
    std::abort();
  return 0;
}
