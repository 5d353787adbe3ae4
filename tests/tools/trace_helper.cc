// A rank program for trace_test.py, run under dtrun. Usage:
//   trace_helper STEPS [--skew-rank R --skew-ns N] [--slow-rank R --slow-ms M]
// Each step (a trace StepSpan): a sharded matmul on a (dp, tp) mesh (an op, with the redistribution it needs), a
// user span, then an all-reduce over the world that rank --slow-rank reaches M ms late (it sleeps first: the
// straggler), and the result gathered (a redistribution). --skew-rank shifts that rank's trace clock by N ns
// (DT_TRACE_CLOCK_SKEW_NS, set before the process group starts), which the alignment must recover. At the end each
// rank prints "threads <rank> <n>": the threads of the process (/proc/self/task), before the group is destroyed.
#include <dtensor/dt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_helper STEPS [--skew-rank R --skew-ns N] [--slow-rank R --slow-ms M]\n");
    return 2;
  }
  const int steps = std::atoi(argv[1]);
  int skew_rank = -1, slow_rank = -1, slow_ms = 0;
  long long skew_ns = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--skew-rank") skew_rank = std::atoi(argv[i + 1]);
    if (k == "--skew-ns") skew_ns = std::atoll(argv[i + 1]);
    if (k == "--slow-rank") slow_rank = std::atoi(argv[i + 1]);
    if (k == "--slow-ms") slow_ms = std::atoi(argv[i + 1]);
  }
  const char* r = std::getenv("DT_RANK");
  const int rank = r ? std::atoi(r) : 0;
  if (rank == skew_rank) setenv("DT_TRACE_CLOCK_SKEW_NS", std::to_string(skew_ns).c_str(), 1);
  dt::CommunicatorPtr world = dt::init_process_group();
  const int n = world->size();
  {
    const dt::DeviceMesh mesh = n % 2 == 0 ? dt::DeviceMesh::create(dt::DeviceType::kCPU, {n / 2, 2}, {"dp", "tp"})
                                           : dt::DeviceMesh::create(dt::DeviceType::kCPU, {n}, {"dp"});
    const int64_t tp_dim = mesh.ndim() - 1;
    std::vector<dt::Placement> col(size_t(mesh.ndim()), dt::Replicate{}), row = col;
    col[size_t(tp_dim)] = dt::Shard{1};
    row[0] = dt::Shard{0};
    const dt::DTensor w = dt::distribute_tensor(dt::Tensor::randn({64, 48}, 1), mesh, col);
    for (int step = 1; step <= steps; ++step) {
      dt::trace::StepSpan span(step);
      const dt::DTensor x = dt::distribute_tensor(dt::Tensor::randn({32, 64}, uint64_t(step)), mesh, row);
      dt::DTensor y = dt::matmul(x, w);
      {
        dt::trace::Span user(dt::trace::Category::kUser, "user work");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (rank == slow_rank) {
        dt::trace::Span late(dt::trace::Category::kUser, "late");
        std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      }
      dt::Tensor t = dt::Tensor::full({1024}, double(rank));
      world->all_reduce(t, dt::ReduceOp::kSum)->wait();
      (void)y.full_tensor();
    }
  }
  int threads = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) threads += e.is_directory();
  std::printf("threads %d %d\n", rank, threads);
  std::fflush(stdout);
  world.reset();
  dt::destroy_process_group();
  return 0;
}
