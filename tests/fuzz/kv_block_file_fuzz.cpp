// Fuzz target for the disk tier's block files: any bytes on disk must give a recovered block
// whose tokens hash to its name, or a rejected (removed) file, and a read must give the checked
// payload or an error value; never a crash, a hang or unchecked data. Built as a libFuzzer
// binary with -DTRIAD_FUZZ=ON (clang), and always as a corpus replayer run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvstore/pool.hpp"

namespace {

constexpr std::size_t block_tokens = 4;
constexpr std::size_t block_bytes = 64;

// A private directory for the one block file under test, removed at exit.
struct scratch {
  scratch()
      : dir(std::filesystem::temp_directory_path() /
            ("triad-kv-fuzz-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
  }
  ~scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path dir;
};

const std::filesystem::path& scratch_dir() {
  static const scratch s;
  return s.dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = scratch_dir();
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    std::filesystem::remove(f.path(), ec);
  // Name the file after the hash its header claims (bytes 24..31), so well-formed inputs get
  // past the name check and exercise the whole parser.
  std::uint64_t claimed = 0;
  if (size >= 32)
    std::memcpy(&claimed, data + 24, sizeof(claimed));
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.kvb", static_cast<unsigned long long>(claimed));
  {
    std::ofstream out{dir / name, std::ios::binary};
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto pool = triad::disk_pool::open(dir, block_tokens, block_bytes, 1 << 20);
  if (!pool) {
    if (pool.error().message.empty())
      std::abort();
    return 0;
  }
  for (const auto& e : (*pool)->recovered()) {
    if (triad::chain_hash(e.parent, e.tokens) != e.hash)
      std::abort(); // a recovered block must be what its name says
    std::vector<std::byte> payload(block_bytes);
    auto r = (*pool)->read(e.hash, payload);
    if (r && triad::block_checksum(payload) != e.checksum)
      std::abort(); // a read that succeeds hands out checked bytes only
    if (!r && r.error().message.empty())
      std::abort();
  }
  if ((*pool)->recovered().size() + (*pool)->damaged_on_open() > 1)
    std::abort(); // one file in, one verdict out
  return 0;
}
