#include "devices/cpu/detail/widened_matmul.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace triad::detail {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

struct aligned_free {
  void operator()(float* p) const noexcept { std::free(p); }
};

} // namespace

widened_matmul::widened_matmul(dnnl::engine& eng, unsigned k, unsigned n, unsigned tile_columns,
                               tile_layout layout)
    : eng_(&eng)
    , k_(k)
    , n_(n)
    , tile_columns_(tile_columns)
    , layout_(layout) {}

dnnl::memory::desc widened_matmul::tile_desc(unsigned width) const {
  return {{k_, width},
          dt::f32,
          layout_ == tile_layout::k_major ? dnnl::memory::dims{width, 1}
                                          : dnnl::memory::dims{1, k_}};
}

dnnl::matmul::primitive_desc widened_matmul::describe(unsigned m, unsigned width) const {
  dnnl::memory::desc a({m, k_}, dt::f32, tag::ab);
  dnnl::memory::desc c({m, width}, dt::f32, dnnl::memory::dims{n_, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, tile_desc(width), c), *eng_);
}

std::string widened_matmul::kernel(unsigned m) const {
  return describe(m, std::min(n_, tile_columns_)).impl_info_str();
}

float* widened_matmul::tile_scratch(std::size_t floats) {
  thread_local std::unique_ptr<float, aligned_free> tile;
  thread_local std::size_t size = 0;
  if (size < floats) {
    tile.reset(); // the old one goes before the new one is made
    size = 0;
    std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr)
      throw std::bad_alloc();
    tile.reset(p);
    size = floats;
  }
  return tile.get();
}

void widened_matmul::multiply(dnnl::stream& strm, const float* src, const float* tile, float* dst,
                              unsigned m, unsigned first, unsigned width) {
  auto key = std::pair{m, width};
  auto it = primitives_.find(key);
  if (it == primitives_.end())
    it = primitives_.emplace(key, dnnl::matmul(describe(m, width))).first;
  dnnl::memory a({{m, k_}, dt::f32, tag::ab}, *eng_, const_cast<float*>(src));
  dnnl::memory b(tile_desc(width), *eng_, const_cast<float*>(tile));
  dnnl::memory c({{m, width}, dt::f32, dnnl::memory::dims{n_, 1}}, *eng_, dst + first);
  it->second.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  strm.wait();
}

} // namespace triad::detail
