// Backward ops: the gradients of linear, the norms, softmax, cross-entropy, embedding and the pointwise unary ops,
// each a rule of the one funnel (dispatch.h), so a backward picks its own sharding strategy like any op. Their
// strategies are the forward's read backwards: a forward Shard stays Shard; a Replicate input that met a sharded
// computation gets a Partial(sum) gradient (data parallel: the weight's gradient; column parallel: the input's);
// a Partial(sum) forward output wants a Replicate gradient (row parallel). nn/ (autograd) calls them.
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/loss.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/shape_ops.h"
#include "kernels/ops/softmax.h"

namespace dt::ops::detail {
namespace {

using kernels::CompareOp;

void check_same_shape(const OpSchema& s, size_t i, size_t j, const char* a, const char* b) {
  DT_CHECK_ARG(s.inputs[i].shape == s.inputs[j].shape, "dt::", s.op, ": ", a, " has shape ",
               shape_str(s.inputs[i].shape), " but ", b, " has ", shape_str(s.inputs[j].shape));
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

// Pointwise unary ops: inputs (grad_out, saved) of one shape, where saved is the forward's input or output (see
// kernels/ops/elementwise.h per op). Linear in grad_out, so a Partial(sum) gradient passes through.
OpRule unary_backward_rule(const std::string& op) {
  OpRule r;
  r.name = op + "_backward";
  r.input_names = {"grad_out", "saved"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "saved");
    check_same_shape(s, 0, 1, "grad_out", "the saved tensor");
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) v.push_back(strategy({S(d)}, {S(d), S(d)}));
    v.push_back(strategy({P()}, {P(), R()}));
    return v;
  };
  r.compute = [op](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& g = in[0];
    const Tensor& t = in[1];
    Tensor out;
    if (op == "relu")
      out = kernels::relu_backward(g, t);
    else if (op == "exp")
      out = kernels::exp_backward(g, t);
    else if (op == "log")
      out = kernels::log_backward(g, t);
    else if (op == "sqrt")
      out = kernels::sqrt_backward(g, t);
    else if (op == "rsqrt")
      out = kernels::rsqrt_backward(g, t);
    else if (op == "tanh")
      out = kernels::tanh_backward(g, t);
    else if (op == "sigmoid")
      out = kernels::sigmoid_backward(g, t);
    else if (op == "silu")
      out = kernels::silu_backward(g, t);
    else if (op == "abs")
      out = kernels::abs_backward(g, t);
    else if (op == "gelu")
      out = kernels::gelu_backward(g, t, kernels::GeluApprox(c.params().get_int("approx")));
    else if (op == "pow_scalar")
      out = kernels::pow_scalar_backward(g, t, c.params().get_double("exponent"));
    else
      DT_ASSERT(false, "no unary backward for ", op);
    return std::vector<Tensor>{out};
  };
  return r;
}

// Inputs (grad_out, out) of softmax / log_softmax over `dim`.
OpRule softmax_backward_rule(const char* name, bool log) {
  OpRule r;
  r.name = name;
  r.input_names = {"grad_out", "out"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "out");
    check_same_shape(s, 0, 1, "grad_out", "out");
    wrap(s, s.params.get_int("dim"), s.inputs[0].ndim());
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t n = s.inputs[0].ndim();
    const int64_t dim = wrap(s, s.params.get_int("dim"), n);
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < n; ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d), S(d)}));
    return v;
  };
  r.compute = [log](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    return std::vector<Tensor>{log ? kernels::log_softmax_backward(in[0], in[1], dim)
                                   : kernels::softmax_backward(in[0], in[1], dim)};
  };
  return r;
}

