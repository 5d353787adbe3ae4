// The n-operand iteration space (kernels/layout.h) against a naive reference loop: for every element of the shape,
// in row-major order, the tuple of element offsets of all operands (sum of index * stride). A simplified Layout may
// visit the elements in another order (Note [Layout simplification]), so the tuples are compared as sorted lists;
// the destination's offsets are distinct, so equal lists mean every destination element is paired with the same
// source elements. Random shapes and strides (fixed seeds): permuted, gapped, negative and zero (broadcast) strides,
// size-1 and size-0 dims, 0-d views, 1 to 4 operands.
#include "kernels/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <vector>

namespace dt::kernels {
namespace {

using Offsets = std::array<int64_t, kMaxOperands>;

std::vector<Offsets> reference(const Shape& shape, const std::vector<Shape>& strides) {
  std::vector<Offsets> out;
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    Offsets o{};
    for (size_t k = 0; k < strides.size(); ++k)
      for (size_t d = 0; d < shape.size(); ++d) o[k] += idx[d] * strides[k][d];
    out.push_back(o);
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

// The tuples for_each_row visits, in its order.
std::vector<Offsets> rows_of(const Layout& l) {
  std::vector<Offsets> out;
  for_each_row(l, [&](const int64_t* off, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) {
      Offsets o{};
      for (int k = 0; k < l.nops; ++k) o[k] = off[k] + i * st[k];
      out.push_back(o);
    }
  });
  return out;
}

// The tuples layout_offsets gives for i = 0 .. numel-1 (what a CUDA kernel computes per thread).
std::vector<Offsets> indexed_of(const Layout& l) {
  std::vector<Offsets> out;
  for (int64_t i = 0; i < l.numel; ++i) {
    Offsets o{};
    layout_offsets<kMaxOperands>(l, i, o.data());
    for (int k = l.nops; k < kMaxOperands; ++k) o[k] = 0;
    out.push_back(o);
  }
  return out;
}

StridedView view(const Shape& shape, const Shape& strides) {
  StridedView v;
  v.ndim = int(shape.size());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = shape[size_t(d)];
    v.strides[d] = strides[size_t(d)];
  }
  return v;
}

// Checks one case through the StridedView front end (and, when possible, the Tensor one); returns the layout.
Layout check_case(const Shape& shape, const std::vector<Shape>& strides) {
  std::vector<StridedView> views;
  for (const Shape& st : strides) views.push_back(view(shape, st));
  Layout l;
  switch (views.size()) {
    case 1:
      l = make_layout({&views[0]});
      break;
    case 2:
      l = make_layout({&views[0], &views[1]});
      break;
    case 3:
      l = make_layout({&views[0], &views[1], &views[2]});
      break;
    default:
      l = make_layout({&views[0], &views[1], &views[2], &views[3]});
      break;
  }
  EXPECT_EQ(l.nops, int(strides.size()));
  EXPECT_EQ(l.numel, shape_numel(shape));
  EXPECT_GE(l.ndim, 1);
  EXPECT_LE(l.ndim, kMaxDims);
  std::vector<Offsets> want = reference(shape, strides);
  std::vector<Offsets> rows = rows_of(l);
  std::vector<Offsets> indexed = indexed_of(l);
  EXPECT_EQ(rows, indexed) << "for_each_row and layout_offsets disagree on the order";
  std::sort(want.begin(), want.end());
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, want) << "shape " << shape_str(shape) << ", dst strides " << shape_str(strides[0]);
  return l;
}

TEST(Layout, RandomViewsMatchTheNaiveLoop) {
  std::mt19937_64 rng(20261201);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int iter = 0; iter < 3000; ++iter) {
    const int nd = int(uni(0, 6));
    Shape shape = Shape(size_t(nd), 1);
    for (auto& s : shape) s = uni(0, 9) == 0 ? 0 : uni(1, 4);
    const int nops = int(uni(1, kMaxOperands));
    std::vector<Shape> strides;
    for (int k = 0; k < nops; ++k) {
      // A permuted row-major layout with gaps, then sign flips and (for sources) broadcast dims.
      std::vector<int> perm = std::vector<int>(size_t(nd), 0);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      Shape st = Shape(size_t(nd), 0);
      int64_t run = uni(1, 2);
      for (int i = nd - 1; i >= 0; --i) {
        const size_t d = size_t(perm[size_t(i)]);
        st[d] = run;
        run *= std::max<int64_t>(shape[d], 1) + (uni(0, 3) == 0 ? uni(1, 2) : 0);
      }
      for (auto& s : st) {
        if (uni(0, 4) == 0) s = -s;
        if (k > 0 && uni(0, 3) == 0) s = 0;
      }
      strides.push_back(st);
    }
    check_case(shape, strides);
    if (HasFailure()) return;
  }
}

