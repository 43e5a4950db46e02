// triad-bench-models: triad serving a GGUF model file against llama.cpp, its peer, on the same
// file and the same cores. The bench writes the files itself (random weights, a Llama shape and,
// without --quick, a Qwen shape; f16 and a Q4_K_M-like mix of q4_K and q6_K; a 32K-token
// byte-level BPE vocabulary), then for each file:
//   - greedy identity: the first 32 tokens triad generates from a prompt, against llama.cpp's
//     from the same prompt ids with flash attention off (its attention in f32; with flash
//     attention on, llama.cpp's CPU kernel sums the values in f16 and the full Llama file's
//     tokens part at a near tie: reported beside it);
//   - prefill: tokens/s of one prompt (time to the first token);
//   - decode, batch 1: tokens/s after the first token;
//   - 16 sessions: 16 prompts at once, 32 tokens each, generated tokens/s of all together
//     (triad's continuous batching; llama.cpp's sequences in one context, batched by
//     node-llama-cpp).
// The peer is llama.cpp's prebuilt CPU libraries through npm node-llama-cpp 3.21.1 (installed by
// scripts/test.sh into .cache/llamacpp), run by bench/models_peer.mjs with UV_THREADPOOL_SIZE=1,
// with 1 and 2 llama.cpp threads and its default flash attention ("auto"), and with 2 threads
// and flash attention off; the fastest run per figure is the peer, and the report says which.
// Without the peer the ratios are left out and the report says NOT RUN.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <span>
#include <thread>

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/node.hpp"
#include "bench/report.hpp"
#include "runtime/main_guard.hpp"
#include "tests/devices/gguf_models.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

constexpr std::uint32_t identity_tokens = 32;
constexpr std::size_t sessions = 16;
constexpr std::uint32_t session_tokens = 32;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// A model file the bench writes.
struct model_file {
  std::string label; ///< "llama_f16"
  triad::test::gguf_spec spec;
  std::filesystem::path path;
};

// Prompt text no merge of the test vocabulary applies to (no "he", "ll", " t"): each byte is
// one token for triad and llama.cpp alike, whatever their pre-tokenizers do with it. Variants
// below 84 differ in their first two words (a first word and a stride through the 14), so no
// two share a KV page: triad's prefix cache serves none of them from another (llama.cpp's
// sequences share nothing either).
std::string prompt_text(std::size_t bytes, std::size_t variant) {
  static constexpr std::string_view words[] = {"x0 ", "y1 ", "z2 ", "q3 ", "w4 ", "r5 ", "u6 ",
                                               "i7 ", "o8 ", "p9 ", "a0 ", "s1 ", "d2 ", "f3 "};
  static constexpr std::size_t strides[] = {1, 3, 5, 9, 11, 13}; // coprime with 14
  constexpr std::size_t n = std::size(words);
  const std::size_t stride = strides[(variant / n) % std::size(strides)];
  std::string out;
  for (std::size_t i = variant % n; out.size() < bytes; i += stride)
    out += words[i % n];
  out.resize(bytes);
  return out;
}

// The prompt variant of session `i` in round `round` of the 16-session figure: rounds and the
// single-prompt runs (variants 0-2) use distinct variants.
std::size_t session_variant(std::size_t round, std::size_t i) {
  return 14 * (1 + 2 * round) + i;
}

// What one engine measured on one file.
struct measured {
  std::vector<triad::token> greedy;
  /// The peer's only: its greedy tokens with flash attention on (llama.cpp's default), which
  /// sums attention values in f16; `greedy` is from its f32 attention.
  std::vector<triad::token> greedy_flash;
  double prefill_tps = 0, decode_tps = 0, aggregate_tps = 0;
  std::string how;
};

// -- triad --

// One request's tokens and times, as its callback saw them.
struct traced {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::string error;
  triad::errc code = triad::errc::system_error;
  std::vector<triad::token> tokens;
  std::uint64_t prompt_tokens = 0;
  clock_type::time_point first, last;
};

