// The resize policy of an elastic job: the parallel layout and gradient accumulation a job takes on the world size
// it finds itself in after a restart (tools/dtrun --max-restarts, Note [Elastic generations]).
//
//   const train::ParallelPlan asked{.dp = 2, .tp = 2, .global_batch = 8};
//   const train::ParallelPlan p = train::resize_plan(asked, world->size());   // 2 ranks left: dp 1, grad_accum 2
//   if (lead) std::printf("%s\n", train::describe(p).c_str());
//
// Note [Resize policy]
// - tp and pp are kept: a model's tensor- and pipeline-parallel split is what makes one replica fit, and a
//   checkpoint loads into any layout (Note [Pipeline checkpoints]), so only dp (data parallelism, FSDP's shard
//   group) changes; under HSDP the shard group is kept and the replicate dim changes. A world that is not a multiple
//   of tp x pp, or smaller, is refused, naming both (dtrun --world-multiple keeps the launcher from making one).
// - The global batch is kept, so the training curve is the same: each optimizer step sees the same rows. When dp
//   shrinks, each rank's rows per step grow; gradient accumulation rises so that a rank's micro-batch never holds
//   more rows than in the plan asked for (its activations fit where they fitted), with the fewest micro-batches that
//   split the global batch evenly. When dp grows back, accumulation falls again.
// - Memory: a rank holds its part of the model state (parameters, gradients and optimizer state: divided by tp x pp,
//   and by the shard group under FSDP) and one micro-batch's activations. Past the budget the plan is refused with
//   both figures, before anything is allocated.
#pragma once

#include <cstdint>
#include <string>

namespace dt::train {

struct ParallelPlan {
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t hsdp = 1;          // HSDP's replicate groups (1: plain FSDP, or no FSDP); dp / hsdp ranks shard the model
  int64_t grad_accum = 1;    // micro-batches per optimizer step on each dp rank
  int64_t global_batch = 1;  // rows per optimizer step, over every dp rank and micro-batch
  int64_t world() const { return dp * tp * pp; }
  int64_t micro_rows() const { return global_batch / (dp * grad_accum); }  // a rank's rows per micro-batch
};

// What a rank holds, for the budget check; with budget_bytes 0 nothing is checked.
struct MemoryModel {
  int64_t budget_bytes = 0;              // per rank
  int64_t state_bytes = 0;               // parameters + gradients + optimizer state of the whole model
  bool state_sharded = true;             // FSDP: divided over the shard group (dp / hsdp ranks)
  int64_t activation_bytes_per_row = 0;  // one row's activations on one rank (its tp x pp part of the model)
};

// A rank's bytes under `plan`: its state and one micro-batch's activations.
int64_t bytes_per_rank(const ParallelPlan& plan, const MemoryModel& memory);

// `asked` (a valid plan: world() ranks, global_batch a multiple of dp * grad_accum) moved to `world` ranks by Note
// [Resize policy]; asked itself when world == asked.world(). InvalidArgument, naming the sizes, when the world cannot
// hold it.
ParallelPlan resize_plan(const ParallelPlan& asked, int64_t world, const MemoryModel& memory = {});

// "dp 2 x tp 2, grad accum 1 (4 rows per micro-batch, global batch 8)"; pp and hsdp when > 1.
std::string describe(const ParallelPlan& plan);

}  // namespace dt::train
