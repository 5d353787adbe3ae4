// Fused attention (kernels/ops/attention.h): validation, the compute dtype, then the device's loops.
#include "kernels/ops/attention.h"

#include <cmath>

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {

// In the compute dtype with a contiguous last dim (a copy only where needed).
Tensor prepared(const Tensor& t, DType compute, Stream stream) {
  Tensor c = t.to(compute, stream);
  return c.dim() > 0 && c.stride(-1) != 1 && c.numel() > 0 ? c.contiguous(stream) : c;
}

AttentionProblem problem(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    check_defined(*t, op, name);
    check_floating(op, *t, name);
    DT_CHECK_ARG(t->dim() == 4, op, ": ", name, " must be [batch, heads, seq, head_dim], got ", shape_str(t->shape()));
  }
  check_same_dtype(op, q, "q", k, "k");
  check_same_dtype(op, q, "q", v, "v");
  common_device(op, {&q, &k, &v}, {"q", "k", "v"});
  DT_CHECK_ARG(k.shape() == v.shape() && q.size(0) == k.size(0) && q.size(3) == k.size(3), op,
               ": q [B, Hq, Tq, D] needs k and v [B, Hkv, Tk, D] of one shape, got q ", shape_str(q.shape()), ", k ",
               shape_str(k.shape()), ", v ", shape_str(v.shape()));
  AttentionProblem p;
  p.batch = q.size(0);
  p.q_heads = q.size(1);
  p.kv_heads = k.size(1);
  p.tq = q.size(2);
  p.tk = k.size(2);
  p.head_dim = q.size(3);
  p.causal = o.causal;
  p.scale = o.scale != 0 ? o.scale : (p.head_dim > 0 ? 1.0 / std::sqrt(double(p.head_dim)) : 1.0);
  p.q_head_offset = o.q_head_offset;
  p.kv_head_offset = o.kv_head_offset;
  if (o.group > 0) {
    p.group = o.group;
  } else {
    DT_CHECK_ARG(p.kv_heads > 0 && p.q_heads % p.kv_heads == 0, op, ": ", p.q_heads,
                 " query heads are not a multiple of ", p.kv_heads, " key/value heads");
    p.group = p.kv_heads > 0 ? p.q_heads / p.kv_heads : 1;
  }
  DT_CHECK_ARG(p.q_head_offset >= 0 && p.kv_head_offset >= 0, op, ": negative head offsets");
  if (p.q_heads > 0) {
    const int64_t first = p.kv_head_of(0), last = p.kv_head_of(p.q_heads - 1);
    DT_CHECK_ARG(first >= 0 && last < p.kv_heads, op, ": query heads ", p.q_head_offset, "..",
                 p.q_head_offset + p.q_heads - 1, " read key/value heads ", first + p.kv_head_offset, "..",
                 last + p.kv_head_offset, " (", p.group, " query heads each), but the block holds ", p.kv_head_offset,
                 "..", p.kv_head_offset + p.kv_heads - 1);
  }
  DT_CHECK_ARG(o.key_start.empty() || int64_t(o.key_start.size()) == p.batch, op, ": key_start needs one entry per ",
               "batch row (", p.batch, "), got ", o.key_start.size());
  for (int64_t s : o.key_start) DT_CHECK_ARG(s >= 0, op, ": key_start entries must be >= 0, got ", s);
  return p;
}

// q, k and v in the compute dtype with their strides in `p`, and key_start on the computation's device (its data
// pointer in `p`): what the forward and the backward both hand the loops.
struct Inputs {
  Tensor q, k, v, key_start;
};
Inputs prepare(AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
               DType compute, Stream stream) {
  Inputs in{prepared(q, compute, stream), prepared(k, compute, stream), prepared(v, compute, stream), {}};
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = in.q.stride(i);
    p.k_stride[i] = in.k.stride(i);
    p.v_stride[i] = in.v.stride(i);
  }
  if (!o.key_start.empty()) {
    Tensor host = Tensor::from_data(o.key_start, {int64_t(o.key_start.size())});
    in.key_start = q.device().is_cpu() ? host : host.to(q.device(), stream);
    p.key_start = in.key_start.data<int64_t>();
  }
  return in;
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(q), stream);
  AttentionProblem p = problem("attention", q, k, v, o);
  const DType compute = acc_dtype(q.dtype());
  const Device device = q.device();
  const Inputs in = prepare(p, q, k, v, o, compute, stream);
  Tensor out = Tensor::empty(q.shape(), compute, device);
  Tensor lse = Tensor::empty({p.batch, p.q_heads, p.tq}, compute, device);
  if (out.numel() > 0 || lse.numel() > 0)
    DT_OPS_DISPATCH(device, "attention", cpu::attention(p, in.q, in.k, in.v, out, lse),
                    cuda::attention(p, in.q, in.k, in.v, out, lse, stream));
  return {out.to(q.dtype(), stream), lse};
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const AttentionOptions& o, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(dout), stream);
  AttentionProblem p = problem("attention_backward", q, k, v, o);
  const DType compute = acc_dtype(q.dtype());
  const Device device = q.device();
  check_defined(dout, "attention_backward", "dout");
  check_defined(out, "attention_backward", "out");
  check_defined(lse, "attention_backward", "lse");
  DT_CHECK_ARG(dout.shape() == q.shape() && out.shape() == q.shape() &&
                   lse.shape() == Shape({p.batch, p.q_heads, p.tq}) && lse.dtype() == compute,
               "attention_backward: dout and out must be q's shape ", shape_str(q.shape()), " and lse [", p.batch, ", ",
               p.q_heads, ", ", p.tq, "] ", dtype_name(compute), ", got ", shape_str(dout.shape()), ", ",
               shape_str(out.shape()), ", ", shape_str(lse.shape()));
  common_device("attention_backward", {&q, &dout, &out, &lse}, {"q", "dout", "out", "lse"});
  const Inputs in = prepare(p, q, k, v, o, compute, stream);
  Tensor doc = dout.to(compute, stream).contiguous(stream), oc = out.to(compute, stream).contiguous(stream);
  Tensor lc = lse.contiguous(stream);
  Tensor dq = Tensor::empty(q.shape(), compute, device), dk = Tensor::empty(k.shape(), compute, device),
         dv = Tensor::empty(v.shape(), compute, device);
  for (Tensor* t : {&dq, &dk, &dv}) t->zero_(stream);
  if (q.numel() > 0 && k.numel() > 0)
    DT_OPS_DISPATCH(device, "attention_backward", cpu::attention_backward(p, doc, in.q, in.k, in.v, oc, lc, dq, dk, dv),
                    cuda::attention_backward(p, doc, in.q, in.k, in.v, oc, lc, dq, dk, dv, stream));
  return {dq.to(q.dtype(), stream), dk.to(k.dtype(), stream), dv.to(v.dtype(), stream)};
}

}  // namespace dt::kernels
