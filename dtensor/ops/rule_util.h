// Internal to dtensor/ops: helpers shared by the rule files, and the per-family registration functions that
// registry.cc calls in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "dtensor/ops/dispatch.h"

namespace dt::ops::detail {

inline Placement R() { return Replicate{}; }
inline Placement S(int64_t d) { return Shard{d}; }
inline Placement P(ReduceOp op = ReduceOp::kSum) { return Partial{op}; }

// Inputs i and j have one shape (names a and b say which in the error).
inline void check_same_shape(const OpSchema& s, size_t i, size_t j, const char* a, const char* b) {
  DT_CHECK_ARG(s.inputs[i].shape == s.inputs[j].shape, "dt::", s.op, ": ", a, " has shape ",
               shape_str(s.inputs[i].shape), " but ", b, " has ", shape_str(s.inputs[j].shape));
}

inline DimStrategy strategy(std::vector<Placement> outputs, std::vector<Placement> inputs) {
  return DimStrategy{std::move(outputs), std::move(inputs)};
}
inline DimStrategy replicate_all(size_t n_in, size_t n_out) {
  return DimStrategy{std::vector<Placement>(n_out, R()), std::vector<Placement>(n_in, R())};
}

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                                             ReduceOp::kProduct};

// Broadcasting (torch rules): the input dim that lines up with output dim `out_dim` and has the full size (so it
// can be sharded like the output), or -1 when the input lacks the dim or broadcasts it.
int64_t aligned_dim(const Shape& in, const Shape& out, int64_t out_dim);
// The broadcast shape of several shapes; throws InvalidArgument naming the op and the shapes.
Shape broadcast_shapes(const std::string& op, const std::vector<Shape>& shapes);

// Argument checks naming the op (InvalidArgument).
void check_same_dtype(const OpSchema& s, size_t i, size_t j, const std::vector<std::string>& names);
void check_floating(const OpSchema& s, size_t i, const std::string& name);
void check_integer(const OpSchema& s, size_t i, const std::string& name);
void check_defined_input(const OpSchema& s, size_t i, const std::string& name);
int64_t wrap(const OpSchema& s, int64_t dim, int64_t ndim, const char* what = "dim");

// A tensor of `shape` holding the identity of `op` for `dtype` (max: -inf or the lowest value, min: +inf or the
// largest, sum: 0, product: 1), on `device`.
Tensor identity_tensor(const Shape& shape, DType dtype, Device device, ReduceOp op);
// `t` with a new shape of the same numel, in row-major order (a view of t, or of a contiguous copy). Unlike
// Tensor::reshape it also handles 0-d tensors on either side.
Tensor reshape_rowmajor(const Tensor& t, const Shape& shape);
// The number of true elements of a bool tensor (synchronises on CUDA).
int64_t count_true(const Tensor& mask);
// (x < lo) or (x >= hi) for an integer tensor, as bool.
Tensor outside(const Tensor& x, int64_t lo, int64_t hi);
// Ids against the rows [begin, begin + count) this rank owns of a row-sharded table (embedding and its backward):
// the ids shifted to local rows, 0 where foreign, and the mask of the foreign ones.
struct LocalRows {
  Tensor ids;      // i64, ids' shape
  Tensor foreign;  // bool, ids' shape
};
LocalRows local_rows(const Tensor& ids, int64_t begin, int64_t count);

// Registration, one function per family (registry.cc calls them in this order).
void register_elementwise_rules(std::vector<OpRule>& rules);
void register_matmul_rules(std::vector<OpRule>& rules);
void register_reduction_rules(std::vector<OpRule>& rules);
void register_softmax_rules(std::vector<OpRule>& rules);
void register_norm_rules(std::vector<OpRule>& rules);
void register_embedding_rules(std::vector<OpRule>& rules);
void register_loss_rules(std::vector<OpRule>& rules);
void register_view_rules(std::vector<OpRule>& rules);
void register_dropout_rules(std::vector<OpRule>& rules);
void register_index_rules(std::vector<OpRule>& rules);

}  // namespace dt::ops::detail
