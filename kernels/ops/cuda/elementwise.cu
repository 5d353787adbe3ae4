// CUDA elementwise kernels: one grid-stride kernel per (op, dtype); the offsets come from the Layout
// (kernels/layout.h; a single multiply when every operand collapsed to one dim).
#include <type_traits>

#include "kernels/ops/cuda/common.cuh"
#include "kernels/ops/elementwise.h"

namespace dt::kernels::cuda {

using namespace ops_detail;

namespace {

template <int N>
__device__ inline void offsets(const Layout& it, int64_t i, int64_t* off) {
  if (it.ndim == 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = i * it.strides[k][0];
  } else {
    layout_offsets<N>(it, i, off);
  }
}

template <UnaryOp op, typename T>
__global__ void unary_kernel(Layout it, T* out, const T* x, acc_t<T> s) {
  using C = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < it.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[kMaxOperands];
    offsets<2>(it, i, off);
    out[off[0]] = T(unary_apply<op, C>(C(x[off[1]]), s));
  }
}

template <BinaryOp op, typename T>
__global__ void binary_kernel(Layout it, T* out, const T* a, const T* b, acc_t<T> s) {
  using C = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < it.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[kMaxOperands];
    offsets<3>(it, i, off);
    out[off[0]] = T(binary_apply<op, C>(C(a[off[1]]), C(b[off[2]]), s));
  }
}

template <CompareOp op, typename T>
__global__ void compare_kernel(Layout it, bool* out, const T* a, const T* b) {
  using C = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < it.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[kMaxOperands];
    offsets<3>(it, i, off);
    out[off[0]] = compare_apply<op, C>(C(a[off[1]]), C(b[off[2]]));
  }
}

template <CompareOp op, typename T>
__global__ void compare_scalar_kernel(Layout it, bool* out, const T* a, double s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < it.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[kMaxOperands];
    offsets<2>(it, i, off);
    out[off[0]] = compare_apply<op, double>(to_double(a[off[1]]), s);
  }
}

template <typename U>
__global__ void where_kernel(Layout it, U* out, const bool* c, const U* a, const U* b) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < it.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[kMaxOperands];
    offsets<4>(it, i, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <typename T>
constexpr bool float_type_v = is_fp_v<acc_t<T>>;

}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& x, double scalar, Stream stream) {
  Layout it = make_layout(unary_op_name(op), {&out, &x});
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    dispatch_unary_op(op, [&]<UnaryOp o>() {
      if constexpr (std::is_same_v<T, bool> || (unary_needs_float(o) && !float_type_v<T>)) {
        DT_ASSERT(false, "unary op ", unary_op_name(o), " reached the CUDA kernel with dtype ",
                  dtype_name(dtype_of<T>));
      } else {
        unary_kernel<o, T><<<grid_for(it.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(it, out.data<T>(), x.data<T>(),
                                                                                       static_cast<acc_t<T>>(scalar));
      }
    });
  });
  check_launch("kernels::cuda::unary");
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double scalar, Stream stream) {
  Layout it = make_layout(binary_op_name(op), {&out, &a, &b});
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    dispatch_binary_op(op, [&]<BinaryOp o>() {
      if constexpr (std::is_same_v<T, bool> || (binary_needs_float(o) && !float_type_v<T>)) {
        DT_ASSERT(false, "binary op ", binary_op_name(o), " reached the CUDA kernel with dtype ",
                  dtype_name(dtype_of<T>));
      } else {
        binary_kernel<o, T><<<grid_for(it.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(
            it, out.data<T>(), a.data<T>(), b.data<T>(), static_cast<acc_t<T>>(scalar));
      }
    });
  });
  check_launch("kernels::cuda::binary");
}

void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b, Stream stream) {
  Layout it = make_layout(compare_op_name(op), {&out, &a, &b});
  dispatch_dtype(a.dtype(), [&]<typename T>() {
    dispatch_compare_op(op, [&]<CompareOp o>() {
      compare_kernel<o, T>
          <<<grid_for(it.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(it, out.data<bool>(), a.data<T>(), b.data<T>());
    });
  });
  check_launch("kernels::cuda::compare");
}

void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double scalar, Stream stream) {
  Layout it = make_layout(compare_op_name(op), {&out, &a});
  dispatch_dtype(a.dtype(), [&]<typename T>() {
    dispatch_compare_op(op, [&]<CompareOp o>() {
      compare_scalar_kernel<o, T>
          <<<grid_for(it.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(it, out.data<bool>(), a.data<T>(), scalar);
    });
  });
  check_launch("kernels::cuda::compare_scalar");
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b, Stream stream) {
  Layout it = make_layout("where", {&out, &cond, &a, &b});
  auto run = [&]<typename U>() {
    where_kernel<U><<<grid_for(it.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(
        it, static_cast<U*>(out.data_ptr()), cond.data<bool>(), static_cast<const U*>(a.data_ptr()),
        static_cast<const U*>(b.data_ptr()));
  };
  dispatch_bits(out.element_size(), run);
  check_launch("kernels::cuda::where");
}

}  // namespace dt::kernels::cuda
