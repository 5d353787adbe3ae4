// pack / unpack / copy / copy_bytes and StridedView against element-by-element references (index arithmetic on the
// raw storage), for every dtype, on contiguous, empty, transposed, narrowed, selected, expanded and 6-8 dim views.
#include "kernels/copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "tests/kernels/test_util.h"

namespace dt::kernels {
namespace {

using namespace dt::kernels::testing;

struct ViewCase {
  std::string name;
  Shape base_shape;
  std::function<Tensor(const Tensor&)> make;  // the view of the base
  bool writable = true;                       // false for expanded (stride 0) views
};

std::vector<ViewCase> view_cases() {
  auto id = [](const Tensor& t) { return t; };
  return {
      {"scalar", {}, id},
      {"empty", {0}, id},
      {"empty_2d", {4, 0, 3}, id},
      {"one", {1}, id},
      {"odd_1d", {37}, id},
      {"contig_2d", {3, 5}, id},
      {"contig_3d_odd", {3, 7, 5}, id},
      {"transposed", {5, 7}, [](const Tensor& t) { return t.t(); }},
      {"permuted_3d",
       {3, 4, 5},
       [](const Tensor& t) {
         return t.permute({2, 0, 1});
       }},
      {"narrow_inner", {6, 9}, [](const Tensor& t) { return t.narrow(1, 2, 5); }},
      {"narrow_outer", {6, 9}, [](const Tensor& t) { return t.narrow(0, 1, 3); }},
      {"narrow_twice_3d", {4, 5, 6}, [](const Tensor& t) { return t.narrow(2, 1, 4).narrow(0, 1, 2); }},
      {"narrow_empty", {4, 5}, [](const Tensor& t) { return t.narrow(1, 2, 0); }},
      {"select_middle", {4, 5, 6}, [](const Tensor& t) { return t.select(1, 2); }},
      {"narrow_transposed", {8, 6}, [](const Tensor& t) { return t.narrow(1, 1, 4).t(); }},
      // large enough for the tiled transpose walk, with partial tiles
      {"big_transposed", {67, 131}, [](const Tensor& t) { return t.t(); }},
      {"big_permuted_3d",
       {5, 40, 37},
       [](const Tensor& t) {
         return t.permute({2, 1, 0});
       }},
      {"big_narrow_transposed", {3, 50, 70}, [](const Tensor& t) { return t.narrow(2, 3, 60).transpose(1, 2); }},
      {"long_rows", {16, 1000}, [](const Tensor& t) { return t.narrow(1, 100, 700); }},
      {"size1_dims", {3, 1, 4, 1}, [](const Tensor& t) { return t.narrow(2, 1, 2); }},
      {"expand_rows",
       {1, 5},
       [](const Tensor& t) {
         return t.expand({4, 5});
       },
       false},
      {"expand_cols",
       {3, 1},
       [](const Tensor& t) {
         return t.expand({3, 6});
       },
       false},
      {"expand_lead",
       {5},
       [](const Tensor& t) {
         return t.expand({2, 3, 5});
       },
       false},
      {"six_dims",
       {2, 3, 1, 4, 2, 3},
       [](const Tensor& t) {
         return t.permute({5, 1, 3, 0, 2, 4}).narrow(1, 1, 2);
       }},
      {"eight_dims",
       {2, 2, 2, 3, 2, 2, 2, 2},
       [](const Tensor& t) {
         return t.permute({7, 6, 5, 4, 3, 2, 1, 0}).narrow(4, 1, 2);
       }},
  };
}

Tensor make_base(const ViewCase& c, DType dt, uint64_t seed) {
  Tensor base = Tensor::empty(c.base_shape, dt);
  fill_random_bits(base, seed);
  return base;
}

std::vector<uint64_t> snapshot(const Tensor& base) {
  std::vector<uint64_t> v(size_t(base.numel()));
  for (int64_t i = 0; i < base.numel(); ++i)
    v[size_t(i)] =
        load_bits(static_cast<char*>(base.data_ptr()) + i * int64_t(base.element_size()), base.element_size());
  return v;
}

// Storage element offsets (relative to the base's start) that the view covers.
std::set<int64_t> covered(const Tensor& base, const Tensor& view) {
  std::set<int64_t> s;
  for_each_index(view.shape(), [&](const std::vector<int64_t>& idx, int64_t) {
    s.insert((element_ptr(view, idx) - static_cast<char*>(base.data_ptr())) / int64_t(base.element_size()));
  });
  return s;
}

// Every element of base outside `view` still has its bits from `before`.
void expect_untouched(const Tensor& base, const Tensor& view, const std::vector<uint64_t>& before,
                      const std::string& what) {
  std::set<int64_t> cov = covered(base, view);
  std::vector<uint64_t> after = snapshot(base);
  for (size_t i = 0; i < after.size(); ++i) {
    if (!cov.count(int64_t(i))) {
      ASSERT_EQ(after[i], before[i]) << what << ": element " << i << " outside the view";
    }
  }
}

TEST(Pack, EveryDtypeAndView) {
  uint64_t seed = 1;
  for (const ViewCase& c : view_cases()) {
    for (DType dt : all_dtypes()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dt));
      Tensor base = make_base(c, dt, seed++);
      Tensor v = c.make(base);
      size_t es = dtype_size(dt);
      int64_t n = v.numel();
      std::vector<unsigned char> buf(size_t(n) * es + 16, 0xcd);
      pack(view_of(v), buf.data(), Device::cpu());
      for_each_index(v.shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
        ASSERT_EQ(load_bits(buf.data() + lin * int64_t(es), es), load_bits(element_ptr(v, idx), es))
            << "element " << lin;
      });
      for (size_t i = size_t(n) * es; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xcd) << "wrote past the end";
    }
  }
}

