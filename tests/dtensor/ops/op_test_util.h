// Shared harness of the DTensor op tests: run an op for every combination of input placements on a mesh (thread
// backend) and compare full_tensor() of every output with the same op run on the full tensors in one process.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/thread/thread_comm.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops.h"

namespace dt::op_test {

// Failures collected from every rank's thread.
class Failures {
 public:
  void add(const std::string& what);
  std::vector<std::string> list() const;
  size_t size() const;
  // Cases checked (by every rank together).
  void add_cases(int64_t n) { cases_ += n; }
  int64_t cases() const { return cases_; }
  // ADD_FAILURE for the first few, EXPECT that there are none and that at least min_cases cases ran.
  void report(int64_t min_cases = 1, size_t max_shown = 12) const;

 private:
  std::atomic<int64_t> cases_{0};
  mutable std::mutex mu_;
  std::vector<std::string> list_;
};

// Runs fn on every rank of a thread world sized like `mesh_shape`, with a mesh of that shape.
void on_mesh(const std::vector<int64_t>& mesh_shape, const std::function<void(const DeviceMesh&)>& fn);

// Specs of a tensor of `ndim` dims on a mesh of `mesh_ndim` dims: every combination over mesh dims of
// R, S(d) for each dim (and the listed Partial ops), plus the non-default order where two mesh dims shard one dim.
std::vector<ShardingSpec> specs_for(int64_t ndim, int64_t mesh_ndim, const std::vector<ReduceOp>& partial_ops,
                                    bool nested_orders = true);

// How to fill one input.
struct InputGen {
  InputGen(Shape shape_, DType dtype_ = DType::f32, double lo_ = -2, double hi_ = 2,
           std::vector<ReduceOp> partial_ops_ = {})
      : shape(std::move(shape_)), dtype(dtype_), lo(lo_), hi(hi_), partial_ops(std::move(partial_ops_)) {}
  Shape shape;
  DType dtype = DType::f32;
  double lo = -2, hi = 2;                 // uniform range (integers: [lo, hi))
  std::vector<ReduceOp> partial_ops;      // Partial placements to try for this input
  bool shard = true;                      // try Shard placements
  std::vector<ShardingSpec> fixed_specs;  // when non-empty: only these specs
};

// A DTensor with `spec` whose value is random: Replicate/Shard dims hold blocks of one global tensor, and every
// coordinate along a Partial mesh dim holds its own random contribution (the value is their reduction).
DTensor random_dtensor(const InputGen& gen, const DeviceMesh& mesh, const ShardingSpec& spec, uint64_t seed);

using DistFn = std::function<std::vector<DTensor>(const std::vector<DTensor>&)>;
using RefFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct MatrixStats {
  int64_t cases = 0;
  int64_t direct = 0;         // cases that needed no redistribution of the inputs
  int64_t redistributed = 0;  // cases where the op redistributed some input first
};

// Every combination of the inputs' specs on `mesh`: full_tensor() of each output vs ref(full inputs). `exact`
// compares bit for bit, else with the tolerance of the output dtype (tolerance()). Runs on every rank; returns
// this rank's stats. `op_name` is the dispatched op (for explain()), or empty.
MatrixStats run_matrix(const std::string& label, const DeviceMesh& mesh, const std::vector<InputGen>& inputs,
                       const DistFn& dist, const RefFn& ref, bool exact, Failures& failures,
                       const std::string& op_name = "", const ops::OpParams& params = {}, uint64_t seed = 1);

// rtol/atol per dtype for arithmetic results (f32: 1e-4/1e-5, f64: 1e-10/1e-12, bf16: 3e-2, f16: 5e-3).
void tolerance(DType dtype, double* rtol, double* atol);
// Compares; on mismatch returns a message with the largest difference.
bool compare(const Tensor& got, const Tensor& want, bool exact, std::string* why, double scale = 1.0);

// The standard meshes: 1-d of 2 and 3 ranks and 2x2.
inline const std::vector<std::vector<int64_t>>& standard_meshes() {
  static const std::vector<std::vector<int64_t>> m{{2}, {3}, {2, 2}};
  return m;
}

}  // namespace dt::op_test
