// chunk_cat / split_copy (FSDP copy-in and copy-out) against a reference that walks the regions by hand: random
// sizes (empty and odd included), non-contiguous inputs, padding, mixed dtypes, and more tensors than one batch.
#include "kernels/chunk_cat.h"

#include <gtest/gtest.h>

#include "tests/kernels/test_util.h"

namespace dt::kernels {
namespace {

using namespace dt::kernels::testing;

// A random tensor of dtype t and random shape; `kind` picks contiguous, transposed, narrowed or expanded.
Tensor random_tensor(std::mt19937_64& rng, DType t, int kind, uint64_t seed) {
  int64_t a = int64_t(rng() % 6), b = int64_t(rng() % 7) + 1;
  if (rng() % 5 == 0) a = 0;  // some empty tensors
  Tensor base;
  switch (kind % 4) {
    case 0:
      base = Tensor::empty({a, b}, t);
      break;
    case 1:
      base = Tensor::empty({b, a}, t);
      break;
    case 2:
      base = Tensor::empty({a, b + 3}, t);
      break;
    default:
      base = Tensor::empty({1, b}, t);
      break;
  }
  fill_random_bits(base, seed);
  switch (kind % 4) {
    case 0:
      return base;
    case 1:
      return base.t();
    case 2:
      return base.narrow(1, 2, b);
    default:
      return base.expand({a, b});
  }
}

// Reference chunk-cat: region by region, element by element, converting with the independent reference.
void expect_chunk_cat(const std::vector<Tensor>& inputs, const std::vector<int64_t>& pads, const Tensor& out) {
  DType od = out.dtype();
  size_t oes = dtype_size(od);
  const char* base = static_cast<const char*>(out.data_ptr());
  int64_t offset = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    DType s = in.dtype();
    for_each_index(in.shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
      const char* sp = element_ptr(in, idx);
      uint64_t want = ref_convert(exact_value(sp, s), !is_floating(s), exact_int(sp, s), od);
      uint64_t got = load_bits(base + (offset + lin) * int64_t(oes), oes);
      ASSERT_TRUE(same_value(got, want, od)) << "tensor " << i << " element " << lin;
    });
    int64_t region = pads.empty() ? in.numel() : pads[i];
    for (int64_t k = in.numel(); k < region; ++k)
      ASSERT_EQ(load_bits(base + (offset + k) * int64_t(oes), oes), 0u) << "padding of tensor " << i << " at " << k;
    offset += region;
  }
  ASSERT_EQ(offset, out.numel());
}

struct RegionSet {
  std::vector<Tensor> tensors;
  std::vector<int64_t> pads;
  int64_t total = 0;
};

RegionSet random_setup(uint64_t seed, size_t count, DType t, bool padded, bool writable) {
  std::mt19937_64 rng(seed);
  RegionSet s;
  for (size_t i = 0; i < count; ++i) {
    int kind = int(rng() % 4);
    if (writable && kind == 3) kind = 0;  // expanded views cannot be written
    s.tensors.push_back(random_tensor(rng, t, kind, seed * 1000 + i));
    int64_t n = s.tensors.back().numel();
    int64_t region = padded ? n + int64_t(rng() % 4) : n;
    s.pads.push_back(region);
    s.total += region;
  }
  if (!padded) s.pads.clear();
  return s;
}

TEST(ChunkCat, RandomInputsEveryDtypeWithAndWithoutPadding) {
  uint64_t seed = 1;
  for (DType t : all_dtypes()) {
    for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(40)}) {
      for (bool padded : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " count=" + std::to_string(count) + (padded ? " padded" : ""));
        RegionSet s = random_setup(seed++, count, t, padded, false);
        Tensor out = Tensor::empty({s.total}, t);
        fill_random_bits(out, seed);  // garbage that the padding must overwrite
        chunk_cat(s.tensors, out, s.pads);
        expect_chunk_cat(s.tensors, s.pads, out);
      }
    }
  }
}

TEST(ChunkCat, MixedPrecisionCopyIn) {
  // f32 shards into a bf16 / f16 / f64 all-gather buffer, and integer parameters into f32.
  uint64_t seed = 77;
  for (auto [in_t, out_t] : {std::pair{DType::f32, DType::bf16}, std::pair{DType::f32, DType::f16},
                             std::pair{DType::bf16, DType::f32}, std::pair{DType::i32, DType::f32}}) {
    SCOPED_TRACE(case_name(out_t, in_t));
    std::mt19937_64 rng(seed);
    RegionSet s;
    for (int i = 0; i < 9; ++i) {
      Tensor base = random_values({int64_t(rng() % 5), 3 + int64_t(rng() % 4)}, in_t, seed + uint64_t(i), -100, 100);
      s.tensors.push_back(i % 2 ? base.t() : base);
      s.pads.push_back(base.numel() + int64_t(rng() % 3));
      s.total += s.pads.back();
    }
    Tensor out = Tensor::full({s.total}, 9, out_t);
    chunk_cat(s.tensors, out, s.pads);
    expect_chunk_cat(s.tensors, s.pads, out);
    ++seed;
  }
}

