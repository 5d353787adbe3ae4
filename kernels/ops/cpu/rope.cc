// CPU loop of the fused rotary embedding (kernels/ops/rope.h).
#include "kernels/ops/rope.h"

#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

void rope(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t rows, int64_t t, int64_t hd,
          int64_t tables) {
  const int64_t h = hd / 2, per_table = rows / tables;
  dispatch_float_dtype("rope", x.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    const T* px = x.data<T>();
    const T* pc = cos.data<T>();
    const T* ps = sin.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < t; ++i) {
        const T* a = px + (r * t + i) * hd;
        const T* c = pc + ((r / per_table) * t + i) * hd;
        const T* s = ps + ((r / per_table) * t + i) * hd;
        T* o = po + (r * t + i) * hd;
        for (int64_t j = 0; j < h; ++j) o[j] = T(C(a[j]) * C(c[j]) - C(a[j + h]) * C(s[j]));
        for (int64_t j = h; j < hd; ++j) o[j] = T(C(a[j]) * C(c[j]) + C(a[j - h]) * C(s[j]));
      }
  });
}

}  // namespace dt::kernels::cpu
