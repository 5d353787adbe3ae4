// matmul and linear rules, written as einsum labels: every output dim is carried by the operands that have it at
// full size (they may shard it), the contracting dim gives P(sum) when both operands shard it.
#include "dtensor/ops/matmul.h"

#include <algorithm>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/matmul.h"

namespace dt {
namespace ops::detail {
namespace {

struct Label {
  int64_t a = -1, b = -1, out = -1;  // the label's dim in each operand (-1: absent or broadcast)
};

struct MatmulDims {
  Shape out;
  std::vector<Label> free;  // labels of the output dims
  int64_t ka = 0, kb = 0;   // the contracting dim of a and b
};

MatmulDims matmul_dims(const OpSchema& s) {
  const Shape& a = s.inputs[0].shape;
  const Shape& b = s.inputs[1].shape;
  const int64_t na = int64_t(a.size()), nb = int64_t(b.size());
  DT_CHECK_ARG(na >= 1 && nb >= 1, "dt::matmul: both operands need at least 1 dim, got ", shape_str(a), " and ",
               shape_str(b));
  MatmulDims d;
  d.ka = na - 1;
  d.kb = nb == 1 ? 0 : nb - 2;
  DT_CHECK_ARG(a[size_t(d.ka)] == b[size_t(d.kb)], "dt::matmul: contracting sizes differ: a ", shape_str(a), " has ",
               a[size_t(d.ka)], " columns, b ", shape_str(b), " has ", b[size_t(d.kb)], " rows");
  const Shape batch_a = na >= 2 ? Shape(a.begin(), a.end() - 2) : Shape{};
  const Shape batch_b = nb >= 2 ? Shape(b.begin(), b.end() - 2) : Shape{};
  if (na >= 2 && nb >= 2) {
    d.out = broadcast_shapes("matmul", {batch_a, batch_b});
    const int64_t nbatch = int64_t(d.out.size());
    for (int64_t j = 0; j < nbatch; ++j) {
      Label l;
      l.out = j;
      l.a = aligned_dim(batch_a, d.out, j);
      l.b = aligned_dim(batch_b, d.out, j);
      d.free.push_back(l);
    }
    d.out.push_back(a[size_t(na - 2)]);
    d.out.push_back(b[size_t(nb - 1)]);
    d.free.push_back(Label{na - 2, -1, nbatch});
    d.free.push_back(Label{-1, nb - 1, nbatch + 1});
  } else if (na >= 2) {  // [..., m, k] @ [k]
    d.out = Shape(a.begin(), a.end() - 1);
    for (int64_t j = 0; j < na - 1; ++j) d.free.push_back(Label{j, -1, j});
  } else if (nb >= 2) {  // [k] @ [..., k, n]
    d.out = batch_b;
    d.out.push_back(b[size_t(nb - 1)]);
    for (int64_t j = 0; j < nb - 2; ++j) d.free.push_back(Label{-1, j, j});
    d.free.push_back(Label{-1, nb - 1, nb - 2});
  }  // else [k] @ [k]: a 0-d result, only the contracting label
  return d;
}

OpRule matmul_rule() {
  OpRule r;
  r.name = "matmul";
  r.input_names = {"a", "b"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "a");
    check_defined_input(s, 1, "b");
    check_same_dtype(s, 0, 1, {"a", "b"});
    return std::vector<OutputMeta>{{matmul_dims(s).out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const MatmulDims d = matmul_dims(s);
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (const Label& l : d.free) v.push_back(strategy({S(l.out)}, {l.a >= 0 ? S(l.a) : R(), l.b >= 0 ? S(l.b) : R()}));
    v.push_back(strategy({P()}, {S(d.ka), S(d.kb)}));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      v.push_back(strategy({P(op)}, {P(op), R()}));
      v.push_back(strategy({P(op)}, {R(), P(op)}));
    }
    return v;
  };
  r.compute = [](const OpCall&, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kernels::matmul(in[0], in[1])};
  };
  return r;
}

OpRule linear_rule() {
  OpRule r;
  r.name = "linear";
  r.input_names = {"x", "weight", "bias"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_defined_input(s, 1, "weight");
    const Shape& x = s.inputs[0].shape;
    const Shape& w = s.inputs[1].shape;
    DT_CHECK_ARG(x.size() >= 1, "dt::linear: x must have at least 1 dim, got ", shape_str(x));
    DT_CHECK_ARG(w.size() == 2, "dt::linear: weight must be [out_features, in_features], got ", shape_str(w));
    DT_CHECK_ARG(x.back() == w[1], "dt::linear: x ", shape_str(x), " has ", x.back(), " features but weight ",
                 shape_str(w), " expects ", w[1]);
    check_same_dtype(s, 0, 1, {"x", "weight", "bias"});
    if (s.inputs[2].defined) {
      DT_CHECK_ARG(s.inputs[2].shape == Shape{w[0]}, "dt::linear: bias must be [", w[0], "], got ",
                   shape_str(s.inputs[2].shape));
      check_same_dtype(s, 0, 2, {"x", "weight", "bias"});
    }
    Shape out(x.begin(), x.end() - 1);
    out.push_back(w[0]);
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t nx = s.inputs[0].ndim();
    std::vector<DimStrategy> v{replicate_all(3, 1)};
    for (int64_t d = 0; d + 1 < nx; ++d) v.push_back(strategy({S(d)}, {S(d), R(), R()}));
    v.push_back(strategy({S(nx - 1)}, {R(), S(0), S(0)}));  // column parallel
    v.push_back(strategy({P()}, {S(nx - 1), S(1), P()}));   // row parallel: bias added once
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      v.push_back(strategy({P(op)}, {P(op), R(), P(op)}));
      v.push_back(strategy({P(op)}, {R(), P(op), P(op)}));
    }
    return v;
  };
  r.compute = [](const OpCall&, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kernels::linear(in[0], in[1], in[2])};
  };
  return r;
}