TEST(ChunkCat, ReduceScatterLayoutFromNarrowedViews) {
  // FSDP reduce-scatter copy-in: every gradient chunked on dim 0 over `world` ranks (torch.chunk sizes, padded to
  // the chunk size), laid out rank-major: [rank 0: g0 chunk, g1 chunk, ...][rank 1: ...]. Built with
  // StridedView::narrow, no allocation.
  const int world = 3;
  std::vector<Tensor> grads = {Tensor::empty({7, 5}), Tensor::empty({2, 3}), Tensor::empty({9}), Tensor::empty({0, 4})};
  for (size_t i = 0; i < grads.size(); ++i) fill_random_bits(grads[i], 300 + i);
  std::vector<StridedView> views;
  std::vector<int64_t> pads;
  std::vector<Tensor> ref_inputs;
  for (int r = 0; r < world; ++r) {
    for (const Tensor& g : grads) {
      int64_t rows = g.size(0), chunk = ceil_div(rows, world);
      int64_t start = std::min(rows, r * chunk), len = std::min(chunk, rows - start);
      views.push_back(view_of(g).narrow(0, start, len));
      ref_inputs.push_back(g.narrow(0, start, len));
      pads.push_back(chunk * (g.numel() / std::max<int64_t>(rows, 1)));
    }
  }
  int64_t total = chunk_cat_numel(views, pads);
  Tensor out = Tensor::empty({total});
  fill_random_bits(out, 5);
  chunk_cat(views, out.data_ptr(), DType::f32, pads, Device::cpu());
  expect_chunk_cat(ref_inputs, pads, out);
  EXPECT_EQ(total, world * (3 * 5 + 1 * 3 + 3 + 0));
}

TEST(SplitCopy, RandomOutputsEveryDtypeWithAndWithoutPadding) {
  uint64_t seed = 500;
  for (DType t : all_dtypes()) {
    for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(40)}) {
      for (bool padded : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " count=" + std::to_string(count) + (padded ? " padded" : ""));
        RegionSet s = random_setup(seed++, count, t, padded, true);
        Tensor in = Tensor::empty({s.total}, t);
        fill_random_bits(in, seed);
        split_copy(in, s.tensors, s.pads);
        size_t es = dtype_size(t);
        int64_t offset = 0;
        for (size_t i = 0; i < s.tensors.size(); ++i) {
          const Tensor& o = s.tensors[i];
          for_each_index(o.shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
            ASSERT_EQ(load_bits(element_ptr(o, idx), es),
                      load_bits(static_cast<char*>(in.data_ptr()) + (offset + lin) * int64_t(es), es))
                << "tensor " << i << " element " << lin;
          });
          offset += s.pads.empty() ? o.numel() : s.pads[i];
        }
      }
    }
  }
}

TEST(SplitCopy, RoundTripWithCast) {
  // copy-out of a reduce-scattered bf16 buffer into f32 gradients = the reference conversion of each element.
  std::vector<Tensor> outs = {Tensor::empty({3, 4}), Tensor::empty({5}).narrow(0, 1, 3), Tensor::empty({4, 2}).t()};
  std::vector<int64_t> pads = {13, 3, 10};
  Tensor in = random_values({26}, DType::bf16, 9, -50, 50);
  split_copy(in, outs, pads);
  int64_t offset = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    for_each_index(outs[i].shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
      double want = exact_value(static_cast<char*>(in.data_ptr()) + (offset + lin) * 2, DType::bf16);
      ASSERT_EQ(exact_value(element_ptr(outs[i], idx), DType::f32), want);
    });
    offset += pads[i];
  }
  // and chunk_cat of those outputs back into bf16 reproduces the buffer's data regions exactly
  Tensor back = Tensor::empty({26}, DType::bf16);
  chunk_cat(outs, back, pads);
  offset = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    for (int64_t k = 0; k < outs[i].numel(); ++k)
      EXPECT_EQ(back.data<BFloat16>()[offset + k].bits, in.data<BFloat16>()[offset + k].bits);
    offset += pads[i];
  }
}

TEST(ChunkCat, ArgumentsValidated) {
  std::vector<Tensor> ins = {Tensor::empty({2, 3}), Tensor::empty({4})};
  Tensor out = Tensor::empty({10});
  std::vector<int64_t> short_pad = {6, 3}, wrong_count = {6};
  EXPECT_THROW(chunk_cat(ins, out, short_pad), InvalidArgument);             // pad smaller than numel
  EXPECT_THROW(chunk_cat(ins, out, wrong_count), InvalidArgument);           // one pad per tensor
  EXPECT_THROW(chunk_cat(ins, Tensor::empty({11})), InvalidArgument);        // total mismatch
  EXPECT_THROW(chunk_cat(ins, Tensor::empty({5, 2}).t()), InvalidArgument);  // non-contiguous buffer
  EXPECT_NO_THROW(chunk_cat(ins, out));
  std::vector<Tensor> outs = {Tensor::empty({2}).expand({3, 2}), Tensor::empty({4})};
  EXPECT_THROW(split_copy(out, outs), InvalidArgument);  // written stride 0
  std::vector<StridedView> views = {view_of(ins[0])};
  std::vector<int64_t> none;
  EXPECT_THROW(chunk_cat(views, nullptr, DType::f32, none, Device::cpu()), InvalidArgument);
  EXPECT_THROW(split_copy(nullptr, DType::f32, none, views, Device::cpu()), InvalidArgument);
  try {
    chunk_cat(ins, out, short_pad);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 has 4 elements"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt::kernels
