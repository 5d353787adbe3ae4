// Data-movement ops that make new tensors (views such as reshape, transpose, permute, narrow live on dt::Tensor):
// cat, split (contiguous copies), stack, tril/triu, causal_mask and arange. CUDA work is queued on `stream`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace dt::kernels {

// torch.cat: tensors of one dtype and device whose shapes agree except along `dim`. 1-d empty tensors of shape
// [0] are skipped (as torch's legacy rule), so that cat({}, x) style accumulation works.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0, Stream stream = {});
// Contiguous copies of the pieces (sizes must add up to x.size(dim)). Tensor::split_with_sizes gives views.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0, Stream stream = {});
// torch.stack: tensors of one shape; the result has a new dim at `dim` (in [-(ndim+1), ndim]).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0, Stream stream = {});

// Keeps the elements on and below (tril) / on and above (triu) the `diagonal`-th diagonal of the last two dims
// (element [i, j] is kept by tril when j - i <= diagonal); others become 0. x has at least 2 dims.
Tensor tril(const Tensor& x, int64_t diagonal = 0, Stream stream = {});
Tensor triu(const Tensor& x, int64_t diagonal = 0, Stream stream = {});
// A bool [rows, cols] mask, true where attention is allowed: j - i <= diagonal (tril of ones). With rows queries
// that are the last rows of cols keys, pass diagonal = cols - rows.
Tensor causal_mask(int64_t rows, int64_t cols, int64_t diagonal = 0, Device device = Device::cpu(), Stream stream = {});

// torch.arange: ceil((end - start) / step) values start + i * step (computed in double, converted to dtype).
Tensor arange(double start, double end, double step, DType dtype = DType::i64, Device device = Device::cpu(),
              Stream stream = {});
Tensor arange(int64_t end, DType dtype = DType::i64, Device device = Device::cpu(), Stream stream = {});

// Canonical forms: x/out contiguous [batch, rows, cols]; arange fills a contiguous 1-d out.
namespace cpu {
void triangle(const Tensor& out, const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
              bool lower);
void causal_mask(const Tensor& out, int64_t rows, int64_t cols, int64_t diagonal);
void arange(const Tensor& out, double start, double step);
}  // namespace cpu

namespace cuda {
void triangle(const Tensor& out, const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
              bool lower, Stream stream);
void causal_mask(const Tensor& out, int64_t rows, int64_t cols, int64_t diagonal, Stream stream);
void arange(const Tensor& out, double start, double step, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
