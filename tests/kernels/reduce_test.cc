// reduce (every dtype x op x size) and divide_by against references computed here: floats in double, rounded once
// to the dtype (f16/bf16: through float, which is the promised "computed in float, rounded once"), integers with
// explicit two's complement wrapping, bool as logic.
#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include "tests/kernels/test_util.h"

namespace dt::kernels {
namespace {

using namespace dt::kernels::testing;

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};

// Random operands: floats in [-4, 4] with NaN and infinities sprinkled in; integers over their whole range (sums
// and products wrap); bool 0/1.
Tensor operand(int64_t n, DType t, uint64_t seed) {
  if (!is_floating(t)) {
    Tensor x = Tensor::empty({n}, t);
    fill_random_bits(x, seed);
    return x;
  }
  Tensor x = random_values({n}, t, seed, -4, 4);
  size_t es = dtype_size(t);
  for (int64_t i = int64_t(seed % 13); i < n; i += 997) {
    double special = (i / 997) % 3 == 0 ? NAN : (i / 997) % 3 == 1 ? INFINITY : -INFINITY;
    store_value(static_cast<char*>(x.data_ptr()) + i * int64_t(es), special, t);
  }
  return x;
}

// Bits of the expected op(a, b) for one element.
uint64_t ref_reduce(const void* pa, const void* pb, DType t, ReduceOp op) {
  if (t == DType::b8) {
    bool x = load_bits(pa, 1) != 0, y = load_bits(pb, 1) != 0;
    return (op == ReduceOp::kProduct || op == ReduceOp::kMin) ? (x && y) : (x || y);
  }
  if (!is_floating(t)) {
    int64_t x = exact_int(pa, t), y = exact_int(pb, t);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return wrap_bits(int64_t(uint64_t(x) + uint64_t(y)), t);
      case ReduceOp::kProduct:
        return wrap_bits(int64_t(uint64_t(x) * uint64_t(y)), t);
      case ReduceOp::kMax:
        return wrap_bits(std::max(x, y), t);
      case ReduceOp::kMin:
        return wrap_bits(std::min(x, y), t);
    }
  }
  double x = exact_value(pa, t), y = exact_value(pb, t), r = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      r = x + y;
      break;
    case ReduceOp::kProduct:
      r = x * y;
      break;
    case ReduceOp::kMax:
      r = std::isnan(x) ? x : std::isnan(y) ? y : std::max(x, y);
      break;
    case ReduceOp::kMin:
      r = std::isnan(x) ? x : std::isnan(y) ? y : std::min(x, y);
      break;
  }
  return ref_convert(r, false, 0, t);
}

TEST(Reduce, EveryDtypeOpAndSize) {
  uint64_t seed = 1;
  for (DType t : all_dtypes()) {
    for (ReduceOp op : kOps) {
      for (int64_t n : {0, 1, 37, 100003}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op) + " n=" + std::to_string(n));
        Tensor a = operand(n, t, seed++), b = operand(n, t, seed++), out = Tensor::empty({n}, t);
        void* pa = n ? a.data_ptr() : nullptr;
        void* pb = n ? b.data_ptr() : nullptr;
        reduce(n ? out.data_ptr() : nullptr, pa, pb, n, t, op, Device::cpu());
        size_t es = dtype_size(t);
        for (int64_t i = 0; i < n; ++i) {
          const char* ea = static_cast<const char*>(pa) + i * int64_t(es);
          const char* eb = static_cast<const char*>(pb) + i * int64_t(es);
          uint64_t got = load_bits(static_cast<char*>(out.data_ptr()) + i * int64_t(es), es);
          uint64_t want = ref_reduce(ea, eb, t, op);
          ASSERT_TRUE(same_value(got, want, t))
              << "element " << i << ": " << exact_value(ea, t) << ", " << exact_value(eb, t) << " gave bits 0x"
              << std::hex << got << ", expected 0x" << want;
        }
      }
    }
  }
}

TEST(Reduce, InPlaceIntoEitherOperand) {
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    Tensor a = operand(1001, t, 5), b = operand(1001, t, 6);
    Tensor want = Tensor::empty({1001}, t);
    reduce(want.data_ptr(), a.data_ptr(), b.data_ptr(), 1001, t, ReduceOp::kSum, Device::cpu());
    Tensor a2 = a.clone(), b2 = b.clone();
    reduce(a2.data_ptr(), a2.data_ptr(), b.data_ptr(), 1001, t, ReduceOp::kSum, Device::cpu());
    reduce(b2.data_ptr(), a.data_ptr(), b2.data_ptr(), 1001, t, ReduceOp::kSum, Device::cpu());
    EXPECT_TRUE(equal(a2, want)) << dtype_name(t);
    EXPECT_TRUE(equal(b2, want)) << dtype_name(t);
  }
}

