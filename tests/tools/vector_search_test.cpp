#include <cstdlib>
#include <filesystem>

#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include "tools/builtin.hpp"

namespace fs = std::filesystem;

namespace {

// The project's own sources are the real corpus (ctest sets TRIAD_SOURCE_DIR).
fs::path corpus() {
  const char* dir = std::getenv("TRIAD_SOURCE_DIR");
  return fs::path{dir != nullptr ? dir : "."} / "runtime";
}

fs::path scratch(const std::string& name) {
  auto p = fs::temp_directory_path() / ("triad-vs-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(p);
  return p;
}

} // namespace

BOOST_AUTO_TEST_SUITE(vector_search)

BOOST_AUTO_TEST_CASE(a_query_finds_the_file_that_talks_about_it) {
  auto chunks = triad::chunk_corpus(corpus());
  BOOST_REQUIRE_MESSAGE(chunks.has_value(), (chunks ? "" : chunks.error().message));
  BOOST_TEST(chunks->size() > 50u);
  auto index = triad::vector_index::build(std::move(*chunks));
  BOOST_REQUIRE(index.has_value());
  // What runtime/defaults.hpp alone says (its scheduler notes); the config sections name the
  // same keys, so a query of key names alone finds those first.
  auto hits = (*index)->search(
      "work-stealing scheduler moderate sleep request response from a non-actor thread", 5);
  BOOST_REQUIRE(!hits.empty());
  bool found = false;
  for (const auto& h : hits)
    found = found || (*index)->chunks()[h.chunk].file == "defaults.hpp";
  for (const auto& h : hits)
    BOOST_TEST_MESSAGE("hit " << (*index)->chunks()[h.chunk].file << " " << h.score);
  BOOST_TEST(found);
  BOOST_TEST(hits.front().score >= hits.back().score);
}

BOOST_AUTO_TEST_CASE(ann_results_agree_with_exact_search) {
  auto chunks = triad::chunk_corpus(corpus());
  BOOST_REQUIRE(chunks.has_value());
  auto index = triad::vector_index::build(std::move(*chunks));
  BOOST_REQUIRE(index.has_value());
  std::size_t agree = 0, total = 0;
  for (const char* q : {"topology hwloc numa domain", "metrics histogram buckets prometheus",
                        "driver thread bounded queue submit", "toml parse error line column"}) {
    auto v = triad::embed_text(q);
    auto ann = (*index)->search_vector(v.data(), 10);
    auto exact = (*index)->exact(v.data(), 10);
    for (const auto& e : exact) {
      ++total;
      for (const auto& a : ann)
        agree += a.chunk == e.chunk;
    }
  }
  BOOST_TEST(static_cast<double>(agree) / total >= 0.9);
}

BOOST_AUTO_TEST_CASE(the_index_persists_and_reloads_and_rebuilds_when_damaged) {
  auto dir = scratch("index");
  auto first = triad::vector_index::open(corpus(), dir);
  BOOST_REQUIRE_MESSAGE(first.has_value(), (first ? "" : first.error().message));
  BOOST_TEST(fs::exists(dir / "hnsw.bin"));
  auto again = triad::vector_index::open(corpus(), dir);
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST((*again)->size() == (*first)->size());
  auto q = triad::embed_text("placement plan driver core");
  BOOST_TEST((*again)->search_vector(q.data(), 3)[0].chunk ==
             (*first)->search_vector(q.data(), 3)[0].chunk);
  fs::resize_file(dir / "hnsw.bin", 100); // damaged: rebuilt, never used
  auto rebuilt = triad::vector_index::open(corpus(), dir);
  BOOST_REQUIRE(rebuilt.has_value());
  BOOST_TEST((*rebuilt)->size() == (*first)->size());
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(the_tool_returns_scored_locations) {
  auto index = triad::vector_index::build(*triad::chunk_corpus(corpus()));
  BOOST_REQUIRE(index.has_value());
  triad::tool_registry registry;
  BOOST_REQUIRE(triad::add_vector_search_tool(registry, std::move(*index)).has_value());
  auto out = registry.call("vector_search", R"({"query": "seccomp filter", "k": 3})");
  BOOST_REQUIRE(out.has_value());
  const auto& results = out->details.at("results").as_array();
  BOOST_TEST(results.size() == 3u);
  BOOST_TEST(results[0].at("start_line").to_number<std::int64_t>() >= 1);
  BOOST_TEST(!registry.call("vector_search", R"({"query": "x", "k": 99})"));
}

BOOST_AUTO_TEST_CASE(a_missing_corpus_is_an_error_naming_it) {
  auto c = triad::chunk_corpus("/nonexistent/corpus");
  BOOST_REQUIRE(!c);
  BOOST_TEST(c.error().message.find("/nonexistent/corpus") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