TEST(Unpack, EveryDtypeAndView) {
  uint64_t seed = 100;
  for (const ViewCase& c : view_cases()) {
    if (!c.writable) continue;
    for (DType dt : all_dtypes()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dt));
      Tensor base = make_base(c, dt, seed++);
      Tensor v = c.make(base);
      Tensor flat = Tensor::empty({v.numel()}, dt);
      fill_random_bits(flat, seed++);
      std::vector<uint64_t> before = snapshot(base);
      unpack(flat.numel() ? flat.data_ptr() : nullptr, view_of(v), Device::cpu());
      size_t es = dtype_size(dt);
      for_each_index(v.shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
        ASSERT_EQ(load_bits(element_ptr(v, idx), es), load_bits(element_ptr(flat, {lin}), es)) << "element " << lin;
      });
      expect_untouched(base, v, before, "unpack");
    }
  }
}

// A destination of `shape` whose dims are laid out in reverse order (column-major): a different layout from most
// sources, so copies exercise both strided sides.
Tensor column_major(const Shape& shape, DType dt) {
  Shape rev(shape.rbegin(), shape.rend());
  std::vector<int64_t> perm;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) perm.push_back(d);
  return Tensor::empty(rev, dt).permute(perm);
}

TEST(Copy, EveryDtypeAndViewIntoContiguousAndColumnMajor) {
  uint64_t seed = 200;
  for (const ViewCase& c : view_cases()) {
    for (DType dt : all_dtypes()) {
      for (int layout = 0; layout < 2; ++layout) {
        SCOPED_TRACE(c.name + " " + dtype_name(dt) + (layout ? " column-major dst" : " contiguous dst"));
        Tensor src = c.make(make_base(c, dt, seed++));
        Tensor dst = layout ? column_major(src.shape(), dt) : Tensor::empty(src.shape(), dt);
        ASSERT_EQ(dst.shape(), src.shape());
        if (dst.numel() > 0) fill_random_bits(Tensor(dst.storage(), {dst.numel()}, {1}, 0, dt), seed++);
        copy(dst, src);
        size_t es = dtype_size(dt);
        for_each_index(src.shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
          ASSERT_EQ(load_bits(element_ptr(dst, idx), es), load_bits(element_ptr(src, idx), es)) << "element " << lin;
        });
      }
    }
  }
}

