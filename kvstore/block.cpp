#include "kvstore/block.hpp"

namespace triad {

std::string_view to_string(tier t) noexcept {
  switch (t) {
  case tier::device:
    return "device";
  case tier::host:
    return "host";
  case tier::disk:
    return "disk";
  }
  return "unknown";
}

} // namespace triad