// layer_norm: inputs (grad_out, x, weight, mean, rstd) -> (grad_x, grad_weight, grad_bias);
// rms_norm: inputs (grad_out, x, weight, rstd) -> (grad_x, grad_weight). The weight is required (pass ones).
OpRule norm_backward_rule(const char* name, bool layer) {
  OpRule r;
  r.name = name;
  r.input_names = layer ? std::vector<std::string>{"grad_out", "x", "weight", "mean", "rstd"}
                        : std::vector<std::string>{"grad_out", "x", "weight", "rstd"};
  r.meta = [layer](const OpSchema& s) {
    for (size_t i = 0; i < s.inputs.size(); ++i) check_defined_input(s, i, "an input");
    check_same_shape(s, 0, 1, "grad_out", "x");
    const Shape& w = s.inputs[2].shape;
    std::vector<OutputMeta> v{{s.inputs[1].shape, s.inputs[1].dtype}, {w, s.inputs[2].dtype}};
    if (layer) v.push_back({w, s.inputs[2].dtype});
    return v;
  };
  r.strategies = [layer](const OpSchema& s, const std::vector<OutputMeta>& outs) {
    const int64_t lead = s.inputs[1].ndim() - s.inputs[2].ndim();
    std::vector<DimStrategy> v{replicate_all(s.inputs.size(), outs.size())};
    for (int64_t d = 0; d < lead; ++d) {
      std::vector<Placement> in{S(d), S(d), R(), S(d)};
      if (layer) in.push_back(S(d));
      std::vector<Placement> out{S(d), P()};
      if (layer) out.push_back(P());
      v.push_back(strategy(out, in));
    }
    return v;
  };
  r.compute = [layer](const OpCall&, const std::vector<Tensor>& in) {
    const Shape ns = in[2].shape();
    if (layer) {
      kernels::LayerNormGrads g = kernels::layer_norm_backward(in[0], in[1], ns, in[3], in[4], in[2], in[2]);
      return std::vector<Tensor>{g.grad_x, g.grad_weight, g.grad_bias};
    }
    kernels::RmsNormGrads g = kernels::rms_norm_backward(in[0], in[1], ns, in[3], in[2]);
    return std::vector<Tensor>{g.grad_x, g.grad_weight};
  };
  return r;
}

