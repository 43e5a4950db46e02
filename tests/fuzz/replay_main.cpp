// Runs a fuzz target over every file of the corpus directories given on the command line, so
// ctest exercises the target in builds without libFuzzer.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  std::size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(argv[i], ec)) {
      if (!entry.is_regular_file())
        continue;
      std::ifstream in{entry.path(), std::ios::binary};
      std::vector<char> bytes{std::istreambuf_iterator<char>{in}, {}};
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++files;
    }
    if (ec) {
      std::fprintf(stderr, "cannot read corpus directory %s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  std::printf("replayed %zu corpus files\n", files);
  return files > 0 ? 0 : 1;
}
