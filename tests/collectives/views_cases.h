// Randomized cases of all_gather_views / all_to_all_views for any communicator that takes strided views (the
// thread backend, UCX processes). Every rank draws the same cases from the same seed and builds the same global
// tensor G (Tensor::rand with a per-case seed), so each checks its own result against G by itself, bit for bit.
//
// all_gather_views: G is cut along a dim into one block per rank with random sizes (empty blocks included); rank r
//   sends its block as a view of a larger buffer (strided) or as a contiguous tensor; every rank receives block j
//   into out.narrow(dim, offset j) of an output laid out row-major or permuted (strided views on both sides).
// all_to_all_views: rank p holds chunk p of G along dim i and sends out.narrow(j, chunk q) to rank q, which lands
//   it in out.narrow(i, chunk p): the S(i) -> S(j) exchange of a redistribution, on any dims.
// Sizes reach a few hundred KiB per block, above the UCX backend's direct-read threshold, and stay below it too.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "collectives/communicator.h"
#include "core/tensor.h"
#include "kernels/strided_view.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::test {

// Random sizes summing to `total` over `parts` parts, some of them zero.
inline std::vector<int64_t> random_split(std::mt19937_64& rng, int64_t total, int parts) {
  std::vector<int64_t> cuts{0, total};
  for (int i = 0; i < parts - 1; ++i) cuts.push_back(int64_t(rng() % uint64_t(total + 1)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> sizes;
  for (int i = 0; i < parts; ++i) sizes.push_back(cuts[size_t(i) + 1] - cuts[size_t(i)]);
  return sizes;
}

inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> off(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) off[i] = off[i - 1] + sizes[i - 1];
  return off;
}

// A tensor equal to `t` whose memory is strided: a narrow of a wider buffer along its last dim, or (when `permuted`)
// stored in reversed dim order.
inline Tensor strided_copy(const Tensor& t, bool permuted) {
  if (permuted) return kernels::ops_test::noncontig(t);  // dims reversed in memory (t has 2 or more dims)
  Shape wide = t.shape();
  wide.back() += 3;
  Tensor store = Tensor::full(wide, 0.0, t.dtype());
  Tensor v = store.narrow(t.dim() - 1, 1, t.size(t.dim() - 1));
  v.copy_(t);
  return v;
}

inline Tensor layout_like(const Shape& shape, DType dtype, bool permuted) {
  Tensor t = Tensor::full(shape, -7.0, dtype);
  return permuted ? strided_copy(t, true) : t;
}

// Runs `cases` random cases on `comm`; returns how many collectives were checked.
inline int run_view_cases(Communicator& comm, uint64_t seed, int cases) {
  const int n = comm.size(), r = comm.rank();
  std::mt19937_64 rng(seed);
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f64, DType::i64, DType::i32};
  int checked = 0;
  for (int c = 0; c < cases; ++c) {
    const DType dt = dtypes[rng() % 5];
    const bool big = rng() % 3 == 0;
    Shape shape{int64_t(1 + rng() % (big ? 96 : 9)), int64_t(1 + rng() % (big ? 700 : 13)), int64_t(1 + rng() % 3)};
    const uint64_t data_seed = rng();
    const Tensor g = Tensor::rand(shape, data_seed, dt, -4, 4);
    const bool send_strided = rng() % 2 == 0, send_permuted = rng() % 2 == 0, out_permuted = rng() % 2 == 0;
    const std::string what = str_cat("case ", c, ": ", dtype_name(dt), shape_str(shape), " on ", n, " ranks");
    if (rng() % 2 == 0) {
      // all_gather_views along dim d
      const int64_t d = int64_t(rng() % 3);
      const auto sizes = random_split(rng, shape[size_t(d)], n);
      const auto off = offsets_of(sizes);
      Tensor mine = g.narrow(d, off[size_t(r)], sizes[size_t(r)]);
      Tensor send = send_strided && mine.numel() > 0 ? strided_copy(mine, send_permuted) : mine.contiguous();
      Tensor out = layout_like(shape, dt, out_permuted);
      std::vector<kernels::StridedView> recv;
      for (int j = 0; j < n; ++j) recv.push_back(kernels::view_of(out.narrow(d, off[size_t(j)], sizes[size_t(j)])));
      comm.all_gather_views(kernels::view_of(send), recv, Device::cpu())->wait();
      EXPECT_TRUE(equal(out.contiguous(), g)) << what << ": all_gather_views along dim " << d;
    } else {
      // all_to_all_views: S(i) -> S(j)
      const int64_t i = int64_t(rng() % 3);
      int64_t j = int64_t(rng() % 3);
      if (j == i) j = (j + 1) % 3;
      const auto a = random_split(rng, shape[size_t(i)], n), b = random_split(rng, shape[size_t(j)], n);
      const auto a_off = offsets_of(a), b_off = offsets_of(b);
      Tensor mine = g.narrow(i, a_off[size_t(r)], a[size_t(r)]);
      Tensor in = send_strided && mine.numel() > 0 ? strided_copy(mine, send_permuted) : mine.contiguous();
      Tensor want = g.narrow(j, b_off[size_t(r)], b[size_t(r)]);
      Tensor out = layout_like(want.shape(), dt, out_permuted);
      std::vector<kernels::StridedView> sv, rv;
      for (int q = 0; q < n; ++q) {
        sv.push_back(kernels::view_of(in.narrow(j, b_off[size_t(q)], b[size_t(q)])));
        rv.push_back(kernels::view_of(out.narrow(i, a_off[size_t(q)], a[size_t(q)])));
      }
      comm.all_to_all_views(sv, rv, Device::cpu())->wait();
      EXPECT_TRUE(equal(out.contiguous(), want.contiguous()))
          << what << ": all_to_all_views S(" << i << ") -> S(" << j << ")";
    }
    ++checked;
  }
  // Different shapes with the same count: a flat block received into a 2-d view (row-major correspondence).
  {
    const Tensor g = Tensor::rand({int64_t(n) * 6, 5}, seed ^ 0x5eed, DType::f32, -1, 1);
    Tensor flat = g.narrow(0, int64_t(r) * 6, 6).contiguous().view({30});
    Tensor out = layout_like(g.shape(), DType::f32, /*permuted=*/true);
    std::vector<kernels::StridedView> recv;
    for (int j = 0; j < n; ++j) recv.push_back(kernels::view_of(out.narrow(0, int64_t(j) * 6, 6)));
    comm.all_gather_views(kernels::view_of(flat), recv, Device::cpu())->wait();
    EXPECT_TRUE(equal(out.contiguous(), g)) << "flat blocks into 2-d views";
    ++checked;
  }
  return checked;
}

}  // namespace dt::test
