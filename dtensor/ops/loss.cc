// cross_entropy and its backward. Rows sharded, or the classes sharded (loss parallel): each rank's log-sum-exp
// of its columns combined across the class shards, the foreign targets masked, so no rank gathers the logits.
#include "dtensor/ops/loss.h"

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/shape_ops.h"

namespace dt {
namespace ops::detail {
namespace {

using kernels::CompareOp;

OpRule cross_entropy_rule() {
  OpRule r;
  r.name = "cross_entropy";
  r.input_names = {"logits", "targets"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "logits");
    check_defined_input(s, 1, "targets");
    check_floating(s, 0, "logits");
    check_integer(s, 1, "targets");
    const Shape& l = s.inputs[0].shape;
    DT_CHECK_ARG(!l.empty(), "dt::cross_entropy: logits need a class dim (the last), got a 0-d tensor");
    const Shape lead(l.begin(), l.end() - 1);
    DT_CHECK_ARG(s.inputs[1].shape == lead, "dt::cross_entropy: targets must have the logits' leading shape ",
                 shape_str(lead), " (logits ", shape_str(l), " with classes last), got ", shape_str(s.inputs[1].shape));
    const auto red = LossReduction(s.params.get_int("reduction"));
    // Outputs: the loss, and every row's log-sum-exp (saved for the backward).
    const DType acc = s.inputs[0].dtype == DType::f64 ? DType::f64 : DType::f32;
    return std::vector<OutputMeta>{{red == LossReduction::kNone ? lead : Shape{}, s.inputs[0].dtype}, {lead, acc}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t last = s.inputs[0].ndim() - 1;
    const bool none = LossReduction(s.params.get_int("reduction")) == LossReduction::kNone;
    std::vector<DimStrategy> v{replicate_all(2, 2)};
    for (int64_t d = 0; d < last; ++d) v.push_back(strategy({none ? S(d) : P(), S(d)}, {S(d), S(d)}));
    v.push_back(strategy({R(), R()}, {S(last), R()}));  // loss parallel
    return v;
  };
  // Loss parallel's own all-reduces move O(rows) values where gathering the logits moves O(rows x classes). They
  // are priced by bandwidth only: their latency replaces the all-gather's, and charging it would make small shapes
  // gather the logits, which loss parallel exists to avoid.
  r.extra_cost = [](const OpSchema& s, const std::vector<OutputMeta>&, const OpStrategy& st) {
    const ShardingSpec& spec = st.inputs[0];
    const int64_t last = s.inputs[0].ndim() - 1;
    int64_t rows = shape_numel(s.inputs[1].shape);
    for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
      if (is_shard(spec[m]) && !is_shard(spec[m], last)) rows = ceil_div(rows, s.mesh.size(m));
    const CostModel model;
    double cost = 0;
    for (int64_t m = 0; m < spec.mesh_ndim(); ++m) {
      const int64_t n = s.mesh.size(m);
      if (is_shard(spec[m], last))
        cost += model.beta * double(2 * (n - 1) * (ceil_div(rows, n) + ceil_div(2 * rows, n)) * 4);
    }
    return cost;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& logits = in[0];
    const Tensor& targets = in[1];
    const int64_t last = logits.dim() - 1;
    const int64_t ignore = c.params().get_int("ignore_index");
    const auto red = LossReduction(c.params().get_int("reduction"));
    const std::vector<int64_t> class_dims = c.mesh_dims_sharding(0, last);
    std::vector<int64_t> row_dims;
    const ShardingSpec& spec = c.input_spec(0);
    for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
      if (is_shard(spec[m]) && !is_shard(spec[m], last)) row_dims.push_back(m);
    if (class_dims.empty() && row_dims.empty()) {
      kernels::CrossEntropyResult res = kernels::cross_entropy(logits, targets, ignore, red);
      return std::vector<Tensor>{res.loss, res.lse};
    }

    const DType dtype = logits.dtype();
    const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Device dev = logits.device();
    const int64_t rows = targets.numel();
    Tensor t = reshape_rowmajor(targets.to(DType::i64), {rows});
    Tensor row_loss;  // [rows] in acc, 0 for ignored rows
    Tensor lse;       // the targets' shape, in acc
    if (class_dims.empty()) {
      kernels::CrossEntropyResult res = kernels::cross_entropy(logits, targets, ignore, LossReduction::kNone);
      row_loss = reshape_rowmajor(res.loss.to(acc), {rows});
      lse = res.lse;
    } else {
      // Loss parallel: a distributed log-softmax over the class-sharded mesh dims; the logits stay where they are.
      const int64_t classes = c.schema.inputs[0].shape[size_t(last)];
      Tensor bad = outside(t, 0, classes);
      Tensor counted = kernels::compare_scalar(CompareOp::kNe, t, double(ignore));
      const int64_t nbad = count_true(kernels::where(counted, bad, counted));
      DT_CHECK_ARG(nbad == 0, "dt::cross_entropy: ", nbad, " targets are outside [0, ", classes,
                   ") and are not ignore_index ", ignore);
      const IndexRange cls = c.input_ranges(0)[size_t(last)];
      Tensor x = reshape_rowmajor(logits.to(acc), {rows, cls.size()});
      Tensor mx =
          (cls.size() > 0 && rows > 0) ? kernels::amax(x, {1}) : identity_tensor({rows}, acc, dev, ReduceOp::kMax);
      if (rows > 0)
        for (int64_t m : class_dims) c.mesh.comm(m)->all_reduce(mx, ReduceOp::kMax)->wait();
      Tensor shifted = kernels::sub(x, mx.unsqueeze(1));
      Tensor sum_exp = kernels::sum(kernels::exp(shifted), {1});
      Tensor cols = kernels::arange(cls.size(), DType::i64, dev);
      Tensor hit = kernels::eq(kernels::sub_scalar(t, double(cls.begin)).unsqueeze(1), cols.unsqueeze(0));
      Tensor zero = Tensor::zeros({}, acc).to(dev);
      Tensor target_logit = kernels::sum(kernels::where(hit, shifted, zero), {1});  // x[t] - max, 0 elsewhere
      Tensor pack = kernels::stack({sum_exp, target_logit}, 0);
      if (rows > 0)
        for (int64_t m : class_dims) c.mesh.comm(m)->all_reduce(pack, ReduceOp::kSum)->wait();
      Tensor log_sum = kernels::log(pack.select(0, 0));
      lse = reshape_rowmajor(kernels::add(log_sum, mx), targets.shape());
      row_loss = kernels::sub(log_sum, pack.select(0, 1));  // lse - x[t]
      row_loss = kernels::masked_fill(row_loss, kernels::compare_scalar(CompareOp::kEq, t, double(ignore)), 0);
    }
    if (red == LossReduction::kNone)
      return std::vector<Tensor>{reshape_rowmajor(row_loss.to(dtype), targets.shape()), lse};
    Tensor total = kernels::sum(row_loss);
    if (red == LossReduction::kSum) return std::vector<Tensor>{total.to(dtype), lse};
    // kMean: divide by the global number of counted targets (one all-reduce over the row-sharded mesh dims).
    Tensor count =
        reshape_rowmajor(kernels::sum(kernels::compare_scalar(CompareOp::kNe, t, double(ignore))).to(acc), {1});
    for (int64_t m : row_dims) c.mesh.comm(m)->all_reduce(count, ReduceOp::kSum)->wait();
    return std::vector<Tensor>{kernels::div(total, reshape_rowmajor(count, {})).to(dtype), lse};
  };
  return r;
}

// Inputs (grad_loss, logits, targets, lse) -> grad_logits, with the forward's strategies (above): rows
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

}  // namespace

void register_loss_rules(std::vector<OpRule>& rules) {
  rules.push_back(cross_entropy_rule());
  rules.push_back(cross_entropy_backward_rule());
}

}  // namespace ops::detail

DCrossEntropyResult cross_entropy_with_lse(const DTensor& logits, const DTensor& targets, int64_t ignore_index,
                                           LossReduction reduction) {
  std::vector<DTensor> out =
      ops::dispatch("cross_entropy", {logits, targets},
                    ops::OpParams().set("ignore_index", ignore_index).set("reduction", int64_t(reduction)));
  return DCrossEntropyResult{out[0], out[1]};
}

DTensor cross_entropy(const DTensor& logits, const DTensor& targets, int64_t ignore_index, LossReduction reduction) {
  return cross_entropy_with_lse(logits, targets, ignore_index, reduction).loss;
}

}  // namespace dt
