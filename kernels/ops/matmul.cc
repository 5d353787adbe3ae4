#include "kernels/ops/matmul.h"

#include <algorithm>

#include "core/allocator.h"
#include "kernels/fill.h"
#include "kernels/ops/common.h"
#include "kernels/ops/cpu/matmul_bf16.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {

// A 16-bit product the CPU has no native GEMM for: converted to f32 for the BLAS and rounded back.
bool converted_on_cpu(DType d) { return d == DType::f16 || (d == DType::bf16 && !cpu::has_bf16_gemm()); }

// The single stride that walks the batch dims [0, nb) of t in row-major order, if there is one (0 when every
// batch dim is broadcast or of size 1).
bool batch_stride_of(const Tensor& t, int64_t nb, int64_t* stride) {
  int64_t s = 0, expect = 0;
  bool have = false;
  for (int64_t d = nb - 1; d >= 0; --d) {
    int64_t sz = t.size(d), st = t.stride(d);
    if (sz == 1) continue;
    if (!have) {
      s = st;
      expect = st * sz;
      have = true;
    } else if (s == 0) {
      if (st != 0) return false;
    } else {
      if (st != expect) return false;
      expect = st * sz;
    }
  }
  *stride = s;
  return true;
}

// Describes the matrices of a [B, rows, cols] view to GEMM without a copy, if one of the matrix strides is 1.
bool matrix_operand(const Tensor& t3, GemmOperand* op) {
  int64_t rows = t3.size(1), cols = t3.size(2), rs = t3.stride(1), cs = t3.stride(2);
  int64_t ld_n = rows <= 1 ? std::max<int64_t>(1, cols) : rs;
  if ((cols <= 1 || cs == 1) && ld_n >= std::max<int64_t>(1, cols)) {
    op->trans = false;
    op->ld = ld_n;
    return true;
  }
  int64_t ld_t = cols <= 1 ? std::max<int64_t>(1, rows) : cs;
  if ((rows <= 1 || rs == 1) && ld_t >= std::max<int64_t>(1, rows)) {
    op->trans = true;
    op->ld = ld_t;
    return true;
  }
  return false;
}

// `t` is [batch dims (nb of them, B elements in all)..., rows, cols]. Returns the [B, rows, cols] tensor GEMM
// reads (a view of t, or a copy when the strides do not allow one) and fills `op`.
Tensor prepare_operand(const Tensor& t, int64_t nb, int64_t B, GemmOperand* op, Stream stream) {
  Tensor src = t;
  int64_t bs = 0;
  if (!batch_stride_of(src, nb, &bs)) {
    src = src.contiguous(stream);
    bool ok = batch_stride_of(src, nb, &bs);
    DT_ASSERT(ok);
  }
  int64_t rows = src.size(-2), cols = src.size(-1);
  Tensor t3 = src.as_strided({B, rows, cols}, {bs, src.stride(-2), src.stride(-1)}, src.offset());
  if (!matrix_operand(t3, op)) {
    if (bs == 0 || B == 1) {
      Tensor m = t3.select(0, 0).contiguous(stream);
      t3 = m.unsqueeze(0).expand({B, rows, cols});
    } else {
      t3 = t3.contiguous(stream);
    }
    bool ok = matrix_operand(t3, op);
    DT_ASSERT(ok);
  }
  op->data = t3.data_ptr();
  op->batch_stride = B <= 1 ? 0 : t3.stride(0);
  return t3;
}

// out: contiguous [B, M, N] (B = product of the nb batch dims); a: [batch..., M, K]; b: [batch..., K, N] (both
// expanded to the batch dims). out = a @ b + beta * out.
void run_gemm(const Tensor& out, const Tensor& a, const Tensor& b, int64_t nb, int64_t B, double beta, Stream stream) {
  int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (B == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0) kernels::fill(out, Scalar(0), stream);
    return;
  }
  GemmArgs g;
  g.dtype = out.dtype();
  g.batch = B;
  g.m = M;
  g.n = N;
  g.k = K;
  g.beta = beta;
  Tensor a3 = prepare_operand(a, nb, B, &g.a, stream);
  Tensor b3 = prepare_operand(b, nb, B, &g.b, stream);
  g.c = out.data_ptr();
  g.ldc = N;
  g.c_batch_stride = M * N;
  // A shared right operand and evenly spaced left rows: one GEMM over all B*M rows.
  if (B > 1 && g.b.batch_stride == 0 && !g.a.trans && g.a.batch_stride == M * g.a.ld) {
    g.m = B * M;
    g.batch = 1;
    g.a.batch_stride = 0;
    g.c_batch_stride = 0;
  }
  DT_OPS_DISPATCH(out.device(), "matmul", cpu::gemm(g), cuda::gemm(g, stream));
}

