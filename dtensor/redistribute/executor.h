// Runs a redistribution plan on this rank: each planner step through its transition (registry.cc).
#pragma once

#include <memory>

#include "dtensor/redistribute/transition.h"

namespace dt::redistribute {

// A plan in progress: the first step is issued by start(); finish() completes it and runs the remaining steps.
class PlanRun {
 public:
  // `mesh`, `global` and `input` must outlive the run (the DTensor being redistributed, or the handle's result
  // template): a contiguous input is read where it lies, without a copy of the Tensor.
  PlanRun(const DeviceMesh& mesh, const Shape& global, const Plan& plan, const Tensor& input);
  // A run dropped before it finished (a RedistributeHandle never waited on) still finishes: its collective reads the
  // input and writes the output until it completes, and every member must take part in every step. Errors are
  // logged (nobody is left to see them).
  ~PlanRun();
  PlanRun(const PlanRun&) = delete;
  PlanRun& operator=(const PlanRun&) = delete;
  bool in_flight_completed() const;
  // Completes the run and hands its result over (call once).
  Tensor finish();

 private:
  void issue(size_t step_index);
  const DeviceMesh& mesh_;
  const Shape& global_;
  const Plan* plan_;         // owned by the process-wide plan cache
  int64_t traced_from_ = 0;  // while tracing: when the run was issued (its span ends when it finishes)
  Tensor current_;           // the last step's output (or the contiguous copy of a strided input)
  const Tensor* input_;      // what the next step reads: the caller's input, then current_
  size_t next_ = 0;
  PendingStep pending_;
  bool has_pending_ = false;
};

// Runs `plan` synchronously.
Tensor run_plan(const DeviceMesh& mesh, const Shape& global, const Plan& plan, const Tensor& input);

// Runs the transfers of a TransferPlan synchronously (cross_mesh.cc): this rank's block of the target spec.
Tensor run_transfer(const TransferContext& ctx);

// Cross-mesh redistribution (cross_mesh.cc): `local` is this rank's block of (src_mesh, src_spec) (empty on
// non-members). Returns this rank's block of (dst_mesh, dst_spec) (empty on non-members of dst_mesh).
Tensor run_cross_mesh(const DeviceMesh& src_mesh, const ShardingSpec& src_spec, const Tensor& local,
                      const DeviceMesh& dst_mesh, const ShardingSpec& dst_spec, const Shape& global, DType dtype);

}  // namespace dt::redistribute
