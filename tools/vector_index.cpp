#include "tools/vector_index.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <hnswlib/hnswlib.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <xxhash.h>

namespace triad {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

void normalise(float* v, std::size_t n) {
  double norm = 0;
  for (std::size_t i = 0; i < n; ++i)
    norm += static_cast<double>(v[i]) * v[i];
  if (norm > 0)
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<float>(v[i] / std::sqrt(norm));
}

bool looks_like_text(const std::string& data) {
  return data.find('\0') == std::string::npos;
}

} // namespace

std::vector<float> embed_text(std::string_view text, std::size_t dim) {
  std::vector<float> v(dim, 0.0f);
  std::map<std::string, int> counts;
  std::string word;
  auto flush = [&] {
    if (word.empty())
      return;
    ++counts["w:" + word];
    std::string padded = "#" + word + "#";
    for (std::size_t i = 0; i + 3 <= padded.size(); ++i)
      ++counts["t:" + padded.substr(i, 3)];
    word.clear();
  };
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else
      flush();
  }
  flush();
  // log(1 + tf) weights: a signed bucket per feature, added tf-weighted.
  for (const auto& [feature, n] : counts) {
    auto h = XXH64(feature.data(), feature.size(), 0x7417);
    auto bucket = static_cast<std::size_t>(h % dim);
    float w = std::log1p(static_cast<float>(n)) * (feature[0] == 'w' ? 2.0f : 1.0f);
    v[bucket] += (h >> 63) != 0 ? w : -w;
  }
  normalise(v.data(), dim);
  return v;
}

expected<std::vector<text_chunk>> chunk_corpus(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return make_error(errc::not_found,
                      "vector_search: corpus '" + root.string() + "' is not a directory");
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    auto name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory())
        it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->file_size() <= (4u << 20))
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  std::vector<text_chunk> out;
  const auto step = defaults::vector_search::chunk_lines - defaults::vector_search::chunk_overlap;
  for (const auto& file : files) {
    std::ifstream in{file, std::ios::binary};
    std::stringstream buf;
    buf << in.rdbuf();
    auto data = buf.str();
    if (!looks_like_text(data))
      continue;
    std::vector<std::string> lines;
    std::istringstream ls{data};
    for (std::string line; std::getline(ls, line);)
      lines.push_back(line);
    auto rel = fs::relative(file, root).string();
    for (std::size_t first = 0; first < lines.size(); first += step) {
      auto last = std::min(lines.size(), first + defaults::vector_search::chunk_lines);
      text_chunk c;
      c.file = rel;
      c.start_line = static_cast<std::uint32_t>(first + 1);
      c.end_line = static_cast<std::uint32_t>(last);
      for (auto i = first; i < last; ++i)
        c.text += lines[i] + "\n";
      out.push_back(std::move(c));
      if (last == lines.size())
        break;
    }
  }
  return out;
}

struct vector_index::impl {
  std::unique_ptr<hnswlib::InnerProductSpace> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> hnsw;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable std::mutex rerank_mutex; // the stream and primitive cache are not thread-safe
  mutable dnnl::stream stream{engine};
  mutable std::map<std::size_t, dnnl::matmul> rerank; // by candidate count
};

vector_index::vector_index()
    : impl_(std::make_unique<impl>()) {}
vector_index::~vector_index() = default;

expected<std::unique_ptr<vector_index>> vector_index::build_vectors(std::vector<float> vectors,
                                                                    std::size_t dim) {
  if (dim == 0 || vectors.empty() || vectors.size() % dim != 0)
    return make_error(errc::invalid_argument, "vector_search: " + std::to_string(vectors.size()) +
                                                  " floats are not rows of " + std::to_string(dim));
  std::unique_ptr<vector_index> self{new vector_index};
  self->dim_ = dim;
  self->count_ = vectors.size() / dim;
  self->vectors_ = std::move(vectors);
  try {
    self->impl_->space = std::make_unique<hnswlib::InnerProductSpace>(dim);
    self->impl_->hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(
        self->impl_->space.get(), self->count_, defaults::vector_search::hnsw_m,
        defaults::vector_search::ef_construction);
    for (std::size_t i = 0; i < self->count_; ++i)
      self->impl_->hnsw->addPoint(self->vectors_.data() + i * dim, i);
    self->impl_->hnsw->setEf(defaults::vector_search::ef_search);
  } catch (const std::exception& e) {
    return make_error(errc::system_error, std::string{"vector_search: hnswlib: "} + e.what());
  }
  return self;
}

