// Benchmark of the local op kernels: CPU kernels::matmul / kernels::linear against the raw cblas_sgemm call on the
// same operands in the same run (interleaved, best of several runs each, so that both see the same machine state),
// and of the distributed linear patterns (dt::linear on DTensors against the local kernel plus the raw collective).
// Prints a table and one JSON line per row:
//   {"bench":"ops","op":"matmul","m":..,"n":..,"k":..,"gflops":..,"ref_gflops":..,"ratio":..}
// Then the local data movement and elementwise ops (Tensor::copy_ / contiguous / to / fill_, kernels::add / mul on
// CPU tensors) against a memcpy of the same number of bytes, one JSON line per row:
//   {"bench":"ops","op":"copy_contig","bytes":..,"gbps":..,"memcpy_gbps":..,"ratio":..}
// Usage: bench/ops [--quick | --moves]   (--quick: smaller sizes, for a smoke run; --moves: only the data
// movement rows)
#include "dtensor/ops.h"

#if defined(DT_BLAS_MKL)
#include <mkl_cblas.h>
constexpr const char* kBlas = "oneMKL";
#else
#include <cblas.h>
constexpr const char* kBlas = "OpenBLAS";
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "collectives/thread/thread_comm.h"
#include "core/tensor.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/matmul.h"
#include "tools/args.h"