TEST(Reduce, HandCheckedValues) {
  // f16: 2048 + 1 is not representable; computed in float (2049) then rounded once, ties to even: 2048.
  Tensor a = Tensor::from_vector({2048, 1, 65504}, {3}, DType::f16),
         b = Tensor::from_vector({1, 2048, 65504}, {3}, DType::f16);
  Tensor o = Tensor::empty({3}, DType::f16);
  reduce(o.data_ptr(), a.data_ptr(), b.data_ptr(), 3, DType::f16, ReduceOp::kSum, Device::cpu());
  EXPECT_EQ(o.to_vector(), (std::vector<double>{2048, 2048, INFINITY}));
  std::vector<int8_t> x = {100, -128, 7}, y = {100, -1, -3};
  Tensor xi = Tensor::from_data(x, {3}), yi = Tensor::from_data(y, {3}), oi = Tensor::empty({3}, DType::i8);
  reduce(oi.data_ptr(), xi.data_ptr(), yi.data_ptr(), 3, DType::i8, ReduceOp::kSum, Device::cpu());
  EXPECT_EQ(oi.to_vector(), (std::vector<double>{-56, 127, 4}));  // wraps
  reduce(oi.data_ptr(), xi.data_ptr(), yi.data_ptr(), 3, DType::i8, ReduceOp::kProduct, Device::cpu());
  EXPECT_EQ(oi.to_vector(), (std::vector<double>{16, -128, -21}));
}

TEST(Reduce, ArgumentsValidated) {
  float x = 0;
  EXPECT_THROW(reduce(&x, &x, &x, -1, DType::f32, ReduceOp::kSum, Device::cpu()), InvalidArgument);
  EXPECT_THROW(reduce(&x, nullptr, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu()), InvalidArgument);
  EXPECT_NO_THROW(reduce(nullptr, nullptr, nullptr, 0, DType::f32, ReduceOp::kSum, Device::cpu()));
  EXPECT_THROW(divide_by(&x, 1, DType::f32, 0, Device::cpu()), InvalidArgument);
  EXPECT_THROW(divide_by(nullptr, 1, DType::f32, 2, Device::cpu()), InvalidArgument);
}

TEST(DivideBy, FloatsAndIntegersEveryDtype) {
  uint64_t seed = 900;
  for (DType t : all_dtypes()) {
    for (int64_t divisor : {1, 2, 3, 7, -2}) {
      for (int64_t n : {0, 1, 37, 10007}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " / " + std::to_string(divisor) + " n=" + std::to_string(n));
        Tensor x = operand(n, t, seed++);
        Tensor before = x.clone();
        divide_by(n ? x.data_ptr() : nullptr, n, t, divisor, Device::cpu());
        size_t es = dtype_size(t);
        for (int64_t i = 0; i < n; ++i) {
          const char* e = static_cast<const char*>(before.data_ptr()) + i * int64_t(es);
          uint64_t want;
          if (t == DType::b8)
            want = load_bits(e, 1);
          else if (is_floating(t))
            want = ref_convert(exact_value(e, t) / double(divisor), false, 0, t);
          else
            want = wrap_bits(exact_int(e, t) / divisor, t);  // C++ division truncates toward zero
          uint64_t got = load_bits(static_cast<char*>(x.data_ptr()) + i * int64_t(es), es);
          ASSERT_TRUE(same_value(got, want, t)) << "element " << i << ": " << exact_value(e, t);
        }
      }
    }
  }
}

TEST(DivideBy, TruncatesTowardZero) {
  std::vector<int32_t> v = {-7, 7, -1, 1, 6};
  Tensor x = Tensor::from_data(v, {5});
  divide_by(x.data_ptr(), 5, DType::i32, 2, Device::cpu());
  EXPECT_EQ(x.to_vector(), (std::vector<double>{-3, 3, 0, 0, 3}));
  Tensor h = Tensor::from_vector({1, 2}, {2}, DType::f16);
  divide_by(h.data_ptr(), 2, DType::f16, 3, Device::cpu());
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3555);  // 1/3 in f16
}

}  // namespace
}  // namespace dt::kernels