TEST(Copy, IntoNarrowedDestinationLeavesTheRest) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    Tensor base = Tensor::empty({7, 11}, dt);
    fill_random_bits(base, 7);
    Tensor dst = base.narrow(1, 3, 6).narrow(0, 2, 4);
    Tensor src = Tensor::empty({6, 4}, dt).t();
    fill_random_bits(Tensor(src.storage(), {24}, {1}, 0, dt), 8);
    std::vector<uint64_t> before = snapshot(base);
    copy(view_of(dst), view_of(src), Device::cpu());
    for_each_index(dst.shape(), [&](const std::vector<int64_t>& idx, int64_t) {
      ASSERT_EQ(load_bits(element_ptr(dst, idx), dtype_size(dt)), load_bits(element_ptr(src, idx), dtype_size(dt)));
    });
    expect_untouched(base, dst, before, dtype_name(dt));
  }
}

TEST(Copy, NegativeStridesThroughRawViews) {
  // Views may have negative strides (a reversed row); the kernels only do index arithmetic.
  std::vector<int32_t> src(12), dst(12, -1);
  for (int i = 0; i < 12; ++i) src[size_t(i)] = i;
  Shape shape{3, 4}, rev_strides{4, -1};
  StridedView s = make_view(src.data() + 3, shape, rev_strides, DType::i32);  // each row reversed
  copy(contiguous_view(dst.data(), shape, DType::i32), s, Device::cpu());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(dst[size_t(r * 4 + c)], r * 4 + 3 - c);
}

TEST(CopyBytes, CopiesAndValidates) {
  std::vector<uint8_t> a(1000), b(1000, 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 7 + 3);
  copy_bytes(b.data(), a.data(), a.size(), Device::cpu());
  EXPECT_EQ(a, b);
  copy_bytes(nullptr, nullptr, 0, Device::cpu());
  EXPECT_THROW(copy_bytes(nullptr, a.data(), 4, Device::cpu()), InvalidArgument);
}

