// CPU loops of the unary elementwise ops: one typed loop per (op, dtype), contiguous rows without index arithmetic.
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

namespace {

template <UnaryOp op, typename T>
void unary_loop(const Layout& it, T* out, const T* x, double scalar) {
  using C = acc_t<T>;
  const C s = static_cast<C>(scalar);
  if (it.ndim == 1 && it.strides[0][0] == 1 && it.strides[1][0] == 1 && it.numel >= 2 * kGrain) {
    parallel_for(it.numel, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = T(unary_apply<op, C>(C(x[i]), s));
    });
    return;
  }
  for_each_row(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
    T* o = out + off[0];
    const T* a = x + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(unary_apply<op, C>(C(a[i]), s));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = T(unary_apply<op, C>(C(a[i * st[1]]), s));
    }
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& x, double scalar) {
  Layout it = make_layout(unary_op_name(op), {&out, &x});
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    dispatch_unary_op(op, [&]<UnaryOp o>() {
      if constexpr (std::is_same_v<T, bool> || (unary_needs_float(o) && !float_type_v<T>)) {
        DT_ASSERT(false, "unary op ", unary_op_name(o), " reached the CPU loop with dtype ", dtype_name(dtype_of<T>));
      } else {
        unary_loop<o, T>(it, out.data<T>(), x.data<T>(), scalar);
      }
    });
  });
}

}  // namespace dt::kernels::cpu
