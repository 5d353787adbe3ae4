#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "core/allocator.h"

namespace dt {
namespace {

// Element (i, j, k) of arange(a*b*c).reshape(a, b, c) is i*b*c + j*c + k: the reference for every view test.
Tensor cube(int64_t a, int64_t b, int64_t c, DType dt = DType::f64) {
  return Tensor::arange(a * b * c, dt).view({a, b, c});
}

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector(), std::vector<double>(6, 0.0));
  EXPECT_EQ(Tensor::full({4}, 2.5, DType::bf16).to_vector(), std::vector<double>(4, 2.5));
  EXPECT_EQ(Tensor::ones({0, 3}).numel(), 0);
  EXPECT_THROW(Tensor::empty({-1, 2}), InvalidArgument);
  EXPECT_THROW(t.data<double>(), InvalidArgument);
  EXPECT_THROW(t.size(2), InvalidArgument);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(Tensor::full({}, 7, DType::i32).item(), 7.0);
}

TEST(Tensor, NarrowSelectTransposePermute) {
  Tensor t = cube(3, 4, 5);
  Tensor n = t.narrow(1, 1, 2);
  EXPECT_TRUE(n.shares_storage_with(t));
  std::vector<double> v = n.to_vector(), ref;
  for (int i = 0; i < 3; ++i)
    for (int j = 1; j < 3; ++j)
      for (int k = 0; k < 5; ++k) ref.push_back(i * 20 + j * 5 + k);
  EXPECT_EQ(v, ref);

  ref.clear();
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) ref.push_back(i * 20 + 2 * 5 + k);
  EXPECT_EQ(t.select(1, 2).to_vector(), ref);
  EXPECT_EQ(t.select(1, -2).to_vector(), ref);

  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{5, 3, 4}));
  EXPECT_FALSE(p.is_contiguous());
  ref.clear();
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) ref.push_back(i * 20 + j * 5 + k);
  EXPECT_EQ(p.to_vector(), ref);
  EXPECT_EQ(p.contiguous().to_vector(), ref);
  EXPECT_TRUE(p.contiguous().is_contiguous());

  ref.clear();
  for (int k = 0; k < 5; ++k)
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 3; ++i) ref.push_back(i * 20 + j * 5 + k);
  EXPECT_EQ(t.transpose(0, 2).to_vector(), ref);

  EXPECT_THROW(t.narrow(0, 2, 2), InvalidArgument);
  EXPECT_THROW(t.permute({0, 0, 1}), InvalidArgument);
  EXPECT_THROW(t.select(3, 0), InvalidArgument);
}

// torch.chunk reference from its definition: size ceil(n/k), as many chunks as needed (possibly fewer than k).
std::vector<int64_t> ref_chunk_sizes(int64_t n, int64_t k) {
  int64_t cs = std::max<int64_t>((n + k - 1) / k, 1);
  std::vector<int64_t> out;
  for (int64_t s = 0; s < n; s += cs) out.push_back(std::min(cs, n - s));
  if (n == 0) out.push_back(0);
  return out;
}

TEST(Tensor, ChunkFollowsTorchChunk) {
  for (int64_t n = 0; n <= 12; ++n)
    for (int64_t k = 1; k <= 6; ++k) {
      Tensor t = Tensor::arange(n, DType::i64);
      auto chunks = t.chunk(k);
      auto ref = ref_chunk_sizes(n, k);
      ASSERT_EQ(chunks.size(), ref.size()) << n << "/" << k;
      int64_t start = 0;
      for (size_t c = 0; c < chunks.size(); ++c) {
        ASSERT_EQ(chunks[c].size(0), ref[c]);
        std::vector<double> want(size_t(ref[c]));
        std::iota(want.begin(), want.end(), double(start));
        EXPECT_EQ(chunks[c].to_vector(), want);
        start += ref[c];
      }
    }
  auto parts = cube(2, 7, 3).split_with_sizes({3, 0, 4}, 1);
  EXPECT_EQ(parts[1].numel(), 0);
  EXPECT_EQ(parts[2].select(1, 0).to_vector(), (std::vector<double>{9, 10, 11, 30, 31, 32}));
  EXPECT_THROW(cube(2, 7, 3).split_with_sizes({3, 3}, 1), InvalidArgument);
}

