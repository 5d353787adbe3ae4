// Host collectives over UCX, timed exactly like the OpenMPI reference (bench/mpi_collectives.cc; what both share,
// the size convention and the formulas included, is bench/bench_rows.h), so that rows join on (op, ranks, bytes).
// Run under dtrun: `dtrun --nproc-per-node N bench/collectives [SAMPLES [WARMUP [OPS [SIZES]]]]` (kUsage).
//
// Ops: all_gather, all_gather_inplace (the input already sits in this rank's slot of the output: FSDP's copy-in),
// reduce_scatter, all_reduce, all_to_all, broadcast. Each sample's ops are waited one by one.
// DT_BENCH_BUFFERS=pool takes the buffers from dtensor's host pool instead of malloc (see BenchAlloc); its rows say
// "impl":"dtensor-ucx-pool".
//
// Output on rank 0: a readable table on stderr and one JSON line per (op, size) on stdout:
//   {"impl":"dtensor-ucx","op":"all_gather","ranks":2,"bytes":S,"time_us":..,"algbw_gbs":..,"busbw_gbs":..,"ok":true}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_rows.h"
#include "collectives/process_group.h"
#include "core/allocator.h"
#include "core/error.h"
#include "tools/args.h"

namespace {

// The buffers' memory: malloc, as the OpenMPI reference has it (default), or dtensor's host pool, as tensors get it
// (DT_BENCH_BUFFERS=pool: huge pages, Note [Huge pages for host blocks] in core/allocator.cc).
template <class T>
struct BenchAlloc {
  using value_type = T;
  BenchAlloc() = default;
  template <class U>
  BenchAlloc(const BenchAlloc<U>&) {}
  static bool pool() {
    static const bool p = [] {
      const char* e = std::getenv("DT_BENCH_BUFFERS");
      return e != nullptr && std::strcmp(e, "pool") == 0;
    }();
    return p;
  }
  T* allocate(size_t n) {
    void* p = pool() ? dt::allocator_for(dt::Device::cpu()).allocate(n * sizeof(T)) : std::malloc(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (pool())
      dt::allocator_for(dt::Device::cpu()).deallocate(p, n * sizeof(T));
    else
      std::free(p);
  }
  bool operator==(const BenchAlloc&) const { return true; }
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

constexpr const char* kUsage =
    "usage: dtrun --nproc-per-node N bench/collectives [SAMPLES [WARMUP [OPS [SIZES]]]]\n"
    "  SAMPLES  timed samples per row (default 15)\n"
    "  WARMUP   untimed runs of each row first (default 5)\n"
    "  OPS      comma separated, of all_gather, all_gather_inplace, reduce_scatter, all_reduce, all_to_all,\n"
    "           broadcast (default: all of them)\n"
    "  SIZES    comma separated per-rank input bytes (default: 4 KiB to 256 MiB, bench/bench_rows.h)\n"
    "DT_BENCH_BUFFERS=pool: buffers from dtensor's host pool instead of malloc.\n";

struct Options {
  int samples = 15, warmup = 5;
  std::vector<std::string> ops;
  std::vector<size_t> sizes = dt::bench::kCollectiveSizes;
};

Options parse(int argc, char** argv) {
  Options o;
  const std::string all = "all_gather,all_gather_inplace,reduce_scatter,all_reduce,all_to_all,broadcast";
  std::string ops = all, sizes;
  if (dt::tools::ArgReader(argc, argv, kUsage).operands(o.samples, o.warmup, ops, sizes) > 3) {
    o.sizes.clear();
    for (const std::string& s : split_list(sizes)) {
      size_t bytes = 0;
      if (!dt::tools::parse_number(s, bytes)) throw dt::tools::UsageError{"SIZES: not a number of bytes: " + s};
      o.sizes.push_back(bytes);
    }
  }
  o.ops = split_list(ops);
  const std::vector<std::string> known = split_list(all);
  for (const std::string& op : o.ops)
    if (std::find(known.begin(), known.end(), op) == known.end())
      throw dt::tools::UsageError{"unknown op '" + op + "' in OPS (known: " + all + ")"};
  return o;
}

int run(const Options& o) {
  auto comm = dt::init_process_group();
  const int rank = comm->rank(), n = comm->size();
  const int samples = o.samples, warmup = o.warmup;
  const std::vector<std::string>& ops = o.ops;
  const std::vector<size_t>& sizes = o.sizes;
  const dt::Device cpu = dt::Device::cpu();
  if (rank == 0)
    std::fprintf(stderr, "%-20s %5s %10s %12s %10s %10s %4s\n", "op", "ranks", "bytes", "time_us", "algbw_GB/s",
                 "busbw_GB/s", "ok");

  for (const std::string& op : ops) {
    for (size_t S : sizes) {
      const size_t cnt = S / sizeof(float);
      if (cnt % size_t(n)) continue;
      const bool ag = dt::bench::is_all_gather(op);
      const size_t recv = dt::bench::recv_count(op, n, cnt);
      std::vector<float, BenchAlloc<float>> sbuf(cnt), rbuf(std::max<size_t>(recv, 1), -1.0f);
      for (size_t i = 0; i < cnt; ++i) sbuf[i] = dt::bench::fill_value(rank, i);
      float* send = sbuf.data();
      if (op == "all_gather_inplace") {
        std::copy(sbuf.begin(), sbuf.end(), rbuf.begin() + int64_t(rank) * int64_t(cnt));
        send = rbuf.data() + int64_t(rank) * int64_t(cnt);
      }
      std::function<void()> run_op;
      if (ag)
        run_op = [&] { comm->all_gather(send, rbuf.data(), int64_t(cnt), dt::DType::f32, cpu)->wait(); };
      else if (op == "reduce_scatter")
        run_op = [&] {
          comm->reduce_scatter(send, rbuf.data(), int64_t(cnt) / n, dt::DType::f32, dt::ReduceOp::kSum, cpu)->wait();
        };
      else if (op == "all_reduce")
        run_op = [&] {
          comm->all_reduce(send, rbuf.data(), int64_t(cnt), dt::DType::f32, dt::ReduceOp::kSum, cpu)->wait();
        };
      else if (op == "all_to_all")
        run_op = [&] { comm->all_to_all(send, rbuf.data(), int64_t(cnt) / n, dt::DType::f32, cpu)->wait(); };
      else if (op == "broadcast")
        run_op = [&] {
          if (rank == 0) std::copy(sbuf.begin(), sbuf.end(), rbuf.begin());
          comm->broadcast(rbuf.data(), int64_t(cnt), dt::DType::f32, 0, cpu)->wait();
        };
      else
        DT_THROW(InvalidArgument, "bench/collectives: unknown op '", op, "'");

      const int inner = dt::bench::inner_reps(S);
      for (int w = 0; w < warmup; ++w) run_op();
      int ok = dt::bench::check_output(op, rank, n, cnt, rbuf.data()) ? 1 : 0;
      int allok = 0;
      comm->all_reduce(&ok, &allok, 1, dt::DType::i32, dt::ReduceOp::kMin, cpu)->wait();
      std::vector<double> ts;
      for (int s = 0; s < samples; ++s) {
        comm->barrier()->wait();
        auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < inner; ++k) run_op();
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner, dmax = 0;
        comm->all_reduce(&dt, &dmax, 1, dt::DType::f64, dt::ReduceOp::kMax, cpu)->wait();
        ts.push_back(dmax);
      }
      const double t = dt::bench::median(ts);
      if (rank == 0) {
        dt::bench::print_row(BenchAlloc<float>::pool() ? "dtensor-ucx-pool" : "dtensor-ucx", op, n, S, t, allok != 0);
        const double alg = dt::bench::algbw_gbs(op, n, S, t);
        std::fprintf(stderr, "%-20s %5d %10zu %12.2f %10.3f %10.3f %4s\n", op.c_str(), n, S, t * 1e6, alg,
                     alg * dt::bench::bus_factor(op, n), allok ? "yes" : "NO");
      }
    }
  }
  comm->barrier()->wait();
  dt::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = dt::tools::parse_or_exit("bench/collectives", [&] { return parse(argc, argv); });
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench/collectives: %s\n", e.what());
    return 1;
  }
}
