#include "kernels/ops/embedding.h"

#include "core/allocator.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {
void check_ids_in_range(const char* op, const Tensor& ids_c, int64_t num_embeddings, Stream stream) {
  IdsCheck c = check_ids(ids_c, num_embeddings, std::nullopt, stream);
  DT_CHECK_ARG(c.bad_pos < 0, op, ": id ", c.bad_value, " at flat position ", c.bad_pos,
               " is out of range for an embedding table of ", num_embeddings, " rows (expected 0 <= id < ",
               num_embeddings, ")");
}
}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(weight), stream);
  const char* op = "embedding";
  check_defined(weight, op, "weight");
  check_defined(ids, op, "ids");
  Device dev = common_device(op, {&weight, &ids}, {"weight", "ids"});
  DT_CHECK_ARG(weight.dim() == 2, op, ": weight must be 2-d [num_embeddings, dim], got shape ",
               shape_str(weight.shape()));
  check_integer(op, ids, "ids");
  int64_t v = weight.size(0), d = weight.size(1), n = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(d);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), dev);
  if (n == 0) return out;
  Tensor ic = ids.contiguous(stream);
  check_ids_in_range(op, ic, v, stream);
  if (d == 0) return out;
  Tensor wc = weight.contiguous(stream);
  DT_OPS_DISPATCH(dev, op, cpu::embedding(out, wc, ic, n, d), cuda::embedding(out, wc, ic, n, d, stream));
  return out;
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings,
                          std::optional<int64_t> padding_idx, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_out), stream);
  const char* op = "embedding_backward";
  check_defined(grad_out, op, "grad_out");
  check_defined(ids, op, "ids");
  Device dev = common_device(op, {&grad_out, &ids}, {"grad_out", "ids"});
  check_integer(op, ids, "ids");
  check_floating(op, grad_out, "grad_out");
  DT_CHECK_ARG(num_embeddings >= 0, op, ": num_embeddings must be non-negative, got ", num_embeddings);
  DT_CHECK_ARG(
      grad_out.dim() == ids.dim() + 1 && Shape(grad_out.shape().begin(), grad_out.shape().end() - 1) == ids.shape(), op,
      ": grad_out has shape ", shape_str(grad_out.shape()), ", expected ids' shape ", shape_str(ids.shape()),
      " plus the embedding dim");
  int64_t pad = -1;
  if (padding_idx) {
    pad = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
    DT_CHECK_ARG(pad >= 0 && pad < num_embeddings, op, ": padding_idx ", *padding_idx, " is out of range for ",
                 num_embeddings, " embeddings");
  }
  int64_t d = grad_out.size(-1), n = ids.numel();
  DType acc = acc_dtype(grad_out.dtype());
  Tensor acc_grad = Tensor::full({num_embeddings, d}, 0, acc, dev, stream);
  if (n > 0 && d > 0) {
    Tensor ic = ids.contiguous(stream);
    check_ids_in_range(op, ic, num_embeddings, stream);
    Tensor gc = grad_out.contiguous(stream);
    DT_OPS_DISPATCH(dev, op, cpu::embedding_backward(acc_grad, gc, ic, n, d, pad),
                    cuda::embedding_backward(acc_grad, gc, ic, n, d, pad, stream));
  }
  return acc == grad_out.dtype() ? acc_grad : acc_grad.to(grad_out.dtype(), stream);
}

}  // namespace dt::kernels
