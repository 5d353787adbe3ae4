// Elementwise rules: broadcasting shardings plus the Partial table of elementwise.h.
#include "dtensor/ops/elementwise.h"

#include <optional>
#include <string_view>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/type_promotion.h"

namespace dt {
namespace ops::detail {
namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// One Partial pass-through case: per input, the Partial op it must have (nullopt: Replicate), and the output's op.
struct PartialCase {
  std::vector<std::optional<ReduceOp>> inputs;
  ReduceOp output;
};

std::vector<Shape> input_shapes(const OpSchema& s) {
  std::vector<Shape> shapes;
  for (const TensorMeta& t : s.inputs) shapes.push_back(t.shape);
  return shapes;
}

bool exact_widening(DType from, DType to);

// Note [Partial under promotion]
// An operand converted to the promoted dtype before the kernel is converted on every rank separately: max and min
// commute with that (every cast is non-decreasing), sum, avg and product only when the cast is exact. A Partial case
// needing a Partial(sum/avg/product) operand whose cast is not exact is dropped (the operand is reduced first).
bool partial_case_survives(const OpSchema& s, const std::vector<std::optional<ReduceOp>>& inputs, DType common) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<ReduceOp>& op = inputs[i];
    if (op && *op != ReduceOp::kMax && *op != ReduceOp::kMin && !exact_widening(s.inputs[i].dtype, common))
      return false;
  }
  return true;
}

// The dtype the operands a and b (inputs ia, ib) are converted to before the kernel (kernels/ops/type_promotion.h).
DType common_dtype(const OpSchema& s, size_t ia, size_t ib) {
  return kernels::promote_types(s.inputs[ia].dtype, s.inputs[ib].dtype);
}

// t converted to `dtype` on this rank (no copy when it already has it).
Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

// R -> R, then S(d) of the output for every dim (inputs that broadcast d stay R), then the Partial cases.
// convert_to: the dtype the operands are promoted to before the kernel (binary ops).
std::vector<DimStrategy> elementwise_strategies(const OpSchema& s, const Shape& out,
                                                const std::vector<PartialCase>& partials,
                                                std::optional<DType> convert_to = std::nullopt) {
  const size_t n = s.inputs.size();
  std::vector<DimStrategy> v{replicate_all(n, 1)};
  for (int64_t d = 0; d < int64_t(out.size()); ++d) {
    DimStrategy st{{S(d)}, {}};
    for (const TensorMeta& t : s.inputs) {
      const int64_t a = aligned_dim(t.shape, out, d);
      st.inputs.push_back(a >= 0 ? S(a) : R());
    }
    v.push_back(std::move(st));
  }
  for (const PartialCase& c : partials) {
    if (convert_to && !partial_case_survives(s, c.inputs, *convert_to)) continue;
    DimStrategy st{{P(c.output)}, {}};
    for (const auto& op : c.inputs) st.inputs.push_back(op ? P(*op) : R());
    v.push_back(std::move(st));
  }
  return v;
}

// ---- unary ----

struct UnaryInfo {
  const char* name;
  UnaryOp op;
  bool needs_float;
};

constexpr UnaryInfo kUnary[] = {
    {"neg", UnaryOp::kNeg, false},
    {"abs", UnaryOp::kAbs, false},
    {"relu", UnaryOp::kRelu, false},
    {"exp", UnaryOp::kExp, true},
    {"log", UnaryOp::kLog, true},
    {"sqrt", UnaryOp::kSqrt, true},
    {"rsqrt", UnaryOp::kRsqrt, true},
    {"tanh", UnaryOp::kTanh, true},
    {"sigmoid", UnaryOp::kSigmoid, true},
    {"silu", UnaryOp::kSilu, true},
    {"gelu", UnaryOp::kGeluErf, true},
    {"gelu_tanh", UnaryOp::kGeluTanh, true},
    {"add_scalar", UnaryOp::kAddScalar, false},
    {"sub_scalar", UnaryOp::kSubScalar, false},
    {"rsub_scalar", UnaryOp::kRsubScalar, false},
    {"mul_scalar", UnaryOp::kMulScalar, false},
    {"div_scalar", UnaryOp::kDivScalar, true},
    {"pow_scalar", UnaryOp::kPowScalar, true},
};

