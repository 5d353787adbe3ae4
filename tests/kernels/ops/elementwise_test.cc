// Elementwise ops against double references on random data: every unary op, binary ops with broadcasting,
// comparisons, where/masked_fill, integer dtypes, non-contiguous inputs, empty shapes and argument errors.
#include "kernels/ops/elementwise.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/ops/functors.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

double ref_unary(UnaryOp op, double x, double s) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kAbs:
      return std::fabs(x);
    case UnaryOp::kRelu:
      return x > 0 ? x : 0;
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kRsqrt:
      return 1 / std::sqrt(x);
    case UnaryOp::kTanh:
      return std::tanh(x);
    case UnaryOp::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case UnaryOp::kSilu:
      return x / (1 + std::exp(-x));
    case UnaryOp::kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOp::kAddScalar:
      return x + s;
    case UnaryOp::kSubScalar:
      return x - s;
    case UnaryOp::kRsubScalar:
      return s - x;
    case UnaryOp::kMulScalar:
      return x * s;
    case UnaryOp::kDivScalar:
      return x / s;
    case UnaryOp::kPowScalar:
      return std::pow(x, s);
  }
  return 0;
}

const UnaryOp kFloatUnary[] = {UnaryOp::kNeg,       UnaryOp::kAbs,       UnaryOp::kRelu,       UnaryOp::kExp,
                               UnaryOp::kLog,       UnaryOp::kSqrt,      UnaryOp::kRsqrt,      UnaryOp::kTanh,
                               UnaryOp::kSigmoid,   UnaryOp::kSilu,      UnaryOp::kGeluErf,    UnaryOp::kGeluTanh,
                               UnaryOp::kAddScalar, UnaryOp::kSubScalar, UnaryOp::kRsubScalar, UnaryOp::kMulScalar,
                               UnaryOp::kDivScalar, UnaryOp::kPowScalar};

bool positive_domain(UnaryOp op) {
  return op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt || op == UnaryOp::kPowScalar;
}

TEST(OpsElementwise, UnaryFloatOpsMatchReference) {
  const std::vector<Shape> shapes = {{}, {0}, {7}, {3, 5}, {2, 3, 4}, {1, 9, 1}};
  uint64_t seed = 1;
  for (DType dt : float_dtypes()) {
    for (UnaryOp op : kFloatUnary) {
      for (const Shape& sh : shapes) {
        for (bool nc : {false, true}) {
          double lo = positive_domain(op) ? 0.1 : -3, hi = 3;
          Tensor x = randu(sh, seed++, dt, lo, hi);
          if (nc) x = noncontig(x);
          double s = op == UnaryOp::kPowScalar ? 1.7 : 0.75;
          Tensor y = unary(op, x, s);
          ASSERT_EQ(y.shape(), sh);
          ASSERT_EQ(y.dtype(), dt);
          ASSERT_TRUE(y.is_contiguous());
          std::vector<double> xv = x.to_vector(), want;
          for (double v : xv) want.push_back(ref_unary(op, v, s));
          // atol covers results near 0 (e.g. silu, gelu of small negative x) in the 16-bit dtypes.
          double atol = dt == DType::f64 ? 1e-14 : dt == DType::f32 ? 1e-6 : 1e-2;
          EXPECT_TRUE(all_close(y, want, rtol_for(dt), atol))
              << unary_op_name(op) << " " << dtype_name(dt) << " " << shape_str(sh) << (nc ? " non-contiguous" : "");
        }
      }
    }
  }
}

TEST(OpsElementwise, NamedUnaryWrappers) {
  Tensor x = randu({4, 3}, 11, DType::f64, 0.2, 2);
  auto check = [&](const Tensor& got, UnaryOp op, double s = 0) {
    std::vector<double> want;
    for (double v : x.to_vector()) want.push_back(ref_unary(op, v, s));
    EXPECT_TRUE(all_close(got, want, 1e-13)) << unary_op_name(op);
  };
  check(neg(x), UnaryOp::kNeg);
  check(abs(x), UnaryOp::kAbs);
  check(relu(x), UnaryOp::kRelu);
  check(exp(x), UnaryOp::kExp);
  check(log(x), UnaryOp::kLog);
  check(sqrt(x), UnaryOp::kSqrt);
  check(rsqrt(x), UnaryOp::kRsqrt);
  check(tanh(x), UnaryOp::kTanh);
  check(sigmoid(x), UnaryOp::kSigmoid);
  check(silu(x), UnaryOp::kSilu);
  check(gelu(x), UnaryOp::kGeluErf);
  check(gelu(x, GeluApprox::kTanh), UnaryOp::kGeluTanh);
  check(add_scalar(x, 2.5), UnaryOp::kAddScalar, 2.5);
  check(sub_scalar(x, 2.5), UnaryOp::kSubScalar, 2.5);
  check(rsub_scalar(x, 2.5), UnaryOp::kRsubScalar, 2.5);
  check(mul_scalar(x, -3), UnaryOp::kMulScalar, -3);
  check(div_scalar(x, 4), UnaryOp::kDivScalar, 4);
  check(pow_scalar(x, 0.5), UnaryOp::kPowScalar, 0.5);
}

