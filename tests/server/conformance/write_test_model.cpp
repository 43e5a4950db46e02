// Writes the conformance run's model file: a small qwen2-architecture GGUF with random weights,
// a byte-level BPE vocabulary with ChatML's control tokens and a ChatML chat template
// (tests/devices/gguf_models.hpp), and prints how many tokens the prompt of a one-message
// conversation is, as the model's own tokenizer counts it.
// Usage: triad-test-write-model PATH MESSAGE

#include <cstdio>

#include "tests/devices/gguf_models.hpp"
#include "tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PATH MESSAGE\n", argv[0]);
    return 2;
  }
  triad::test::gguf_spec spec;
  spec.arch = triad::model_arch::qwen2;
  spec.chat = true;
  spec.bias = true;
  spec.tied = true;
  spec.layers = 2;
  spec.context = 512;
  if (auto ok = triad::test::model_writer(spec).write(argv[1]); !ok) {
    std::fprintf(stderr, "%s\n", ok.error().to_string().c_str());
    return 1;
  }
  auto file = triad::gguf_file::open(argv[1]);
  auto v = file ? triad::vocab::from_gguf(**file) : triad::expected<triad::vocab>{file.error()};
  auto tok = v ? triad::make_tokenizer(*v) : triad::expected<std::unique_ptr<triad::model_tokenizer>>{v.error()};
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.error().to_string().c_str());
    return 1;
  }
  const std::string prompt = std::string{"<|im_start|>user\n"} + argv[2] +
                             "<|im_end|>\n<|im_start|>assistant\n";
  std::printf("%zu\n", (*tok)->encode(prompt, true).size());
  return 0;
}
