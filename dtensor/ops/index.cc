// Rules of index_select, gather and their backward ops. Note [indexing through embedding]: every local kernel here is
// kernels::embedding / embedding_backward (which run on CPU and CUDA) on a reshaped view: index_select along `dim` is
// an embedding lookup of x with `dim` moved to the front; gather along `dim` is a lookup of single elements of x
// flattened to [rows * n, 1] with ids offset by row * n.
#include "dtensor/ops/index.h"

#include <numeric>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/shape_ops.h"

namespace dt {
namespace ops::detail {
namespace {

using kernels::CompareOp;

// The permutation that moves `dim` to position `to` (0 or last), and its inverse.
std::vector<int64_t> move_dim(int64_t ndim, int64_t dim, bool to_front) {
  std::vector<int64_t> p;
  if (to_front) p.push_back(dim);
  for (int64_t d = 0; d < ndim; ++d)
    if (d != dim) p.push_back(d);
  if (!to_front) p.push_back(dim);
  return p;
}
std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[size_t(p[i])] = int64_t(i);
  return q;
}

// index as i64, every entry in [0, n) (InvalidArgument naming the op otherwise).
Tensor checked_index(const std::string& op, const Tensor& index, int64_t n) {
  Tensor idx = index.to(DType::i64);
  Tensor below = kernels::compare_scalar(CompareOp::kLt, idx, 0);
  Tensor above = kernels::compare_scalar(CompareOp::kGe, idx, double(n));
  const int64_t bad = count_true(kernels::where(below, below, above));
  DT_CHECK_ARG(bad == 0, "dt::", op, ": ", bad, " indices are outside [0, ", n, ")");
  return idx;
}

void check_index_dtype(const OpSchema& s, size_t i) { check_integer(s, i, "index"); }

// ---- index_select ----

OpRule index_select_rule() {
  OpRule r;
  r.name = "index_select";
  r.input_names = {"x", "index"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_defined_input(s, 1, "index");
    check_index_dtype(s, 1);
    DT_CHECK_ARG(s.inputs[1].ndim() == 1, "dt::index_select: index must be 1-d, got ", shape_str(s.inputs[1].shape));
    Shape out = s.inputs[0].shape;
    DT_CHECK_ARG(!out.empty(), "dt::index_select: x must have at least 1 dim, got a 0-d tensor");
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(out.size()));
    out[size_t(dim)] = s.inputs[1].shape[0];
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t dim = s.params.get_int("dim");
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d), R()}));
    v.push_back(strategy({S(dim)}, {R(), S(0)}));
    for (ReduceOp op : kAllReduceOps) v.push_back(strategy({P(op)}, {P(op), R()}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const int64_t dim = c.params().get_int("dim");
    const int64_t n = x.size(dim);
    Tensor idx = checked_index(c.schema.op, in[1], n);
    const std::vector<int64_t> p = move_dim(x.dim(), dim, true);
    Tensor xt = x.permute(p).contiguous();
    Shape moved = xt.shape();
    const int64_t rest = shape_numel(Shape(moved.begin() + 1, moved.end()));
    Tensor rows = kernels::embedding(reshape_rowmajor(xt, {n, rest}), idx);
    moved[0] = idx.numel();
    return std::vector<Tensor>{reshape_rowmajor(rows, moved).permute(inverse(p)).contiguous()};
  };
  return r;
}

OpRule index_select_backward_rule() {
  OpRule r;
  r.name = "index_select_backward";
  r.input_names = {"grad", "index"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad");
    check_defined_input(s, 1, "index");
    check_index_dtype(s, 1);
    check_floating(s, 0, "grad");
    const Shape& g = s.inputs[0].shape;
    DT_CHECK_ARG(s.inputs[1].ndim() == 1, "dt::index_select_backward: index must be 1-d, got ",
                 shape_str(s.inputs[1].shape));
    DT_CHECK_ARG(!g.empty(), "dt::index_select_backward: grad must have at least 1 dim");
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(g.size()));
    DT_CHECK_ARG(g[size_t(dim)] == s.inputs[1].shape[0], "dt::index_select_backward: grad ", shape_str(g), " has ",
                 g[size_t(dim)], " slices along dim ", dim, " but index has ", s.inputs[1].shape[0]);
    const int64_t size = s.params.get_int("size");
    DT_CHECK_ARG(size >= 0, "dt::index_select_backward: size must be non-negative, got ", size);
    Shape out = g;
    out[size_t(dim)] = size;
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t dim = s.params.get_int("dim");
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d), R()}));
    v.push_back(strategy({P()}, {S(dim), S(0)}));  // each rank adds its slices; the sum is the whole
    v.push_back(strategy({P()}, {P(), R()}));
    v.push_back(strategy({P(ReduceOp::kAvg)}, {P(ReduceOp::kAvg), R()}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& g = in[0];
    const int64_t dim = c.params().get_int("dim");
    const int64_t size = c.params().get_int("size");
    Tensor idx = checked_index(c.schema.op, in[1], size);
    const std::vector<int64_t> p = move_dim(g.dim(), dim, true);
    Tensor gt = g.permute(p).contiguous();
    const int64_t k = gt.size(0);
    const int64_t rest = shape_numel(Shape(gt.shape().begin() + 1, gt.shape().end()));
    Tensor acc = kernels::embedding_backward(reshape_rowmajor(gt, {k, rest}), idx, size);
    Shape moved = gt.shape();
    moved[0] = size;
    return std::vector<Tensor>{reshape_rowmajor(acc.to(g.dtype()), moved).permute(inverse(p)).contiguous()};
  };
  return r;
}