TEST(OpsElementwise, UnaryIntegerOpsAreExact) {
  for (DType dt : {DType::i8, DType::i32, DType::i64}) {
    Tensor x = noncontig(randint({5, 6}, 3, -50, 50, dt));
    struct Case {
      UnaryOp op;
      double s;
    };
    for (Case c :
         {Case{UnaryOp::kNeg, 0}, Case{UnaryOp::kAbs, 0}, Case{UnaryOp::kRelu, 0}, Case{UnaryOp::kAddScalar, 7},
          Case{UnaryOp::kSubScalar, -3}, Case{UnaryOp::kRsubScalar, 2}, Case{UnaryOp::kMulScalar, 2}}) {
      Tensor y = unary(c.op, x, c.s);
      EXPECT_EQ(y.dtype(), dt);
      std::vector<double> want;
      for (double v : x.to_vector()) want.push_back(ref_unary(c.op, v, c.s));
      EXPECT_TRUE(all_close(y, want, 0)) << unary_op_name(c.op) << " " << dtype_name(dt);
    }
  }
}

double ref_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return std::pow(a, b);
    case BinaryOp::kMaximum:
      return std::max(a, b);
    case BinaryOp::kMinimum:
      return std::min(a, b);
    default:
      return 0;
  }
}

struct ShapePair {
  Shape a, b;
};
const std::vector<ShapePair> kBroadcastCases = {
    {{3, 4}, {3, 4}}, {{3, 1}, {1, 4}},    {{2, 3, 4}, {4}},       {{5}, {}},           {{}, {}},
    {{0, 3}, {3}},    {{2, 1, 3}, {4, 1}}, {{1, 1, 5}, {2, 3, 1}}, {{17, 33}, {17, 1}}, {{2, 0, 3}, {1, 1, 3}},
};

TEST(OpsElementwise, BinaryOpsBroadcastLikeTorch) {
  uint64_t seed = 100;
  const BinaryOp ops[] = {BinaryOp::kAdd, BinaryOp::kSub,     BinaryOp::kMul,    BinaryOp::kDiv,
                          BinaryOp::kPow, BinaryOp::kMaximum, BinaryOp::kMinimum};
  for (DType dt : float_dtypes()) {
    for (BinaryOp op : ops) {
      for (const ShapePair& sp : kBroadcastCases) {
        for (bool nc : {false, true}) {
          bool pos = op == BinaryOp::kPow || op == BinaryOp::kDiv;
          Tensor a = randu(sp.a, seed++, dt, pos ? 0.5 : -2, 2);
          Tensor b = randu(sp.b, seed++, dt, pos ? 0.5 : -2, 2);
          if (nc) {
            a = noncontig(a);
            b = noncontig(b);
          }
          Tensor y = binary(op, a, b);
          Shape out = bcast(sp.a, sp.b);
          ASSERT_EQ(y.shape(), out) << binary_op_name(op);
          std::vector<double> av = a.to_vector(), bv = b.to_vector(), want;
          for (int64_t i = 0; i < shape_numel(out); ++i) {
            auto idx = unravel(i, out);
            want.push_back(ref_binary(op, at_bcast(av, sp.a, idx), at_bcast(bv, sp.b, idx)));
          }
          double atol = dt == DType::f64 ? 1e-14 : dt == DType::f32 ? 1e-6 : 1e-2;
          EXPECT_TRUE(all_close(y, want, rtol_for(dt), atol))
              << binary_op_name(op) << " " << dtype_name(dt) << " " << shape_str(sp.a) << " vs " << shape_str(sp.b);
        }
      }
    }
  }
}