std::vector<PartialCase> unary_partials(UnaryOp op, double s) {
  const ReduceOp sum = ReduceOp::kSum, avg = ReduceOp::kAvg, mx = ReduceOp::kMax, mn = ReduceOp::kMin;
  auto c = [](ReduceOp in, ReduceOp out) { return PartialCase{{in}, out}; };
  switch (op) {
    case UnaryOp::kNeg:
      return {c(sum, sum), c(avg, avg), c(mx, mn), c(mn, mx)};
    case UnaryOp::kRelu:
    case UnaryOp::kExp:
    case UnaryOp::kTanh:
    case UnaryOp::kSigmoid:
      // Non-decreasing and defined everywhere: f(max a_i) = max f(a_i).
      return {c(mx, mx), c(mn, mn)};
    case UnaryOp::kAddScalar:
    case UnaryOp::kSubScalar:
      return {c(avg, avg), c(mx, mx), c(mn, mn)};
    case UnaryOp::kRsubScalar:
      return {c(avg, avg), c(mx, mn), c(mn, mx)};
    case UnaryOp::kMulScalar:
      if (s >= 0) return {c(sum, sum), c(avg, avg), c(mx, mx), c(mn, mn)};
      return {c(sum, sum), c(avg, avg), c(mx, mn), c(mn, mx)};
    case UnaryOp::kDivScalar:
      if (s > 0) return {c(sum, sum), c(avg, avg), c(mx, mx), c(mn, mn)};
      if (s < 0) return {c(sum, sum), c(avg, avg), c(mx, mn), c(mn, mx)};
      return {};
    default:
      return {};  // abs, log, sqrt, rsqrt, silu, gelu, pow: not linear, not monotone or not defined everywhere
  }
}

