#include "train/resize.h"

#include "core/error.h"
#include "core/memory_stats.h"

namespace dt::train {

int64_t bytes_per_rank(const ParallelPlan& plan, const MemoryModel& memory) {
  int64_t state = memory.state_bytes / (plan.tp * plan.pp);
  if (memory.state_sharded) state /= plan.dp / plan.hsdp;
  return state + memory.activation_bytes_per_row * plan.micro_rows();
}

ParallelPlan resize_plan(const ParallelPlan& asked, int64_t world, const MemoryModel& memory) {
  DT_CHECK_ARG(asked.dp >= 1 && asked.tp >= 1 && asked.pp >= 1 && asked.hsdp >= 1 && asked.grad_accum >= 1 &&
                   asked.global_batch >= 1,
               "resize_plan: the plan asked for needs positive sizes: ", describe(asked));
  DT_CHECK_ARG(asked.dp % asked.hsdp == 0, "resize_plan: hsdp ", asked.hsdp, " must divide dp ", asked.dp);
  DT_CHECK_ARG(asked.global_batch % (asked.dp * asked.grad_accum) == 0, "resize_plan: the global batch ",
               asked.global_batch, " does not split into dp ", asked.dp, " x grad accum ", asked.grad_accum,
               " equal micro-batches");
  const int64_t replica = asked.tp * asked.pp;
  DT_CHECK_ARG(world >= replica, "cannot go on with ", world, " rank(s): tp ", asked.tp, " x pp ", asked.pp, " = ",
               replica, " ranks hold one replica of the model, and tp and pp are kept (Note [Resize policy])");
  DT_CHECK_ARG(world % replica == 0, "cannot go on with ", world, " ranks: not a multiple of tp ", asked.tp, " x pp ",
               asked.pp, " = ", replica, " (give dtrun --world-multiple ", replica, ")");
  ParallelPlan p = asked;
  p.dp = world / replica;
  if (asked.hsdp > 1) {
    const int64_t shard = asked.dp / asked.hsdp;
    DT_CHECK_ARG(p.dp % shard == 0, "cannot go on with dp ", p.dp, ": HSDP keeps its shard groups of ", shard,
                 " ranks, and ", p.dp, " is not a multiple");
    p.hsdp = p.dp / shard;
  }
  DT_CHECK_ARG(asked.global_batch % p.dp == 0, "cannot go on with dp ", p.dp, ": the global batch ", asked.global_batch,
               " does not split evenly over it (the global batch is kept)");
  // The fewest micro-batches whose rows per rank fit in the micro-batch asked for.
  const int64_t max_rows = asked.micro_rows();
  const int64_t rows = asked.global_batch / p.dp;  // this rank's rows per step
  p.grad_accum = 0;
  for (int64_t a = 1; a <= rows; ++a) {
    if (rows % a == 0 && rows / a <= max_rows) {
      p.grad_accum = a;
      break;
    }
  }
  DT_ASSERT(p.grad_accum > 0, "resize_plan: one row per micro-batch always fits");
  if (memory.budget_bytes > 0) {
    const int64_t need = bytes_per_rank(p, memory);
    DT_CHECK_ARG(need <= memory.budget_bytes, "cannot go on with ", world, " ranks (", describe(p), "): a rank needs ",
                 format_mib(need), " (model state ",
                 format_mib(need - memory.activation_bytes_per_row * p.micro_rows()), ", activations ",
                 format_mib(memory.activation_bytes_per_row * p.micro_rows()), "), over its budget of ",
                 format_mib(memory.budget_bytes));
  }
  return p;
}

std::string describe(const ParallelPlan& p) {
  std::string s = (p.pp > 1 ? "pp " + std::to_string(p.pp) + " x " : std::string()) + "dp " + std::to_string(p.dp) +
                  (p.hsdp > 1 ? " (" + std::to_string(p.hsdp) + " replicas)" : std::string()) + " x tp " +
                  std::to_string(p.tp) + ", grad accum " + std::to_string(p.grad_accum);
  if (p.dp > 0 && p.grad_accum > 0)
    s += " (" + std::to_string(p.micro_rows()) + " rows per micro-batch, global batch " +
         std::to_string(p.global_batch) + ")";
  return s;
}

}  // namespace dt::train