void submit(triad::node& n, triad::chat_request r, traced& t) {
  n.submit(std::move(r), [&t](const triad::request_event& e) {
    std::lock_guard<std::mutex> g{t.m};
    if (e.kind == triad::request_event::token) {
      if (t.tokens.empty())
        t.first = clock_type::now();
      t.last = clock_type::now();
      t.tokens.push_back(e.tok);
    } else if (e.kind == triad::request_event::done || e.kind == triad::request_event::error) {
      if (e.kind == triad::request_event::error) {
        t.error = e.message;
        t.code = e.code;
      }
      t.prompt_tokens = e.usage.prompt_tokens;
      t.done = true;
      t.cv.notify_all();
    }
  });
}

triad::expected<void> wait(traced& t) {
  std::unique_lock<std::mutex> l{t.m};
  t.cv.wait(l, [&] { return t.done; });
  if (!t.error.empty())
    return triad::make_error(t.code, "triad: " + t.error);
  return {};
}

triad::chat_request completion(const std::string& text, std::uint32_t max_tokens,
                               std::uint32_t forced) {
  triad::chat_request r;
  r.raw_prompt = text;
  r.max_tokens = max_tokens;
  if (forced > 0) // the decode steps are computed as ever; only the choice is forced
    r.script = triad::generation_script{{{forced, std::nullopt}}};
  return r;
}

triad::expected<measured> run_triad(const model_file& f, std::size_t prompt_bytes,
                                    triad::model_dtype dtype, bool greedy_only) {
  auto config = triad::default_config();
  config.model.path = f.path.string();
  config.model.dtype = dtype;
  config.devices.clear();
  triad::device_config d;
  d.name = "cpu0";
  d.role = triad::device_role::both;
  d.memory_mib = 2048;
  config.devices.push_back(d);
  config.orchestration.device_layout = triad::layout::monolithic;
  config.orchestration.device_slots = sessions;
  auto started = triad::node::start(config);
  if (!started)
    return started.error();
  auto& n = **started;
  measured out;
  out.how = "triad " + n.device_reports().front().kernel;

  // Greedy identity.
  {
    traced t;
    submit(n, completion(prompt_text(prompt_bytes, 0), identity_tokens, 0), t);
    if (auto ok = wait(t); !ok)
      return ok.error();
    out.greedy = t.tokens;
  }
  if (greedy_only) {
    n.stop();
    return out;
  }
  // Prefill and decode, best of two (distinct prompts: no prefix cache hit).
  for (std::size_t rep = 1; rep <= 2; ++rep) {
    traced t;
    auto start = clock_type::now();
    submit(n, completion(prompt_text(prompt_bytes, rep), 64, 64), t);
    if (auto ok = wait(t); !ok)
      return ok.error();
    const double ttft = std::chrono::duration<double>(t.first - start).count();
    const double decode = std::chrono::duration<double>(t.last - t.first).count();
    out.prefill_tps = std::max(out.prefill_tps, static_cast<double>(t.prompt_tokens) / ttft);
    out.decode_tps = std::max(out.decode_tps, static_cast<double>(t.tokens.size() - 1) / decode);
  }
  // 16 sessions at once, best of two rounds (each round's prompts its own).
  for (std::size_t round = 0; round < 2; ++round) {
    std::vector<traced> ts(sessions);
    auto start = clock_type::now();
    for (std::size_t i = 0; i < sessions; ++i)
      submit(n,
             completion(prompt_text(64, session_variant(round, i)), session_tokens, session_tokens),
             ts[i]);
    std::size_t produced = 0;
    for (auto& t : ts) {
      if (auto ok = wait(t); !ok)
        return ok.error();
      produced += t.tokens.size();
    }
    out.aggregate_tps =
        std::max(out.aggregate_tps, static_cast<double>(produced) / seconds_since(start));
  }
  n.stop();
  return out;
}

// -- llama.cpp --