// Copies large enough to use non-temporal stores (Note [Streaming copies]): every misalignment of source and
// destination and odd lengths (the unaligned head and the tail around the 64-byte body), and a strided copy of long
// rows, against memcpy / element-by-element references.
TEST(CopyBytes, StreamedLargeCopiesAtEveryAlignment) {
  const size_t big = (size_t(16) << 20) + 77;
  std::vector<uint8_t> a(big + 64), b(big + 64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t((i * 2654435761u) >> 13);
  for (size_t s : {size_t(0), size_t(1), size_t(7), size_t(15)}) {
    for (size_t d : {size_t(0), size_t(3), size_t(8), size_t(13)}) {
      std::fill(b.begin(), b.end(), uint8_t(0xAB));
      copy_bytes(b.data() + d, a.data() + s, big - s, Device::cpu());
      ASSERT_EQ(std::memcmp(b.data() + d, a.data() + s, big - s), 0) << "src offset " << s << ", dst offset " << d;
      if (d > 0) {
        EXPECT_EQ(b[d - 1], uint8_t(0xAB)) << "wrote before the destination";
      }
      EXPECT_EQ(b[d + big - s], uint8_t(0xAB)) << "wrote past the destination";
    }
  }
  // 4097 rows of 1025 f32 (odd row bytes) into every other column block of a wider tensor: 16 MiB and more in all.
  Tensor src = Tensor::rand({4097, 1025}, 11);
  Tensor dst = Tensor::zeros({4097, 2051});
  copy(dst.narrow(1, 1, 1025), src);
  EXPECT_TRUE(equal(dst.narrow(1, 1, 1025).contiguous(), src));
  EXPECT_TRUE(equal(dst.narrow(1, 0, 1), Tensor::zeros({4097, 1})));
  EXPECT_TRUE(equal(dst.narrow(1, 1026, 1025), Tensor::zeros({4097, 1025})));
}

TEST(CopyArgs, Rejected) {
  Tensor a = Tensor::empty({3, 4}), b = Tensor::empty({4, 3}), c = Tensor::empty({3, 4}, DType::f64);
  EXPECT_THROW(copy(a, b), InvalidArgument);  // shape
  EXPECT_THROW(copy(a, c), InvalidArgument);  // dtype (copy_cast converts)
  EXPECT_NO_THROW(copy_cast(a, c));
  EXPECT_THROW(copy(a.narrow(0, 0, 1).expand({3, 4}), a), InvalidArgument);  // written stride 0
  EXPECT_THROW(pack(view_of(a), nullptr, Device::cpu()), InvalidArgument);
  EXPECT_THROW(unpack(nullptr, view_of(a), Device::cpu()), InvalidArgument);
  EXPECT_THROW(copy(Tensor(), a), InvalidArgument);
  StridedView bad = view_of(a);
  bad.shape[1] = -1;
  EXPECT_THROW(pack(bad, a.data_ptr(), Device::cpu()), InvalidArgument);
  bad = view_of(a);
  bad.ndim = kMaxDims + 1;
  EXPECT_THROW(pack(bad, a.data_ptr(), Device::cpu()), InvalidArgument);
  EXPECT_THROW(view_of(Tensor::empty({1, 1, 1, 1, 1, 1, 1, 1, 1})), InvalidArgument);
  Shape s3{2, 2, 2}, s2{1, 1};
  EXPECT_THROW(make_view(a.data_ptr(), s3, s2, DType::f32), InvalidArgument);
  try {
    copy(a, b);
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    // The message names both views.
    EXPECT_NE(std::string(e.what()).find("f32[3, 4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32[4, 3]"), std::string::npos) << e.what();
  }
#if !defined(DT_WITH_CUDA)
  EXPECT_THROW(pack(view_of(a), b.data_ptr(), Device::cuda(0)), Unsupported);
#endif
}

TEST(StridedView, MatchesTensorViews) {
  Tensor base = Tensor::empty({4, 5, 6}, DType::f16);
  StridedView v = view_of(base);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.numel(), 120);
  EXPECT_EQ(v.nbytes(), 240u);
  struct {
    StridedView got;
    Tensor want;
  } cases[] = {
      {v.narrow(1, 2, 3), base.narrow(1, 2, 3)},
      {v.select(2, 4), base.select(2, 4)},
      {v.narrow(0, 1, 2).select(0, 1), base.narrow(0, 1, 2).select(0, 1)},
      {v.select(0, 3).narrow(1, 0, 6), base.select(0, 3).narrow(1, 0, 6)},
  };
  for (auto& c : cases) {
    StridedView w = view_of(c.want);
    EXPECT_EQ(c.got.data, w.data);
    EXPECT_EQ(c.got.ndim, w.ndim);
    for (int d = 0; d < w.ndim; ++d) {
      EXPECT_EQ(c.got.shape[d], w.shape[d]);
      EXPECT_EQ(c.got.strides[d], w.strides[d]);
    }
    EXPECT_EQ(c.got.is_contiguous(), c.want.is_contiguous()) << view_str(c.got);
  }
  EXPECT_FALSE(view_of(base.transpose(0, 2)).is_contiguous());
  EXPECT_TRUE(view_of(base.narrow(1, 0, 0)).is_contiguous());
  EXPECT_THROW(v.narrow(1, 3, 3), InvalidArgument);
  EXPECT_THROW(v.select(3, 0), InvalidArgument);
  EXPECT_THROW(v.select(0, 4), InvalidArgument);
  EXPECT_EQ(view_str(v.narrow(1, 2, 3)), "f16[4, 3, 6] strides [30, 6, 1]");
  Shape sh{2, 3};
  StridedView cv = contiguous_view(base.data_ptr(), sh, DType::i8);
  EXPECT_EQ(cv.strides[0], 3);
  EXPECT_EQ(cv.strides[1], 1);
  EXPECT_EQ(flat_view(nullptr, 0, DType::f32).numel(), 0);
}

}  // namespace
}  // namespace dt::kernels
