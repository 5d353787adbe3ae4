// Soak: back-to-back small collectives and redistributions on one mesh, checked for drift. Under dtrun (4 processes
// for #19's figures); each iteration is one all-reduce, one all-gather, one broadcast and three redistributions of a
// small uneven tensor (S(0) -> R, R -> S(1), S(1) -> S(0)), each result checked against the full tensor.
//
//   soak ITERATIONS [--json]
//
// Measures after a warm-up of ITERATIONS / 10: RSS (warm-up vs end: flat means within 5 %), the time of the first and
// the last 1000 iterations (no slowdown: within 10 %), open file descriptors and threads (no leak: equal). Every rank
// prints the figures (rank 0 also one JSON line with --json). Exit 1 when a result is wrong, RSS grew more than 5 %
// or a descriptor or thread leaked; the slowdown is reported, never judged here (no test asserts on time).
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/process_group.h"
#include "core/process_memory.h"
#include "dtensor/dtensor.h"

namespace {

int64_t count_dir(const char* path) {
  int64_t n = 0;
  if (DIR* d = ::opendir(path)) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t iterations = argc > 1 ? std::atoll(argv[1]) : 10000;
  const bool json = argc > 2 && std::strcmp(argv[2], "--json") == 0;
  if (iterations < 2000) {
    std::fprintf(stderr, "soak: need at least 2000 iterations (the first and last 1000 are compared)\n");
    return 2;
  }
  try {
    dt::CommunicatorPtr world = dt::init_process_group();
    const int rank = world->rank(), size = world->size();
    dt::DeviceMesh mesh = dt::DeviceMesh::create(world, dt::Device::cpu(), {size});
    const dt::Tensor full = dt::Tensor::randn({2 * size + 1, 3 * size - 1}, 11);  // uneven over the mesh
    dt::DTensor x = dt::distribute_tensor(full, mesh, {dt::Shard{0}}, {}, std::nullopt);
    dt::Tensor value = dt::Tensor::full({64}, double(rank + 1));
    dt::Tensor gathered = dt::Tensor::empty({64 * size});
    dt::Tensor one = dt::Tensor::full({16}, double(rank));
    const double sum_expect = double(size) * double(size + 1) / 2.0;
    using Clock = std::chrono::steady_clock;
    const int64_t warmup = iterations / 10;
    int64_t rss_warm = 0, fds_warm = 0, threads_warm = 0, bad = 0;
    double first_s = 0, last_s = 0;
    Clock::time_point block_start;
    for (int64_t it = 0; it < warmup + iterations; ++it) {
      const int64_t k = it - warmup;  // measured iteration index (negative in the warm-up)
      if (k == 0) {
        rss_warm = dt::process_rss_bytes();
        fds_warm = count_dir("/proc/self/fd");
        threads_warm = count_dir("/proc/self/task");
      }
      if (k == 0 || k == iterations - 1000) block_start = Clock::now();
      dt::Tensor r = dt::Tensor::full({64}, double(rank + 1));
      world->all_reduce(r, dt::ReduceOp::kSum)->wait();
      world->all_gather(value, gathered)->wait();
      dt::Tensor b = one.clone();
      world->broadcast(b, int(it % size))->wait();
      const dt::DTensor a = x.redistribute({dt::Replicate{}});
      const dt::DTensor c = a.redistribute({dt::Shard{1}});
      const dt::DTensor d = c.redistribute({dt::Shard{0}});
      if (it % 97 == 0) {  // checks off the timed path now and then
        bad += r.data<float>()[7] != float(sum_expect);
        bad += gathered.data<float>()[64 * (size - 1)] != float(size);
        bad += b.data<float>()[3] != float(it % size);
        bad += !dt::equal(a.to_local(), full);
        bad += !dt::equal(d.to_local(), x.to_local());
      }
      if (k == 999) first_s = std::chrono::duration<double>(Clock::now() - block_start).count();
      if (k == iterations - 1) last_s = std::chrono::duration<double>(Clock::now() - block_start).count();
    }
    world->barrier()->wait();
    const int64_t rss_end = dt::process_rss_bytes();
    const int64_t fds_end = count_dir("/proc/self/fd"), threads_end = count_dir("/proc/self/task");
    const double rss_drift = double(rss_end - rss_warm) / double(std::max<int64_t>(rss_warm, 1));
    const double slowdown = last_s / first_s - 1.0;
    const bool ok = bad == 0 && rss_drift <= 0.05 && fds_end <= fds_warm && threads_end <= threads_warm;
    std::printf(
        "[r%d] soak: %lld iterations on %d ranks (each: all_reduce, all_gather, broadcast, 3 redistributions); "
        "wrong results %lld; RSS %.1f -> %.1f MiB (%+.2f%%); first 1000 %.3f s, last 1000 %.3f s (%+.1f%%%s); "
        "fds %lld -> %lld; threads %lld -> %lld: %s\n",
        rank, (long long)iterations, size, (long long)bad, rss_warm / 1048576.0, rss_end / 1048576.0, 100 * rss_drift,
        first_s, last_s, 100 * slowdown, slowdown > 0.10 ? ", slower by more than 10 %" : "", (long long)fds_warm,
        (long long)fds_end, (long long)threads_warm, (long long)threads_end, ok ? "ok" : "OUT OF BOUNDS");
    if (json && rank == 0)
      std::printf(
          "{\"bench\":\"soak\",\"ranks\":%d,\"iterations\":%lld,\"wrong\":%lld,\"rss_drift\":%.5f,"
          "\"first_1000_s\":%.4f,\"last_1000_s\":%.4f,\"slowdown\":%.4f,\"fds\":[%lld,%lld],"
          "\"threads\":[%lld,%lld]}\n",
          size, (long long)iterations, (long long)bad, rss_drift, first_s, last_s, slowdown, (long long)fds_warm,
          (long long)fds_end, (long long)threads_warm, (long long)threads_end);
    mesh = {};
    x = {};
    world.reset();
    dt::destroy_process_group();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak: %s\n", e.what());
    return 1;
  }
}
