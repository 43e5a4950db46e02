#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"
#include "tools/defaults.hpp"

namespace triad {

/// Embeds text deterministically, without a model: lower-cased words and character trigrams are
/// hashed (xxHash64) into `dim` signed buckets with log(1 + tf) weights, then L2-normalised, so
/// texts sharing words and spellings have a high inner product.
std::vector<float> embed_text(std::string_view text,
                              std::size_t dim = defaults::vector_search::dim);

/// A piece of a corpus file.
struct text_chunk {
  std::string file;             ///< path relative to the corpus root
  std::uint32_t start_line = 0; ///< first line (1-based)
  std::uint32_t end_line = 0;   ///< last line
  std::string text;             ///< the lines
};

/// Splits every text file under `root` into overlapping chunks of lines (files that are not
/// valid text, over 4 MiB, or hidden are skipped).
expected<std::vector<text_chunk>> chunk_corpus(const std::filesystem::path& root);

/// A hit: the chunk's index and its inner-product score.
struct vector_hit {
  std::size_t chunk = 0; ///< index into the index's chunks
  float score = 0;       ///< inner product of normalised embeddings (cosine)
};

/// An approximate nearest-neighbour index (hnswlib HNSW, inner product) over embedded chunks,
/// with exact re-ranking of the ANN candidates as one oneDNN matmul.
class vector_index {
public:
  /// Embeds and indexes the chunks.
  static expected<std::unique_ptr<vector_index>> build(std::vector<text_chunk> chunks);
  /// Indexes given vectors (row-major, `dim` floats each, normalised); for benchmarks.
  static expected<std::unique_ptr<vector_index>> build_vectors(std::vector<float> vectors,
                                                               std::size_t dim);
  /// Loads an index saved under `dir` when its corpus fingerprint matches `root`, else builds it
  /// from `root` and saves it there.
  static expected<std::unique_ptr<vector_index>> open(const std::filesystem::path& root,
                                                      const std::filesystem::path& dir);
  ~vector_index();

  /// Writes the index and its chunks under `dir`.
  expected<void> save(const std::filesystem::path& dir) const;
  /// The k best chunks for a text query: ANN candidates, re-ranked exactly.
  std::vector<vector_hit> search(std::string_view query, std::size_t k) const;
  /// The k best for a query vector: ANN candidates, re-ranked exactly.
  std::vector<vector_hit> search_vector(const float* query, std::size_t k) const;
  /// The exact k best by brute force (for recall measurements).
  std::vector<vector_hit> exact(const float* query, std::size_t k) const;
  /// The chunks, by index.
  const std::vector<text_chunk>& chunks() const noexcept { return chunks_; }
  /// Number of indexed vectors.
  std::size_t size() const noexcept { return count_; }
  /// Embedding width.
  std::size_t dim() const noexcept { return dim_; }
  /// The fingerprint of the corpus it was built from (empty for build / build_vectors).
  const std::string& fingerprint() const noexcept { return fingerprint_; }

private:
  struct impl;
  vector_index();

  std::size_t dim_ = 0;
  std::size_t count_ = 0;
  std::vector<float> vectors_;
  std::vector<text_chunk> chunks_;
  std::string fingerprint_;
  std::unique_ptr<impl> impl_;
};

} // namespace triad
