// Pointwise differentiable ops (nn/ops.h).
#include "core/error.h"
#include "dtensor/ops/dispatch.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::nn {

using G = std::vector<DTensor>;

DTensor sum_to(const DTensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - int64_t(shape.size());
  DT_ASSERT(lead >= 0, "sum_to: ", shape_str(g.shape()), " -> ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && g.shape()[size_t(lead) + i] != 1) dims.push_back(lead + int64_t(i));
  if (dims.empty()) return reshape(g, shape);
  return reshape(dt::sum(g, dims, /*keepdim=*/true), shape);
}

namespace {

// A unary op whose backward is the registered "<op>_backward" rule on (grad, saved).
Variable unary(const char* op, const Variable& x, DTensor out, bool save_out, ops::OpParams params = {}) {
  DTensor saved = save_out ? out : x.data();
  std::string bw = std::string(op) + "_backward";
  return record_one(op, {x}, std::move(out), [saved, bw, params](const G& g) {
    return G{ops::dispatch_one(bw, {g[0], saved}, params)};
  });
}

}  // namespace

Variable add(const Variable& a, const Variable& b) {
  return record_one("add", {a, b}, dt::add(a.data(), b.data()), [sa = a.shape(), sb = b.shape()](const G& g) {
    return G{sum_to(g[0], sa), sum_to(g[0], sb)};
  });
}
Variable sub(const Variable& a, const Variable& b) {
  return record_one("sub", {a, b}, dt::sub(a.data(), b.data()), [sa = a.shape(), sb = b.shape()](const G& g) {
    return G{sum_to(g[0], sa), sum_to(dt::neg(g[0]), sb)};
  });
}
Variable mul(const Variable& a, const Variable& b) {
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  DTensor da = gb ? a.data() : DTensor(), db = ga ? b.data() : DTensor();
  return record_one("mul", {a, b}, dt::mul(a.data(), b.data()), [da, db, sa = a.shape(), sb = b.shape()](const G& g) {
    return G{db.defined() ? sum_to(dt::mul(g[0], db), sa) : DTensor(),
             da.defined() ? sum_to(dt::mul(g[0], da), sb) : DTensor()};
  });
}
Variable div(const Variable& a, const Variable& b) {
  DTensor da = a.data(), db = b.data();
  const bool gb = b.requires_grad();
  return record_one("div", {a, b}, dt::div(da, db), [da, db, gb](const G& g) {
    DTensor grad_a = sum_to(dt::div(g[0], db), da.shape());
    DTensor grad_b = gb ? sum_to(dt::neg(dt::div(dt::mul(g[0], da), dt::mul(db, db))), db.shape()) : DTensor();
    return G{grad_a, grad_b};
  });
}
Variable pow(const Variable& a, const Variable& b) {
  DTensor da = a.data(), db = b.data();
  DTensor out = dt::pow(da, db);
  const bool gb = b.requires_grad();
  return record_one("pow", {a, b}, out, [da, db, out, gb](const G& g) {
    DTensor grad_a = sum_to(dt::mul(g[0], dt::mul(db, dt::pow(da, dt::sub(db, 1.0)))), da.shape());
    DTensor grad_b = gb ? sum_to(dt::mul(g[0], dt::mul(out, dt::log(da))), db.shape()) : DTensor();
    return G{grad_a, grad_b};
  });
}
Variable maximum(const Variable& a, const Variable& b) {
  DTensor da = a.data(), db = b.data();
  return record_one("maximum", {a, b}, dt::maximum(da, db), [da, db](const G& g) {
    DTensor a_wins = dt::ge(da, db);
    return G{sum_to(dt::where(a_wins, g[0], dt::mul(g[0], 0.0)), da.shape()),
             sum_to(dt::where(a_wins, dt::mul(g[0], 0.0), g[0]), db.shape())};
  });
}
Variable minimum(const Variable& a, const Variable& b) {
  DTensor da = a.data(), db = b.data();
  return record_one("minimum", {a, b}, dt::minimum(da, db), [da, db](const G& g) {
    DTensor a_wins = dt::le(da, db);
    return G{sum_to(dt::where(a_wins, g[0], dt::mul(g[0], 0.0)), da.shape()),
             sum_to(dt::where(a_wins, dt::mul(g[0], 0.0), g[0]), db.shape())};
  });
}

Variable add(const Variable& x, double s) {
  return record_one("add_scalar", {x}, dt::add(x.data(), s), [](const G& g) { return g; });
}
Variable sub(const Variable& x, double s) {
  return record_one("sub_scalar", {x}, dt::sub(x.data(), s), [](const G& g) { return g; });
}
Variable rsub(const Variable& x, double s) {
  return record_one("rsub_scalar", {x}, dt::rsub(x.data(), s), [](const G& g) { return G{dt::neg(g[0])}; });
}
Variable mul(const Variable& x, double s) {
  return record_one("mul_scalar", {x}, dt::mul(x.data(), s), [s](const G& g) { return G{dt::mul(g[0], s)}; });
}
Variable div(const Variable& x, double s) {
  return record_one("div_scalar", {x}, dt::div(x.data(), s), [s](const G& g) { return G{dt::div(g[0], s)}; });
}
Variable pow(const Variable& x, double s) {
  return unary("pow_scalar", x, dt::pow(x.data(), s), false, ops::OpParams().set("exponent", s));
}
Variable neg(const Variable& x) {
  return record_one("neg", {x}, dt::neg(x.data()), [](const G& g) { return G{dt::neg(g[0])}; });
}
Variable abs(const Variable& x) { return unary("abs", x, dt::abs(x.data()), false); }
Variable relu(const Variable& x) { return unary("relu", x, dt::relu(x.data()), true); }
Variable exp(const Variable& x) { return unary("exp", x, dt::exp(x.data()), true); }
Variable log(const Variable& x) { return unary("log", x, dt::log(x.data()), false); }
Variable sqrt(const Variable& x) { return unary("sqrt", x, dt::sqrt(x.data()), true); }
Variable rsqrt(const Variable& x) { return unary("rsqrt", x, dt::rsqrt(x.data()), true); }
Variable tanh(const Variable& x) { return unary("tanh", x, dt::tanh(x.data()), true); }
Variable sigmoid(const Variable& x) { return unary("sigmoid", x, dt::sigmoid(x.data()), true); }
Variable silu(const Variable& x) { return unary("silu", x, dt::silu(x.data()), false); }
Variable gelu(const Variable& x, GeluApprox approx) {
  return unary("gelu", x, dt::gelu(x.data(), approx), false, ops::OpParams().set("approx", int64_t(approx)));
}

Variable where(const DTensor& cond, const Variable& a, const Variable& b) {
  return record_one("where", {a, b}, dt::where(cond, a.data(), b.data()),
                    [cond, sa = a.shape(), sb = b.shape()](const G& g) {
                      DTensor zero = dt::mul(g[0], 0.0);
                      return G{sum_to(dt::where(cond, g[0], zero), sa), sum_to(dt::where(cond, zero, g[0]), sb)};
                    });
}
Variable masked_fill(const Variable& x, const DTensor& mask, double value) {
  return record_one("masked_fill", {x}, dt::masked_fill(x.data(), mask, value),
                    [mask, sx = x.shape()](const G& g) { return G{sum_to(dt::masked_fill(g[0], mask, 0.0), sx)}; });
}
Variable to(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return record_one("to", {x}, dt::to(x.data(), dtype),
                    [from = x.dtype()](const G& g) { return G{dt::to(g[0], from)}; });
}

Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
Variable operator+(const Variable& x, double s) { return add(x, s); }
Variable operator-(const Variable& x, double s) { return sub(x, s); }
Variable operator*(const Variable& x, double s) { return mul(x, s); }
Variable operator/(const Variable& x, double s) { return div(x, s); }
Variable operator*(double s, const Variable& x) { return mul(x, s); }
Variable operator-(const Variable& x) { return neg(x); }

}  // namespace dt::nn