TEST(Tensor, ViewReshapeSqueezeExpand) {
  Tensor t = cube(2, 3, 4);
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_TRUE(v.shares_storage_with(t));
  EXPECT_EQ(v.to_vector(), t.to_vector());
  Tensor tr = t.transpose(1, 2);  // (2, 4, 3), not viewable as (8, 3)
  EXPECT_THROW(tr.view({8, 3}), InvalidArgument);
  Tensor r = tr.reshape({8, 3});
  EXPECT_FALSE(r.shares_storage_with(t));
  EXPECT_EQ(r.to_vector(), tr.to_vector());
  // Merging dims that stay contiguous among themselves is a view even on a non-contiguous tensor.
  Tensor nar = t.narrow(2, 0, 2);  // (2, 3, 2) strides (12, 4, 1)
  Tensor merged = nar.view({2, 3, 2}).transpose(0, 1).reshape({3, 4});
  std::vector<double> ref;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) ref.push_back(i * 12 + j * 4 + k);
  EXPECT_EQ(merged.to_vector(), ref);
  EXPECT_THROW(t.view({5, 5}), InvalidArgument);
  Tensor scalar = Tensor::full({}, 3.0);
  EXPECT_EQ(scalar.view({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(scalar.reshape({1}).to_vector(), (std::vector<double>{3.0}));
  EXPECT_EQ(scalar.view({1}).view({}).item(), 3.0);
  EXPECT_THROW(t.view({-1, -1}), InvalidArgument);

  Tensor u = t.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(u.squeeze(1).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(u.unsqueeze(-1).squeeze().shape(), (Shape{2, 3, 4}));
  Tensor row = Tensor::arange(3).view({1, 3});
  Tensor e = row.expand({2, 4, 3});
  EXPECT_EQ(e.strides()[0], 0);
  std::vector<double> eref;
  for (int i = 0; i < 8; ++i) eref.insert(eref.end(), {0, 1, 2});
  EXPECT_EQ(e.to_vector(), eref);
  EXPECT_THROW(row.expand({2, 4}), InvalidArgument);
}

TEST(Tensor, CopyCastFillClone) {
  Tensor a = Tensor::randn({5, 7}, 3, DType::f32);
  Tensor b = Tensor::empty({7, 5}, DType::f64);
  b.copy_(a.t());
  std::vector<double> av = a.to_vector(), bv = b.to_vector();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) ASSERT_EQ(bv[size_t(j * 5 + i)], double(float(av[size_t(i * 7 + j)])));
  Tensor h = a.to(DType::bf16);
  std::vector<double> hv = h.to_vector();
  for (size_t i = 0; i < av.size(); ++i) ASSERT_EQ(hv[i], double(float(BFloat16(float(av[i])))));
  Tensor c = a.clone();
  EXPECT_FALSE(c.shares_storage_with(a));
  EXPECT_TRUE(equal(c, a));
  c.narrow(0, 1, 2).fill_(-1);
  EXPECT_FALSE(equal(c, a));
  std::vector<double> cv = c.to_vector();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j)
      ASSERT_EQ(cv[size_t(i * 7 + j)], (i == 1 || i == 2) ? -1.0 : double(float(av[size_t(i * 7 + j)])));
  // Broadcast copy.
  Tensor dst = Tensor::zeros({3, 4}, DType::i32);
  dst.copy_(Tensor::arange(4, DType::i64));
  EXPECT_EQ(dst.select(0, 2).to_vector(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_THROW(dst.copy_(Tensor::arange(5)), InvalidArgument);
  // Bool and integer conversions.
  EXPECT_EQ(Tensor::from_vector({0, 2, -1}, {3}).to(DType::b8).to_vector(), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(Tensor::from_vector({1.7, -1.7}, {2}).to(DType::i32).to_vector(), (std::vector<double>{1, -1}));
}

TEST(Tensor, RandomFillsAreDeterministicAndDistributed) {
  Tensor a = Tensor::rand({1000}, 42), b = Tensor::rand({1000}, 42), c = Tensor::rand({1000}, 43);
  EXPECT_TRUE(equal(a, b));
  EXPECT_FALSE(equal(a, c));
  std::vector<double> v = Tensor::randn({20000}, 5, DType::f64).to_vector();
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  var /= double(v.size());
  EXPECT_NEAR(mean, 0, 0.05);
  EXPECT_NEAR(var, 1, 0.05);
  for (double x : Tensor::rand({500}, 1, DType::f64, -2, 3).to_vector()) {
    ASSERT_GE(x, -2);
    ASSERT_LT(x, 3);
  }
  for (double x : Tensor::rand({500}, 1, DType::i32, 0, 10).to_vector()) {
    ASSERT_EQ(x, std::floor(x));
    ASSERT_GE(x, 0);
    ASSERT_LT(x, 10);
  }
}

TEST(Tensor, ClosenessHelpers) {
  Tensor a = Tensor::from_vector({1, 2, NAN}, {3});
  Tensor b = Tensor::from_vector({1, 2.000001, NAN}, {3});
  EXPECT_TRUE(allclose(a, b, 1e-5, 0));
  EXPECT_FALSE(allclose(a, b, 1e-8, 0));
  EXPECT_EQ(max_abs_diff(a, b), double(2.000001f) - 2.0);
  EXPECT_FALSE(equal(a, Tensor::from_vector({1, 2, 3}, {3})));
  EXPECT_NE(a.to_string().find("shape=[3]"), std::string::npos);
}

TEST(Tensor, FromBlobIsZeroCopy) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  bool freed = false;
  {
    Tensor t = Tensor::from_blob(buf.data(), {2, 3}, DType::f32, Device::cpu(), [&](void*) { freed = true; });
    t.select(1, 1).fill_(0);
    EXPECT_EQ(buf, (std::vector<float>{1, 0, 3, 4, 0, 6}));
  }
  EXPECT_TRUE(freed);
}

TEST(Tensor, BadViewsAndSizesAreErrors) {
  // 0-d and undefined tensors have no dims to view along.
  Tensor s = Tensor::full({}, 1);
  EXPECT_THROW(s.size(0), InvalidArgument);
  EXPECT_THROW(s.stride(-1), InvalidArgument);
  EXPECT_THROW(s.narrow(0, 0, 1), InvalidArgument);
  EXPECT_THROW(s.select(0, 0), InvalidArgument);
  EXPECT_THROW(s.transpose(0, 0), InvalidArgument);
  EXPECT_THROW(s.chunk(2, 0), InvalidArgument);
  EXPECT_THROW(s.split(1, 0), InvalidArgument);
  EXPECT_THROW(s.squeeze(0), InvalidArgument);
  EXPECT_EQ(s.unsqueeze(0).shape(), Shape{1});  // a 0-d tensor still gains a dim
  EXPECT_THROW(Tensor().narrow(0, 0, 0), InvalidArgument);
  EXPECT_THROW(Tensor().select(0, 0), InvalidArgument);

  // as_strided stays inside the storage.
  Tensor a = Tensor::arange(4);
  EXPECT_THROW(a.as_strided({1000000}, {1}, 0), InvalidArgument);
  EXPECT_THROW(a.as_strided({2}, {1}, -100000000), InvalidArgument);
  EXPECT_THROW(a.as_strided({2, 2}, {1}, 0), InvalidArgument);
  EXPECT_THROW(a.as_strided({2}, {std::numeric_limits<int64_t>::max()}, 0), InvalidArgument);
  EXPECT_THROW(a.as_strided({2}, {-1}, 3), InvalidArgument);
  EXPECT_EQ(a.as_strided({2, 2}, {1, 2}, 0).to_vector(), (std::vector<double>{0, 2, 1, 3}));
  EXPECT_EQ(a.as_strided({0, 5}, {100, 100}, 4).numel(), 0);  // empty views reach nothing

  // Sizes whose sum or product overflows.
  EXPECT_THROW(a.narrow(0, std::numeric_limits<int64_t>::max(), 2), InvalidArgument);
  EXPECT_THROW(Tensor::empty({int64_t(1) << 33, int64_t(1) << 33, 4}), InvalidArgument);
  EXPECT_THROW(Tensor::empty({int64_t(1) << 62}, DType::f64), InvalidArgument);
  EXPECT_EQ(Tensor::empty({int64_t(1) << 40, 0, int64_t(1) << 40}).numel(), 0);
  // An empty shape whose other sizes multiply past int64: its contiguous strides must not wrap (to negative ones).
  Tensor huge_empty = Tensor::empty({3, 3, int64_t(1) << 62, 0});
  for (int64_t st : huge_empty.strides()) EXPECT_GE(st, 0);
  EXPECT_THROW(Tensor::ones({1}).expand({-5}), InvalidArgument);
  EXPECT_THROW(Tensor::arange(int64_t(1) << 60), Error);  // no memory holds it: a dt::Error, not std::length_error

  // Invalid enum values and null memory.
  EXPECT_THROW(Tensor::empty({4}, static_cast<DType>(55)), InvalidArgument);
  EXPECT_THROW(a.to(static_cast<DType>(55)), InvalidArgument);
  EXPECT_THROW(Tensor::from_blob(nullptr, {4}, DType::f32, Device::cpu(), {}), InvalidArgument);
}

TEST(Tensor, CopyFromAnOverlappingViewReadsTheSourceAsItWas) {
  Tensor a = Tensor::arange(4).view({2, 2});
  a.copy_(a.t());
  EXPECT_EQ(a.to_vector(), (std::vector<double>{0, 2, 1, 3}));
  Tensor b = Tensor::arange(6);
  b.narrow(0, 1, 5).copy_(b.narrow(0, 0, 5));  // shift right by one
  EXPECT_EQ(b.to_vector(), (std::vector<double>{0, 0, 1, 2, 3, 4}));
  Tensor c = Tensor::arange(3);
  c.copy_(c);  // onto itself: nothing changes
  EXPECT_EQ(c.to_vector(), (std::vector<double>{0, 1, 2}));
}

}  // namespace
}  // namespace dt