namespace {

using dt::Tensor;
using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Row {
  std::string op;  // "matmul", "matmul_tn" (transposed left operand), "linear" (x @ w^T)
  int64_t m, n, k;
  double gflops, ref_gflops, max_abs_diff;
  double single_gflops = 0;  // distributed rows: the whole product on one process with all the ranks' BLAS threads
};

void print_row(const Row& r) {
  std::printf("%-10s %6lld %6lld %6lld %10.1f %10.1f %7.3f %10.2e\n", r.op.c_str(), (long long)r.m, (long long)r.n,
              (long long)r.k, r.gflops, r.ref_gflops, r.gflops / r.ref_gflops, r.max_abs_diff);
  if (r.single_gflops > 0)
    std::printf("%-10s %20s single process, same total work: %.1f GFLOP/s -> distributed / single = %.3f\n", "", "",
                r.single_gflops, r.gflops / r.single_gflops);
}

void print_json(const Row& r) {
  std::printf(
      "{\"bench\":\"ops\",\"op\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"gflops\":%.2f,\"ref_gflops\":%.2f,"
      "\"ratio\":%.4f,\"single_gflops\":%.2f}\n",
      r.op.c_str(), (long long)r.m, (long long)r.n, (long long)r.k, r.gflops, r.ref_gflops, r.gflops / r.ref_gflops,
      r.single_gflops);
}

// Runs `ours` and `ref` alternately (after one warm-up each when `warm_up`) until both have `min_reps` runs and
// `min_s` seconds in total; returns the best time of each.
std::pair<double, double> best_times(const std::function<void()>& ours, const std::function<void()>& ref, int min_reps,
                                     double min_s, bool warm_up) {
  if (warm_up) {
    ours();
    ref();
  }
  double best_ours = 1e30, best_ref = 1e30, total = 0;
  for (int rep = 0; rep < min_reps || total < min_s; ++rep) {
    double a = seconds(ours), b = seconds(ref);
    best_ours = std::min(best_ours, a);
    best_ref = std::min(best_ref, b);
    total += a + b;
    if (rep > 200) break;
  }
  return {best_ours, best_ref};
}

double max_diff(const Tensor& got, const float* want) {
  const float* g = got.data<float>();
  double d = 0;
  for (int64_t i = 0; i < got.numel(); ++i) d = std::max(d, double(std::fabs(g[i] - want[i])));
  return d;
}

// C[m, n] = op(A) B with A given as [m, k] (or [k, m] for "matmul_tn") and B [k, n] (or W [n, k] for "linear").
Row bench_gemm(const std::string& op, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  bool tn = op == "matmul_tn", lin = op == "linear";
  Tensor a = tn ? Tensor::randn({k, m}, seed) : Tensor::randn({m, k}, seed);
  Tensor b = lin ? Tensor::randn({n, k}, seed + 1) : Tensor::randn({k, n}, seed + 1);
  std::vector<float> c(size_t(m * n));
  Tensor out;
  auto ours = [&] {
    if (lin)
      out = dt::kernels::linear(a, b);
    else
      out = dt::kernels::matmul(tn ? a.t() : a, b);
  };
  auto ref = [&] {
    cblas_sgemm(CblasRowMajor, tn ? CblasTrans : CblasNoTrans, lin ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.0f, a.data<float>(), tn ? int(m) : int(k), b.data<float>(), lin ? int(k) : int(n), 0.0f, c.data(),
                int(n));
  };
  double flop = 2.0 * double(m) * double(n) * double(k);
  // Large products: two runs each (one run is up to a second on two cores). Every row warms up first: the reference
  // writes into a vector touched when it was made, while the kernel's first output is fresh memory, and the first
  // touch of fresh huge pages is not the GEMM (64 MiB took 0.19 s here once, 0.01 s when reused; the 4096 x 4096 x
  // 1024 row read 0.82x without the warm-up, 0.96x with huge pages off).
  bool large = flop > 1e10;
  auto [t_ours, t_ref] = best_times(ours, ref, large ? 2 : 5, large ? 0.0 : 0.3, /*warm_up=*/true);
  return Row{op, m, n, k, flop / t_ours * 1e-9, flop / t_ref * 1e-9, max_diff(out, c.data())};
}

// Distributed linear patterns on the thread backend (`ranks` ranks as threads, one BLAS thread each), timed on rank
// 0 between barriers: dt::linear on DTensors (strategy choice, implicit redistribution, wrapping) against the same
// local kernel on the same shards plus the raw collective the pattern needs. flop counts the global product.
//   dist_col    x R,    w S(0)        -> y S(1)                  no communication
//   dist_row    x S(1), w S(1)        -> y P(sum) -> R           one all-reduce of y
//   dist_fsdp   x S(0), w S(0) (FSDP) -> w all-gathered, y S(0)  one all-gather of w
Row bench_dist(const std::string& op, int64_t m, int64_t n, int64_t k, int ranks, uint64_t seed) {
  using dt::DTensor;
  Tensor x = Tensor::randn({m, k}, seed), w = Tensor::randn({n, k}, seed + 1);
  Tensor want = dt::kernels::linear(x, w);
  double t_ours = 0, t_ref = 0, diff = 0;
  const int prev_threads = dt::kernels::blas_threads();
  // The single-process baseline: the whole product with as many BLAS threads as there are ranks.
  dt::kernels::set_blas_threads(ranks);
  double t_single = 1e30;
  for (int rep = 0; rep < 3; ++rep) t_single = std::min(t_single, seconds([&] { dt::kernels::linear(x, w); }));
  dt::kernels::set_blas_threads(1);
  dt::run_threads(ranks, [&](dt::CommunicatorPtr world) {
    dt::DeviceMesh mesh = dt::DeviceMesh::create(world, dt::Device::cpu(), {ranks});
    const bool row = op == "dist_row", fsdp = op == "dist_fsdp";
    const dt::Placement px = row ? dt::Placement(dt::Shard{1}) : fsdp ? dt::Placement(dt::Shard{0}) : dt::Replicate{};
    const dt::Placement pw = row ? dt::Placement(dt::Shard{1}) : dt::Placement(dt::Shard{0});
    DTensor dx = dt::distribute_tensor(x, mesh, {px});
    DTensor dw = dt::distribute_tensor(w, mesh, {pw});
    Tensor xl = dx.to_local(), wl = dw.to_local();
    Tensor gathered = Tensor::empty({n, k});
    DTensor result;
    auto ours = [&] {
      DTensor y = dt::linear(dx, dw);
      result = row ? y.redistribute({dt::Replicate{}}) : y;
    };
    auto ref = [&] {
      if (fsdp) world->all_gather(wl, gathered)->wait();
      Tensor y = dt::kernels::linear(xl, fsdp ? gathered : wl);
      if (row) world->all_reduce(y, dt::ReduceOp::kSum)->wait();
    };
    double best_ours = 1e30, best_ref = 1e30;
    for (int rep = 0; rep < 4; ++rep) {  // rep 0 warms up (plans, strategy cache, buffers)
      world->barrier()->wait();
      double a = seconds(ours);
      world->barrier()->wait();
      double b = seconds(ref);
      if (rep > 0) best_ours = std::min(best_ours, a), best_ref = std::min(best_ref, b);
    }
    Tensor got = result.full_tensor();
    if (world->rank() == 0) {
      t_ours = best_ours, t_ref = best_ref;
      diff = dt::max_abs_diff(got, want);
    }
  });
  dt::kernels::set_blas_threads(prev_threads);
  double flop = 2.0 * double(m) * double(n) * double(k);
  return Row{op, m, n, k, flop / t_ours * 1e-9, flop / t_ref * 1e-9, diff, flop / t_single * 1e-9};
}

// The funnel's fixed cost per call: dt::add on tiny DTensors (8 x 8, S(0) on 2 thread ranks, so no redistribution),
// with a warm strategy cache: schema, cache lookup, local kernel, wrapping. Best over rounds of `calls` calls, in
// microseconds per call on rank 0.
double bench_dispatch_us(int calls) {
  double best = 1e30;
  dt::run_threads(2, [&](dt::CommunicatorPtr world) {
    dt::DeviceMesh mesh = dt::DeviceMesh::create(world, dt::Device::cpu(), {2});
    dt::DTensor a = dt::distribute_tensor(Tensor::randn({8, 8}, 1), mesh, {dt::Shard{0}}, {}, std::nullopt);
    dt::DTensor b = dt::distribute_tensor(Tensor::randn({8, 8}, 2), mesh, {dt::Shard{0}}, {}, std::nullopt);
    for (int round = 0; round < 6; ++round) {
      world->barrier()->wait();
      double t = seconds([&] {
        for (int i = 0; i < calls; ++i) dt::add(a, b);
      });
      if (world->rank() == 0 && round > 0) best = std::min(best, t / calls * 1e6);
    }
  });
  return best;
}

// One data-movement row: `fn` reads and writes `bytes` in all; the reference memcpy's `bytes / 2` (read + write).
void bench_move(const char* op, int64_t bytes, const std::function<void()>& fn) {
  std::vector<char> a(size_t(bytes / 2), 1), b(size_t(bytes / 2), 2);
  auto [t, t_ref] = best_times(
      fn, [&] { std::memcpy(b.data(), a.data(), a.size()); }, 9, 0.3, true);
  const double gbps = double(bytes) / t * 1e-9, ref = double(bytes) / t_ref * 1e-9;
  std::printf("%-14s %10lld %10.2f %10.2f %7.3f\n", op, (long long)bytes, gbps, ref, gbps / ref);
  std::printf("{\"bench\":\"ops\",\"op\":\"%s\",\"bytes\":%lld,\"gbps\":%.3f,\"memcpy_gbps\":%.3f,\"ratio\":%.4f}\n",
              op, (long long)bytes, gbps, ref, gbps / ref);
}

void bench_moves(bool quick) {
  using dt::DType;
  namespace k = dt::kernels;
  const int64_t r = quick ? 256 : 2048, c = quick ? 256 : 2048;
  const int64_t f = r * c * 4;  // bytes of one f32 tensor
  std::printf("# data movement and elementwise ops on CPU tensors (f32 [%lld, %lld]) vs memcpy of the same bytes\n",
              (long long)r, (long long)c);
  std::printf("%-14s %10s %10s %10s %7s\n", "op", "bytes", "GB/s", "memcpy", "ratio");
  Tensor x = Tensor::rand({r, c}, 1), y = Tensor::rand({r, c}, 2), dst = Tensor::empty({r, c});
  Tensor row = Tensor::rand({c}, 3), small = Tensor::empty({r, c - 2});
  Tensor half = Tensor::empty({r, c}, DType::bf16);
  bench_move("copy_contig", 2 * f, [&] { dst.copy_(x); });
  bench_move("contiguous_t", 2 * f, [&] { (void)x.t().contiguous(); });
  bench_move("copy_narrow", 2 * (f - r * 8), [&] { small.copy_(x.narrow(1, 1, c - 2)); });
  bench_move("copy_bcast", 2 * f, [&] { dst.copy_(row); });
  bench_move("cast_bf16", f + f / 2, [&] { half.copy_(x); });
  bench_move("to_f32", f / 2 + f, [&] { (void)half.to(DType::f32); });
  bench_move("fill", f, [&] { dst.fill_(1.5); });
  bench_move("add", 3 * f, [&] { (void)k::add(x, y); });
  bench_move("add_bcast", 2 * f, [&] { (void)k::add(x, row); });
  bench_move("mul_t", 3 * f, [&] { (void)k::mul(x, y.t()); });
  bench_move("mul_scalar", 2 * f, [&] { (void)k::mul_scalar(x, 0.5); });
}

constexpr const char* kUsage =
    "usage: bench/ops [--quick | --moves]\n"
    "  --quick  smaller sizes, for a smoke run\n"
    "  --moves  only the data movement rows\n";

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, moves = false;
  dt::tools::parse_or_exit("bench/ops", [&] {
    dt::tools::ArgReader args(argc, argv, kUsage);
    while (args.next())
      if (!args.take("--quick", quick) && !args.take("--moves", moves)) throw args.unexpected();
    if (quick && moves) throw dt::tools::UsageError{"--quick or --moves, not both"};
    return 0;
  });
  if (moves) {
    bench_moves(false);
    return 0;
  }
  std::printf("# kernels::matmul vs raw cblas_sgemm (f32, CPU, %d %s threads); best of several runs each\n",
              dt::kernels::blas_threads(), kBlas);
  std::printf("%-10s %6s %6s %6s %10s %10s %7s %10s\n", "op", "m", "n", "k", "GFLOP/s", "ref", "ratio", "max|diff|");
  std::vector<Row> rows;
  // ---- 1. local GEMM: the funnel's overhead over BLAS (target ratio >= 0.95) ----
  std::vector<int64_t> squares = quick ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{256, 512, 1024, 2048};
  uint64_t seed = 1;
  for (int64_t s : squares) rows.push_back(bench_gemm("matmul", s, s, s, seed += 2));
  int64_t tm = quick ? 256 : 4096, tk = quick ? 64 : 1024;
  // Transformer-like: [tokens, hidden] x [hidden, 4 * hidden], and the same through linear (torch's weight layout)
  // and with a transposed left operand (both passed to GEMM as transpose flags, no copy).
  rows.push_back(bench_gemm("matmul", tm, tm, tk, seed += 2));
  rows.push_back(bench_gemm("linear", tm, tm, tk, seed += 2));
  rows.push_back(bench_gemm("matmul_tn", tm, tm, tk, seed += 2));
  for (const Row& r : rows) print_row(r);

  // ---- 2. distributed matmul patterns on 2 thread ranks: dt::linear vs the local kernel + raw collective, and
  //         vs the single-process product of the same total work ----
  // (target ratio close to 1: the strategy choice and wrapping cost little next to the GEMM)
  int64_t dm = quick ? 128 : 1024, dn = quick ? 128 : 2048, dk = quick ? 64 : 1024;
  for (const char* op : {"dist_col", "dist_row", "dist_fsdp"}) {
    rows.push_back(bench_dist(op, dm, dn, dk, 2, seed += 2));
    print_row(rows.back());
  }

  // ---- 3. the funnel's fixed cost (no GEMM): one small elementwise op ----
  const double dispatch_us = bench_dispatch_us(quick ? 2000 : 5000);
  std::printf("dispatch: dt::add on 8x8 S(0) over 2 thread ranks, warm strategy cache: %.2f us/call\n", dispatch_us);

  for (const Row& r : rows) print_json(r);
  std::printf("{\"bench\":\"ops\",\"op\":\"dispatch_add_8x8\",\"us_per_call\":%.3f}\n", dispatch_us);
  bench_moves(quick);
  return 0;
}
