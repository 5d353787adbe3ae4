// Note [Resize policy]: the layout an elastic job takes on the ranks it finds after a restart. Cases worked by hand,
// and every (plan, world) of a grid against the policy's properties checked by brute force.
#include "train/resize.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace dt::train {
namespace {

std::string error_of(const ParallelPlan& asked, int64_t world, const MemoryModel& memory = {}) {
  try {
    resize_plan(asked, world, memory);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ResizePlan, KeepsTpShrinksDpRaisesAccumulation) {
  const ParallelPlan asked{.dp = 2, .tp = 2, .global_batch = 8};
  const ParallelPlan two = resize_plan(asked, 2);
  EXPECT_EQ(two.dp, 1);
  EXPECT_EQ(two.tp, 2);
  EXPECT_EQ(two.grad_accum, 2);  // 8 rows on one dp rank, 4 per micro-batch as asked
  EXPECT_EQ(two.micro_rows(), 4);
  const ParallelPlan back = resize_plan(two, 4);
  EXPECT_EQ(back.dp, 2);
  EXPECT_EQ(back.grad_accum, 1);
  EXPECT_EQ(describe(two), "dp 1 x tp 2, grad accum 2 (4 rows per micro-batch, global batch 8)");
  // pp is kept too; 12 ranks of tp 2 x pp 2: dp 3.
  const ParallelPlan p3 = resize_plan({.dp = 2, .tp = 2, .pp = 2, .global_batch = 12}, 12);
  EXPECT_EQ(p3.dp, 3);
  EXPECT_EQ(p3.grad_accum, 1);
  // The same world: the plan asked for.
  const ParallelPlan same = resize_plan({.dp = 4, .tp = 1, .grad_accum = 2, .global_batch = 16}, 4);
  EXPECT_EQ(same.dp, 4);
  EXPECT_EQ(same.grad_accum, 2);
}

TEST(ResizePlan, HsdpKeepsItsShardGroup) {
  const ParallelPlan asked{.dp = 4, .tp = 1, .hsdp = 2, .global_batch = 8};  // 2 replicas of 2 shards
  const ParallelPlan p = resize_plan(asked, 2);
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.hsdp, 1);
  EXPECT_EQ(p.grad_accum, 2);
  EXPECT_TRUE(contains(error_of(asked, 3), "HSDP keeps its shard groups of 2 ranks"));
}

TEST(ResizePlan, RefusesWhatCannotHoldTheModel) {
  // tp 4 cannot shrink onto 2 ranks, nor onto 6.
  EXPECT_TRUE(contains(error_of({.dp = 2, .tp = 4, .global_batch = 8}, 2),
                       "cannot go on with 2 rank(s): tp 4 x pp 1 = 4 ranks hold one replica"));
  EXPECT_TRUE(contains(error_of({.dp = 2, .tp = 4, .global_batch = 8}, 6), "not a multiple of tp 4 x pp 1 = 4"));
  EXPECT_TRUE(contains(error_of({.dp = 2, .tp = 1, .global_batch = 4}, 3), "the global batch 4 does not split"));
  // The model's state, sharded over dp, no longer fits one rank's budget.
  const MemoryModel m{
      .budget_bytes = 600 << 20, .state_bytes = int64_t(1000) << 20, .activation_bytes_per_row = 1 << 20};
  EXPECT_EQ(resize_plan({.dp = 2, .tp = 1, .global_batch = 8}, 2, m).dp, 2);  // 500 MiB + 4 MiB
  const std::string e = error_of({.dp = 2, .tp = 1, .global_batch = 8}, 1, m);
  EXPECT_TRUE(contains(e,
                       "a rank needs 1004.0 MiB (model state 1000.0 MiB, activations 4.0 MiB), over its budget "
                       "of 600.0 MiB"))
      << e;
  // Replicated state (no FSDP) does not shrink with dp.
  EXPECT_EQ(bytes_per_rank({.dp = 4, .tp = 2, .global_batch = 8}, {.state_bytes = 800, .state_sharded = false}), 400);
  // Bad plans asked for.
  EXPECT_TRUE(
      contains(error_of({.dp = 2, .tp = 1, .grad_accum = 3, .global_batch = 8}, 2), "does not split into dp 2"));
  EXPECT_TRUE(contains(error_of({.dp = 0, .tp = 1, .global_batch = 8}, 2), "positive sizes"));
}

// Every plan of a grid on every world size: when a plan is returned, it keeps tp, pp and the global batch, uses the
// whole world, keeps micro-batches no larger than asked, and no smaller accumulation would do; when refused, the
// brute force finds no plan either.
TEST(ResizePlan, GridAgainstBruteForce) {
  int plans = 0, refused = 0;
  for (int64_t tp : {1, 2, 4})
    for (int64_t dp : {1, 2, 3, 4})
      for (int64_t accum : {1, 2, 3})
        for (int64_t batch : {4, 6, 8, 12, 24}) {
          if (batch % (dp * accum) != 0) continue;
          const ParallelPlan asked{.dp = dp, .tp = tp, .grad_accum = accum, .global_batch = batch};
          for (int64_t world = 1; world <= 16; ++world) {
            // The brute force: the smallest accumulation on world / tp dp ranks with micro rows <= asked's.
            int64_t best = 0;
            if (world % tp == 0 && batch % (world / tp) == 0) {
              const int64_t rows = batch / (world / tp);
              for (int64_t a = rows; a >= 1; --a)
                if (rows % a == 0 && rows / a <= asked.micro_rows()) best = a;
            }
            if (best == 0) {
              EXPECT_FALSE(error_of(asked, world).empty()) << describe(asked) << " on " << world;
              ++refused;
              continue;
            }
            const ParallelPlan p = resize_plan(asked, world);
            EXPECT_EQ(p.tp, tp);
            EXPECT_EQ(p.world(), world);
            EXPECT_EQ(p.global_batch, batch);
            EXPECT_EQ(p.dp * p.grad_accum * p.micro_rows(), batch);
            EXPECT_LE(p.micro_rows(), asked.micro_rows());
            EXPECT_EQ(p.grad_accum, best) << describe(asked) << " on " << world;
            ++plans;
          }
        }
  EXPECT_GT(plans, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace dt::train