TEST(OpsElementwise, NamedBinaryWrappersAndIntegers) {
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    Tensor a = randint({4, 5}, 7, 0, 20, dt), b = noncontig(randint({5}, 8, 0, 20, dt));
    auto check = [&](const Tensor& got, BinaryOp op) {
      std::vector<double> av = a.to_vector(), bv = b.to_vector(), want;
      for (int64_t i = 0; i < 20; ++i) {
        double v = ref_binary(op, av[size_t(i)], bv[size_t(i % 5)]);
        if (dt == DType::u8) v = double(uint8_t(int64_t(v)));  // unsigned wrap-around, as torch
        want.push_back(v);
      }
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_TRUE(all_close(got, want, 0)) << binary_op_name(op) << " " << dtype_name(dt);
    };
    check(add(a, b), BinaryOp::kAdd);
    check(sub(a, b), BinaryOp::kSub);
    check(mul(a, b), BinaryOp::kMul);
    check(maximum(a, b), BinaryOp::kMaximum);
    check(minimum(a, b), BinaryOp::kMinimum);
  }
  Tensor a = randu({3, 2}, 9, DType::f64, 0.5, 2), b = randu({2}, 10, DType::f64, 0.5, 2);
  std::vector<double> av = a.to_vector(), bv = b.to_vector(), dv, pv;
  for (int i = 0; i < 6; ++i) {
    dv.push_back(av[size_t(i)] / bv[size_t(i % 2)]);
    pv.push_back(std::pow(av[size_t(i)], bv[size_t(i % 2)]));
  }
  EXPECT_TRUE(all_close(div(a, b), dv, 1e-14));
  EXPECT_TRUE(all_close(pow(a, b), pv, 1e-14));
}

TEST(OpsElementwise, NanPropagation) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = Tensor::from_vector({1, nan, 3, nan}, {4}, DType::f32);
  Tensor b = Tensor::from_vector({nan, 2, 1, nan}, {4}, DType::f32);
  EXPECT_TRUE(all_close(maximum(a, b), {nan, nan, 3, nan}, 0));
  EXPECT_TRUE(all_close(minimum(a, b), {nan, nan, 1, nan}, 0));
  EXPECT_TRUE(all_close(relu(a), {1, nan, 3, nan}, 0));
}

TEST(OpsElementwise, ComparisonsGiveBool) {
  const CompareOp ops[] = {CompareOp::kEq, CompareOp::kNe, CompareOp::kLt,
                           CompareOp::kLe, CompareOp::kGt, CompareOp::kGe};
  auto ref = [](CompareOp op, double a, double b) {
    switch (op) {
      case CompareOp::kEq:
        return a == b;
      case CompareOp::kNe:
        return a != b;
      case CompareOp::kLt:
        return a < b;
      case CompareOp::kLe:
        return a <= b;
      case CompareOp::kGt:
        return a > b;
      case CompareOp::kGe:
        return a >= b;
    }
    return false;
  };
  for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::i64, DType::b8}) {
    // Small integer values so that equality happens often.
    Tensor a = noncontig(randint({3, 4}, 21, 0, dt == DType::b8 ? 1 : 3, dt));
    Tensor b = randint({4}, 22, 0, dt == DType::b8 ? 1 : 3, dt);
    for (CompareOp op : ops) {
      Tensor y = compare(op, a, b);
      ASSERT_EQ(y.dtype(), DType::b8);
      ASSERT_EQ(y.shape(), (Shape{3, 4}));
      std::vector<double> av = a.to_vector(), bv = b.to_vector(), want, want_s;
      for (int i = 0; i < 12; ++i) {
        want.push_back(ref(op, av[size_t(i)], bv[size_t(i % 4)]));
        want_s.push_back(ref(op, av[size_t(i)], 1.0));
      }
      EXPECT_TRUE(all_close(y, want, 0)) << compare_op_name(op) << " " << dtype_name(dt);
      EXPECT_TRUE(all_close(compare_scalar(op, a, 1.0), want_s, 0)) << compare_op_name(op) << " scalar";
    }
  }
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}), b = Tensor::from_vector({3, 2, 1}, {3});
  EXPECT_TRUE(all_close(eq(a, b), {0, 1, 0}, 0));
  EXPECT_TRUE(all_close(ne(a, b), {1, 0, 1}, 0));
  EXPECT_TRUE(all_close(lt(a, b), {1, 0, 0}, 0));
  EXPECT_TRUE(all_close(le(a, b), {1, 1, 0}, 0));
  EXPECT_TRUE(all_close(gt(a, b), {0, 0, 1}, 0));
  EXPECT_TRUE(all_close(ge(a, b), {0, 1, 1}, 0));
}

