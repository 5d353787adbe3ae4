// Throughput of the CPU data-movement kernels (pack / unpack of strided blocks, chunk-cat and split-copy, casts)
// next to memcpy of the same bytes, best of several runs: a table and one JSON line per row.
//
//   build/bench/kernels
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cast.h"
#include "kernels/chunk_cat.h"
#include "kernels/copy.h"
#include "tools/args.h"

namespace {

using namespace dt;
using namespace dt::kernels;

double best_seconds(const std::function<void()>& fn, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

void row(const std::string& name, double bytes, double secs, double memcpy_secs) {
  double gbs = bytes / secs / 1e9;
  std::printf("%-44s %9.2f GB/s  %6.2fx memcpy time\n", name.c_str(), gbs, secs / memcpy_secs);
  std::printf(
      "{\"bench\": \"kernels\", \"case\": \"%s\", \"bytes\": %.0f, \"seconds\": %.6f, \"gbps\": %.3f, "
      "\"vs_memcpy\": %.3f}\n",
      name.c_str(), bytes, secs, gbs, secs / memcpy_secs);
}

constexpr const char* kUsage = "usage: bench/kernels   (no arguments: 64 MiB per case, best of 7 runs)\n";

}  // namespace

int main(int argc, char** argv) {
  dt::tools::read_operands("bench/kernels", argc, argv, kUsage);
  const int reps = 7;
  const int64_t mib = 1 << 20;
  const int64_t total = 64 * mib;  // bytes moved per case
  std::vector<char> src(size_t(2 * total)), dst(size_t(2 * total));
  std::memset(src.data(), 1, src.size());
  std::memset(dst.data(), 2, dst.size());
  double t_memcpy = best_seconds([&] { std::memcpy(dst.data(), src.data(), size_t(total)); }, reps);
  std::printf("%-44s %9.2f GB/s\n", "memcpy 64 MiB", double(total) / t_memcpy / 1e9);

  // Pack a [rows, cols] f32 block narrowed out of [rows, 2 * cols]: an all-gather on dim 1.
  for (int64_t cols : {16, 256, 4096, 65536}) {
    int64_t rows = total / 4 / cols;
    Shape shape{rows, cols}, strides{2 * cols, 1};
    StridedView v = make_view(src.data(), shape, strides, DType::f32);
    // The floor for this access pattern: one memcpy per row, written by hand.
    double t_rows = best_seconds(
        [&] {
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(dst.data() + r * cols * 4, src.data() + r * 2 * cols * 4, size_t(cols * 4));
        },
        reps);
    row("  memcpy per row, rows of " + std::to_string(cols * 4) + " B", double(total), t_rows, t_memcpy);
    double t = best_seconds([&] { pack(v, dst.data(), Device::cpu()); }, reps);
    row("pack f32 64 MiB, rows of " + std::to_string(cols * 4) + " B", double(total), t, t_memcpy);
    double tu = best_seconds(
        [&] { unpack(src.data(), make_view(dst.data(), shape, strides, DType::f32), Device::cpu()); }, reps);
    row("unpack f32 64 MiB, rows of " + std::to_string(cols * 4) + " B", double(total), tu, t_memcpy);
  }
  // Chunk-cat of 256 contiguous f32 tensors with padding, and its split-copy.
  {
    std::vector<StridedView> views;
    std::vector<int64_t> pads;
    int64_t per = total / 4 / 256;
    for (int i = 0; i < 256; ++i) {
      int64_t n = per - (i % 7);
      views.push_back(flat_view(src.data() + i * per * 4, n, DType::f32));
      pads.push_back(per);
    }
    double t = best_seconds([&] { chunk_cat(views, dst.data(), DType::f32, pads, Device::cpu()); }, reps);
    row("chunk_cat 256 x f32 (64 MiB)", double(total), t, t_memcpy);
    std::vector<StridedView> outs;
    for (int i = 0; i < 256; ++i) outs.push_back(flat_view(dst.data() + i * per * 4, per - (i % 7), DType::f32));
    double ts = best_seconds([&] { split_copy(src.data(), DType::f32, pads, outs, Device::cpu()); }, reps);
    row("split_copy 256 x f32 (64 MiB)", double(total), ts, t_memcpy);
  }
  // Mixed-precision copy-in: f32 -> bf16 cast of 16 Mi elements (64 MiB read).
  {
    int64_t n = total / 4;
    double t = best_seconds([&] { cast(dst.data(), DType::bf16, src.data(), DType::f32, n, Device::cpu()); }, reps);
    row("cast f32->bf16 16 Mi elements", double(total), t, t_memcpy);
  }
  // Transpose copy (the slow case: one side strided per element).
  {
    int64_t n = 2048;
    Shape shape{n, n}, tstrides{1, n};
    StridedView s = make_view(src.data(), shape, tstrides, DType::f32);
    double t = best_seconds([&] { pack(s, dst.data(), Device::cpu()); }, 3);
    row("pack transposed f32 2048x2048 (16 MiB)", double(n * n * 4), t, t_memcpy / 4);
  }
  return 0;
}
