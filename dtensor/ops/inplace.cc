#include "dtensor/ops/inplace.h"

#include "core/error.h"
#include "dtensor/ops/view.h"
#include "kernels/ops/elementwise.h"

namespace dt {
namespace {

enum class Update { kAdd, kMul, kCopy };

const char* update_name(Update u) { return u == Update::kAdd ? "add_" : u == Update::kMul ? "mul_" : "copy_"; }

// y broadcast to x's shape and redistributed to the spec `u` needs (inplace.h), as this rank's block in x's dtype.
Tensor operand_block(const DTensor& x, const DTensor& y, Update u) {
  const char* op = update_name(u);
  DT_CHECK_ARG(x.defined(), "dt::", op, ": x is undefined");
  DT_CHECK_ARG(y.defined(), "dt::", op, ": the other operand is undefined");
  DT_CHECK_ARG(y.mesh() == x.mesh() || y.mesh().same_layout(x.mesh()), "dt::", op, ": the operand is on ",
               y.mesh().to_string(), " but x is on ", x.mesh().to_string());
  DTensor yb = y.shape() == x.shape() ? y : expand(y, x.shape());
  ShardingSpec target = x.spec();
  for (int64_t m = 0; m < target.mesh_ndim(); ++m) {
    if (!is_partial(target[m])) continue;
    const ReduceOp rop = std::get<Partial>(target[m]).op;
    if (u == Update::kAdd && rop == ReduceOp::kProduct)
      DT_THROW(Unsupported, "dt::add_: x is ", x.spec().to_string(),
               ": an addition into a Partial(product) is not exact; redistribute x first");
    if (u == Update::kMul && (rop == ReduceOp::kMax || rop == ReduceOp::kMin))
      DT_THROW(Unsupported, "dt::mul_: x is ", x.spec().to_string(),
               ": a product with a Partial(max/min) depends on the signs; redistribute x first");
    if (u == Update::kMul && (rop == ReduceOp::kSum || rop == ReduceOp::kAvg))
      target = target.with_placement(m, Replicate{});
  }
  // The planner has no Shard -> Partial step: a Partial dim of the target that y does not already have goes through
  // Replicate (then R -> P is local).
  ShardingSpec mid = target;
  for (int64_t m = 0; m < target.mesh_ndim(); ++m)
    if (is_partial(target[m]) && !(yb.spec()[m] == target[m])) mid = mid.with_placement(m, Replicate{});
  DTensor ready = yb.spec() == mid ? yb : yb.redistribute(mid);
  if (!(mid == target)) ready = ready.redistribute(target);
  const Tensor& block = ready.to_local();
  return block.dtype() == x.dtype() ? block : block.to(x.dtype());
}

// Writes `value` into x's local tensor (same storage).
DTensor& write(DTensor& x, const Tensor& value) {
  Tensor local = x.to_local();
  local.copy_(value);
  return x;
}

}  // namespace

DTensor& add_(DTensor& x, const DTensor& y, double alpha) {
  Tensor yl = operand_block(x, y, Update::kAdd);
  if (!x.mesh().is_member()) return x;
  if (alpha != 1) yl = kernels::mul_scalar(yl, alpha);
  return write(x, kernels::add(x.to_local(), yl));
}

DTensor& mul_(DTensor& x, const DTensor& y) {
  Tensor yl = operand_block(x, y, Update::kMul);
  if (!x.mesh().is_member()) return x;
  return write(x, kernels::mul(x.to_local(), yl));
}

DTensor& mul_(DTensor& x, double s) {
  DT_CHECK_ARG(x.defined(), "dt::mul_: x is undefined");
  for (const Placement& p : x.placements()) {
    if (!is_partial(p)) continue;
    const ReduceOp rop = std::get<Partial>(p).op;
    if (rop == ReduceOp::kProduct || (s < 0 && (rop == ReduceOp::kMax || rop == ReduceOp::kMin)))
      DT_THROW(Unsupported, "dt::mul_: x is ", x.spec().to_string(), ": scaling by ", s,
               " is not exact on that Partial; redistribute x first");
  }
  if (!x.mesh().is_member()) return x;
  return write(x, kernels::mul_scalar(x.to_local(), s));
}

DTensor& copy_(DTensor& x, const DTensor& src) {
  Tensor block = operand_block(x, src, Update::kCopy);
  if (!x.mesh().is_member()) return x;
  return write(x, block);
}

}  // namespace dt