// The prompt's ids as triad's raw prompt has them (bos where the model wants one).
triad::expected<std::vector<triad::token>> prompt_ids(const model_file& f,
                                                      const std::string& text) {
  auto file = triad::gguf_file::open(f.path);
  if (!file)
    return file.error();
  auto v = triad::vocab::from_gguf(**file);
  if (!v)
    return v.error();
  const bool bos = v->add_bos && v->bos;
  const auto bos_id = v->bos;
  auto tok = triad::make_tokenizer(std::move(*v));
  if (!tok)
    return tok.error();
  std::vector<triad::token> out;
  if (bos)
    out.push_back(*bos_id);
  (*tok)->encode_to(out, text, false);
  return out;
}

json::array ids_json(const std::vector<triad::token>& ids) {
  json::array a;
  for (auto t : ids)
    a.push_back(t);
  return a;
}

// `s` as one shell word.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

// The node binary: TRIAD_NODE (the test environment's), else `node` on the PATH.
std::string node_binary() {
  const char* n = std::getenv("TRIAD_NODE");
  return n != nullptr && *n != '\0' ? n : "node";
}

// Runs the peer script once; its JSON line, or why not.
triad::expected<json::object> run_peer_once(const std::string& peer_dir, const json::object& job) {
  const std::string script = std::string{TRIAD_SOURCE_DIR} + "/bench/models_peer.mjs";
  const std::string cmd = "UV_THREADPOOL_SIZE=1 " + quoted(node_binary()) + " " + quoted(script) +
                          " " + quoted(peer_dir) + " " + quoted(json::serialize(job)) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr)
    return triad::make_error(triad::errc::io_error, "cannot run node");
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p))
    text.append(buf, n);
  const int status = ::pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto line = text.rfind("{\"prefill_s\"");
  if (rc != 0 || line == std::string::npos)
    return triad::make_error(triad::errc::io_error, "the llama.cpp peer failed (exit " +
                                                        std::to_string(rc) + "): " + text);
  boost::system::error_code ec;
  auto v = json::parse(std::string_view{text}.substr(line), ec);
  if (ec || !v.is_object())
    return triad::make_error(triad::errc::parse_error, "the llama.cpp peer printed: " + text);
  return v.as_object();
}

triad::expected<measured> run_peer(const std::string& peer_dir, const model_file& f,
                                   std::size_t prompt_bytes, bool greedy_only) {
  auto prompt = prompt_ids(f, prompt_text(prompt_bytes, 0));
  if (!prompt)
    return prompt.error();
  json::array session_rounds;
  for (std::size_t round = 0; round < 2; ++round) {
    json::array prompts;
    for (std::size_t i = 0; i < sessions; ++i) {
      auto ids = prompt_ids(f, prompt_text(64, session_variant(round, i)));
      if (!ids)
        return ids.error();
      prompts.push_back(ids_json(*ids));
    }
    session_rounds.push_back(std::move(prompts));
  }
  // llama.cpp's default (flash attention "auto": on for the CPU) at 1 and 2 threads, and at 2
  // threads with flash attention off: its f32 attention, whose tokens the identity check takes.
  struct config {
    int threads;
    bool flash;
  };
  static constexpr config configs[] = {{1, true}, {2, true}, {2, false}};
  static constexpr config greedy_config{1, false};
  measured best;
  for (const config& c : greedy_only ? std::span{&greedy_config, 1} : std::span{configs}) {
    const int threads = c.threads;
    json::object job{{"model", f.path.string()},
                     {"threads", threads},
                     {"flash_attention", c.flash ? json::value("auto") : json::value(false)},
                     {"prompt", ids_json(*prompt)},
                     {"generate", greedy_only ? identity_tokens : 64},
                     {"sessions", greedy_only ? 0 : sessions},
                     {"session_rounds", session_rounds},
                     {"session_generate", session_tokens},
                     {"context", 1024}};
    auto r = run_peer_once(peer_dir, job);
    if (!r)
      return r.error();
    measured m;
    for (const auto& t : r->at("tokens").as_array())
      if (m.greedy.size() < identity_tokens)
        m.greedy.push_back(static_cast<triad::token>(t.to_number<std::int64_t>()));
    if (greedy_only)
      return m;
    (c.flash ? best.greedy_flash : best.greedy) = m.greedy;
    m.prefill_tps = static_cast<double>(prompt->size()) / r->at("prefill_s").to_number<double>();
    m.decode_tps = r->at("decoded").to_number<double>() / r->at("decode_s").to_number<double>();
    m.aggregate_tps =
        r->at("aggregate_tokens").to_number<double>() / r->at("aggregate_s").to_number<double>();
    m.how = std::string{r->at("backend").as_string()};
    std::printf("  llama.cpp, %d thread(s), flash attention %s: prefill %.1f tok/s, decode %.1f "
                "tok/s, 16 sessions %.1f tok/s\n",
                threads, c.flash ? "auto" : "off", m.prefill_tps, m.decode_tps, m.aggregate_tps);
    // The faster configuration per figure: llama.cpp at its best.
    if (best.how.empty()) {
      best.prefill_tps = m.prefill_tps;
      best.decode_tps = m.decode_tps;
      best.aggregate_tps = m.aggregate_tps;
      best.how = m.how;
    } else {
      if (m.prefill_tps > best.prefill_tps)
        best.prefill_tps = m.prefill_tps;
      if (m.decode_tps > best.decode_tps)
        best.decode_tps = m.decode_tps, best.how = m.how;
      best.aggregate_tps = std::max(best.aggregate_tps, m.aggregate_tps);
    }
  }
  return best;
}