// Inputs (grad_loss, logits, targets, lse) -> grad_logits, with the forward's strategies (embedding.cc): rows
// sharded (kMean divides by the global count: one all-reduce of it), or classes sharded (loss parallel: the forward's
// log-sum-exp of every row gives this rank's columns of the softmax; nothing is gathered).
OpRule cross_entropy_backward_rule() {
  OpRule r;
  r.name = "cross_entropy_backward";
  r.input_names = {"grad_loss", "logits", "targets", "lse"};
  r.meta = [](const OpSchema& s) {
    for (size_t i = 0; i < 4; ++i) check_defined_input(s, i, "an input");
    return std::vector<OutputMeta>{{s.inputs[1].shape, s.inputs[1].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t last = s.inputs[1].ndim() - 1;
    const bool none = LossReduction(s.params.get_int("reduction")) == LossReduction::kNone;
    std::vector<DimStrategy> v{replicate_all(4, 1)};
    for (int64_t d = 0; d < last; ++d) v.push_back(strategy({S(d)}, {none ? S(d) : R(), S(d), S(d), S(d)}));
    v.push_back(strategy({S(last)}, {R(), S(last), R(), R()}));  // loss parallel
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& g = in[0];
    const Tensor& logits = in[1];
    const Tensor& targets = in[2];
    const Tensor& lse = in[3];
    const int64_t last = logits.dim() - 1;
    const int64_t ignore = c.params().get_int("ignore_index");
    const auto red = LossReduction(c.params().get_int("reduction"));
    const std::vector<int64_t> class_dims = c.mesh_dims_sharding(1, last);
    std::vector<int64_t> row_dims;
    const ShardingSpec& spec = c.input_spec(1);
    for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
      if (is_shard(spec[m]) && !is_shard(spec[m], last)) row_dims.push_back(m);
    if (class_dims.empty() && (row_dims.empty() || red != LossReduction::kMean))
      return std::vector<Tensor>{kernels::cross_entropy_backward(g, logits, targets, lse, ignore, red)};

    const DType acc = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
    const Device dev = logits.device();
    const int64_t rows = targets.numel();
    Tensor t = reshape_rowmajor(targets.to(DType::i64), {rows});
    Tensor counted = kernels::compare_scalar(CompareOp::kNe, t, double(ignore));
    // The gradient's scale per row: grad_loss (kNone: per row), divided by the global count for kMean.
    Tensor scale = red == LossReduction::kNone ? reshape_rowmajor(g.to(acc), {rows})
                                               : kernels::mul(counted.to(acc), reshape_rowmajor(g.to(acc), {1}));
    if (red == LossReduction::kMean) {
      Tensor count = reshape_rowmajor(kernels::sum(counted).to(acc), {1});
      for (int64_t m : row_dims) c.mesh.comm(m)->all_reduce(count, ReduceOp::kSum)->wait();
      scale = kernels::div(scale, count);
    } else {
      scale = kernels::mul(scale, counted.to(acc));
    }
    const IndexRange cls = c.input_ranges(1)[size_t(last)];
    Tensor x = reshape_rowmajor(logits.to(acc), {rows, cls.size()});
    Tensor p = kernels::exp(kernels::sub(x, reshape_rowmajor(lse, {rows}).unsqueeze(1)));
    Tensor cols = kernels::arange(cls.size(), DType::i64, dev);
    Tensor hit = kernels::eq(kernels::sub_scalar(t, double(cls.begin)).unsqueeze(1), cols.unsqueeze(0));
    Tensor grad = kernels::mul(kernels::sub(p, hit.to(acc)), scale.unsqueeze(1));
    return std::vector<Tensor>{reshape_rowmajor(grad, logits.shape()).to(logits.dtype())};
  };
  return r;
}

// Inputs (grad_out [..., D], ids) -> grad_weight [V, D] (V = param "num_embeddings"), the forward's strategies
// read backwards: ids sharded -> P(sum); a column-sharded table -> S(1); a row-sharded table (forward P(sum)
// output, so a Replicate gradient) -> S(0), each rank adding only the ids of its rows.
OpRule embedding_backward_rule() {
  OpRule r;
  r.name = "embedding_backward";
  r.input_names = {"grad_out", "ids"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "ids");
    check_integer(s, 1, "ids");
    const Shape& g = s.inputs[0].shape;
    DT_CHECK_ARG(!g.empty() && Shape(g.begin(), g.end() - 1) == s.inputs[1].shape, "dt::embedding_backward: grad_out ",
                 shape_str(g), " does not match ids ", shape_str(s.inputs[1].shape));
    return std::vector<OutputMeta>{{Shape{s.params.get_int("num_embeddings"), g.back()}, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t n = s.inputs[1].ndim();
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < n; ++d) v.push_back(strategy({P()}, {S(d), S(d)}));
    v.push_back(strategy({S(1)}, {S(n), R()}));
    v.push_back(strategy({S(0)}, {R(), R()}));
    v.push_back(strategy({P()}, {P(), R()}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& g = in[0];
    const Tensor& ids = in[1];
    const IndexRange rows = c.output_ranges(0)[0];
    if (rows.begin == 0 && rows.end == c.outputs[0].shape[0])
      return std::vector<Tensor>{kernels::embedding_backward(g, ids, rows.size())};
    LocalRows local = local_rows(ids, rows.begin, rows.size());
    Tensor gm = kernels::masked_fill(g, local.foreign.unsqueeze(-1), 0);
    return std::vector<Tensor>{kernels::embedding_backward(gm, local.ids, rows.size())};
  };
  return r;
}

}  // namespace

void register_backward_rules(std::vector<OpRule>& rules) {
  rules.push_back(linear_backward_rule());
  for (const char* op : {"relu", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "abs", "gelu", "pow_scalar"})
    rules.push_back(unary_backward_rule(op));
  rules.push_back(softmax_backward_rule("softmax_backward", false));
  rules.push_back(softmax_backward_rule("log_softmax_backward", true));
  rules.push_back(norm_backward_rule("layer_norm_backward", true));
  rules.push_back(norm_backward_rule("rms_norm_backward", false));
  rules.push_back(cross_entropy_backward_rule());
  rules.push_back(embedding_backward_rule());
}

}  // namespace dt::ops::detail
