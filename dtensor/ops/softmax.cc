// softmax / log_softmax and their backward: the softmax dim whole, the others keep their sharding.
#include "dtensor/ops/softmax.h"

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/softmax.h"

namespace dt {
namespace ops::detail {
namespace {

OpRule softmax_rule(const char* name, bool log) {
  OpRule r;
  r.name = name;
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_floating(s, 0, "x");
    wrap(s, s.params.get_int("dim"), s.inputs[0].ndim());
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t n = s.inputs[0].ndim();
    const int64_t dim = wrap(s, s.params.get_int("dim"), n);
    std::vector<DimStrategy> v{replicate_all(1, 1)};
    for (int64_t d = 0; d < n; ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d)}));
    return v;
  };
  r.compute = [log](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    return std::vector<Tensor>{log ? kernels::log_softmax(in[0], dim) : kernels::softmax(in[0], dim)};
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

}  // namespace

void register_softmax_rules(std::vector<OpRule>& rules) {
  rules.push_back(softmax_rule("softmax", false));
  rules.push_back(softmax_rule("log_softmax", true));
  rules.push_back(softmax_backward_rule("softmax_backward", false));
  rules.push_back(softmax_backward_rule("log_softmax_backward", true));
}

}  // namespace ops::detail

DTensor softmax(const DTensor& x, int64_t dim) {
  return ops::dispatch_one("softmax", {x}, ops::OpParams().set("dim", dim));
}
DTensor log_softmax(const DTensor& x, int64_t dim) {
  return ops::dispatch_one("log_softmax", {x}, ops::OpParams().set("dim", dim));
}

}  // namespace dt
