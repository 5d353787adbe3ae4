#include "kernels/ops/shape_ops.h"

#include <algorithm>
#include <cstring>

namespace dt::kernels::cpu {

void triangle(const Tensor& out, const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
              bool lower) {
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  size_t es = x.element_size();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      size_t row = size_t((b * rows + i) * cols) * es;
      // tril keeps j <= i + diagonal; triu keeps j >= i + diagonal.
      int64_t edge = i + diagonal;
      int64_t keep_lo = lower ? 0 : std::clamp<int64_t>(edge, 0, cols);
      int64_t keep_hi = lower ? std::clamp<int64_t>(edge + 1, 0, cols) : cols;
      std::memset(dst + row, 0, size_t(keep_lo) * es);
      std::memcpy(dst + row + size_t(keep_lo) * es, src + row + size_t(keep_lo) * es, size_t(keep_hi - keep_lo) * es);
      std::memset(dst + row + size_t(keep_hi) * es, 0, size_t(cols - keep_hi) * es);
    }
  }
}

void causal_mask(const Tensor& out, int64_t rows, int64_t cols, int64_t diagonal) {
  bool* p = out.data<bool>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = j - i <= diagonal;
}

void arange(const Tensor& out, double start, double step) {
  int64_t n = out.numel();
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    T* p = out.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = from_double<T>(start + double(i) * step);
  });
}

}  // namespace dt::kernels::cpu