TEST(Layout, ContiguousOperandsCollapseToOneDim) {
  Layout l = check_case({3, 4, 5}, {{20, 5, 1}, {20, 5, 1}, {20, 5, 1}});
  EXPECT_EQ(l.ndim, 1);
  EXPECT_TRUE(is_flat(l));
}

TEST(Layout, BroadcastDimsMergeOnlyWithBroadcastDims) {
  // Source broadcast along the two outer dims: those merge with each other (0 == 0 * n), not with the inner one.
  Layout l = check_case({2, 3, 5}, {{15, 5, 1}, {0, 0, 1}});
  EXPECT_EQ(l.ndim, 2);
  EXPECT_EQ(l.shape[0], 6);
  EXPECT_EQ(l.strides[1][0], 0);
  // Broadcast along the inner dim only (a column vector): the rows keep stride 0 in the source.
  l = check_case({4, 6}, {{6, 1}, {1, 0}});
  EXPECT_EQ(l.ndim, 2);
  EXPECT_EQ(l.strides[0][1], 1);
  EXPECT_EQ(l.strides[1][1], 0);
  // Three operands, one broadcast in the middle dim (where(cond, a, b)-like).
  check_case({3, 4, 5}, {{20, 5, 1}, {20, 5, 1}, {5, 0, 1}, {0, 0, 0}});
}

TEST(Layout, RowMajorDestinationKeepsItsOrder) {
  // The elementwise ops write a fresh row-major output: the writes must run forward, as with the merge-only rule.
  Layout l = check_case({3, 1, 4, 2}, {{8, 8, 2, 1}, {1, 1, 3, 12}, {0, 0, 2, 1}});
  std::vector<Offsets> rows = rows_of(l);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i][0], int64_t(i));
}

TEST(Layout, NegativeStrides) {
  Layout l = check_case({4, 3}, {{-3, -1}, {3, 1}});
  EXPECT_EQ(l.ndim, 1);  // reversed contiguous: one run of stride -1
  EXPECT_EQ(l.strides[0][0], -1);
  check_case({4, 3}, {{3, 1}, {-1, -4}});
}

TEST(Layout, EmptyAndZeroDimViews) {
  Layout l = check_case({3, 0, 2}, {{0, 2, 1}, {1, 1, 1}});
  EXPECT_EQ(l.numel, 0);
  EXPECT_TRUE(rows_of(l).empty());
  l = check_case({}, {{}, {}, {}});
  EXPECT_EQ(l.numel, 1);
  EXPECT_EQ(rows_of(l), (std::vector<Offsets>{Offsets{}}));
  l = check_case({1, 1}, {{7, 3}, {0, 0}});
  EXPECT_EQ(rows_of(l), (std::vector<Offsets>{Offsets{}}));
}

TEST(Layout, TensorFrontEndMergesBeforeCounting) {
  // Ten dims that merge pairwise in their own order fit, although a StridedView holds at most kMaxDims.
  Shape shape(10, 2);
  Tensor a = Tensor::empty(shape, DType::u8);
  Tensor b = Tensor::empty({2}, DType::u8).expand(shape);
  Layout l = make_layout("test", {&a, &b});
  EXPECT_EQ(l.numel, 1024);
  EXPECT_EQ(rows_of(l).size(), 1024u);
  // Nine dims of which none merge: rejected with the op named.
  Tensor big = Tensor::empty({2, 2, 2, 2, 2, 2, 2, 2, 2}, DType::u8);
  Tensor perm = big.permute({8, 7, 6, 5, 4, 3, 2, 1, 0});
  Tensor out = Tensor::empty(perm.shape(), DType::u8);
  try {
    make_layout("my_op", {&out, &perm});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("my_op"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt::kernels
