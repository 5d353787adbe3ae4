// CPU loops of the binary elementwise ops: one typed loop per (op, dtype), contiguous rows without index
// arithmetic, a broadcast scalar operand read once per row.
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

template <BinaryOp op, typename T>
void binary_loop(const Layout& it, T* out, const T* a, const T* b, double scalar) {
  using C = acc_t<T>;
  const C s = static_cast<C>(scalar);
  if (it.ndim == 1 && it.strides[0][0] == 1 && it.strides[1][0] == 1 && it.strides[2][0] == 1 &&
      it.numel >= 2 * kGrain) {
    parallel_for(it.numel, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = T(binary_apply<op, C>(C(a[i]), C(b[i]), s));
    });
    return;
  }
  for_each_row(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
    T* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(binary_apply<op, C>(C(pa[i]), C(pb[i]), s));
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const C vb = C(pb[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = T(binary_apply<op, C>(C(pa[i]), vb, s));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = T(binary_apply<op, C>(C(pa[i * st[1]]), C(pb[i * st[2]]), s));
    }
  });
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double scalar) {
  Layout it = make_layout(binary_op_name(op), {&out, &a, &b});
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    dispatch_binary_op(op, [&]<BinaryOp o>() {
      if constexpr (std::is_same_v<T, bool> || (binary_needs_float(o) && !float_type_v<T>)) {
        DT_ASSERT(false, "binary op ", binary_op_name(o), " reached the CPU loop with dtype ", dtype_name(dtype_of<T>));
      } else {
        binary_loop<o, T>(it, out.data<T>(), a.data<T>(), b.data<T>(), scalar);
      }
    });
  });
}

}  // namespace dt::kernels::cpu
