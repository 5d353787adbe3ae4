// The dropout rule: elementwise, with the mask drawn per global index (dropout.h).
#include "dtensor/ops/dropout.h"

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"

namespace dt {
namespace ops::detail {
namespace {

OpRule dropout_rule() {
  OpRule r;
  r.name = "dropout";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_floating(s, 0, "x");
    const double p = s.params.get_double("p");
    DT_CHECK_ARG(p >= 0 && p <= 1, "dt::", s.op, ": p must be in [0, 1], got ", p);
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v{replicate_all(1, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) v.push_back(strategy({S(d)}, {S(d)}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const double p = c.params().get_double("p");
    if (p >= 1) return std::vector<Tensor>{Tensor::zeros(x.shape(), x.dtype(), x.device())};
    Shape offset, block;
    for (const IndexRange& r : c.input_ranges(0)) {
      offset.push_back(r.begin);
      block.push_back(r.size());
    }
    const auto seed = uint64_t(c.params().get_int("seed"));
    Tensor u = Tensor::rand_block(c.schema.inputs[0].shape, offset, block, seed, DType::f64).to(x.device());
    Tensor dropped = kernels::compare_scalar(kernels::CompareOp::kLt, u, p);
    return std::vector<Tensor>{kernels::masked_fill(kernels::mul_scalar(x, 1.0 / (1.0 - p)), dropped, 0)};
  };
  return r;
}

}  // namespace

void register_dropout_rules(std::vector<OpRule>& rules) { rules.push_back(dropout_rule()); }

}  // namespace ops::detail

DTensor dropout(const DTensor& x, double p, uint64_t seed, bool training) {
  DT_CHECK_ARG(x.defined(), "dt::dropout: x is undefined");
  DT_CHECK_ARG(p >= 0 && p <= 1, "dt::dropout: p must be in [0, 1], got ", p);
  if (!training) return x;
  return ops::dispatch_one("dropout", {x}, ops::OpParams().set("p", p).set("seed", int64_t(seed)));
}

DTensor dropout_backward(const DTensor& grad, double p, uint64_t seed) {
  DT_CHECK_ARG(grad.defined(), "dt::dropout_backward: grad is undefined");
  return dropout(grad, p, seed, true);
}

}  // namespace dt
