// CPU layer_norm / rms_norm over contiguous [rows, cols]: two passes per row for the statistics (mean, then the
// centred sum of squares), parameter gradients accumulated across rows in the compute type.
#include "kernels/ops/norm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {

template <typename T>
void forward_rows(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* x, const T* w, const T* b, int64_t rows,
                  int64_t cols, double eps) {
  using C = acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* o = out + r * cols;
    C mu = 0;
    if (mean) {
      for (int64_t j = 0; j < cols; ++j) mu += C(xr[j]);
      mu /= C(cols);
    }
    C ss = 0;
    for (int64_t j = 0; j < cols; ++j) {
      C v = C(xr[j]) - mu;
      ss += v * v;
    }
    C rs = C(1) / m_sqrt(ss / C(cols) + C(eps));
    if (mean) mean[r] = mu;
    rstd[r] = rs;
    for (int64_t j = 0; j < cols; ++j) {
      C v = (C(xr[j]) - mu) * rs;
      if (w) v *= C(w[j]);
      if (b) v += C(b[j]);
      o[j] = T(v);
    }
  }
}

template <typename T>
void backward_rows(T* gx, T* gw, T* gb, const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* w,
                   int64_t rows, int64_t cols) {
  using C = acc_t<T>;
  std::vector<C> acc_w(gw ? size_t(cols) : 0), acc_b(gb ? size_t(cols) : 0);
  std::vector<C> gxw(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* gr = g + r * cols;
    C mu = mean ? mean[r] : C(0);
    C rs = rstd[r];
    C sum_gw = 0, sum_gwx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      C xhat = (C(xr[j]) - mu) * rs;
      C gj = C(gr[j]);
      C v = w ? gj * C(w[j]) : gj;
      gxw[size_t(j)] = v;
      sum_gw += v;
      sum_gwx += v * xhat;
      if (gw) acc_w[size_t(j)] += gj * xhat;
      if (gb) acc_b[size_t(j)] += gj;
    }
    C a = mean ? sum_gw / C(cols) : C(0);
    C bcoef = sum_gwx / C(cols);
    T* o = gx + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      C xhat = (C(xr[j]) - mu) * rs;
      o[j] = T(rs * (gxw[size_t(j)] - a - xhat * bcoef));
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    if (gw) gw[j] = T(acc_w[size_t(j)]);
    if (gb) gb[j] = T(acc_b[size_t(j)]);
  }
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, int64_t rows, int64_t cols, double eps) {
  dispatch_float_dtype("norm", x.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    // Blocks of rows on the intra-op threads (each row writes only its own outputs and statistics).
    C* pm = ptr_or_null<C>(mean);
    parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)), [&](int64_t r0, int64_t r1) {
      forward_rows<T>(out.data<T>() + r0 * cols, pm ? pm + r0 : nullptr, rstd.data<C>() + r0, x.data<T>() + r0 * cols,
                      ptr_or_null<T>(weight), ptr_or_null<T>(bias), r1 - r0, cols, eps);
    });
  });
}

void norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                   int64_t cols) {
  dispatch_float_dtype("norm_backward", x.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    backward_rows<T>(grad_x.data<T>(), ptr_or_null<T>(grad_weight), ptr_or_null<T>(grad_bias), grad_out.data<T>(),
                     x.data<T>(), ptr_or_null<C>(mean), rstd.data<C>(), ptr_or_null<T>(weight), rows, cols);
  });
}

}  // namespace dt::kernels::cpu