TEST(OpsElementwise, WhereAndMaskedFill) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::b8}) {
    Tensor cond = randint({3, 1, 4}, 31, 0, 1, DType::b8);
    Tensor a = noncontig(randint({2, 4}, 32, -9, 9, dt == DType::b8 ? DType::i32 : dt).to(dt));
    Tensor b = randint({3, 2, 1}, 33, -9, 9, dt == DType::b8 ? DType::i32 : dt).to(dt);
    Tensor y = where(cond, a, b);
    Shape out{3, 2, 4};
    ASSERT_EQ(y.shape(), out);
    std::vector<double> cv = cond.to_vector(), av = a.to_vector(), bv = b.to_vector(), want;
    for (int64_t i = 0; i < shape_numel(out); ++i) {
      auto idx = unravel(i, out);
      want.push_back(at_bcast(cv, {3, 1, 4}, idx) != 0 ? at_bcast(av, {2, 4}, idx) : at_bcast(bv, {3, 2, 1}, idx));
    }
    EXPECT_TRUE(all_close(y, want, 0)) << dtype_name(dt);
  }
  Tensor x = randu({2, 3}, 34);
  Tensor mask = Tensor::from_data<bool>({true, false, true}, {3});
  Tensor y = masked_fill(noncontig(x), mask, -1e9);
  std::vector<double> xv = x.to_vector(), want;
  for (int i = 0; i < 6; ++i) want.push_back(i % 3 == 1 ? xv[size_t(i)] : double(float(-1e9)));
  EXPECT_TRUE(all_close(y, want, 0));
  EXPECT_TRUE(throws_with([&] { masked_fill(x, Tensor::from_data<bool>({true, false}, {2}), 0); }, "broadcast"));
}

TEST(OpsElementwise, ArgumentErrorsAreClear) {
  Tensor f = randu({2, 3}, 1), d = randu({2, 3}, 2, DType::f64), i = randint({2, 3}, 3, 0, 5, DType::i32);
  EXPECT_TRUE(throws_with([&] { add(f, d); }, "same dtype"));
  EXPECT_TRUE(throws_with([&] { add(f, randu({4}, 4)); }, "cannot be broadcast"));
  EXPECT_TRUE(throws_with([&] { exp(i); }, "floating dtype"));
  EXPECT_TRUE(throws_with([&] { div(i, i); }, "floating dtype"));
  EXPECT_TRUE(throws_with([&] { add_scalar(i, 0.5); }, "not an integer"));
  Tensor bl = randint({3}, 5, 0, 1, DType::b8);
  EXPECT_TRUE(throws_with([&] { add(bl, bl); }, "bool"));
  EXPECT_TRUE(throws_with([&] { where(f, f, f); }, "cond must have dtype bool"));
  EXPECT_TRUE(throws_with([&] { neg(Tensor()); }, "undefined"));
}

}  // namespace
}  // namespace dt::kernels

namespace dt::kernels {
namespace {

// Note [A float erf that vectorizes]: host_erff against double erf on a dense grid (every 2^-12 over [-6, 6], and
// every float of [0, 2^-10] stepped coarsely) and at the special values.
TEST(OpsElementwise, HostErfIsWithinThreeUlpsOfDouble) {
  double worst_ulps = 0, worst_x = 0;
  auto check = [&](float x) {
    const double want = std::erf(double(x));
    const float got = ops_detail::host_erff(x);
    const float w = float(std::fabs(want));
    const double ulp = double(std::nextafter(w, INFINITY)) - double(w);
    const double ulps = std::fabs(double(got) - want) / ulp;
    if (ulps > worst_ulps) {
      worst_ulps = ulps;
      worst_x = x;
    }
  };
  for (int i = -6 * 4096; i <= 6 * 4096; ++i) check(float(i) / 4096.0f);
  for (float x = 1e-30f; x < 1e-3f; x *= 1.01f) {
    check(x);
    check(-x);
  }
  EXPECT_LE(worst_ulps, 3.0) << "at x = " << worst_x;
  std::printf("  host_erff: at most %.2f ulp from double erf (at x = %.6g)\n", worst_ulps, worst_x);
  EXPECT_EQ(ops_detail::host_erff(0.0f), 0.0f);
  EXPECT_EQ(ops_detail::host_erff(INFINITY), 1.0f);
  EXPECT_EQ(ops_detail::host_erff(-INFINITY), -1.0f);
  EXPECT_EQ(ops_detail::host_erff(50.0f), 1.0f);
  EXPECT_TRUE(std::isnan(ops_detail::host_erff(NAN)));
}

}  // namespace
}  // namespace dt::kernels
