#include "dtensor/redistribute/transition.h"

#include "core/error.h"
#include "kernels/copy.h"
#include "placement/layout.h"

namespace dt::redistribute {

std::vector<int64_t> StepContext::member_sizes_before(int64_t d) const {
  return group_member_sizes(global, mesh.shape(), step.before, mesh.coordinate(), step.mesh_dim, d);
}
std::vector<int64_t> StepContext::member_sizes_after(int64_t d) const {
  return group_member_sizes(global, mesh.shape(), step.after, mesh.coordinate(), step.mesh_dim, d);
}

Tensor dim_to_front(const Tensor& t, int64_t d) {
  std::vector<int64_t> perm{d};
  for (int64_t i = 0; i < t.dim(); ++i)
    if (i != d) perm.push_back(i);
  return t.permute(perm);
}

Tensor front_to_dim(const Tensor& t, int64_t d) {
  std::vector<int64_t> perm;
  for (int64_t i = 1; i <= d; ++i) perm.push_back(i);
  perm.push_back(0);
  for (int64_t i = d + 1; i < t.dim(); ++i) perm.push_back(i);
  // perm maps output dim -> input dim: output dim k < d comes from input dim k+1, output dim d from input dim 0.
  return t.permute(perm);
}

std::vector<kernels::StridedView> slice_views(const Tensor& t, int64_t dim, const std::vector<int64_t>& sizes) {
  const kernels::StridedView whole = kernels::view_of(t);
  std::vector<kernels::StridedView> out(sizes.size());
  int64_t off = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    out[p] = whole.narrow(int(dim), off, sizes[p]);
    off += sizes[p];
  }
  DT_ASSERT(off == t.size(dim), "slice_views: sizes sum to ", off, ", not ", t.size(dim));
  return out;
}

bool leading_dims_trivial(const Shape& shape, int64_t d) {
  for (int64_t i = 0; i < d; ++i)
    if (shape[size_t(i)] != 1) return false;
  return true;
}

Tensor partial_local_value(const Tensor& value, ReduceOp op, int64_t index) {
  if (index == 0 || (op != ReduceOp::kSum && op != ReduceOp::kProduct)) return value;
  return Tensor::full(value.shape(), op == ReduceOp::kSum ? 0.0 : 1.0, value.dtype(), value.device());
}

Tensor partial_local_block(Tensor plain_block, const ShardingSpec& spec, const std::vector<int64_t>& coord) {
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
    if (is_partial(spec[m]))
      plain_block = partial_local_value(plain_block, std::get<Partial>(spec[m]).op, coord[size_t(m)]);
  return plain_block;
}

}  // namespace dt::redistribute