OpRule unary_rule(const UnaryInfo& info) {
  OpRule r;
  r.name = info.name;
  r.input_names = {"x"};
  const UnaryInfo inf = info;
  r.meta = [inf](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    if (inf.needs_float) check_floating(s, 0, "x");
    DT_CHECK_ARG(s.inputs[0].dtype != DType::b8, "dt::", s.op, ": x must not be bool");
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [inf](const OpSchema& s, const std::vector<OutputMeta>& out) {
    const double scalar = s.params.has("scalar") ? s.params.get_double("scalar") : 0.0;
    return elementwise_strategies(s, out[0].shape, unary_partials(inf.op, scalar));
  };
  r.compute = [inf](const OpCall& c, const std::vector<Tensor>& in) {
    const double scalar = c.params().has("scalar") ? c.params().get_double("scalar") : 0.0;
    return std::vector<Tensor>{kernels::unary(inf.op, in[0], scalar)};
  };
  return r;
}

// ---- binary ----

struct BinaryInfo {
  const char* name;
  BinaryOp op;
  bool needs_float;
};

constexpr BinaryInfo kBinary[] = {
    {"add", BinaryOp::kAdd, false},         {"sub", BinaryOp::kSub, false}, {"mul", BinaryOp::kMul, false},
    {"div", BinaryOp::kDiv, true},          {"pow", BinaryOp::kPow, true},  {"maximum", BinaryOp::kMaximum, false},
    {"minimum", BinaryOp::kMinimum, false},
};

std::vector<PartialCase> binary_partials(BinaryOp op) {
  const ReduceOp sum = ReduceOp::kSum, avg = ReduceOp::kAvg, mx = ReduceOp::kMax, mn = ReduceOp::kMin,
                 prod = ReduceOp::kProduct;
  const std::optional<ReduceOp> rep;
  auto c = [](std::optional<ReduceOp> a, std::optional<ReduceOp> b, ReduceOp out) { return PartialCase{{a, b}, out}; };
  switch (op) {
    case BinaryOp::kAdd:
      return {c(sum, sum, sum), c(avg, avg, avg), c(mx, rep, mx), c(rep, mx, mx), c(mn, rep, mn), c(rep, mn, mn)};
    case BinaryOp::kSub:
      return {c(sum, sum, sum), c(avg, avg, avg), c(mx, rep, mx), c(rep, mx, mn), c(mn, rep, mn), c(rep, mn, mx)};
    case BinaryOp::kMul:
      return {c(sum, rep, sum), c(rep, sum, sum), c(avg, rep, avg), c(rep, avg, avg), c(prod, prod, prod)};
    case BinaryOp::kDiv:
      return {c(sum, rep, sum), c(avg, rep, avg), c(prod, prod, prod)};
    case BinaryOp::kMaximum:
      return {c(mx, mx, mx)};
    case BinaryOp::kMinimum:
      return {c(mn, mn, mn)};
    default:
      return {};
  }
}

OpRule binary_rule(const BinaryInfo& info) {
  OpRule r;
  r.name = info.name;
  r.input_names = {"a", "b"};
  const BinaryInfo inf = info;
  r.meta = [inf](const OpSchema& s) {
    check_defined_input(s, 0, "a");
    check_defined_input(s, 1, "b");
    DType t = common_dtype(s, 0, 1);
    DT_CHECK_ARG(t != DType::b8, "dt::", s.op, ": bool inputs are not supported (both a and b are bool)");
    if (inf.op == BinaryOp::kDiv && !is_floating(t)) t = DType::f32;  // true division, as torch
    DT_CHECK_ARG(!inf.needs_float || is_floating(t), "dt::", s.op, ": needs a floating operand, got a ",
                 dtype_name(s.inputs[0].dtype), " and b ", dtype_name(s.inputs[1].dtype));
    return std::vector<OutputMeta>{{broadcast_shapes(s.op, input_shapes(s)), t}};
  };
  r.strategies = [inf](const OpSchema& s, const std::vector<OutputMeta>& out) {
    return elementwise_strategies(s, out[0].shape, binary_partials(inf.op), out[0].dtype);
  };
  r.compute = [inf](const OpCall& c, const std::vector<Tensor>& in) {
    const DType t = c.outputs[0].dtype;
    return std::vector<Tensor>{kernels::binary(inf.op, as_dtype(in[0], t), as_dtype(in[1], t))};
  };
  return r;
}

// ---- comparisons ----

struct CompareInfo {
  const char* name;
  CompareOp op;
};
constexpr CompareInfo kCompare[] = {{"eq", CompareOp::kEq}, {"ne", CompareOp::kNe}, {"lt", CompareOp::kLt},
                                    {"le", CompareOp::kLe}, {"gt", CompareOp::kGt}, {"ge", CompareOp::kGe}};

OpRule compare_rule(const CompareInfo& info, bool scalar) {
  OpRule r;
  r.name = scalar ? std::string(info.name) + "_scalar" : info.name;
  r.input_names = scalar ? std::vector<std::string>{"x"} : std::vector<std::string>{"a", "b"};
  const CompareOp op = info.op;
  r.meta = [scalar](const OpSchema& s) {
    check_defined_input(s, 0, scalar ? "x" : "a");
    if (!scalar) {
      check_defined_input(s, 1, "b");
    }
    return std::vector<OutputMeta>{{broadcast_shapes(s.op, input_shapes(s)), DType::b8}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    return elementwise_strategies(s, out[0].shape, {});
  };
  r.compute = [op, scalar](const OpCall& c, const std::vector<Tensor>& in) {
    if (scalar) return std::vector<Tensor>{kernels::compare_scalar(op, in[0], c.params().get_double("scalar"))};
    const DType t = kernels::promote_types(in[0].dtype(), in[1].dtype());
    return std::vector<Tensor>{kernels::compare(op, as_dtype(in[0], t), as_dtype(in[1], t))};
  };
  return r;
}

// ---- where, masked_fill, to ----

OpRule where_rule() {
  OpRule r;
  r.name = "where";
  r.input_names = {"cond", "a", "b"};
  r.meta = [](const OpSchema& s) {
    for (size_t i = 0; i < 3; ++i) check_defined_input(s, i, i == 0 ? "cond" : i == 1 ? "a" : "b");
    DT_CHECK_ARG(s.inputs[0].dtype == DType::b8, "dt::where: cond must be bool, got ", dtype_name(s.inputs[0].dtype));
    return std::vector<OutputMeta>{{broadcast_shapes(s.op, input_shapes(s)), common_dtype(s, 1, 2)}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    // where picks a or b per position, alike on every rank: any reduction commutes with it.
    std::vector<PartialCase> partials;
    for (ReduceOp op : kAllReduceOps) partials.push_back({{std::nullopt, op, op}, op});
    return elementwise_strategies(s, out[0].shape, partials, out[0].dtype);
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const DType t = c.outputs[0].dtype;
    return std::vector<Tensor>{kernels::where(in[0], as_dtype(in[1], t), as_dtype(in[2], t))};
  };
  return r;
}

OpRule masked_fill_rule() {
  OpRule r;
  r.name = "masked_fill";
  r.input_names = {"x", "mask"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_defined_input(s, 1, "mask");
    DT_CHECK_ARG(s.inputs[1].dtype == DType::b8, "dt::masked_fill: mask must be bool, got ",
                 dtype_name(s.inputs[1].dtype));
    Shape out = broadcast_shapes(s.op, input_shapes(s));
    DT_CHECK_ARG(out == s.inputs[0].shape, "dt::masked_fill: mask ", shape_str(s.inputs[1].shape),
                 " must broadcast to x's shape ", shape_str(s.inputs[0].shape));
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    // A filled position holds `value` on every rank: avg, max and min of equal values give it back; sum only
    // for 0 and product only for 1.
    const double v = s.params.get_double("value");
    std::vector<PartialCase> partials;
    for (ReduceOp op : kAllReduceOps) {
      if ((op == ReduceOp::kSum && v != 0) || (op == ReduceOp::kProduct && v != 1)) continue;
      partials.push_back({{op, std::nullopt}, op});
    }
    return elementwise_strategies(s, out[0].shape, partials);
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kernels::masked_fill(in[0], in[1], c.params().get_double("value"))};
  };
  return r;
}

bool exact_widening(DType from, DType to) {
  if (from == to) return true;
  if ((from == DType::f16 || from == DType::bf16) && (to == DType::f32 || to == DType::f64)) return true;
  if (from == DType::f32 && to == DType::f64) return true;
  if ((from == DType::i8 || from == DType::i32) && to == DType::i64) return true;
  return false;
}

OpRule to_rule() {
  OpRule r;
  r.name = "to";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    return std::vector<OutputMeta>{{s.inputs[0].shape, DType(s.params.get_int("dtype"))}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    const DType from = s.inputs[0].dtype, to = out[0].dtype;
    std::vector<PartialCase> partials;
    if (exact_widening(from, to)) {
      partials.push_back({{ReduceOp::kSum}, ReduceOp::kSum});
      partials.push_back({{ReduceOp::kAvg}, ReduceOp::kAvg});
    }
    if (from != DType::b8 && to != DType::b8) {  // casts between numbers are non-decreasing
      partials.push_back({{ReduceOp::kMax}, ReduceOp::kMax});
      partials.push_back({{ReduceOp::kMin}, ReduceOp::kMin});
    }
    return elementwise_strategies(s, out[0].shape, partials);
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].to(c.outputs[0].dtype)};
  };
  return r;
}