void check_operands(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  check_defined(a, op, an);
  check_defined(b, op, bn);
  common_device(op, {&a, &b}, {an, bn});
  check_same_dtype(op, a, an, b, bn);
  DT_CHECK_ARG(a.dtype() != DType::b8, op, ": bool operands are not supported");
  if (!a.device().is_cpu())
    DT_CHECK_ARG(is_floating(a.dtype()), op, ": integer matmul (", dtype_name(a.dtype()),
                 ") is only supported on the CPU");
}

// The [..., c] tensor t as [rows, c]: a view when the leading dims collapse, else a contiguous copy.
Tensor rows_of(const Tensor& t, Stream stream) {
  int64_t c = t.size(-1);
  int64_t rows = prod(t.shape(), 0, t.shape().size() - 1);
  int64_t rs = 0;
  if (batch_stride_of(t, t.dim() - 1, &rs)) return t.as_strided({rows, c}, {rs, t.stride(-1)}, t.offset());
  return reshape_contig(t, {rows, c}, stream);
}

struct MatmulPlan {
  Tensor a, b;  // at least 2-d (1-d operands promoted)
  Shape batch;
  Shape out_shape;  // the result's shape (promoted dims removed)
};

MatmulPlan plan_matmul(const char* op, const Tensor& a, const Tensor& b) {
  DT_CHECK_ARG(a.dim() >= 1 && b.dim() >= 1, op, ": both operands need at least 1 dim, got shapes ",
               shape_str(a.shape()), " and ", shape_str(b.shape()));
  MatmulPlan p;
  p.a = a.dim() == 1 ? a.unsqueeze(0) : a;
  p.b = b.dim() == 1 ? b.unsqueeze(1) : b;
  DT_CHECK_ARG(p.a.size(-1) == p.b.size(-2), op, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
               " cannot be multiplied (", p.a.size(-1), " columns in a vs ", p.b.size(-2), " rows in b)");
  Shape ab(p.a.shape().begin(), p.a.shape().end() - 2), bb(p.b.shape().begin(), p.b.shape().end() - 2);
  p.batch = broadcast_shapes(op, ab, bb);
  p.out_shape = p.batch;
  if (a.dim() > 1) p.out_shape.push_back(p.a.size(-2));
  if (b.dim() > 1) p.out_shape.push_back(p.b.size(-1));
  return p;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(a), stream);
  const char* op = "matmul";
  check_operands(op, a, "a", b, "b");
  Device dev = a.device();
  if (dev.is_cpu() && converted_on_cpu(a.dtype()))
    return matmul(a.to(DType::f32, stream), b.to(DType::f32, stream), stream).to(a.dtype(), stream);
  MatmulPlan p = plan_matmul(op, a, b);
  int64_t M = p.a.size(-2), K = p.a.size(-1), N = p.b.size(-1);
  Shape as = p.batch, bs = p.batch, full = p.batch;
  as.insert(as.end(), {M, K});
  bs.insert(bs.end(), {K, N});
  full.insert(full.end(), {M, N});
  Tensor out = Tensor::empty(full, a.dtype(), dev);
  int64_t B = shape_numel(p.batch);
  run_gemm(reshape_contig(out, {B, M, N}, stream), p.a.expand(as), p.b.expand(bs), int64_t(p.batch.size()), B, 0,
           stream);
  return reshape_contig(out, p.out_shape, stream);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  const char* op = "linear";
  check_operands(op, x, "x", weight, "weight");
  DT_CHECK_ARG(weight.dim() == 2, op, ": weight must be 2-d [out_features, in_features], got shape ",
               shape_str(weight.shape()));
  DT_CHECK_ARG(x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": x has shape ", shape_str(x.shape()),
               " but weight has shape ", shape_str(weight.shape()),
               " (x's last dim must equal in_features = ", weight.size(1), ")");
  if (bias.defined()) {
    common_device(op, {&x, &bias}, {"x", "bias"});
    check_same_dtype(op, bias, "bias", x, "x");
    DT_CHECK_ARG(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias must have shape [", weight.size(0),
                 "], got ", shape_str(bias.shape()));
  }
  Device dev = x.device();
  if (dev.is_cpu() && converted_on_cpu(x.dtype())) {
    Tensor bf = bias.defined() ? bias.to(DType::f32, stream) : Tensor();
    return linear(x.to(DType::f32, stream), weight.to(DType::f32, stream), bf, stream).to(x.dtype(), stream);
  }
  int64_t out_f = weight.size(0);
  Tensor x2 = rows_of(x, stream);
  Tensor out2 = Tensor::empty({x2.size(0), out_f}, x.dtype(), dev);
  if (bias.defined()) out2.copy_(bias, stream);
  run_gemm(reshape_contig(out2, {1, x2.size(0), out_f}, stream), x2, weight.t(), 0, 1, bias.defined() ? 1.0 : 0.0,
           stream);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_f);
  return reshape_contig(out2, out_shape, stream);
}

