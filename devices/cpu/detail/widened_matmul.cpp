#include "devices/cpu/detail/widened_matmul.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "devices/cpu/detail/kernels.hpp"

namespace triad::detail {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

struct aligned_free {
  void operator()(void* p) const noexcept { std::free(p); }
};

} // namespace

widened_matmul::widened_matmul(dnnl::engine& eng, unsigned k, unsigned n, unsigned tile_columns,
                               tile_layout layout, bool bf16)
    : eng_(&eng)
    , k_(k)
    , n_(n)
    , tile_columns_(tile_columns)
    , layout_(layout)
    , bf16_(bf16) {}

dnnl::memory::desc widened_matmul::tile_desc(unsigned width) const {
  return {{k_, width},
          bf16_ ? dt::bf16 : dt::f32,
          layout_ == tile_layout::k_major ? dnnl::memory::dims{width, 1}
                                          : dnnl::memory::dims{1, k_}};
}

dnnl::matmul::primitive_desc widened_matmul::describe(unsigned m, unsigned width) const {
  dnnl::memory::desc a({m, k_}, bf16_ ? dt::bf16 : dt::f32, tag::ab);
  dnnl::memory::desc c({m, width}, dt::f32, dnnl::memory::dims{n_, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, tile_desc(width), c), *eng_);
}

std::string widened_matmul::kernel(unsigned m) const {
  return describe(m, std::min(n_, tile_columns_)).impl_info_str();
}

void* widened_matmul::scratch(unsigned slot, std::size_t bytes) {
  thread_local std::unique_ptr<void, aligned_free> buffers[2];
  thread_local std::size_t sizes[2] = {};
  auto& buffer = buffers[slot];
  if (sizes[slot] < bytes) {
    buffer.reset(); // the old one goes before the new one is made
    sizes[slot] = 0;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr)
      throw std::bad_alloc();
    buffer.reset(p);
    sizes[slot] = bytes;
  }
  return buffer.get();
}

const std::uint16_t* widened_matmul::activations_bf16(const float* src, std::size_t n) {
  auto* out = static_cast<std::uint16_t*>(scratch(1, n * sizeof(std::uint16_t)));
  to_bf16(src, out, n);
  return out;
}

void widened_matmul::multiply(dnnl::stream& strm, const void* src, const void* tile, float* dst,
                              unsigned m, unsigned first, unsigned width) {
  auto key = std::pair{m, width};
  auto it = primitives_.find(key);
  if (it == primitives_.end())
    it = primitives_.emplace(key, dnnl::matmul(describe(m, width))).first;
  dnnl::memory a({{m, k_}, bf16_ ? dt::bf16 : dt::f32, tag::ab}, *eng_, const_cast<void*>(src));
  dnnl::memory b(tile_desc(width), *eng_, const_cast<void*>(tile));
  dnnl::memory c({{m, width}, dt::f32, dnnl::memory::dims{n_, 1}}, *eng_, dst + first);
  it->second.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  strm.wait();
}

} // namespace triad::detail
