// CPU loops of the elementwise ops: one typed loop per (op, dtype), contiguous rows without index arithmetic.
#include "kernels/ops/elementwise.h"

#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {

template <typename T>
constexpr bool float_type_v = is_fp_v<acc_t<T>>;

// Elements per chunk of a contiguous loop split over the intra-op threads (kernels/cpu/parallel.h).
constexpr int64_t kGrain = 16384;

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