// How many leading tokens `a` and `b` share.
std::size_t identical_prefix(const std::vector<triad::token>& a,
                             const std::vector<triad::token>& b) {
  const auto n = std::min(a.size(), b.size());
  return static_cast<std::size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
      a.begin());
}

// -- the files --

model_file make_file(const std::filesystem::path& dir, bool qwen, bool quantized, bool quick) {
  model_file f;
  auto& s = f.spec;
  s.chat = true;
  s.vocab_pad = 32000;
  s.context = 2048;
  s.layers = quick ? 8 : 12;
  s.hidden = 768;
  s.heads = 12;
  s.head_dim = 64;
  s.ffn = 2048;
  if (qwen) {
    s.arch = triad::model_arch::qwen2;
    s.family = triad::test::chat_family::chatml;
    s.bias = true;
    s.tied = true;
    s.hidden = 1024; // whole q4_K blocks per row (Qwen2.5-0.5B's 896 are not)
    s.heads = 16;
    s.kv_heads = 2;
    s.ffn = 2816;
  } else {
    s.arch = triad::model_arch::llama;
    s.family = triad::test::chat_family::llama3;
    s.kv_heads = 4;
  }
  if (quantized) {
    s.type = triad::ggml_type::q4_k;
    s.wide_type = triad::ggml_type::q6_k;
  } else {
    s.type = triad::ggml_type::f16;
  }
  f.label = std::string{qwen ? "qwen" : "llama"} + (quantized ? "_q4_k_m" : "_f16");
  f.path = dir / ("triad-bench-models-" + std::to_string(::getpid()) + "-" + f.label + ".gguf");
  return f;
}

