#include "kernels/ops/loss.h"

#include "core/allocator.h"
#include "kernels/ops/common.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {

struct CeDims {
  Shape lead;
  int64_t rows = 0, classes = 0;
};

CeDims check_ce(const char* op, const Tensor& logits, const Tensor& targets) {
  check_defined(logits, op, "logits");
  check_defined(targets, op, "targets");
  check_floating(op, logits, "logits");
  check_integer(op, targets, "targets");
  DT_CHECK_ARG(logits.dim() >= 1, op, ": logits must have at least 1 dim (the classes), got a 0-d tensor");
  CeDims d;
  d.lead = Shape(logits.shape().begin(), logits.shape().end() - 1);
  d.rows = shape_numel(d.lead);
  d.classes = logits.size(-1);
  DT_CHECK_ARG(targets.shape() == d.lead, op, ": targets have shape ", shape_str(targets.shape()),
               ", expected logits' leading shape ", shape_str(d.lead), " (logits ", shape_str(logits.shape()),
               ", classes last)");
  DT_CHECK_ARG(d.classes > 0 || d.rows == 0, op, ": logits have 0 classes (shape ", shape_str(logits.shape()), ")");
  return d;
}

// Validates the targets and returns the number of non-ignored rows.
int64_t check_targets(const char* op, const Tensor& targets_c, int64_t classes, int64_t ignore_index, Stream stream) {
  IdsCheck c = check_ids(targets_c, classes, ignore_index, stream);
  DT_CHECK_ARG(c.bad_pos < 0, op, ": target ", c.bad_value, " at flat position ", c.bad_pos, " is out of range for ",
               classes, " classes (expected 0 <= target < ", classes, " or ignore_index = ", ignore_index, ")");
  return c.valid;
}

void run_rows(const char* op, const Tensor& row_loss, const Tensor& lse, const Tensor& logits_c,
              const Tensor& targets_c, const CeDims& d, int64_t ignore_index, Stream stream) {
  if (d.rows == 0) return;
  DT_OPS_DISPATCH(
      logits_c.device(), op,
      cpu::cross_entropy_rows(row_loss, lse, logits_c, targets_c, d.rows, d.classes, ignore_index),
      cuda::cross_entropy_rows(row_loss, lse, logits_c, targets_c, d.rows, d.classes, ignore_index, stream));
}

}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                 LossReduction reduction, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(logits), stream);
  const char* op = "cross_entropy";
  CeDims d = check_ce(op, logits, targets);
  Device dev = common_device(op, {&logits, &targets}, {"logits", "targets"});
  Tensor tc = targets.contiguous(stream), lc = logits.contiguous(stream);
  int64_t valid = check_targets(op, tc, d.classes, ignore_index, stream);
  DType acc = acc_dtype(logits.dtype());
  Tensor row_loss = Tensor::empty({d.rows}, acc, dev);
  CrossEntropyResult r;
  r.lse = Tensor::empty({d.rows}, acc, dev);
  run_rows(op, row_loss, r.lse, lc, tc, d, ignore_index, stream);
  r.lse = reshape_contig(r.lse, d.lead, stream);
  if (reduction == LossReduction::kNone) {
    r.loss = reshape_contig(row_loss.to(logits.dtype(), stream), d.lead, stream);
    return r;
  }
  Tensor total = sum(row_loss.to(DType::f64, stream), {}, false, stream);
  if (reduction == LossReduction::kMean) total = div_scalar(total, double(valid), stream);  // 0/0 = NaN, as torch
  r.loss = total.to(logits.dtype(), stream);
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, LossReduction reduction, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_loss), stream);
  const char* op = "cross_entropy_backward";
  CeDims d = check_ce(op, logits, targets);
  check_defined(grad_loss, op, "grad_loss");
  Device dev = common_device(op, {&grad_loss, &logits, &targets, &lse}, {"grad_loss", "logits", "targets", "lse"});
  check_same_dtype(op, grad_loss, "grad_loss", logits, "logits");
  if (reduction == LossReduction::kNone) {
    DT_CHECK_ARG(grad_loss.shape() == d.lead, op, ": with reduction none, grad_loss must have the targets' shape ",
                 shape_str(d.lead), ", got ", shape_str(grad_loss.shape()));
  } else {
    DT_CHECK_ARG(grad_loss.dim() == 0, op, ": with reduction mean or sum, grad_loss must be 0-d, got shape ",
                 shape_str(grad_loss.shape()));
  }
  DType acc = acc_dtype(logits.dtype());
  Tensor tc = targets.contiguous(stream), lc = logits.contiguous(stream);
  int64_t valid = check_targets(op, tc, d.classes, ignore_index, stream);
  Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), dev);
  if (grad.numel() == 0) return grad;
  Tensor lse_c;
  if (lse.defined()) {
    DT_CHECK_ARG(lse.dtype() == acc && lse.shape() == d.lead, op, ": lse must be ", dtype_name(acc), " of shape ",
                 shape_str(d.lead), " (as returned by cross_entropy), got ", dtype_name(lse.dtype()), " ",
                 shape_str(lse.shape()));
    lse_c = reshape_contig(lse, {d.rows}, stream);
  } else {
    lse_c = Tensor::empty({d.rows}, acc, dev);
    Tensor scratch = Tensor::empty({d.rows}, acc, dev);
    run_rows(op, scratch, lse_c, lc, tc, d, ignore_index, stream);
  }
  Tensor scale = Tensor::empty({d.rows}, acc, dev);
  scale.copy_(reshape_contig(grad_loss, {reduction == LossReduction::kNone ? d.rows : 1}, stream), stream);
  if (reduction == LossReduction::kMean) scale = div_scalar(scale, double(valid), stream);
  DT_OPS_DISPATCH(dev, op, cpu::cross_entropy_backward(grad, lc, tc, lse_c, scale, d.rows, d.classes, ignore_index),
                  cuda::cross_entropy_backward(grad, lc, tc, lse_c, scale, d.rows, d.classes, ignore_index, stream));
  return grad;
}

}  // namespace dt::kernels
