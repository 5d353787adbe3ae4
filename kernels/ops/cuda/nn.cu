// CUDA softmax, layer_norm and rms_norm. Rows of the canonical forms go one block per row (a block-wide tree for
// the row statistics); softmax along a non-last dim goes one thread per line.
#include <algorithm>

#include "kernels/ops/common.h"
#include "kernels/ops/cuda/common.cuh"
#include "kernels/ops/norm.h"
#include "kernels/ops/softmax.h"

namespace dt::kernels::cuda {

using namespace ops_detail;

namespace {

unsigned row_blocks(int64_t rows) { return unsigned(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 16)); }

// ---- softmax ----

template <typename T>
__global__ void softmax_rows_kernel(T* out, const T* x, int64_t rows, int64_t n, bool log) {
  using C = acc_t<T>;
  __shared__ C shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* o = out + r * n;
    C mx = -C(INFINITY);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      C v = C(xr[j]);
      mx = (v > mx || v != v) ? v : mx;
    }
    mx = block_max(mx, shared);
    C s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += m_exp(C(xr[j]) - mx);
    s = block_sum(s, shared);
    if (log) {
      C lse = m_log(s);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) o[j] = T(C(xr[j]) - mx - lse);
    } else {
      C inv = C(1) / s;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) o[j] = T(m_exp(C(xr[j]) - mx) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_lines_kernel(T* out, const T* x, int64_t outer, int64_t n, int64_t inner, bool log) {
  using C = acc_t<T>;
  int64_t total = outer * inner;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (q / inner) * n * inner + q % inner;
    C mx = C(x[base]);
    for (int64_t j = 1; j < n; ++j) {
      C v = C(x[base + j * inner]);
      mx = (v > mx || v != v) ? v : mx;
    }
    C s = 0;
    for (int64_t j = 0; j < n; ++j) s += m_exp(C(x[base + j * inner]) - mx);
    C lse = m_log(s), inv = C(1) / s;
    for (int64_t j = 0; j < n; ++j) {
      C v = C(x[base + j * inner]) - mx;
      out[base + j * inner] = T(log ? v - lse : m_exp(v) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_bwd_rows_kernel(T* gx, const T* g, const T* y, int64_t rows, int64_t n, bool log) {
  using C = acc_t<T>;
  __shared__ C shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    T* o = gx + r * n;
    C s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += log ? C(gr[j]) : C(gr[j]) * C(yr[j]);
    s = block_sum(s, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      o[j] = T(log ? C(gr[j]) - m_exp(C(yr[j])) * s : C(yr[j]) * (C(gr[j]) - s));
  }
}

template <typename T>
__global__ void softmax_bwd_lines_kernel(T* gx, const T* g, const T* y, int64_t outer, int64_t n, int64_t inner,
                                         bool log) {
  using C = acc_t<T>;
  int64_t total = outer * inner;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (q / inner) * n * inner + q % inner;
    C s = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = base + j * inner;
      s += log ? C(g[k]) : C(g[k]) * C(y[k]);
    }
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = base + j * inner;
      gx[k] = T(log ? C(g[k]) - m_exp(C(y[k])) * s : C(y[k]) * (C(g[k]) - s));
    }
  }
}

// ---- norms ----

template <typename T>
__global__ void norm_fwd_kernel(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* x, const T* w, const T* b,
                                int64_t rows, int64_t cols, acc_t<T> eps) {
  using C = acc_t<T>;
  __shared__ C shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* o = out + r * cols;
    C mu = 0;
    if (mean) {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mu += C(xr[j]);
      mu = block_sum(mu, shared) / C(cols);
    }
    C ss = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v = C(xr[j]) - mu;
      ss += v * v;
    }
    ss = block_sum(ss, shared);
    C rs = C(1) / m_sqrt(ss / C(cols) + eps);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v = (C(xr[j]) - mu) * rs;
      if (w) v *= C(w[j]);
      if (b) v += C(b[j]);
      o[j] = T(v);
    }
  }
}

template <typename T>
__global__ void norm_bwd_kernel(T* gx, const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* w,
                                int64_t rows, int64_t cols) {
  using C = acc_t<T>;
  __shared__ C shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* gr = g + r * cols;
    C mu = mean ? mean[r] : C(0), rs = rstd[r];
    C s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v = w ? C(gr[j]) * C(w[j]) : C(gr[j]);
      s1 += v;
      s2 += v * (C(xr[j]) - mu) * rs;
    }
    s1 = block_sum(s1, shared);
    s2 = block_sum(s2, shared);
    C a = mean ? s1 / C(cols) : C(0), bc = s2 / C(cols);
    T* o = gx + r * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v = w ? C(gr[j]) * C(w[j]) : C(gr[j]);
      C xhat = (C(xr[j]) - mu) * rs;
      o[j] = T(rs * (v - a - xhat * bc));
    }
  }
}

