// CUDA embedding gather / scatter-add, cross-entropy rows, and the id range check (one small device-to-host copy).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/ops/common.h"
#include "kernels/ops/cuda/common.cuh"
#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"

namespace dt::kernels {

namespace ops_detail {

namespace {

template <typename I>
__global__ void check_ids_kernel(const I* ids, int64_t n, int64_t hi, bool has_ignore, int64_t ignore,
                                 unsigned long long* result /* [bad_pos, valid] */) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t v = int64_t(ids[i]);
    if (has_ignore && v == ignore) continue;
    atomicAdd(&result[1], 1ull);
    if (v < 0 || v >= hi) atomicMin(&result[0], (unsigned long long)i);
  }
}

}  // namespace

IdsCheck check_ids_cuda(const Tensor& ids, int64_t hi, std::optional<int64_t> ignore, Stream stream) {
  cudaStream_t s = kernels::cuda::as_cuda(stream);
  int64_t n = ids.numel();
  Tensor res = Tensor::empty({2}, DType::i64, ids.device());
  unsigned long long init[2] = {std::numeric_limits<unsigned long long>::max(), 0};
  auto* pres = static_cast<unsigned long long*>(res.data_ptr());
  DT_CUDA_CHECK(cudaMemcpyAsync(pres, init, sizeof(init), cudaMemcpyHostToDevice, s), "check_ids (upload)");
  dispatch_dtype(ids.dtype(), [&]<typename I>() {
    if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>) {
      check_ids_kernel<I><<<kernels::cuda::grid_for(n), 256, 0, s>>>(ids.data<I>(), n, hi, ignore.has_value(),
                                                                     ignore.value_or(0), pres);
    } else {
      DT_ASSERT(false, "check_ids on dtype ", dtype_name(ids.dtype()));
    }
  });
  kernels::cuda::check_launch("check_ids");
  unsigned long long host[2];
  DT_CUDA_CHECK(cudaMemcpyAsync(host, pres, sizeof(host), cudaMemcpyDeviceToHost, s), "check_ids (download)");
  DT_CUDA_CHECK(cudaStreamSynchronize(s), "check_ids (synchronize)");
  IdsCheck r;
  r.valid = int64_t(host[1]);
  if (host[0] != std::numeric_limits<unsigned long long>::max()) {
    r.bad_pos = int64_t(host[0]);
    Tensor one = ids.as_strided({1}, {1}, ids.offset() + r.bad_pos).to(Device::cpu());
    r.bad_value = int64_t(one.to_vector()[0]);
  }
  return r;
}

}  // namespace ops_detail

namespace cuda {

using namespace ops_detail;

namespace {

template <typename Fn>
void dispatch_ids(const Tensor& ids, Fn&& fn) {
  dispatch_dtype(ids.dtype(), [&]<typename I>() {
    if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>)
      fn(ids.data<I>());
    else
      DT_ASSERT(false, "ids of dtype ", dtype_name(ids.dtype()));
  });
}

template <typename U, typename I>
__global__ void gather_kernel(U* out, const U* w, const I* ids, int64_t n, int64_t dim) {
  int64_t total = n * dim;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = q / dim, j = q % dim;
    out[q] = w[int64_t(ids[i]) * dim + j];
  }
}

template <typename T, typename I>
__global__ void scatter_add_kernel(acc_t<T>* gw, const T* g, const I* ids, int64_t n, int64_t dim, int64_t pad) {
  int64_t total = n * dim;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = q / dim, j = q % dim;
    int64_t v = int64_t(ids[i]);
    if (v == pad) continue;
    atomicAdd(&gw[v * dim + j], acc_t<T>(g[q]));
  }
}

template <typename T, typename I>
__global__ void ce_rows_kernel(acc_t<T>* row_loss, acc_t<T>* lse, const T* x, const I* t, int64_t rows, int64_t classes,
                               int64_t ignore) {
  using C = acc_t<T>;
  __shared__ C shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * classes;
    C mx = -C(INFINITY);
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      C v = C(xr[c]);
      mx = (v > mx || v != v) ? v : mx;
    }
    mx = block_max(mx, shared);
    C s = 0;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) s += m_exp(C(xr[c]) - mx);
    s = block_sum(s, shared);
    if (threadIdx.x == 0) {
      C e = mx + m_log(s);
      lse[r] = e;
      int64_t tr = int64_t(t[r]);
      row_loss[r] = tr == ignore ? C(0) : e - C(xr[tr]);
    }
  }
}

template <typename T, typename I>
__global__ void ce_bwd_kernel(T* grad, const T* x, const I* t, const acc_t<T>* lse, const acc_t<T>* scale, int64_t rows,
                              int64_t classes, int64_t ignore) {
  using C = acc_t<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t tr = int64_t(t[r]);
    bool ignored = tr == ignore;
    C sc = scale[r], e = lse[r];
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      int64_t k = r * classes + c;
      grad[k] = ignored ? T(0.0f) : T(sc * (m_exp(C(x[k]) - e) - (c == tr ? C(1) : C(0))));
    }
  }
}

unsigned row_blocks(int64_t rows) { return unsigned(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 16)); }

}  // namespace

void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids, int64_t n, int64_t dim, Stream stream) {
  cudaStream_t s = as_cuda(stream);
  auto run = [&]<typename U>() {
    dispatch_ids(ids, [&](const auto* id) {
      gather_kernel<<<grid_for(n * dim, kBlock), kBlock, 0, s>>>(static_cast<U*>(out.data_ptr()),
                                                                 static_cast<const U*>(weight.data_ptr()), id, n, dim);
    });
  };
  dispatch_bits(weight.element_size(), run);
  check_launch("kernels::cuda::embedding");
}

void embedding_backward(const Tensor& grad_weight_acc, const Tensor& grad_out, const Tensor& ids, int64_t n,
                        int64_t dim, int64_t padding_idx, Stream stream) {
  dispatch_float_dtype("embedding_backward", grad_out.dtype(), [&]<typename T>() {
    dispatch_ids(ids, [&](const auto* id) {
      scatter_add_kernel<T><<<grid_for(n * dim, kBlock), kBlock, 0, as_cuda(stream)>>>(
          grad_weight_acc.data<acc_t<T>>(), grad_out.data<T>(), id, n, dim, padding_idx);
    });
  });
  check_launch("kernels::cuda::embedding_backward");
}

void cross_entropy_rows(const Tensor& row_loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                        int64_t rows, int64_t classes, int64_t ignore_index, Stream stream) {
  dispatch_float_dtype("cross_entropy", logits.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    dispatch_ids(targets, [&](const auto* t) {
      ce_rows_kernel<T><<<row_blocks(rows), kBlock, 0, as_cuda(stream)>>>(
          row_loss.data<C>(), lse.data<C>(), logits.data<T>(), t, rows, classes, ignore_index);
    });
  });
  check_launch("kernels::cuda::cross_entropy");
}

void cross_entropy_backward(const Tensor& grad_logits, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& row_scale, int64_t rows, int64_t classes, int64_t ignore_index,
                            Stream stream) {
  dispatch_float_dtype("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    dispatch_ids(targets, [&](const auto* t) {
      ce_bwd_kernel<T><<<row_blocks(rows), kBlock, 0, as_cuda(stream)>>>(
          grad_logits.data<T>(), logits.data<T>(), t, lse.data<C>(), row_scale.data<C>(), rows, classes, ignore_index);
    });
  });
  check_launch("kernels::cuda::cross_entropy_backward");
}

}  // namespace cuda
}  // namespace dt::kernels
