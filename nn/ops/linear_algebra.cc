// matmul and linear (nn/ops.h).
#include "core/error.h"
#include "dtensor/ops/dispatch.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::nn {

using G = std::vector<DTensor>;

Variable matmul(const Variable& a, const Variable& b) {
  DT_CHECK_ARG(a.defined() && b.defined(), "nn::matmul: an operand is undefined");
  // 1-d operands become matrices (torch's rule), so the backward below only sees >= 2-d.
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  DTensor da = a.data(), db = b.data();
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return record_one("matmul", {a, b}, dt::matmul(da, db), [da, db, ga, gb](const G& g) {
    DTensor grad_a = ga ? sum_to(dt::matmul(g[0], dt::transpose(db, -1, -2)), da.shape()) : DTensor();
    DTensor grad_b = gb ? sum_to(dt::matmul(dt::transpose(da, -1, -2), g[0]), db.shape()) : DTensor();
    return G{grad_a, grad_b};
  });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  DTensor dx = x.data(), dw = weight.data();
  const bool has_bias = bias.defined();
  DTensor out = dt::linear(dx, dw, has_bias ? bias.data() : DTensor());
  return record_one("linear", {x, weight, bias}, std::move(out), [dx, dw, has_bias, weight](const G& g) {
    DTensor gb;
    if (has_bias) {
      std::vector<int64_t> lead;
      for (int64_t d = 0; d + 1 < g[0].dim(); ++d) lead.push_back(d);
      gb = lead.empty() ? g[0] : dt::sum(g[0], lead);
    }
    // Note [Deferred weight gradients]: the input's gradient now, the weight's when the queue runs.
    if (WeightGradQueue* queue = deferred_weight_grads(); queue != nullptr && can_defer_grad(weight)) {
      DTensor gx = ops::dispatch_one("linear_backward_input", {g[0], dw});
      queue->push([grad = g[0], dx, weight] {
        deliver_leaf_grad(weight, ops::dispatch_one("linear_backward_weight", {grad, dx}));
      });
      return G{gx, DTensor(), gb};
    }
    std::vector<DTensor> gxw = ops::dispatch("linear_backward", {g[0], dx, dw});
    return G{gxw[0], gxw[1], gb};
  });
}

}  // namespace dt::nn
