// CPU cross-entropy rows: log-sum-exp with the row maximum subtracted, then lse - logit[target].
#include "kernels/ops/loss.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {
template <typename Fn>
void dispatch_targets(const Tensor& t, Fn&& fn) {
  dispatch_dtype(t.dtype(), [&]<typename I>() {
    if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>)
      fn(t.data<I>());
    else
      DT_ASSERT(false, "targets of dtype ", dtype_name(t.dtype()));
  });
}
}  // namespace

void cross_entropy_rows(const Tensor& row_loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                        int64_t rows, int64_t classes, int64_t ignore_index) {
  dispatch_float_dtype("cross_entropy", logits.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    const T* x = logits.data<T>();
    C* pl = row_loss.data<C>();
    C* pe = lse.data<C>();
    dispatch_targets(targets, [&](const auto* t) {
      parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, classes)), [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const T* xr = x + r * classes;
          C mx = C(xr[0]);
          for (int64_t c = 1; c < classes; ++c) {
            C v = C(xr[c]);
            mx = (v > mx || is_nan(v)) ? v : mx;
          }
          C s = 0;
          for (int64_t c = 0; c < classes; ++c) s += m_exp(C(xr[c]) - mx);
          C e = mx + m_log(s);
          pe[r] = e;
          int64_t tr = int64_t(t[r]);
          pl[r] = tr == ignore_index ? C(0) : e - C(xr[tr]);
        }
      });
    });
  });
}

void cross_entropy_backward(const Tensor& grad_logits, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& row_scale, int64_t rows, int64_t classes, int64_t ignore_index) {
  dispatch_float_dtype("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    const T* x = logits.data<T>();
    T* g = grad_logits.data<T>();
    const C* pe = lse.data<C>();
    const C* ps = row_scale.data<C>();
    dispatch_targets(targets, [&](const auto* t) {
      parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, classes)), [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const T* xr = x + r * classes;
          T* gr = g + r * classes;
          int64_t tr = int64_t(t[r]);
          if (tr == ignore_index) {
            for (int64_t c = 0; c < classes; ++c) gr[c] = T(0.0f);
            continue;
          }
          C sc = ps[r], e = pe[r];
          // softmax minus the one-hot target, the target's column fixed after the (vectorizable) loop.
          for (int64_t c = 0; c < classes; ++c) gr[c] = T(sc * m_exp(C(xr[c]) - e));
          if (tr >= 0 && tr < classes) gr[tr] = T(sc * (m_exp(C(xr[tr]) - e) - C(1)));
        }
      });
    });
  });
}

}  // namespace dt::kernels::cpu