// Parameters of a spec, for the report.
double parameters(const triad::test::gguf_spec& s) {
  const double q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const double layer = s.hidden * (q + 2 * kv) + q * s.hidden + 3.0 * s.hidden * s.ffn;
  return s.layers * layer + s.vocab_pad * s.hidden * (s.tied ? 1.0 : 2.0);
}

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-models: triad against llama.cpp on the same GGUF files"};
  triad::bench::common_options common;
  triad::bench::add_common_options(app, common,
                                   "the Llama shape only (unless --only), 8 layers, shorter "
                                   "prompts");
  std::string peer_dir = std::string{TRIAD_SOURCE_DIR} + "/.cache/llamacpp";
  app.add_option("--peer", peer_dir,
                 "where npm installed node-llama-cpp (default: .cache/llamacpp)");
  std::string only;
  app.add_option("--only", only,
                 "run only the file with this label (llama_f16, llama_q4_k_m, "
                 "qwen_f16, qwen_q4_k_m)");
  std::string dir = std::filesystem::temp_directory_path().string();
  app.add_option("--dir", dir, "where the model files are written (and removed after)");
  unsigned greedy_check = 0;
  app.add_option("--greedy-check", greedy_check,
                 "only check greedy identity with f32 compute: exit 1 unless the first N tokens "
                 "(at most 32) are llama.cpp's, 77 without the peer (a test; no figures)")
      ->check(CLI::Range(1u, identity_tokens));
  CLI11_PARSE(app, argc, argv);
  triad::bench::report rep;
  rep.quick = common.quick;
  const std::size_t prompt_bytes = common.quick ? 256 : 512;

  const bool peer =
      std::filesystem::exists(peer_dir + "/node_modules/node-llama-cpp/package.json") &&
      std::filesystem::exists(peer_dir + "/node_modules/@node-llama-cpp/linux-x64/package.json") &&
      std::system((quoted(node_binary()) + " --version > /dev/null 2>&1").c_str()) == 0;
  if (!peer)
    std::printf("triad-bench-models: llama.cpp peer NOT RUN: no node (%s) or no node-llama-cpp "
                "with its x64 binaries under %s (scripts/test.sh installs it); %s\n",
                node_binary().c_str(), peer_dir.c_str(),
                greedy_check > 0 ? "the check is skipped" : "triad's figures only");
  if (!peer && greedy_check > 0)
    return 77; // ctest reports the check skipped
  rep.metrics["peer_run"] = peer;

  std::vector<model_file> files;
  for (bool qwen : {false, true}) {
    if (qwen && common.quick && only.empty()) // --only picks from every file
      continue;
    for (bool quantized : {false, true})
      files.push_back(make_file(dir, qwen, quantized, common.quick));
  }
  if (!only.empty()) {
    std::erase_if(files, [&](const model_file& f) { return f.label != only; });
    if (files.empty()) {
      std::fprintf(stderr,
                   "triad-bench-models: --only %s: no such file (llama_f16, "
                   "llama_q4_k_m, qwen_f16, qwen_q4_k_m)\n",
                   only.c_str());
      return 2;
    }
  }
  double worst_decode = 1e30, worst_prefill = 1e30, worst_aggregate = 1e30;
  for (auto& f : files) {
    std::printf("%s: %.0fM parameters, writing %s\n", f.label.c_str(), parameters(f.spec) / 1e6,
                f.path.c_str());
    auto written = triad::test::model_writer(f.spec).write(f.path);
    if (!written) {
      std::fprintf(stderr, "triad-bench-models: %s\n", written.error().to_string().c_str());
      return 1;
    }
    struct remove_after {
      std::filesystem::path p;
      ~remove_after() {
        std::error_code ec;
        std::filesystem::remove(p, ec);
      }
    } cleanup{f.path};
    rep.metrics[f.label + "_file_mib"] =
        static_cast<double>(std::filesystem::file_size(f.path)) / (1 << 20);
    if (greedy_check > 0) {
      auto mine = run_triad(f, prompt_bytes, triad::model_dtype::f32, true);
      auto theirs = mine ? run_peer(peer_dir, f, prompt_bytes, true)
                         : triad::expected<measured>{mine.error()};
      if (!theirs) {
        std::fprintf(stderr, "triad-bench-models: %s: %s\n", f.label.c_str(),
                     theirs.error().to_string().c_str());
        return 1;
      }
      const std::size_t same = identical_prefix(mine->greedy, theirs->greedy);
      // Where triad stopped at an end token (llama.cpp's evaluation does not stop), the tokens
      // up to and with it are what must agree.
      const std::size_t needed = std::min<std::size_t>(greedy_check, mine->greedy.size());
      std::printf("  greedy, f32: the first %zu of triad's %zu tokens are llama.cpp's (needed: "
                  "%zu)\n",
                  same, mine->greedy.size(), needed);
      if (needed == 0 || same < needed) {
        auto list = [](const std::vector<triad::token>& ids) {
          std::string out;
          for (auto t : ids)
            out += std::to_string(t) + " ";
          return out;
        };
        std::printf("  triad:     %s\n  llama.cpp: %s\n", list(mine->greedy).c_str(),
                    list(theirs->greedy).c_str());
        return 1;
      }
      continue;
    }
    auto t = run_triad(f, prompt_bytes, triad::model_dtype::automatic, false);
    if (!t) {
      std::fprintf(stderr, "triad-bench-models: %s: %s\n", f.label.c_str(),
                   t.error().to_string().c_str());
      return 1;
    }
    std::printf("  %s: prefill %.1f tok/s, decode %.1f tok/s, 16 sessions %.1f tok/s\n",
                t->how.c_str(), t->prefill_tps, t->decode_tps, t->aggregate_tps);
    rep.metrics[f.label + "_triad_prefill_tps"] = t->prefill_tps;
    rep.metrics[f.label + "_triad_decode_tps"] = t->decode_tps;
    rep.metrics[f.label + "_triad_aggregate_16_tps"] = t->aggregate_tps;
    rep.metrics[f.label + "_triad_kernel"] = t->how;
    if (!peer)
      continue;
    auto l = run_peer(peer_dir, f, prompt_bytes, false);
    if (!l) {
      std::fprintf(stderr, "triad-bench-models: %s: %s\n", f.label.c_str(),
                   l.error().to_string().c_str());
      return 1;
    }
    rep.metrics[f.label + "_llamacpp_prefill_tps"] = l->prefill_tps;
    rep.metrics[f.label + "_llamacpp_decode_tps"] = l->decode_tps;
    rep.metrics[f.label + "_llamacpp_aggregate_16_tps"] = l->aggregate_tps;
    rep.metrics[f.label + "_llamacpp_fastest_decode"] = l->how;
    std::size_t same = identical_prefix(t->greedy, l->greedy);
    rep.metrics[f.label + "_greedy_identical_tokens_served_dtype"] = same;
    std::printf("  greedy, served dtype: the first %zu of %u tokens identical\n", same,
                identity_tokens);
    // The file's weights exactly (f16 and the quantized blocks decode to f32 without loss).
    auto exact = run_triad(f, prompt_bytes, triad::model_dtype::f32, true);
    if (!exact) {
      std::fprintf(stderr, "triad-bench-models: %s: %s\n", f.label.c_str(),
                   exact.error().to_string().c_str());
      return 1;
    }
    same = identical_prefix(exact->greedy, l->greedy);
    rep.metrics[f.label + "_greedy_identical_tokens_f32"] = same;
    std::printf("  greedy, f32: the first %zu of %u tokens identical\n", same, identity_tokens);
    same = identical_prefix(exact->greedy, l->greedy_flash);
    rep.metrics[f.label + "_greedy_identical_tokens_f32_vs_flash_attention"] = same;
    std::printf("  greedy, f32, against llama.cpp with flash attention (f16 sums of values): the "
                "first %zu of %u tokens identical\n",
                same, identity_tokens);
    const double decode = t->decode_tps / l->decode_tps;
    const double prefill = t->prefill_tps / l->prefill_tps;
    const double aggregate = t->aggregate_tps / l->aggregate_tps;
    rep.ratios["decode_over_llamacpp_batch1_" + f.label] = decode;
    rep.ratios["prefill_over_llamacpp_" + f.label] = prefill;
    rep.ratios["aggregate_over_llamacpp_16_sessions_" + f.label] = aggregate;
    worst_decode = std::min(worst_decode, decode);
    worst_prefill = std::min(worst_prefill, prefill);
    worst_aggregate = std::min(worst_aggregate, aggregate);
  }
  if (greedy_check > 0)
    return 0;
  if (peer) { // the headline ratios: the worst file's
    rep.ratios["decode_over_llamacpp_batch1"] = worst_decode;
    rep.ratios["prefill_over_llamacpp"] = worst_prefill;
    rep.ratios["aggregate_over_llamacpp_16_sessions"] = worst_aggregate;
  }
  return rep.finish(common.json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-models", argc, argv, run);
}
