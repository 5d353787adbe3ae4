// Internal to kernels/ops: the iteration space of a broadcasting elementwise op, shared by the CPU loops and the
// CUDA kernels (passed to a kernel by value).
//
// Every operand is viewed with the output's shape (broadcast operands have stride 0). The output is freshly
// allocated and row-major contiguous, so the dims keep their order: size-1 dims are dropped and a dim is merged
// into its inner neighbour when every operand is contiguous across the two. Same-shape contiguous operands become
// one dim of numel elements, which the loops detect (ndim == 1) to skip index arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/macros.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace dt::kernels::ops_detail {

inline constexpr int kIterMaxDims = 8;
inline constexpr int kIterMaxOperands = 4;

struct NdIter {
  int ndim = 1;  // >= 1
  int nops = 0;
  int64_t numel = 0;
  int64_t shape[kIterMaxDims] = {};
  int64_t strides[kIterMaxOperands][kIterMaxDims] = {};  // in elements; operand 0 is the output
};

// `ops` are tensors of shape `shape` (broadcast with expand()); operand 0 is the output.
inline NdIter make_iter(const char* op, const Shape& shape, std::initializer_list<const Tensor*> ops) {
  NdIter it;
  it.nops = int(ops.size());
  DT_ASSERT(it.nops <= kIterMaxOperands);
  it.numel = shape_numel(shape);
  std::vector<int64_t> sh;
  std::vector<std::vector<int64_t>> st(ops.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sh.empty();
    size_t k = 0;
    for (const Tensor* t : ops) {
      DT_ASSERT(t->shape() == shape, "operand shape ", shape_str(t->shape()), " vs ", shape_str(shape));
      if (merge && st[k].back() != t->strides()[d] * shape[d]) merge = false;
      ++k;
    }
    if (merge) {
      sh.back() *= shape[d];
      k = 0;
      for (const Tensor* t : ops) st[k++].back() = t->strides()[d];
    } else {
      sh.push_back(shape[d]);
      k = 0;
      for (const Tensor* t : ops) st[k++].push_back(t->strides()[d]);
    }
  }
  if (sh.empty()) {
    sh.push_back(it.numel == 0 ? 0 : 1);
    for (auto& s : st) s.push_back(1);
  }
  DT_CHECK_ARG(int(sh.size()) <= kIterMaxDims, op, ": at most ", kIterMaxDims,
               " non-mergeable dims are supported, got shape ", shape_str(shape));
  it.ndim = int(sh.size());
  for (int d = 0; d < it.ndim; ++d) {
    it.shape[d] = sh[size_t(d)];
    for (int k = 0; k < it.nops; ++k) it.strides[k][d] = st[size_t(k)][size_t(d)];
  }
  return it;
}

// Element offsets of linear index i (row-major over it.shape) for every operand.
DT_HOST_DEVICE inline void iter_offsets(const NdIter& it, int64_t i, int64_t* off) {
  for (int k = 0; k < it.nops; ++k) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    int64_t n = it.shape[d];
    int64_t idx = d == 0 ? i : i % n;
    i = d == 0 ? 0 : i / n;
    for (int k = 0; k < it.nops; ++k) off[k] += idx * it.strides[k][d];
  }
}

}  // namespace dt::kernels::ops_detail