// Pointwise unary ops: inputs (grad_out, saved) of one shape, where saved is the forward's input or output (see
// kernels/ops/elementwise.h per op). Linear in grad_out, so a Partial(sum) gradient passes through.
OpRule unary_backward_rule(const std::string& op) {
  OpRule r;
  r.name = op + "_backward";
  r.input_names = {"grad_out", "saved"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "saved");
    check_same_shape(s, 0, 1, "grad_out", "the saved tensor");
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) v.push_back(strategy({S(d)}, {S(d), S(d)}));
    v.push_back(strategy({P()}, {P(), R()}));
    return v;
  };
  r.compute = [op](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& g = in[0];
    const Tensor& t = in[1];
    Tensor out;
    if (op == "relu")
      out = kernels::relu_backward(g, t);
    else if (op == "exp")
      out = kernels::exp_backward(g, t);
    else if (op == "log")
      out = kernels::log_backward(g, t);
    else if (op == "sqrt")
      out = kernels::sqrt_backward(g, t);
    else if (op == "rsqrt")
      out = kernels::rsqrt_backward(g, t);
    else if (op == "tanh")
      out = kernels::tanh_backward(g, t);
    else if (op == "sigmoid")
      out = kernels::sigmoid_backward(g, t);
    else if (op == "silu")
      out = kernels::silu_backward(g, t);
    else if (op == "abs")
      out = kernels::abs_backward(g, t);
    else if (op == "gelu")
      out = kernels::gelu_backward(g, t, kernels::GeluApprox(c.params().get_int("approx")));
    else if (op == "pow_scalar")
      out = kernels::pow_scalar_backward(g, t, c.params().get_double("exponent"));
    else
      DT_ASSERT(false, "no unary backward for ", op);
    return std::vector<Tensor>{out};
  };
  return r;
}

}  // namespace