// Inputs (grad_out, x, weight) -> (grad_x, grad_weight); the bias gradient is a sum of grad_out (nn/ uses dt::sum).
OpRule linear_backward_rule() {
  OpRule r;
  r.name = "linear_backward";
  r.input_names = {"grad_out", "x", "weight"};
  r.meta = [](const OpSchema& s) {
    for (size_t i = 0; i < 3; ++i) check_defined_input(s, i, std::vector<std::string>{"grad_out", "x", "weight"}[i]);
    const Shape& x = s.inputs[1].shape;
    const Shape& w = s.inputs[2].shape;
    DT_CHECK_ARG(w.size() == 2 && !x.empty() && x.back() == w[1], "dt::linear_backward: x ", shape_str(x),
                 " and weight ", shape_str(w), " do not match");
    Shape g = x;
    g.back() = w[0];
    DT_CHECK_ARG(s.inputs[0].shape == g, "dt::linear_backward: grad_out must have shape ", shape_str(g), ", got ",
                 shape_str(s.inputs[0].shape));
    return std::vector<OutputMeta>{{x, s.inputs[1].dtype}, {w, s.inputs[2].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t last = s.inputs[1].ndim() - 1;
    std::vector<DimStrategy> v{replicate_all(3, 2)};
    for (int64_t d = 0; d < last; ++d) v.push_back(strategy({S(d), P()}, {S(d), S(d), R()}));  // data parallel
    v.push_back(strategy({P(), S(0)}, {S(last), R(), S(0)}));                                  // column parallel
    v.push_back(strategy({S(last), S(1)}, {R(), S(last), S(1)}));                              // row parallel
    v.push_back(strategy({P(), P()}, {P(), R(), R()}));
    return v;
  };
  r.compute = [](const OpCall&, const std::vector<Tensor>& in) {
    kernels::LinearGrads g = kernels::linear_backward(in[0], in[1], in[2], /*need_grad_bias=*/false);
    return std::vector<Tensor>{g.grad_x, g.grad_weight};
  };
  return r;
}

// linear_backward in two halves, for backwards split into input and weight gradients (zero-bubble pipeline
// schedules, Note [Deferred weight gradients] in nn/autograd.h): (grad_out, weight) -> grad_x and (grad_out, x) ->
// grad_weight, each with linear_backward's strategies restricted to its operands.
OpRule linear_backward_input_rule() {
  OpRule r;
  r.name = "linear_backward_input";
  r.input_names = {"grad_out", "weight"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "weight");
    const Shape& g = s.inputs[0].shape;
    const Shape& w = s.inputs[1].shape;
    DT_CHECK_ARG(w.size() == 2 && !g.empty() && g.back() == w[0], "dt::linear_backward_input: grad_out ", shape_str(g),
                 " and weight ", shape_str(w), " do not match");
    Shape x = g;
    x.back() = w[1];
    return std::vector<OutputMeta>{{x, s.inputs[1].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t last = s.inputs[0].ndim() - 1;
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < last; ++d) v.push_back(strategy({S(d)}, {S(d), R()}));  // data parallel
    v.push_back(strategy({P()}, {S(last), S(0)}));                                  // column parallel
    v.push_back(strategy({S(last)}, {R(), S(1)}));                                  // row parallel
    v.push_back(strategy({P()}, {P(), R()}));
    return v;
  };
  r.compute = [](const OpCall&, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kernels::matmul(in[0], in[1])};
  };
  return r;
}

OpRule linear_backward_weight_rule() {
  OpRule r;
  r.name = "linear_backward_weight";
  r.input_names = {"grad_out", "x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "x");
    const Shape& g = s.inputs[0].shape;
    const Shape& x = s.inputs[1].shape;
    DT_CHECK_ARG(!g.empty() && g.size() == x.size() && std::equal(g.begin(), g.end() - 1, x.begin()),
                 "dt::linear_backward_weight: grad_out ", shape_str(g), " and x ", shape_str(x), " do not match");
    return std::vector<OutputMeta>{{Shape{g.back(), x.back()}, s.inputs[1].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t last = s.inputs[0].ndim() - 1;
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < last; ++d) v.push_back(strategy({P()}, {S(d), S(d)}));  // data parallel
    v.push_back(strategy({S(0)}, {S(last), R()}));                                  // column parallel
    v.push_back(strategy({S(1)}, {R(), S(last)}));                                  // row parallel
    v.push_back(strategy({P()}, {P(), R()}));
    return v;
  };
  r.compute = [](const OpCall&, const std::vector<Tensor>& in) {
    // Every leading dim is summed over: [N, out]^T @ [N, in].
    const Tensor g = in[0].reshape({-1, in[0].size(-1)}), x = in[1].reshape({-1, in[1].size(-1)});
    return std::vector<Tensor>{kernels::matmul(g.t(), x)};
  };
  return r;
}

}  // namespace

void register_matmul_rules(std::vector<OpRule>& rules) {
  rules.push_back(matmul_rule());
  rules.push_back(linear_rule());
  rules.push_back(linear_backward_rule());
  rules.push_back(linear_backward_input_rule());
  rules.push_back(linear_backward_weight_rule());
}

}  // namespace ops::detail

DTensor matmul(const DTensor& a, const DTensor& b) { return ops::dispatch_one("matmul", {a, b}); }

DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias) {
  return ops::dispatch_one("linear", {x, weight, bias});
}

}  // namespace dt
