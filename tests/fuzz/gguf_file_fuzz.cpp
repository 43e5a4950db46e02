// Fuzz target for the GGUF reader: any bytes must give a checked file (every tensor's bytes
// inside the image, every metadata value readable through its getter) or an error value that
// names the problem; never a crash, a hang or an allocation the input cannot back. Built as a
// libFuzzer binary with -DTRIAD_FUZZ=ON (clang), and always as a corpus replayer run by ctest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "gguf/file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> image{reinterpret_cast<const std::byte*>(data), size};
  auto file = triad::gguf_file::parse(image, "fuzz.gguf");
  if (!file) {
    if (file.error().message.empty())
      std::abort();
    return 0;
  }
  for (const auto& t : (*file)->tensors()) {
    if (t.bytes.data() < image.data() || t.bytes.data() + t.bytes.size() > image.data() + size)
      std::abort(); // a tensor's bytes must lie inside the image
    if ((*file)->tensor(t.name) != &t)
      std::abort();
    const auto traits = triad::traits_of(t.type);
    if (t.bytes.size() != t.elements / traits.block_elements * traits.block_bytes ||
        t.elements % traits.block_elements != 0)
      std::abort(); // the bytes hold exactly the tensor's values
  }
  for (const auto& key : (*file)->keys()) {
    const auto* v = (*file)->find(key);
    if (v == nullptr)
      std::abort();
    // Exactly the getter of the value's own kind succeeds.
    int readable = static_cast<bool>((*file)->string(key)) +
                   static_cast<bool>((*file)->boolean(key)) +
                   static_cast<bool>((*file)->strings(key)) +
                   static_cast<bool>((*file)->integers(key)) +
                   static_cast<bool>((*file)->numbers(key)) +
                   static_cast<bool>((*file)->number(key));
    if (readable != 1)
      std::abort();
  }
  return 0;
}