expected<std::unique_ptr<vector_index>> vector_index::build(std::vector<text_chunk> chunks) {
  if (chunks.empty())
    return make_error(errc::invalid_argument, "vector_search: the corpus has no text chunks");
  const auto dim = defaults::vector_search::dim;
  std::vector<float> vectors;
  vectors.reserve(chunks.size() * dim);
  for (const auto& c : chunks) {
    auto v = embed_text(c.file + "\n" + c.text, dim);
    vectors.insert(vectors.end(), v.begin(), v.end());
  }
  auto self = build_vectors(std::move(vectors), dim);
  if (!self)
    return self.error();
  (*self)->chunks_ = std::move(chunks);
  return self;
}

namespace {

// Paths, sizes and modification times of the corpus, hashed: changes mean a rebuild.
std::string fingerprint_of(const fs::path& root) {
  std::string all;
  std::error_code ec;
  std::vector<std::string> rows;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec))
    if (it->is_regular_file())
      rows.push_back(fs::relative(it->path(), root).string() + ":" +
                     std::to_string(it->file_size()) + ":" +
                     std::to_string(it->last_write_time().time_since_epoch().count()));
  std::sort(rows.begin(), rows.end());
  for (const auto& r : rows)
    all += r + "\n";
  return std::to_string(XXH64(all.data(), all.size(), 1)) + ":" + std::to_string(rows.size());
}

} // namespace

expected<std::unique_ptr<vector_index>> vector_index::open(const fs::path& root,
                                                           const fs::path& dir) {
  auto fp = fingerprint_of(root);
  std::ifstream meta{dir / "chunks.json"};
  if (meta) {
    std::stringstream buf;
    buf << meta.rdbuf();
    boost::system::error_code ec;
    auto doc = json::parse(buf.str(), ec);
    if (!ec && doc.is_object() && doc.as_object().contains("fingerprint") &&
        doc.at("fingerprint").as_string() == fp) {
      std::vector<text_chunk> chunks;
      for (const auto& c : doc.at("chunks").as_array())
        chunks.push_back({std::string{c.at("file").as_string()},
                          static_cast<std::uint32_t>(c.at("start").to_number<std::int64_t>()),
                          static_cast<std::uint32_t>(c.at("end").to_number<std::int64_t>()),
                          std::string{c.at("text").as_string()}});
      std::unique_ptr<vector_index> self{new vector_index};
      self->dim_ = defaults::vector_search::dim;
      self->count_ = chunks.size();
      for (const auto& c : chunks) {
        auto v = embed_text(c.file + "\n" + c.text, self->dim_);
        self->vectors_.insert(self->vectors_.end(), v.begin(), v.end());
      }
      self->chunks_ = std::move(chunks);
      self->fingerprint_ = fp;
      try {
        self->impl_->space = std::make_unique<hnswlib::InnerProductSpace>(self->dim_);
        self->impl_->hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(
            self->impl_->space.get(), (dir / "hnsw.bin").string());
        if (self->impl_->hnsw->cur_element_count != self->count_)
          throw std::runtime_error("index holds " +
                                   std::to_string(self->impl_->hnsw->cur_element_count) +
                                   " vectors, chunks " + std::to_string(self->count_));
        self->impl_->hnsw->setEf(defaults::vector_search::ef_search);
        return self;
      } catch (const std::exception&) {
        // A damaged or mismatched index file is rebuilt below, never used.
      }
    }
  }
  auto chunks = chunk_corpus(root);
  if (!chunks)
    return chunks.error();
  auto built = build(std::move(*chunks));
  if (!built)
    return built.error();
  (*built)->fingerprint_ = fp;
  if (auto ok = (*built)->save(dir); !ok)
    return ok.error();
  return built;
}

