// bench/copy_floor: the copies a 2+-rank all_gather / all_to_all between processes of one host cannot avoid, timed
// alone: this rank's own block with memcpy, every peer's block with one process_vm_readv straight out of the peer's
// buffer (one copy, as UCX's and OpenMPI's single-copy paths make), and no synchronisation between the copies (the
// peers' inputs never change). Buffers are malloc'ed, as the OpenMPI reference has them. A collective cannot be
// faster than this on such buffers unless its copies are; ./dev bench (bench/run.sh) prints both libraries against it.
//
//   dtrun --nproc-per-node N build/bench/copy_floor [SAMPLES [WARMUP]]
//
// Timed like bench/collectives, with the same sizes, data, check and formulas (bench/bench_rows.h). One JSON line per
// (op, size) on stdout: {"impl":"copy-floor","op":"all_gather","ranks":2,"bytes":S,"time_us":..,"busbw_gbs":..,
// "ok":true}. Exits 0 without rows when the kernel forbids reading the peers' memory (Yama ptrace_scope).
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_rows.h"
#include "collectives/process_group.h"
#include "core/error.h"
#include "core/tensor.h"
#include "tools/args.h"

namespace {

// Every rank's value of `x`, in rank order.
std::vector<int64_t> gather_all(dt::Communicator& c, int64_t x) {
  dt::Tensor mine = dt::Tensor::from_data<int64_t>({x}, {1});
  dt::Tensor all = dt::Tensor::empty({c.size()}, dt::DType::i64);
  c.all_gather(mine, all)->wait();
  return {all.data<int64_t>(), all.data<int64_t>() + c.size()};
}

// Reads `bytes` at `remote` in process `pid` into `local`; false when the kernel refuses.
bool read_peer(int64_t pid, void* local, int64_t remote, size_t bytes) {
  iovec l{local, bytes}, r{reinterpret_cast<void*>(remote), bytes};
  const ssize_t got = process_vm_readv(pid_t(pid), &l, 1, &r, 1, 0);
  if (got == ssize_t(bytes)) return true;
  if (got < 0 && (errno == EPERM || errno == EACCES)) return false;
  DT_THROW(SystemError, "process_vm_readv of ", bytes, " bytes from pid ", pid, ": ",
           got < 0 ? std::strerror(errno) : "short read");
}

constexpr const char* kUsage =
    "usage: dtrun --nproc-per-node N bench/copy_floor [SAMPLES [WARMUP]]\n"
    "  SAMPLES  timed samples per row (default 15)\n"
    "  WARMUP   untimed runs of each row first (default 5)\n";

}  // namespace

int main(int argc, char** argv) {
  int samples = 15, warmup = 5;
  dt::tools::read_operands("bench/copy_floor", argc, argv, kUsage, samples, warmup);
  try {
    auto world = dt::init_process_group();
    dt::Communicator& c = *world;
    const int r = c.rank(), n = c.size();
    if (n < 2) return 0;
    const std::vector<int64_t> pids = gather_all(c, int64_t(getpid()));
    for (const std::string op : {"all_gather", "all_to_all"}) {
      for (size_t S : dt::bench::kCollectiveSizes) {
        const size_t cnt = S / sizeof(float);
        if (cnt % size_t(n) != 0) continue;
        const bool ag = op == "all_gather";
        std::vector<float> in(cnt), out(ag ? cnt * size_t(n) : cnt, -1.0f);
        for (size_t i = 0; i < cnt; ++i) in[i] = dt::bench::fill_value(r, i);
        const std::vector<int64_t> addr = gather_all(c, int64_t(reinterpret_cast<uintptr_t>(in.data())));
        const size_t blk = ag ? S : S / size_t(n);  // bytes from each rank
        bool allowed = true;
        auto once = [&] {
          // As the collectives do: this rank's block, then each peer's, in pairwise order.
          const size_t own_src = ag ? 0 : size_t(r) * blk;
          std::memcpy(reinterpret_cast<char*>(out.data()) + size_t(r) * blk,
                      reinterpret_cast<const char*>(in.data()) + own_src, blk);
          for (int s = 1; s < n && allowed; ++s) {
            const int j = (r - s + n) % n;
            const int64_t remote = addr[size_t(j)] + int64_t(ag ? 0 : size_t(r) * blk);
            allowed = read_peer(pids[size_t(j)], reinterpret_cast<char*>(out.data()) + size_t(j) * blk, remote, blk);
          }
        };
        for (int w = 0; w < warmup && allowed; ++w) once();
        // Whether every rank may read its peers: the same answer everywhere, or nobody times anything.
        if (gather_all(c, allowed ? 1 : 0) != std::vector<int64_t>(size_t(n), 1)) {
          if (r == 0) std::fprintf(stderr, "copy_floor: reading the peers' memory is not allowed here; no rows\n");
          return 0;
        }
        const bool ok = dt::bench::check_output(op, r, n, cnt, out.data());
        const int inner = dt::bench::inner_reps(S);
        std::vector<double> ts;
        for (int s = 0; s < samples; ++s) {
          c.barrier()->wait();
          const auto t0 = std::chrono::steady_clock::now();
          for (int k = 0; k < inner; ++k) once();
          const double dt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner;
          dt::Tensor t = dt::Tensor::from_data<double>({dt_s}, {1});
          c.all_reduce(t, dt::ReduceOp::kMax)->wait();
          ts.push_back(t.data<double>()[0]);
        }
        const bool all_ok = gather_all(c, ok ? 1 : 0) == std::vector<int64_t>(size_t(n), 1);
        if (r == 0) dt::bench::print_row("copy-floor", op, n, S, dt::bench::median(ts), all_ok);
      }
    }
    c.barrier()->wait();
    dt::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench/copy_floor: %s\n", e.what());
    return 1;
  }
  return 0;
}