void register_elementwise_rules(std::vector<OpRule>& rules) {
  for (const UnaryInfo& u : kUnary) rules.push_back(unary_rule(u));
  for (const BinaryInfo& b : kBinary) rules.push_back(binary_rule(b));
  for (const CompareInfo& c : kCompare) {
    rules.push_back(compare_rule(c, false));
    rules.push_back(compare_rule(c, true));
  }
  rules.push_back(where_rule());
  rules.push_back(masked_fill_rule());
  rules.push_back(to_rule());
  for (const char* op : {"relu", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "abs", "gelu", "pow_scalar"})
    rules.push_back(unary_backward_rule(op));
}

}  // namespace ops::detail

// ---- public API ----

namespace {
DTensor unary(const char* op, const DTensor& x, double scalar = 0, bool has_scalar = false) {
  ops::OpParams p;
  if (!has_scalar) return ops::dispatch_one(op, {x}, p);
  p.set("scalar", scalar);
  DT_CHECK_ARG(x.defined(), "dt::", op, ": x is undefined");
  // A scalar promotes a bool or integer tensor (kernels/ops/type_promotion.h); div and pow compute in floating.
  DType t = kernels::promote_with_scalar(x.dtype(), scalar);
  const std::string_view name(op);
  if ((name == "div_scalar" || name == "pow_scalar") && !is_floating(t)) t = DType::f32;
  return ops::dispatch_one(op, {t == x.dtype() ? x : to(x, t)}, p);
}
DTensor binary(const char* op, const DTensor& a, const DTensor& b) { return ops::dispatch_one(op, {a, b}); }
DTensor compare_scalar(const char* op, const DTensor& x, double s) {
  return ops::dispatch_one(op, {x}, ops::OpParams().set("scalar", s));
}
}  // namespace

DTensor add(const DTensor& a, const DTensor& b) { return binary("add", a, b); }
DTensor sub(const DTensor& a, const DTensor& b) { return binary("sub", a, b); }
DTensor mul(const DTensor& a, const DTensor& b) { return binary("mul", a, b); }
DTensor div(const DTensor& a, const DTensor& b) { return binary("div", a, b); }
DTensor pow(const DTensor& a, const DTensor& b) { return binary("pow", a, b); }
DTensor maximum(const DTensor& a, const DTensor& b) { return binary("maximum", a, b); }
DTensor minimum(const DTensor& a, const DTensor& b) { return binary("minimum", a, b); }

DTensor add(const DTensor& x, double s) { return unary("add_scalar", x, s, true); }
DTensor sub(const DTensor& x, double s) { return unary("sub_scalar", x, s, true); }
DTensor rsub(const DTensor& x, double s) { return unary("rsub_scalar", x, s, true); }
DTensor mul(const DTensor& x, double s) { return unary("mul_scalar", x, s, true); }
DTensor div(const DTensor& x, double s) { return unary("div_scalar", x, s, true); }
DTensor pow(const DTensor& x, double s) { return unary("pow_scalar", x, s, true); }

DTensor neg(const DTensor& x) { return unary("neg", x); }
DTensor abs(const DTensor& x) { return unary("abs", x); }
DTensor relu(const DTensor& x) { return unary("relu", x); }
DTensor exp(const DTensor& x) { return unary("exp", x); }
DTensor log(const DTensor& x) { return unary("log", x); }
DTensor sqrt(const DTensor& x) { return unary("sqrt", x); }
DTensor rsqrt(const DTensor& x) { return unary("rsqrt", x); }
DTensor tanh(const DTensor& x) { return unary("tanh", x); }
DTensor sigmoid(const DTensor& x) { return unary("sigmoid", x); }
DTensor silu(const DTensor& x) { return unary("silu", x); }
DTensor gelu(const DTensor& x, GeluApprox approx) {
  return unary(approx == GeluApprox::kTanh ? "gelu_tanh" : "gelu", x);
}