// ---- gather ----

// gather's shapes: index has x's ndim and is no larger than x off `dim`.
void check_gather_shapes(const OpSchema& s, const Shape& x, const Shape& index, int64_t dim) {
  DT_CHECK_ARG(index.size() == x.size(), "dt::", s.op, ": index ", shape_str(index), " must have the ", x.size(),
               " dims of the input ", shape_str(x));
  for (size_t d = 0; d < x.size(); ++d)
    DT_CHECK_ARG(int64_t(d) == dim || index[d] <= x[d], "dt::", s.op, ": index ", shape_str(index),
                 " is larger than the input ", shape_str(x), " along dim ", d);
}

// Strategies shared by gather (inputs x, index) and gather_backward (inputs grad, index): `big` is x's shape or the
// input shape, `small` index's.
void gather_shard_strategies(std::vector<DimStrategy>& v, const Shape& big, const Shape& small, int64_t dim,
                             bool forward) {
  for (int64_t d = 0; d < int64_t(big.size()); ++d) {
    if (d == dim || big[size_t(d)] != small[size_t(d)]) continue;
    v.push_back(strategy({S(d)}, {S(d), S(d)}));
  }
  if (forward) v.push_back(strategy({S(dim)}, {R(), S(dim)}));
}

// x (contiguous view of any layout) of shape `big`, index of shape `small` (dims other than dim <= big's): the
// flat ids of gather's elements in x narrowed to small off `dim` and flattened as [rows * n], dim moved last.
struct GatherPlan {
  std::vector<int64_t> perm;  // moves dim last
  Shape moved_small;          // small with dim last
  int64_t rows = 0, n = 0, k = 0;
  Tensor ids;  // [rows * k] i64
};

GatherPlan gather_plan(const std::string& op, const Tensor& index, int64_t dim, int64_t n) {
  GatherPlan g;
  g.perm = move_dim(index.dim(), dim, false);
  Tensor it = checked_index(op, index, n).permute(g.perm).contiguous();
  g.moved_small = it.shape();
  g.n = n;
  g.k = g.moved_small.back();
  g.rows = shape_numel(Shape(g.moved_small.begin(), g.moved_small.end() - 1));
  Tensor base = kernels::mul_scalar(kernels::arange(g.rows, DType::i64, index.device()), double(n)).unsqueeze(1);
  g.ids = reshape_rowmajor(kernels::add(reshape_rowmajor(it, {g.rows, g.k}), base), {g.rows * g.k});
  return g;
}

// `t` narrowed to `small` on every dim but `dim`.
Tensor narrow_off_dim(Tensor t, const Shape& small, int64_t dim) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != dim && t.size(d) != small[size_t(d)]) t = t.narrow(d, 0, small[size_t(d)]);
  return t;
}

