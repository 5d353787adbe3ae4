// layer_norm / rms_norm and their backward: the normalized (trailing) dims whole, the leading ones keep their
// sharding; the weight and bias replicated, their gradients Partial(sum) over a sharded leading dim.
#include "dtensor/ops/norm.h"

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/norm.h"

namespace dt {
namespace ops::detail {
namespace {

// Inputs: x, weight, [bias]; outputs: out, [mean], rstd.
OpRule norm_rule(const char* name, bool layer) {
  OpRule r;
  r.name = name;
  r.input_names = layer ? std::vector<std::string>{"x", "weight", "bias"} : std::vector<std::string>{"x", "weight"};
  r.meta = [layer](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_floating(s, 0, "x");
    const Shape& x = s.inputs[0].shape;
    const std::vector<int64_t>& ns = s.params.get_ints("normalized_shape");
    DT_CHECK_ARG(!ns.empty() && ns.size() <= x.size() && Shape(x.end() - int64_t(ns.size()), x.end()) == ns,
                 "dt::", s.op, ": normalized_shape ", shape_str(ns),
                 " must be non-empty and equal the trailing dims of x ", shape_str(x));
    for (size_t i = 1; i < s.inputs.size(); ++i) {
      if (!s.inputs[i].defined) continue;
      DT_CHECK_ARG(s.inputs[i].shape == ns, "dt::", s.op, ": ", i == 1 ? "weight" : "bias", " must have shape ",
                   shape_str(ns), ", got ", shape_str(s.inputs[i].shape));
      check_same_dtype(s, 0, i, {"x", "weight", "bias"});
    }
    const Shape lead(x.begin(), x.end() - int64_t(ns.size()));
    const DType acc = s.inputs[0].dtype == DType::f64 ? DType::f64 : DType::f32;
    std::vector<OutputMeta> v{{x, s.inputs[0].dtype}};
    if (layer) v.push_back({lead, acc});
    v.push_back({lead, acc});
    return v;
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& outs) {
    const int64_t lead = s.inputs[0].ndim() - int64_t(s.params.get_ints("normalized_shape").size());
    const size_t n_in = s.inputs.size(), n_out = outs.size();
    std::vector<DimStrategy> v{replicate_all(n_in, n_out)};
    for (int64_t d = 0; d < lead; ++d) {
      DimStrategy st{std::vector<Placement>(n_out, S(d)), std::vector<Placement>(n_in, R())};
      st.inputs[0] = S(d);
      v.push_back(std::move(st));
    }
    return v;
  };
  r.compute = [layer](const OpCall& c, const std::vector<Tensor>& in) {
    const Shape ns = c.params().get_ints("normalized_shape");
    const double eps = c.params().get_double("eps");
    if (layer) {
      kernels::LayerNormResult res = kernels::layer_norm(in[0], ns, in[1], in[2], eps);
      return std::vector<Tensor>{res.out, res.mean, res.rstd};
    }
    kernels::RmsNormResult res = kernels::rms_norm(in[0], ns, in[1], eps);
    return std::vector<Tensor>{res.out, res.rstd};
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

}  // namespace

void register_norm_rules(std::vector<OpRule>& rules) {
  rules.push_back(norm_rule("layer_norm", true));
  rules.push_back(norm_rule("rms_norm", false));
  rules.push_back(norm_backward_rule("layer_norm_backward", true));
  rules.push_back(norm_backward_rule("rms_norm_backward", false));
}

}  // namespace ops::detail

DLayerNormResult layer_norm_with_stats(const DTensor& x, const Shape& normalized_shape, const DTensor& weight,
                                       const DTensor& bias, double eps) {
  std::vector<DTensor> out = ops::dispatch("layer_norm", {x, weight, bias},
                                           ops::OpParams().set("normalized_shape", normalized_shape).set("eps", eps));
  return DLayerNormResult{out[0], out[1], out[2]};
}
DRmsNormResult rms_norm_with_stats(const DTensor& x, const Shape& normalized_shape, const DTensor& weight, double eps) {
  std::vector<DTensor> out =
      ops::dispatch("rms_norm", {x, weight}, ops::OpParams().set("normalized_shape", normalized_shape).set("eps", eps));
  return DRmsNormResult{out[0], out[1]};
}
DTensor layer_norm(const DTensor& x, const Shape& normalized_shape, const DTensor& weight, const DTensor& bias,
                   double eps) {
  return layer_norm_with_stats(x, normalized_shape, weight, bias, eps).out;
}
DTensor rms_norm(const DTensor& x, const Shape& normalized_shape, const DTensor& weight, double eps) {
  return rms_norm_with_stats(x, normalized_shape, weight, eps).out;
}

}  // namespace dt
