// CPU embedding gather (row memcpy) and scatter-add backward (rows accumulated in order: deterministic).
#include "kernels/ops/embedding.h"

#include <cstring>
#include <type_traits>

#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {
template <typename Fn>
void dispatch_ids(const Tensor& ids, Fn&& fn) {
  dispatch_dtype(ids.dtype(), [&]<typename I>() {
    if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>)
      fn(ids.data<I>());
    else
      DT_ASSERT(false, "embedding ids of dtype ", dtype_name(ids.dtype()));
  });
}
}  // namespace

void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids, int64_t n, int64_t dim) {
  const char* w = static_cast<const char*>(weight.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  size_t row = size_t(dim) * weight.element_size();
  dispatch_ids(ids, [&](const auto* id) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(o + size_t(i) * row, w + size_t(int64_t(id[i])) * row, row);
  });
}

void embedding_backward(const Tensor& grad_weight_acc, const Tensor& grad_out, const Tensor& ids, int64_t n,
                        int64_t dim, int64_t padding_idx) {
  dispatch_float_dtype("embedding_backward", grad_out.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    C* gw = grad_weight_acc.data<C>();
    const T* g = grad_out.data<T>();
    dispatch_ids(ids, [&](const auto* id) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = int64_t(id[i]);
        if (v == padding_idx) continue;
        C* dst = gw + v * dim;
        const T* src = g + i * dim;
        for (int64_t j = 0; j < dim; ++j) dst[j] += C(src[j]);
      }
    });
  });
}

}  // namespace dt::kernels::cpu
