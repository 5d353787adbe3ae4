// The OpenMPI reference for bench/collectives: the same ops, sizes, data, checks and timing (bench/bench_rows.h),
// through MPI, so that ./dev bench (bench/run.sh) can put both side by side in one run.
//
//   mpirun -np N --mca pml ob1 --mca btl self,vader build/bench/mpi_collectives [IMPL [SAMPLES [WARMUP]]]
//
// `impl` names the rows (bench/run.sh: "openmpi-vader", OpenMPI over shared memory, whose defaults ob1 + vader with
// CMA single-copy were the fastest of its settings here). One JSON line per (op, size) on rank 0's stdout.
// Only MPI's C API: OpenMPI's deprecated C++ bindings do not compile warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_rows.h"
#include "tools/args.h"

namespace {

using dt::bench::kCollectiveSizes;

constexpr const char* kUsage =
    "usage: mpirun -np N bench/mpi_collectives [IMPL [SAMPLES [WARMUP]]]\n"
    "  IMPL     the rows' \"impl\" (default openmpi)\n"
    "  SAMPLES  timed samples per row (default 15)\n"
    "  WARMUP   untimed runs of each row first (default 5)\n";

struct Options {
  std::string impl = "openmpi";
  int samples = 15, warmup = 5;
};

int run(const Options& o) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const std::string& impl = o.impl;
  const int samples = o.samples, warmup = o.warmup;

  for (const std::string op : {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"}) {
    for (size_t S : kCollectiveSizes) {
      const size_t cnt = S / sizeof(float);
      if (cnt % size_t(n)) continue;
      const int count = int(cnt), block = int(cnt / size_t(n));
      std::vector<float> sbuf(cnt), rbuf(dt::bench::recv_count(op, n, cnt), -1.0f);
      for (size_t i = 0; i < cnt; ++i) sbuf[i] = dt::bench::fill_value(rank, i);
      std::function<void()> run_op;
      if (op == "all_gather")
        run_op = [&] { MPI_Allgather(sbuf.data(), count, MPI_FLOAT, rbuf.data(), count, MPI_FLOAT, MPI_COMM_WORLD); };
      else if (op == "reduce_scatter")
        run_op = [&] { MPI_Reduce_scatter_block(sbuf.data(), rbuf.data(), block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      else if (op == "all_reduce")
        run_op = [&] { MPI_Allreduce(sbuf.data(), rbuf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      else
        run_op = [&] { MPI_Alltoall(sbuf.data(), block, MPI_FLOAT, rbuf.data(), block, MPI_FLOAT, MPI_COMM_WORLD); };

      for (int w = 0; w < warmup; ++w) run_op();
      int ok = dt::bench::check_output(op, rank, n, cnt, rbuf.data()) ? 1 : 0, all_ok = 0;
      MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      const int inner = dt::bench::inner_reps(S);
      std::vector<double> ts;
      for (int s = 0; s < samples; ++s) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int k = 0; k < inner; ++k) run_op();
        double t = (MPI_Wtime() - t0) / inner, t_max = 0;
        MPI_Allreduce(&t, &t_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        ts.push_back(t_max);
      }
      if (rank == 0) dt::bench::print_row(impl.c_str(), op, n, S, dt::bench::median(ts), all_ok != 0);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Read before MPI_Init, so that --help and a usage error leave without it.
  Options o;
  dt::tools::read_operands("bench/mpi_collectives", argc, argv, kUsage, o.impl, o.samples, o.warmup);
  MPI_Init(&argc, &argv);
  const int rc = run(o);
  MPI_Finalize();
  return rc;
}
