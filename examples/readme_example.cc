// The README's example, built and run by the tests so that it stays true.
#include <dtensor/dt.h>  // the C++ umbrella: every public header, no backend internals

#include <iostream>

int main() {
  dt::init_process_group();  // under dtrun, torchrun, mpirun or srun: UCX over shared memory or the network
  auto mesh = dt::DeviceMesh::create(dt::DeviceType::kCPU, {2, 2}, {"dp", "tp"});  // kCUDA: each rank's own GPU
  dt::Tensor full = dt::Tensor::randn({7, 5}, /*seed=*/1);
  auto x = dt::distribute_tensor(full, mesh, {dt::Shard(0), dt::Replicate()});  // rank 0 sends each rank its block
  auto y = x.redistribute({dt::Replicate(), dt::Shard(1)});  // uneven: 3 + 2 columns, no padding visible
  dt::Tensor local = y.to_local();
  dt::Tensor whole = y.full_tensor();                                              // equals `full`, bit for bit
  auto z = dt::DTensor::from_local(local, mesh, {dt::Replicate(), dt::Shard(1)});  // global shape inferred exactly
  auto w = dt::distribute_tensor(dt::Tensor::randn({3, 5}, 2), mesh, {dt::Replicate(), dt::Shard(1)});
  auto p = dt::matmul(z, dt::transpose(w, 0, 1));  // contracting dim sharded: p is (R, P(sum))
  std::cout << dt::visualize_sharding(y) << p.describe() << "\n";
  bool ok = dt::equal(whole, full) &&
            dt::allclose(p.full_tensor(), dt::kernels::matmul(full, dt::Tensor::randn({3, 5}, 2).t()), 1e-5, 1e-5);
  dt::destroy_process_group();  // before main returns: the world is not left to static destruction
  return ok ? 0 : 1;
}
