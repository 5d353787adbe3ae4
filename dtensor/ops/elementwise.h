// Elementwise DTensor ops with torch broadcasting. The output follows the inputs' shardings (a dim that an input
// broadcasts needs that input replicated there); Partial inputs pass through exactly where the op is linear or
// monotone in them (see the rule table in elementwise.cc), anything else is reduced first.
//
//   Partial rules (per mesh dim; R = Replicate):
//     add       P(sum)+P(sum), P(avg)+P(avg); P(max)+R and R+P(max) -> P(max), likewise min
//     sub       P(sum)-P(sum), P(avg)-P(avg); P(max)-R -> P(max), R-P(max) -> P(min), and mirrored for min
//     mul       P(sum)*R, R*P(sum) -> P(sum) (likewise avg), P(product)*P(product) -> P(product)
//     div       P(sum)/R -> P(sum) (likewise avg), P(product)/P(product) -> P(product)
//     maximum   P(max),P(max) -> P(max); minimum: P(min),P(min) -> P(min)
//     neg       sum->sum, avg->avg, max<->min;   relu, exp, tanh, sigmoid: max->max, min->min
//     x+s, x-s  avg, max, min kept; s-x: avg kept, max<->min;  x*s, x/s: sum, avg kept, max/min kept for s>0
//               (s >= 0 for *) and swapped for s<0
//     where     R cond, P(op) a, P(op) b -> P(op) for every op;  masked_fill: avg/max/min, sum when value == 0
//     to(dtype) max/min for non-bool casts; sum/avg only when the cast widens exactly
//   Not linear (pow, abs, log, sqrt, rsqrt, silu, gelu, comparisons): Partial inputs are reduced first.
//
// Dtypes: binary ops (add, sub, mul, div, pow, maximum, minimum, the comparisons, where's a and b) promote mixed
// dtypes by torch's rule, kernels/ops/type_promotion.h promote_types (bool < integers < floating, within a kind the
// wider, f16 with bf16 -> f32): each rank converts the narrower operand's block before the kernel. A Partial(sum,
// avg, product) operand whose conversion is not exact is reduced first (Note [Partial under promotion]). div of
// integers gives f32 (true division); pow needs a floating operand; both bool is an error. A double scalar keeps a
// floating tensor's dtype (x_f16 * 2.0 is f16); a bool or integer tensor with a non-integer scalar becomes f32, and
// div/pow by a scalar compute integers in f32. Comparisons give bool.
#pragma once

#include "dtensor/dtensor.h"
#include "kernels/ops/elementwise.h"

namespace dt {

using kernels::GeluApprox;

DTensor add(const DTensor& a, const DTensor& b);
DTensor sub(const DTensor& a, const DTensor& b);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
DTensor pow(const DTensor& a, const DTensor& b);
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor minimum(const DTensor& a, const DTensor& b);

DTensor add(const DTensor& x, double s);
DTensor sub(const DTensor& x, double s);
DTensor rsub(const DTensor& x, double s);  // s - x
DTensor mul(const DTensor& x, double s);
DTensor div(const DTensor& x, double s);
DTensor pow(const DTensor& x, double s);

DTensor neg(const DTensor& x);
DTensor abs(const DTensor& x);
DTensor relu(const DTensor& x);
DTensor exp(const DTensor& x);
DTensor log(const DTensor& x);
DTensor sqrt(const DTensor& x);
DTensor rsqrt(const DTensor& x);
DTensor tanh(const DTensor& x);
DTensor sigmoid(const DTensor& x);
DTensor silu(const DTensor& x);
DTensor gelu(const DTensor& x, GeluApprox approx = GeluApprox::kNone);

DTensor eq(const DTensor& a, const DTensor& b);
DTensor ne(const DTensor& a, const DTensor& b);
DTensor lt(const DTensor& a, const DTensor& b);
DTensor le(const DTensor& a, const DTensor& b);
DTensor gt(const DTensor& a, const DTensor& b);
DTensor ge(const DTensor& a, const DTensor& b);
DTensor eq(const DTensor& x, double s);
DTensor ne(const DTensor& x, double s);
DTensor lt(const DTensor& x, double s);
DTensor le(const DTensor& x, double s);
DTensor gt(const DTensor& x, double s);
DTensor ge(const DTensor& x, double s);

// cond (bool) ? a : b, the three broadcast together.
DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b);
// x with `value` where mask (bool, broadcastable to x) is true.
DTensor masked_fill(const DTensor& x, const DTensor& mask, double value);
// Converts the dtype (returns x when it already has it).
DTensor to(const DTensor& x, DType dtype);

DTensor operator+(const DTensor& a, const DTensor& b);
DTensor operator-(const DTensor& a, const DTensor& b);
DTensor operator*(const DTensor& a, const DTensor& b);
DTensor operator/(const DTensor& a, const DTensor& b);
DTensor operator+(const DTensor& x, double s);
DTensor operator-(const DTensor& x, double s);
DTensor operator*(const DTensor& x, double s);
DTensor operator/(const DTensor& x, double s);
DTensor operator+(double s, const DTensor& x);
DTensor operator-(double s, const DTensor& x);
DTensor operator*(double s, const DTensor& x);
DTensor operator-(const DTensor& x);

// A plain Tensor mixed with a DTensor is a Replicate DTensor on the DTensor's mesh (as in PyTorch, where a
// torch.Tensor operand of a DTensor op is treated as replicated). It is wrapped without communication and without a
// check: the caller guarantees that it holds the same value on every rank of the mesh (a different value per rank
// gives a DTensor whose ranks disagree, silently). It is moved to the mesh's device when it is elsewhere.
DTensor as_replicate(const Tensor& t, const DeviceMesh& mesh);

#define DT_MIXED_BINARY_(name)                     \
  DTensor name(const DTensor& a, const Tensor& b); \
  DTensor name(const Tensor& a, const DTensor& b);
DT_MIXED_BINARY_(add)
DT_MIXED_BINARY_(sub)
DT_MIXED_BINARY_(mul)
DT_MIXED_BINARY_(div)
DT_MIXED_BINARY_(pow)
DT_MIXED_BINARY_(maximum)
DT_MIXED_BINARY_(minimum)
DT_MIXED_BINARY_(eq)
DT_MIXED_BINARY_(ne)
DT_MIXED_BINARY_(lt)
DT_MIXED_BINARY_(le)
DT_MIXED_BINARY_(gt)
DT_MIXED_BINARY_(ge)
DT_MIXED_BINARY_(operator+)
DT_MIXED_BINARY_(operator-)
DT_MIXED_BINARY_(operator*)
DT_MIXED_BINARY_(operator/)
#undef DT_MIXED_BINARY_

}  // namespace dt
