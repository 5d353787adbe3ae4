// Host collectives over UCX, timed exactly like the OpenMPI reference (/work/shared/anchors/mpi_collectives.cpp), so
// that rows join on (op, ranks, bytes). Run under dtrun: `dtrun --nproc-per-node N bench/collectives [samples]
// [warmup] [ops] [sizes]`.
//
// Size convention: S = per-rank INPUT bytes for every op (float32 elements).
//   all_gather(_inplace)  send S,  recv n*S   algbw = n*S/t   busbw = algbw*(n-1)/n
//   reduce_scatter        send S,  recv S/n   algbw = S/t     busbw = algbw*(n-1)/n   (sum)
//   all_reduce            send S,  recv S     algbw = S/t     busbw = algbw*2(n-1)/n  (sum)
//   all_to_all            send S,  recv S     algbw = S/t     busbw = algbw*(n-1)/n
//   broadcast             buf S               algbw = S/t     busbw = algbw           (root 0)
// (nccl-tests' formulas). A sample = barrier; `inner` back-to-back ops (each waited); time = max over ranks / inner.
// Median of `samples` samples after `warmup` untimed ops; results are checked once after warm-up.
// all_gather_inplace: the input already sits in this rank's slot of the output (FSDP's copy-in).
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

#include "collectives/process_group.h"
#include "core/allocator.h"
#include "core/error.h"

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int run(int argc, char** argv) {
  auto comm = dt::init_process_group();
  const int rank = comm->rank(), n = comm->size();
  const int samples = argc > 1 ? std::atoi(argv[1]) : 15;
  const int warmup = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<std::string> ops =
      split_list(argc > 3 ? argv[3] : "all_gather,all_gather_inplace,reduce_scatter,all_reduce,all_to_all,broadcast");
  std::vector<size_t> sizes = {4ull << 10, 64ull << 10, 1ull << 20, 16ull << 20, 64ull << 20};
  if (argc > 4) {
    sizes.clear();
    for (auto& s : split_list(argv[4])) sizes.push_back(size_t(std::atoll(s.c_str())));
  }
  const dt::Device cpu = dt::Device::cpu();
  if (rank == 0)
    std::fprintf(stderr, "%-20s %5s %10s %12s %10s %10s %4s\n", "op", "ranks", "bytes", "time_us", "algbw_GB/s",
                 "busbw_GB/s", "ok");

  for (const std::string& op : ops) {
    for (size_t S : sizes) {
      const size_t cnt = S / sizeof(float);
      if (cnt % size_t(n)) continue;
      const bool ag = op == "all_gather" || op == "all_gather_inplace";
      const size_t recv = ag ? cnt * size_t(n) : op == "reduce_scatter" ? cnt / size_t(n) : cnt;
      std::vector<float, BenchAlloc<float>> sbuf(cnt), rbuf(std::max<size_t>(recv, 1), -1.0f);
      for (size_t i = 0; i < cnt; ++i) sbuf[i] = float((rank + 1) + int(i % 7));
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

      const int inner = int(std::max<size_t>(1, (4ull << 20) / S));
      for (int w = 0; w < warmup; ++w) run_op();
      int ok = 1;
      for (size_t i = 0; i < recv; i += 997) {
        float expect;
        if (ag)
          expect = float((i / cnt + 1) + (i % cnt % 7));
        else if (op == "reduce_scatter")
          expect = float(n * (n + 1) / 2 + n * int((size_t(rank) * (cnt / size_t(n)) + i) % 7));
        else if (op == "all_reduce")
          expect = float(n * (n + 1) / 2 + n * int(i % 7));
        else if (op == "broadcast")
          expect = float(1 + int(i % 7));
        else {
          size_t blk = cnt / size_t(n);
          expect = float((i / blk + 1) + ((size_t(rank) * blk + i % blk) % 7));
        }
        if (rbuf[i] != expect) {
          ok = 0;
          break;
        }
      }
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
      const double t = median(ts);
      const double alg = ag ? double(S) * n : double(S);
      const double busf = op == "all_reduce" ? 2.0 * (n - 1) / n : op == "broadcast" ? 1.0 : double(n - 1) / n;
      if (rank == 0) {
        std::printf(
            "{\"impl\":\"%s\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"time_us\":%.2f,\"algbw_gbs\":%.3f,"
            "\"busbw_gbs\":%.3f,\"ok\":%s}\n",
            BenchAlloc<float>::pool() ? "dtensor-ucx-pool" : "dtensor-ucx", op.c_str(), n, S, t * 1e6, alg / t / 1e9,
            alg / t / 1e9 * busf, allok ? "true" : "false");
        std::fflush(stdout);
        std::fprintf(stderr, "%-20s %5d %10zu %12.2f %10.3f %10.3f %4s\n", op.c_str(), n, S, t * 1e6, alg / t / 1e9,
                     alg / t / 1e9 * busf, allok ? "yes" : "NO");
      }
    }
  }
  comm->barrier()->wait();
  dt::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench/collectives: %s\n", e.what());
    return 1;
  }
}
