#include "devices/cpu/detail/onednn_linear.hpp"

#include <vector>

#include "devices/cpu/detail/kernels.hpp"

namespace triad::detail {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

dnnl::matmul::primitive_desc make_pd(dnnl::engine& eng, unsigned m, unsigned k, unsigned n, dt src,
                                     const dnnl::memory::desc& weights) {
  dnnl::memory::desc a({m, k}, src, tag::ab);
  dnnl::memory::desc c({m, n}, dt::f32, tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, weights, c), eng);
}

} // namespace

onednn_linear::onednn_linear(dnnl::engine& eng, unsigned k, unsigned n, dtype type,
                             const float* plain, vector_isa own)
    : eng_(&eng)
    , k_(k)
    , n_(n)
    , src_type_(type == dtype::bf16 ? dt::bf16 : dt::f32) {
  // Let oneDNN choose the weights layout for a mid-size M; in oneDNN 2.6 the brgemm layout
  // does not depend on M, and every later M is created against this same packed layout.
  dnnl::memory::desc any({k, n}, src_type_, tag::any);
  auto pd = make_pd(eng, 64, k, n, src_type_, any);
  weights_desc_ = pd.weights_desc();
  kernel_ = pd.impl_info_str();
  small_ = packed_small_m::for_weights(weights_desc_, k, n, type, own);
  weights_ = dnnl::memory(weights_desc_, eng);
  dnnl::stream strm(eng);
  std::size_t count = std::size_t{k} * n;
  if (type == dtype::bf16) {
    std::vector<std::uint16_t> staged(count);
    to_bf16(plain, staged.data(), count);
    dnnl::memory src({{k, n}, dt::bf16, tag::ab}, eng, staged.data());
    dnnl::reorder(src, weights_).execute(strm, src, weights_);
    strm.wait();
  } else {
    dnnl::memory src({{k, n}, dt::f32, tag::ab}, eng, const_cast<float*>(plain));
    dnnl::reorder(src, weights_).execute(strm, src, weights_);
    strm.wait();
  }
}

dnnl::matmul& onednn_linear::primitive(unsigned m) {
  auto it = primitives_.find(m);
  if (it == primitives_.end())
    it = primitives_.emplace(m, dnnl::matmul(make_pd(*eng_, m, k_, n_, src_type_, weights_desc_)))
             .first;
  return it->second;
}

std::string onednn_linear::kernel() const {
  if (!small_)
    return kernel_;
  return kernel_ + " + " + small_->name() + " (M<=" + std::to_string(packed_small_m::m_limit) + ")";
}

void onednn_linear::forward(dnnl::stream& strm, const void* src, float* dst, unsigned m) {
  if (small_ && m >= 1 && m <= packed_small_m::m_limit) {
    small_->forward(weights_.get_data_handle(), src, dst, m);
    return;
  }
  auto& prim = primitive(m);
  dnnl::memory a({{m, k_}, src_type_, tag::ab}, *eng_, const_cast<void*>(src));
  dnnl::memory c({{m, n_}, dt::f32, tag::ab}, *eng_, dst);
  prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, c}});
  strm.wait();
}

} // namespace triad::detail
