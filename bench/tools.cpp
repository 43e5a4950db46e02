// triad-bench-tools: sandbox start-to-exit latency of a trivial command with the shell tool's
// profile (p50, p99) against plain fork/exec of the same command in the same run; vector search
// recall@10 and queries/s of the HNSW index (with exact re-ranking) against exact search on a
// generated corpus (100k chunks, 20k with --quick); compile calls per second for a small
// translation unit.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "bench/report.hpp"
#include "runtime/main_guard.hpp"
#include "tools/builtin.hpp"
#include "tools/sandbox.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Microseconds to fork, exec /bin/true and reap it, without any isolation.
double fork_exec_us() {
  auto start = clock_type::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    char* envp[] = {nullptr};
    ::execve(argv[0], argv, envp);
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

} // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-tools: sandbox latency against fork/exec, compile calls/s"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  triad::bench::add_common_options(app, common, "fewer repetitions");
  CLI11_PARSE(app, argc, argv);

  const int runs = quick ? 60 : 400;
  std::vector<double> plain, sandboxed;
  for (int i = 0; i < runs; ++i) {
    plain.push_back(fork_exec_us());
    triad::sandbox_request req;
    req.argv = {"/bin/true"};
    req.read_only = triad::shell_read_only(); // what the shell tool binds
    auto start = clock_type::now();
    auto r = triad::run_sandboxed(req);
    if (!r || r->exit_code != 0) {
      std::fprintf(stderr, "triad-bench-tools: sandbox run failed: %s\n",
                   r ? r->err.c_str() : r.error().message.c_str());
      return 1;
    }
    sandboxed.push_back(
        std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
  }
  // Vector search on a generated corpus: chunks of 40 words drawn from a Zipf-like vocabulary;
  // queries are chunks with 30% of their words replaced.
  const std::size_t n_chunks = quick ? 20'000 : 100'000;
  std::mt19937_64 rng{42};
  std::vector<std::string> vocab;
  for (int i = 0; i < 5000; ++i) {
    std::string w;
    for (int c = 0, len = 3 + static_cast<int>(rng() % 6); c < len; ++c)
      w += static_cast<char>('a' + rng() % 26);
    vocab.push_back(w);
  }
  auto word = [&] {
    double u = std::uniform_real_distribution<double>{0, 1}(rng);
    return vocab[static_cast<std::size_t>(std::pow(u, 2.5) *
                                          static_cast<double>(vocab.size() - 1))];
  };
  std::vector<std::vector<std::string>> docs(n_chunks);
  std::vector<float> vectors;
  vectors.reserve(n_chunks * triad::defaults::vector_search::dim);
  for (auto& d : docs) {
    std::string text;
    for (int i = 0; i < 40; ++i) {
      d.push_back(word());
      text += d.back() + " ";
    }
    auto v = triad::embed_text(text);
    vectors.insert(vectors.end(), v.begin(), v.end());
  }
  auto build_start = clock_type::now();
  auto index =
      triad::vector_index::build_vectors(std::move(vectors), triad::defaults::vector_search::dim);
  if (!index) {
    std::fprintf(stderr, "triad-bench-tools: %s\n", index.error().message.c_str());
    return 1;
  }
  double build_s = std::chrono::duration<double>(clock_type::now() - build_start).count();
  const int queries = quick ? 200 : 1000;
  std::vector<std::vector<float>> qs;
  for (int i = 0; i < queries; ++i) {
    auto d = docs[rng() % docs.size()];
    for (auto& w : d)
      if (rng() % 10 < 3)
        w = word();
    std::string text;
    for (auto& w : d)
      text += w + " ";
    qs.push_back(triad::embed_text(text));
  }
  std::size_t agree = 0;
  auto search_start = clock_type::now();
  std::vector<std::vector<triad::vector_hit>> ann;
  for (const auto& q : qs)
    ann.push_back((*index)->search_vector(q.data(), 10));
  double search_s = std::chrono::duration<double>(clock_type::now() - search_start).count();
  for (std::size_t i = 0; i < qs.size(); ++i)
    for (const auto& e : (*index)->exact(qs[i].data(), 10))
      for (const auto& a : ann[i])
        agree += a.chunk == e.chunk;

  triad::tool_registry registry;
  if (auto ok = triad::add_compile_tool(registry); !ok) {
    std::fprintf(stderr, "triad-bench-tools: %s\n", ok.error().message.c_str());
    return 1;
  }
  const int compiles = quick ? 8 : 40;
  auto start = clock_type::now();
  for (int i = 0; i < compiles; ++i) {
    auto out = registry.call("compile", R"({"language": "c", "mode": "object",
      "source": "static int sq(int x) { return x * x; }\nint sum(int n) { int s = 0; for (int i = 0; i < n; ++i) s += sq(i); return s; }\n"})");
    if (!out || !out->details.at("success").as_bool()) {
      std::fprintf(stderr, "triad-bench-tools: compile failed\n");
      return 1;
    }
  }
  double compile_s = std::chrono::duration<double>(clock_type::now() - start).count();

  triad::bench::report out;
  out.quick = quick;
  out.metrics["runs"] = runs;
  out.metrics["sandbox_p50_us"] = triad::bench::percentile(sandboxed, 0.5);
  out.metrics["sandbox_p99_us"] = triad::bench::percentile(sandboxed, 0.99);
  out.metrics["forkexec_p50_us"] = triad::bench::percentile(plain, 0.5);
  out.metrics["forkexec_p99_us"] = triad::bench::percentile(plain, 0.99);
  out.metrics["compile_calls_per_s"] = compiles / compile_s;
  out.metrics["corpus_chunks"] = n_chunks;
  out.metrics["index_build_s"] = build_s;
  out.metrics["queries_per_s"] = queries / search_s;
  out.metrics["recall_at_10"] = static_cast<double>(agree) / (10.0 * queries);
  out.ratios["sandbox_over_forkexec"] =
      triad::bench::percentile(sandboxed, 0.5) / triad::bench::percentile(plain, 0.5);
  return out.finish(json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-tools", argc, argv, run);
}