DTensor eq(const DTensor& a, const DTensor& b) { return binary("eq", a, b); }
DTensor ne(const DTensor& a, const DTensor& b) { return binary("ne", a, b); }
DTensor lt(const DTensor& a, const DTensor& b) { return binary("lt", a, b); }
DTensor le(const DTensor& a, const DTensor& b) { return binary("le", a, b); }
DTensor gt(const DTensor& a, const DTensor& b) { return binary("gt", a, b); }
DTensor ge(const DTensor& a, const DTensor& b) { return binary("ge", a, b); }
DTensor eq(const DTensor& x, double s) { return compare_scalar("eq_scalar", x, s); }
DTensor ne(const DTensor& x, double s) { return compare_scalar("ne_scalar", x, s); }
DTensor lt(const DTensor& x, double s) { return compare_scalar("lt_scalar", x, s); }
DTensor le(const DTensor& x, double s) { return compare_scalar("le_scalar", x, s); }
DTensor gt(const DTensor& x, double s) { return compare_scalar("gt_scalar", x, s); }
DTensor ge(const DTensor& x, double s) { return compare_scalar("ge_scalar", x, s); }

DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b) {
  return ops::dispatch_one("where", {cond, a, b});
}
DTensor masked_fill(const DTensor& x, const DTensor& mask, double value) {
  return ops::dispatch_one("masked_fill", {x, mask}, ops::OpParams().set("value", value));
}
DTensor to(const DTensor& x, DType dtype) {
  DT_CHECK_ARG(x.defined(), "dt::to: x is undefined");
  if (x.dtype() == dtype) return x;
  return ops::dispatch_one("to", {x}, ops::OpParams().set("dtype", int64_t(dtype)));
}

DTensor operator+(const DTensor& a, const DTensor& b) { return add(a, b); }
DTensor operator-(const DTensor& a, const DTensor& b) { return sub(a, b); }
DTensor operator*(const DTensor& a, const DTensor& b) { return mul(a, b); }
DTensor operator/(const DTensor& a, const DTensor& b) { return div(a, b); }
DTensor operator+(const DTensor& x, double s) { return add(x, s); }
DTensor operator-(const DTensor& x, double s) { return sub(x, s); }
DTensor operator*(const DTensor& x, double s) { return mul(x, s); }
DTensor operator/(const DTensor& x, double s) { return div(x, s); }
DTensor operator+(double s, const DTensor& x) { return add(x, s); }
DTensor operator-(double s, const DTensor& x) { return rsub(x, s); }
DTensor operator*(double s, const DTensor& x) { return mul(x, s); }
DTensor operator-(const DTensor& x) { return neg(x); }

DTensor as_replicate(const Tensor& t, const DeviceMesh& mesh) {
  DT_CHECK_ARG(t.defined(), "dt::as_replicate: the tensor is undefined");
  DT_CHECK_ARG(mesh.defined(), "dt::as_replicate: the mesh is undefined");
  const ShardingSpec spec = ShardingSpec::replicated(mesh.ndim());
  if (!mesh.is_member())
    return DTensor::from_local_unchecked(Tensor::empty({0}, t.dtype(), mesh.device()), mesh, spec, t.shape());
  return DTensor::from_local_unchecked(t.to(mesh.device()).contiguous(), mesh, spec, t.shape());
}

namespace {
const DeviceMesh& mesh_of(const DTensor& x, const char* op) {
  DT_CHECK_ARG(x.defined(), "dt::", op, ": the DTensor operand is undefined");
  return x.mesh();
}
}  // namespace

#define DT_MIXED_BINARY_(name, fn)                                                                    \
  DTensor name(const DTensor& a, const Tensor& b) { return fn(a, as_replicate(b, mesh_of(a, #fn))); } \
  DTensor name(const Tensor& a, const DTensor& b) { return fn(as_replicate(a, mesh_of(b, #fn)), b); }
DT_MIXED_BINARY_(add, add)
DT_MIXED_BINARY_(sub, sub)
DT_MIXED_BINARY_(mul, mul)
DT_MIXED_BINARY_(div, div)
DT_MIXED_BINARY_(pow, pow)
DT_MIXED_BINARY_(maximum, maximum)
DT_MIXED_BINARY_(minimum, minimum)
DT_MIXED_BINARY_(eq, eq)
DT_MIXED_BINARY_(ne, ne)
DT_MIXED_BINARY_(lt, lt)
DT_MIXED_BINARY_(le, le)
DT_MIXED_BINARY_(gt, gt)
DT_MIXED_BINARY_(ge, ge)
DT_MIXED_BINARY_(operator+, add)
DT_MIXED_BINARY_(operator-, sub)
DT_MIXED_BINARY_(operator*, mul)
DT_MIXED_BINARY_(operator/, div)
#undef DT_MIXED_BINARY_

}  // namespace dt
