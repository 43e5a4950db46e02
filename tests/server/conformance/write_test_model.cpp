// Writes the conformance run's model file: a small qwen2-architecture GGUF with random weights,
// a byte-level BPE vocabulary with ChatML's control tokens and a ChatML chat template
// (tests/devices/gguf_models.hpp), and prints how many tokens the prompt of a one-message
// conversation is, as the model's own tokenizer counts it.
// Usage: triad-test-write-model PATH MESSAGE [TYPE]   (TYPE: the matmul weights' ggml type,
// f32 unless given: f16, bf16, q8_0, q4_0, q4_K or q6_K)

#include <cstdio>

#include "tests/devices/gguf_models.hpp"
#include "tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s PATH MESSAGE [TYPE]\n", argv[0]);
    return 2;
  }
  triad::test::gguf_spec spec;
  if (argc == 4) {
    bool known = false;
    for (auto t : {triad::ggml_type::f32, triad::ggml_type::f16, triad::ggml_type::bf16,
                   triad::ggml_type::q8_0, triad::ggml_type::q4_0, triad::ggml_type::q4_k,
                   triad::ggml_type::q6_k})
      if (triad::to_string(t) == argv[3]) {
        spec.type = t;
        known = true;
      }
    if (!known) {
      std::fprintf(stderr, "unknown TYPE %s (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)\n", argv[3]);
      return 2;
    }
  }
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
