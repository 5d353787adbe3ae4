// CPU loops of the comparisons (tensor and scalar) and of where (a selection that moves bits, never values).
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"
#include "kernels/ops/cpu/elementwise_loops.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;
using namespace elementwise_detail;

void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Layout it = make_layout(compare_op_name(op), {&out, &a, &b});
  bool* po = out.data<bool>();
  dispatch_dtype(a.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    dispatch_compare_op(op, [&]<CompareOp o>() {
      for_each_row(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i)
          po[off[0] + i * st[0]] = compare_apply<o, C>(C(pa[off[1] + i * st[1]]), C(pb[off[2] + i * st[2]]));
      });
    });
  });
}

void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double scalar) {
  Layout it = make_layout(compare_op_name(op), {&out, &a});
  bool* po = out.data<bool>();
  dispatch_dtype(a.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    dispatch_compare_op(op, [&]<CompareOp o>() {
      for_each_row(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i)
          po[off[0] + i * st[0]] = compare_apply<o, double>(to_double(pa[off[1] + i * st[1]]), scalar);
      });
    });
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  Layout it = make_layout("where", {&out, &cond, &a, &b});
  const bool* pc = cond.data<bool>();
  // Same-dtype selection moves bits, never values.
  auto run = [&]<typename U>() {
    U* po = static_cast<U*>(out.data_ptr());
    const U* pa = static_cast<const U*>(a.data_ptr());
    const U* pb = static_cast<const U*>(b.data_ptr());
    if (it.ndim == 1 && it.strides[0][0] == 1 && it.strides[1][0] == 1 && it.strides[2][0] == 1 &&
        it.strides[3][0] == 1 && it.numel >= 2 * kGrain) {
      parallel_for(it.numel, kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) po[i] = pc[i] ? pa[i] : pb[i];
      });
      return;
    }
    for_each_row(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i)
        po[off[0] + i * st[0]] = pc[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
    });
  };
  dispatch_bits(out.element_size(), run);
}

}  // namespace dt::kernels::cpu