// Partial column sums of g * xhat and g over a chunk of rows: part_w/part_b are [chunks, cols].
template <typename T>
__global__ void norm_param_partial_kernel(acc_t<T>* part_w, acc_t<T>* part_b, const T* g, const T* x,
                                          const acc_t<T>* mean, const acc_t<T>* rstd, int64_t rows, int64_t cols,
                                          int64_t rows_per_chunk) {
  using C = acc_t<T>;
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  int64_t r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  C aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; ++r) {
    C gv = C(g[r * cols + j]);
    C mu = mean ? mean[r] : C(0);
    aw += gv * (C(x[r * cols + j]) - mu) * rstd[r];
    ab += gv;
  }
  if (part_w) part_w[blockIdx.y * cols + j] = aw;
  if (part_b) part_b[blockIdx.y * cols + j] = ab;
}

template <typename T>
__global__ void sum_partials_kernel(T* out, const acc_t<T>* part, int64_t chunks, int64_t cols) {
  using C = acc_t<T>;
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  C s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += part[c * cols + j];
  out[j] = T(s);
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, Stream stream) {
  cudaStream_t s = as_cuda(stream);
  dispatch_float_dtype("softmax", x.dtype(), [&]<typename T>() {
    if (inner == 1)
      softmax_rows_kernel<T><<<row_blocks(outer), kBlock, 0, s>>>(out.data<T>(), x.data<T>(), outer, n, log);
    else
      softmax_lines_kernel<T>
          <<<grid_for(outer * inner, kBlock), kBlock, 0, s>>>(out.data<T>(), x.data<T>(), outer, n, inner, log);
  });
  check_launch("kernels::cuda::softmax");
}

void softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& out, int64_t outer, int64_t n,
                      int64_t inner, bool log, Stream stream) {
  cudaStream_t s = as_cuda(stream);
  dispatch_float_dtype("softmax_backward", out.dtype(), [&]<typename T>() {
    if (inner == 1)
      softmax_bwd_rows_kernel<T>
          <<<row_blocks(outer), kBlock, 0, s>>>(grad_x.data<T>(), grad_out.data<T>(), out.data<T>(), outer, n, log);
    else
      softmax_bwd_lines_kernel<T><<<grid_for(outer * inner, kBlock), kBlock, 0, s>>>(
          grad_x.data<T>(), grad_out.data<T>(), out.data<T>(), outer, n, inner, log);
  });
  check_launch("kernels::cuda::softmax_backward");
}

void norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, int64_t rows, int64_t cols, double eps, Stream stream) {
  dispatch_float_dtype("norm", x.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    norm_fwd_kernel<T><<<row_blocks(rows), kBlock, 0, as_cuda(stream)>>>(
        out.data<T>(), ptr_or_null<C>(mean), rstd.data<C>(), x.data<T>(), ptr_or_null<T>(weight), ptr_or_null<T>(bias),
        rows, cols, C(eps));
  });
  check_launch("kernels::cuda::norm_forward");
}

void norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                   int64_t cols, Stream stream) {
  cudaStream_t s = as_cuda(stream);
  dispatch_float_dtype("norm_backward", x.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    norm_bwd_kernel<T><<<row_blocks(rows), kBlock, 0, s>>>(grad_x.data<T>(), grad_out.data<T>(), x.data<T>(),
                                                           ptr_or_null<C>(mean), rstd.data<C>(), ptr_or_null<T>(weight),
                                                           rows, cols);
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    int64_t rows_per_chunk = 64;
    int64_t chunks = std::min<int64_t>(ceil_div(rows, rows_per_chunk), 1024);
    rows_per_chunk = ceil_div(rows, chunks);
    DType acc = acc_dtype(x.dtype());
    Tensor pw = grad_weight.defined() ? Tensor::empty({chunks, cols}, acc, x.device()) : Tensor();
    Tensor pb = grad_bias.defined() ? Tensor::empty({chunks, cols}, acc, x.device()) : Tensor();
    dim3 grid(unsigned(ceil_div(cols, kBlock)), unsigned(chunks));
    norm_param_partial_kernel<T><<<grid, kBlock, 0, s>>>(ptr_or_null<C>(pw), ptr_or_null<C>(pb), grad_out.data<T>(),
                                                         x.data<T>(), ptr_or_null<C>(mean), rstd.data<C>(), rows, cols,
                                                         rows_per_chunk);
    unsigned g1 = unsigned(ceil_div(cols, kBlock));
    if (pw.defined()) sum_partials_kernel<T><<<g1, kBlock, 0, s>>>(grad_weight.data<T>(), pw.data<C>(), chunks, cols);
    if (pb.defined()) sum_partials_kernel<T><<<g1, kBlock, 0, s>>>(grad_bias.data<T>(), pb.data<C>(), chunks, cols);
  });
  check_launch("kernels::cuda::norm_backward");
}

}  // namespace dt::kernels::cuda
