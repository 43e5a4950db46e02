// triad-bench-grammar: token masks of a typical tool's JSON Schema (issue #27). A tool-call
// document is generated token by token as a model would, each step asking the mask of the
// grammar's state; the mask time per token is reported cold (a new grammar: its automaton and
// masks are built as it goes) and warm (the next turn's call with the same tools, as an agent
// sends them every turn, other values: the mask cache answers the states seen before).
// Vocabularies: triad's byte tokenizer (320 ids), and SYNTHETIC vocabularies of 32000, 128256 and
// 151936 ids (every byte, then random pieces of 2-9 characters of letters, digits, spaces and JSON
// punctuation, as BPE vocabularies' pieces are); real vocabularies are not read yet. Not yet on the
// serving path (issue #27 continues).

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>

#include "bench/report.hpp"
#include "devices/tokenizer.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/main_guard.hpp"

namespace {

using namespace triad::grammar;
using clock_type = std::chrono::steady_clock;

// A tool's parameters as agent frameworks declare them: 7 properties, enums, a nested object,
// an array, required and optional members.
constexpr std::string_view tool_schema = R"({
  "type": "object",
  "properties": {
    "location": {"type": "string", "description": "city and country"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
    "days": {"type": "integer"},
    "include_hourly": {"type": "boolean"},
    "options": {"type": "object",
                "properties": {"language": {"type": "string"},
                               "detail": {"enum": ["low", "medium", "high"]},
                               "max_results": {"type": "integer"}},
                "required": ["language", "detail"], "additionalProperties": false},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "note": {"type": ["string", "null"]}
  },
  "required": ["location", "unit", "options"],
  "additionalProperties": false
})";

// The first call of a turn, and the next turn's (other values, other members).
constexpr std::string_view first_call =
    R"({"location":"San Francisco, CA","unit":"celsius","days":5,"include_hourly":true,)"
    R"("options":{"language":"en","detail":"high","max_results":10},"tags":["weather",)"
    R"("forecast"],"note":null})";
constexpr std::string_view next_call =
    R"({"location":"Lyon, France","unit":"kelvin","days":12,"options":{"language":"fr",)"
    R"("detail":"low"},"tags":[],"note":"bring an umbrella, 2 days"})";

std::vector<std::string> byte_vocabulary() {
  std::vector<std::string> v;
  triad::tokenizer t;
  for (triad::token id = 0; id < 320; ++id)
    v.push_back(triad::tokenizer::is_special(id) ? std::string{} : t.decode(id));
  return v;
}

std::vector<std::string> synthetic_vocabulary(std::size_t size) {
  std::vector<std::string> v;
  for (int c = 0; c < 256; ++c)
    v.push_back(std::string(1, static_cast<char>(c)));
  std::mt19937 rng{42};
  const std::string alphabet =
      "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz      ABCDEFGHIJKLMNOP0123456789"
      "{}[]\",:._-";
  while (v.size() < size) {
    std::string t;
    const std::size_t n = 2 + rng() % 8;
    for (std::size_t j = 0; j < n; ++j)
      t += alphabet[rng() % alphabet.size()];
    v.push_back(std::move(t));
  }
  return v;
}

// Microseconds per token to generate `document` through `cache`: at each step the mask of the
// state, then the longest allowed token that continues the document.
double generate(std::string_view document, mask_cache& cache, const token_index& vocab,
                const std::vector<std::string>& bytes, std::size_t& tokens) {
  matcher m{cache.machine()};
  std::size_t at = 0;
  tokens = 0;
  double seconds = 0;
  while (at < document.size()) {
    const auto start = clock_type::now();
    const auto mask = cache.at(m);
    seconds += std::chrono::duration<double>(clock_type::now() - start).count();
    std::size_t best = 0;
    for (std::uint32_t t = 0; t < vocab.size(); ++t)
      if (allowed(*mask, t) && bytes[t].size() > best &&
          document.substr(at, bytes[t].size()) == bytes[t])
        best = bytes[t].size();
    if (best == 0 || !m.accept(document.substr(at, best))) {
      std::fprintf(stderr, "triad-bench-grammar: no allowed token continues the document at %zu\n",
                   at);
      std::exit(1);
    }
    at += best;
    ++tokens;
  }
  return seconds * 1e6 / static_cast<double>(tokens);
}

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-grammar: token masks of a tool's JSON Schema"};
  triad::bench::common_options common;
  triad::bench::add_common_options(app, common, "the byte and 32000-id vocabularies only");
  CLI11_PARSE(app, argc, argv);
  triad::bench::report rep;
  rep.quick = common.quick;
  auto g = from_json_schema(boost::json::parse(tool_schema));
  if (!g) {
    std::fprintf(stderr, "triad-bench-grammar: %s\n", g.error().to_string().c_str());
    return 1;
  }
  const auto grammar_ptr = std::make_shared<const grammar>(std::move(*g));
  std::vector<std::size_t> sizes{320, 32000};
  if (!common.quick)
    sizes.insert(sizes.end(), {128256, 151936});
  for (const std::size_t size : sizes) {
    auto bytes = size == 320 ? byte_vocabulary() : synthetic_vocabulary(size);
    const std::uint32_t end = size == 320 ? triad::tokenizer::eos : 0;
    auto vocab = std::make_shared<const token_index>(bytes, std::vector<std::uint32_t>{end});
    mask_cache cache{std::make_shared<automaton>(grammar_ptr), vocab};
    std::size_t tokens = 0;
    std::size_t next_tokens = 0;
    const double cold = generate(first_call, cache, *vocab, bytes, tokens);
    const double warm = generate(next_call, cache, *vocab, bytes, next_tokens);
    const std::string n = std::to_string(size);
    std::printf("vocabulary %zu (%s): mask %.1f us per token cold (%zu tokens), %.2f warm (%zu "
                "tokens); %zu automaton states\n",
                size, size == 320 ? "byte tokenizer" : "SYNTHETIC", cold, tokens, warm, next_tokens,
                cache.machine()->states());
    rep.metrics["mask_us_per_token_cold_" + n] = cold;
    rep.metrics["mask_us_per_token_" + n] = warm;
    rep.metrics["tokens_" + n] = tokens + next_tokens;
    rep.metrics["vocabulary_" + n] = size == 320 ? "byte tokenizer" : "synthetic";
  }
  return rep.finish(common.json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-grammar", argc, argv, run);
}