MatmulGrads matmul_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b, bool need_grad_a,
                            bool need_grad_b, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_out), stream);
  const char* op = "matmul_backward";
  check_operands(op, a, "a", b, "b");
  check_defined(grad_out, op, "grad_out");
  common_device(op, {&grad_out, &a}, {"grad_out", "a"});
  check_same_dtype(op, grad_out, "grad_out", a, "a");
  MatmulPlan p = plan_matmul(op, a, b);
  DT_CHECK_ARG(grad_out.shape() == p.out_shape, op, ": grad_out has shape ", shape_str(grad_out.shape()),
               ", expected matmul's result shape ", shape_str(p.out_shape));
  // grad_out with the promoted dims put back: batch + [M, N].
  Shape gshape = p.batch;
  gshape.insert(gshape.end(), {p.a.size(-2), p.b.size(-1)});
  Tensor g = grad_out.dim() == int64_t(gshape.size()) ? grad_out : reshape_contig(grad_out, gshape, stream);
  MatmulGrads r;
  if (need_grad_a) {
    Tensor ga = matmul(g, p.b.transpose(-1, -2), stream);
    r.grad_a = reshape_contig(sum_to_shape(ga, p.a.shape(), stream), a.shape(), stream);
  }
  if (need_grad_b) {
    Tensor gb;
    if (p.b.dim() == 2 && p.a.dim() > 2) {
      // Sum over the batch inside one GEMM: [K, B*M] @ [B*M, N].
      gb = matmul(rows_of(p.a, stream).t(), rows_of(g, stream), stream);
    } else {
      gb = sum_to_shape(matmul(p.a.transpose(-1, -2), g, stream), p.b.shape(), stream);
    }
    r.grad_b = reshape_contig(gb, b.shape(), stream);
  }
  return r;
}

LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, bool need_grad_bias,
                            Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_out), stream);
  const char* op = "linear_backward";
  check_operands(op, x, "x", weight, "weight");
  check_defined(grad_out, op, "grad_out");
  common_device(op, {&grad_out, &x}, {"grad_out", "x"});
  check_same_dtype(op, grad_out, "grad_out", x, "x");
  DT_CHECK_ARG(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": x ", shape_str(x.shape()),
               " and weight ", shape_str(weight.shape()), " do not fit linear");
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(weight.size(0));
  DT_CHECK_ARG(grad_out.shape() == out_shape, op, ": grad_out has shape ", shape_str(grad_out.shape()), ", expected ",
               shape_str(out_shape));
  Tensor g2 = rows_of(grad_out, stream), x2 = rows_of(x, stream);
  LinearGrads r;
  r.grad_x = reshape_contig(matmul(g2, weight, stream), x.shape(), stream);
  r.grad_weight = matmul(g2.t(), x2, stream);
  if (need_grad_bias) r.grad_bias = sum(g2, {0}, false, stream);
  return r;
}

}  // namespace dt::kernels
