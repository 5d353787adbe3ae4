// Reductions over dims (torch semantics), accumulating f16/bf16/f32 in float and f64 in double.
//
// `dims` may be negative and must not repeat; an empty `dims` reduces every dim (as torch.sum(x)). keepdim keeps
// reduced dims as size 1. Result dtypes: sum of a floating tensor keeps its dtype, sum of an integer or bool tensor
// is i64 (as torch); mean needs a floating dtype; max/min/amax/amin keep the dtype; indices are i64. Empty
// reductions: sum is 0 and mean NaN (as torch); max, min, amax, amin, argmax, argmin over an empty dim are an error.
// NaN propagates through max/min (the index of the first NaN is returned); ties return the first index.
// CUDA work is queued on `stream`.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false, Stream stream = {});
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false, Stream stream = {});
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false, Stream stream = {});
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false, Stream stream = {});

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64
};
// torch.max(x, dim, keepdim) / torch.min(x, dim, keepdim).
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false, Stream stream = {});
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false, Stream stream = {});
// torch.max(x) / torch.min(x): a 0-d tensor.
Tensor max(const Tensor& x, Stream stream = {});
Tensor min(const Tensor& x, Stream stream = {});
// Indices (i64) along `dim`; without a dim, the index into the flattened tensor (a 0-d tensor, or all-ones shape
// with keepdim).
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false, Stream stream = {});
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false, Stream stream = {});

// The canonical form every reduction is run in: x is a contiguous [outer, red, inner] block and the result
// out[o, i] = reduce over r of x[o, r, i]; `indices` (i64, may be undefined) receives the arg index r.
enum class ReduceKind : uint8_t { kSum, kMean, kMax, kMin };

namespace cpu {
void reduce(ReduceKind kind, const Tensor& x, int64_t outer, int64_t red, int64_t inner, const Tensor& out,
            const Tensor& indices);
}  // namespace cpu

namespace cuda {
void reduce(ReduceKind kind, const Tensor& x, int64_t outer, int64_t red, int64_t inner, const Tensor& out,
            const Tensor& indices, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
