// CPU softmax over the canonical [outer, n, inner] block: three passes per line (max, sum of exp, write).
#include "kernels/ops/softmax.h"

#include <algorithm>

#include "kernels/cpu/parallel.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {

template <typename T>
void softmax_lines(T* out, const T* x, int64_t outer, int64_t n, int64_t inner, bool log) {
  using C = acc_t<T>;
  // Blocks of `outer` run on the intra-op threads (each writes its own lines).
  parallel_for(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * inner)), [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* xl = x + o * n * inner + i;
        T* ol = out + o * n * inner + i;
        C mx = C(xl[0]);
        for (int64_t j = 1; j < n; ++j) {
          C v = C(xl[j * inner]);
          mx = (v > mx || is_nan(v)) ? v : mx;
        }
        C s = 0;
        for (int64_t j = 0; j < n; ++j) s += m_exp(C(xl[j * inner]) - mx);
        if (log) {
          C lse = m_log(s);
          for (int64_t j = 0; j < n; ++j) ol[j * inner] = T(C(xl[j * inner]) - mx - lse);
        } else {
          C inv = C(1) / s;
          for (int64_t j = 0; j < n; ++j) ol[j * inner] = T(m_exp(C(xl[j * inner]) - mx) * inv);
        }
      }
    }
  });
}

template <typename T>
void softmax_backward_lines(T* gx, const T* g, const T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  using C = acc_t<T>;
  parallel_for(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * inner)), [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        int64_t base = o * n * inner + i;
        C s = 0;
        if (log) {
          for (int64_t j = 0; j < n; ++j) s += C(g[base + j * inner]);
          for (int64_t j = 0; j < n; ++j) {
            int64_t k = base + j * inner;
            gx[k] = T(C(g[k]) - m_exp(C(y[k])) * s);
          }
        } else {
          for (int64_t j = 0; j < n; ++j) s += C(g[base + j * inner]) * C(y[base + j * inner]);
          for (int64_t j = 0; j < n; ++j) {
            int64_t k = base + j * inner;
            gx[k] = T(C(y[k]) * (C(g[k]) - s));
          }
        }
      }
    }
  });
}

}  // namespace

void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  dispatch_float_dtype("softmax", x.dtype(),
                       [&]<typename T>() { softmax_lines<T>(out.data<T>(), x.data<T>(), outer, n, inner, log); });
}

void softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& out, int64_t outer, int64_t n,
                      int64_t inner, bool log) {
  dispatch_float_dtype("softmax", out.dtype(), [&]<typename T>() {
    softmax_backward_lines<T>(grad_x.data<T>(), grad_out.data<T>(), out.data<T>(), outer, n, inner, log);
  });
}

}  // namespace dt::kernels::cpu
