// The redistribution matrix shared by the thread-backend tests and the multi-process (UCX) test: every transition
// pair on the given meshes, for several shapes (even, uneven, empty shards) and dtypes. Each case checks, against
// the full tensor built independently on every rank from a seed:
//   - the local block of the result equals the block the layout assigns (for non-Partial targets),
//   - full_tensor() of the result equals the original bit for bit,
//   - the collectives issued equal the plan's collective steps, per mesh dim (CommCounter).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "placement/placement.h"
#include "placement/sharding_spec.h"

namespace dt::testing {

struct MatrixOptions {
  std::vector<std::vector<int64_t>> meshes;  // mesh shapes to run on (their size must equal the world size)
  std::vector<Shape> shapes;
  std::vector<DType> dtypes{DType::f32};
  bool nested_orders = true;  // also S(0)[1],S(0)[0] style specs on 2-d meshes
  bool all_partial_ops = true;
  // The meshes' device: the cases are built on the CPU, moved there, and compared on the CPU after full_tensor().
  Device device = Device::cpu();
};

struct MatrixResult {
  int64_t cases = 0;        // redistributions executed and checked
  int64_t unsupported = 0;  // pairs rejected as unsupported (checked to be exactly the documented ones)
  std::vector<std::string> failures;
};

// Runs on one rank; every rank of `world` must call it with the same options.
MatrixResult run_redistribution_matrix(const CommunicatorPtr& world, const MatrixOptions& options);

// The candidate specs for a tensor of `ndim` dims on a mesh of `mesh_ndim` dims.
std::vector<ShardingSpec> candidate_specs(int64_t ndim, int64_t mesh_ndim, bool nested_orders, bool all_partial_ops);

// Integer-valued random data (exact under sum, avg, max, min and product with ones), the same on every rank.
Tensor case_tensor(const Shape& shape, DType dtype, uint64_t seed);

// Whether the planner must reject src -> dst (a Shard becoming Partial, or mixed Partial ops in either spec).
bool expect_unsupported(const ShardingSpec& src, const ShardingSpec& dst);

}  // namespace dt::testing