expected<void> vector_index::save(const fs::path& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(errc::io_error,
                      "vector_search: cannot create '" + dir.string() + "': " + ec.message());
  try {
    impl_->hnsw->saveIndex((dir / "hnsw.bin").string());
  } catch (const std::exception& e) {
    return make_error(errc::io_error, std::string{"vector_search: saving the index: "} + e.what());
  }
  json::array chunks;
  for (const auto& c : chunks_)
    chunks.push_back(json::object{
        {"file", c.file}, {"start", c.start_line}, {"end", c.end_line}, {"text", c.text}});
  std::ofstream out{dir / "chunks.json"};
  out << json::serialize(
      json::object{{"fingerprint", fingerprint_}, {"chunks", std::move(chunks)}});
  if (!out)
    return make_error(errc::io_error,
                      "vector_search: cannot write '" + (dir / "chunks.json").string() + "'");
  return {};
}

std::vector<vector_hit> vector_index::search(std::string_view query, std::size_t k) const {
  auto q = embed_text(query, dim_);
  return search_vector(q.data(), k);
}

std::vector<vector_hit> vector_index::search_vector(const float* query, std::size_t k) const {
  if (count_ == 0 || k == 0)
    return {};
  std::size_t pool = std::min(count_, std::max(k, defaults::vector_search::rerank_pool));
  auto found = impl_->hnsw->searchKnn(query, pool);
  std::vector<std::size_t> ids;
  while (!found.empty()) {
    ids.push_back(found.top().second);
    found.pop();
  }
  // Exact re-ranking: scores = candidates [n x dim] . query, one oneDNN matmul.
  const std::size_t n = ids.size();
  std::vector<float> cand(n * dim_), scores(n);
  for (std::size_t i = 0; i < n; ++i)
    std::copy_n(vectors_.data() + ids[i] * dim_, dim_, cand.data() + i * dim_);
  {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    auto m = static_cast<dnnl::memory::dim>(n), d = static_cast<dnnl::memory::dim>(dim_);
    std::lock_guard guard{impl_->rerank_mutex};
    auto it = impl_->rerank.find(n);
    if (it == impl_->rerank.end()) {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc({{m, d}, dt::f32, tag::ab},
                                                         {{d, 1}, dt::f32, tag::ab},
                                                         {{m, 1}, dt::f32, tag::ab}),
                                      impl_->engine);
      it = impl_->rerank.emplace(n, dnnl::matmul(pd)).first;
    }
    dnnl::memory a({{m, d}, dt::f32, tag::ab}, impl_->engine, cand.data());
    dnnl::memory b({{d, 1}, dt::f32, tag::ab}, impl_->engine, const_cast<float*>(query));
    dnnl::memory c({{m, 1}, dt::f32, tag::ab}, impl_->engine, scores.data());
    it->second.execute(impl_->stream,
                       {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    impl_->stream.wait();
  }
  std::vector<vector_hit> hits;
  for (std::size_t i = 0; i < n; ++i)
    hits.push_back({ids[i], scores[i]});
  std::sort(hits.begin(), hits.end(), [](const auto& a, const auto& b) {
    return a.score != b.score ? a.score > b.score : a.chunk < b.chunk;
  });
  hits.resize(std::min(k, hits.size()));
  return hits;
}

std::vector<vector_hit> vector_index::exact(const float* query, std::size_t k) const {
  std::vector<vector_hit> hits(count_);
  for (std::size_t i = 0; i < count_; ++i) {
    float s = 0;
    const float* v = vectors_.data() + i * dim_;
    for (std::size_t j = 0; j < dim_; ++j)
      s += v[j] * query[j];
    hits[i] = {i, s};
  }
  auto kk = std::min(k, hits.size());
  std::partial_sort(hits.begin(), hits.begin() + static_cast<std::ptrdiff_t>(kk), hits.end(),
                    [](const auto& a, const auto& b) {
                      return a.score != b.score ? a.score > b.score : a.chunk < b.chunk;
                    });
  hits.resize(kk);
  return hits;
}

} // namespace triad