OpRule gather_rule() {
  OpRule r;
  r.name = "gather";
  r.input_names = {"x", "index"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_defined_input(s, 1, "index");
    check_index_dtype(s, 1);
    const Shape& x = s.inputs[0].shape;
    DT_CHECK_ARG(!x.empty(), "dt::gather: x must have at least 1 dim, got a 0-d tensor");
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(x.size()));
    check_gather_shapes(s, x, s.inputs[1].shape, dim);
    return std::vector<OutputMeta>{{s.inputs[1].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t dim = s.params.get_int("dim");
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    gather_shard_strategies(v, s.inputs[0].shape, s.inputs[1].shape, dim, true);
    for (ReduceOp op : kAllReduceOps) v.push_back(strategy({P(op)}, {P(op), R()}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    const Tensor& index = in[1];
    Tensor x = narrow_off_dim(in[0], index.shape(), dim);
    GatherPlan g = gather_plan(c.schema.op, index, dim, x.size(dim));
    Tensor flat = reshape_rowmajor(x.permute(g.perm).contiguous(), {g.rows * g.n, 1});
    Tensor out = g.ids.numel() == 0 ? Tensor::empty({0, 1}, x.dtype(), x.device()) : kernels::embedding(flat, g.ids);
    return std::vector<Tensor>{reshape_rowmajor(out, g.moved_small).permute(inverse(g.perm)).contiguous()};
  };
  return r;
}

OpRule gather_backward_rule() {
  OpRule r;
  r.name = "gather_backward";
  r.input_names = {"grad", "index"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad");
    check_defined_input(s, 1, "index");
    check_index_dtype(s, 1);
    check_floating(s, 0, "grad");
    const Shape& input = s.params.get_ints("input_shape");
    DT_CHECK_ARG(!input.empty(), "dt::gather_backward: input_shape must have at least 1 dim");
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(input.size()));
    DT_CHECK_ARG(s.inputs[0].shape == s.inputs[1].shape, "dt::gather_backward: grad ", shape_str(s.inputs[0].shape),
                 " must have index's shape ", shape_str(s.inputs[1].shape));
    check_gather_shapes(s, input, s.inputs[1].shape, dim);
    return std::vector<OutputMeta>{{input, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    const int64_t dim = s.params.get_int("dim");
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    gather_shard_strategies(v, out[0].shape, s.inputs[1].shape, dim, false);
    v.push_back(strategy({P()}, {S(dim), S(dim)}));  // each rank scatters its part; the sum is the whole
    v.push_back(strategy({P()}, {P(), R()}));
    v.push_back(strategy({P(ReduceOp::kAvg)}, {P(ReduceOp::kAvg), R()}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    const Tensor& grad = in[0];
    const Tensor& index = in[1];
    Tensor out = Tensor::zeros(c.output_local_shape(0), grad.dtype(), grad.device());
    Tensor region = narrow_off_dim(out, index.shape(), dim);
    GatherPlan g = gather_plan(c.schema.op, index, dim, region.size(dim));
    Tensor gflat = reshape_rowmajor(grad.permute(g.perm).contiguous(), {g.rows * g.k, 1});
    Tensor acc = kernels::embedding_backward(gflat, g.ids, g.rows * g.n);
    Shape moved = g.moved_small;
    if (!moved.empty()) moved.back() = g.n;
    region.copy_(reshape_rowmajor(acc, moved).permute(inverse(g.perm)));
    return std::vector<Tensor>{out};
  };
  return r;
}

}  // namespace

void register_index_rules(std::vector<OpRule>& rules) {
  rules.push_back(index_select_rule());
  rules.push_back(index_select_backward_rule());
  rules.push_back(gather_rule());
  rules.push_back(gather_backward_rule());
}

}  // namespace ops::detail

namespace {
int64_t wrapped(const DTensor& t, int64_t dim, int64_t ndim, const char* op) {
  DT_CHECK_ARG(t.defined(), "dt::", op, ": an input is undefined");
  return wrap_dim(dim, std::max<int64_t>(ndim, 1), (std::string(op) + " dim").c_str());
}
}  // namespace

DTensor index_select(const DTensor& x, int64_t dim, const DTensor& index) {
  const int64_t d = wrapped(x, dim, x.dim(), "index_select");
  return ops::dispatch_one("index_select", {x, index}, ops::OpParams().set("dim", d));
}

DTensor index_select_backward(const DTensor& grad, const DTensor& index, int64_t dim, int64_t size) {
  const int64_t d = wrapped(grad, dim, grad.dim(), "index_select_backward");
  return ops::dispatch_one("index_select_backward", {grad, index}, ops::OpParams().set("dim", d).set("size", size));
}

DTensor gather(const DTensor& x, int64_t dim, const DTensor& index) {
  const int64_t d = wrapped(x, dim, x.dim(), "gather");
  return ops::dispatch_one("gather", {x, index}, ops::OpParams().set("dim", d));
}

DTensor gather_backward(const DTensor& grad, const DTensor& index, int64_t dim, const Shape& input_shape) {
  const int64_t d = wrapped(grad, dim, int64_t(input_shape.size()), "gather_backward");
  return ops::dispatch_one("gather_backward", {grad, index},
                           ops::OpParams().set("dim", d).set("input_shape", input_shape));
}

}  // namespace dt
