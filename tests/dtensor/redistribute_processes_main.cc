// The redistribution matrix on real processes over UCX (run through dtrun with 4 ranks): every transition pair on a
// 4-rank 1-d mesh and a 2x2 mesh, even and uneven shapes with empty shards, two dtypes; then the error paths that
// only show across processes: a mesh that differs across ranks and from_local with inconsistent local shapes.
// Exits 0 when every rank's checks pass; each rank prints its own failures.
#include <cstdio>
#include <string>

#include "collectives/process_group.h"
#include "dtensor/dtensor.h"
#include "tests/dtensor/redistribute_cases.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}

}  // namespace

int main() {
  try {
    dt::CommunicatorPtr world = dt::init_process_group();
    const int n = world->size();

    dt::testing::MatrixOptions o;
    o.meshes = {{n}};
    if (n == 4) o.meshes.push_back({2, 2});
    o.shapes = {{8, 4}, {7, 5}, {3, 2}};  // even; uneven; 3 rows over 4 ranks leaves an empty shard
    o.dtypes = {dt::DType::f32, dt::DType::bf16};
    o.all_partial_ops = false;
    dt::testing::MatrixResult r = dt::testing::run_redistribution_matrix(world, o);
    for (const std::string& f : r.failures) check(false, f);
    check(r.cases > 50, "too few cases ran: " + std::to_string(r.cases));
    if (world->rank() == 0)
      std::printf("%lld redistributions checked on %d processes, %lld unsupported pairs rejected\n", (long long)r.cases,
                  n, (long long)r.unsupported);

    // A mesh that differs on one rank: every rank gets an error naming the rank(s) that differ.
    try {
      std::vector<int64_t> sizes = world->rank() == n - 1 ? std::vector<int64_t>{1, n} : std::vector<int64_t>{n, 1};
      dt::DeviceMesh::create(world, dt::Device::cpu(), sizes);
      check(false, "a mesh differing across ranks was accepted");
    } catch (const dt::InvalidArgument& e) {
      std::string msg = e.what();
      check(msg.find("different mesh") != std::string::npos, "mesh mismatch message: " + msg);
    }

    // from_local with an inconsistent local shape on the last rank: every rank's error names it.
    dt::DeviceMesh mesh = dt::DeviceMesh::create(world, dt::Device::cpu(), {n});
    dt::Tensor local = dt::Tensor::zeros({world->rank() == n - 1 ? 5 : 2, 3});
    dt::FromLocalOptions opts;
    opts.run_check = true;
    try {
      dt::DTensor::from_local(local, mesh, {dt::Shard{0}}, dt::Shape{int64_t(2 * n), 3}, opts);
      check(false, "inconsistent from_local was accepted");
    } catch (const dt::InvalidArgument& e) {
      std::string msg = e.what();
      check(msg.find("rank " + std::to_string(n - 1) + " has [5, 3]") != std::string::npos,
            "from_local message: " + msg);
    }
    world->barrier()->wait();
    if (world->rank() == 0) std::printf("error paths checked\n");
    dt::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED with exception: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
