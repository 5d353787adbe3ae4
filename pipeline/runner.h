// Runs a validated schedule (pipeline/schedule.h) on this rank's stages: one training step's forwards and backwards
// over the microbatches, the boundary tensors sent to and received from the neighbouring stages' ranks.
//
//   pipeline::PipelineRunner runner({.schedule = pipeline::by_name("1f1b", pp, m), .pp_rank = r,
//                                    .pp_comm = mesh.comm("pp"), .stage_mesh = mesh["tp"], .stages = mine,
//                                    .boundary_shape = [&](int, int mb) { return Shape{rows(mb), seq, dim}; }});
//   double loss = runner.step(ids_per_mb, targets_per_mb, loss_fn);   // gradients accumulated into .grad()
//   pipeline::clip_grad_norm_(params, 1.0, mesh.comm("pp")); opt.step(); opt.zero_grad();
//
// Note [Pipeline runner]
// - Each rank walks its own action list in order (Note [Pipeline schedule semantics] in validate.h). A forward takes
//   the first stage's microbatch input, a tensor received from the previous stage's rank, or the previous stage's
//   output on this rank; that input is a fresh autograd leaf, so a backward stops at the stage boundary and leaves
//   the input's gradient in the leaf, which SEND_B sends (or the previous stage on this rank takes).
// - The last stage's loss_fn gives each microbatch's loss; its backward starts there. The caller scales the loss
//   (sum over tokens / the global batch's tokens makes any microbatch split equal to one batch); gradients of every
//   microbatch accumulate into the parameters' .grad(), as gradient accumulation does.
// - Boundary tensors keep one layout on both sides, boundary_placements on the stage mesh (Replicate, or Shard(1)
//   under sequence parallelism; a stage output in another layout is redistributed to it, in autograd), and every
//   stage's sub-mesh has the same shape, so each rank sends its local block to the rank with the same coordinate on
//   the next stage's sub-mesh: one point-to-point message on the pp communicator. Global shapes come from
//   boundary_shape and local ones from the layout (no forward run to discover them).
// - The communicator pairs messages between two ranks in the order they are posted, while a schedule may receive them
//   in another order (the validator matches them by identity, as tagged messages: the interleaved schedule with
//   p = 2 and m = 5 receives a gradient before an activation posted earlier on the same channel). The runner knows
//   every sender's posting order from the schedule, so a RECV takes the messages in front of its own off the channel
//   first and keeps them until their RECV comes: the buffered, tagged semantics the validator assumes, on an
//   in-order transport, with no wait the schedule does not already have (an earlier message was posted earlier).
// - Sends are asynchronous and waited for at the end of the step; a receive waits at once. Any failure (a dead peer,
//   a timeout) is rethrown naming this rank, the action's index and the action.
// - Data parallelism and FSDP inside a stage are the stage's own: each dp rank runs the schedule on its rows of every
//   microbatch, and before_backward lets FSDP reduce once, after the stage's last microbatch.
// - I runs the backward with the weights' gradients deferred (Note [Deferred weight gradients] in nn/autograd.h:
//   Linear weights that are plain leaves), W computes them; the numbers are B's. Weights that FSDP shards keep their
//   gradients in I (FSDP reduces a group when its backward ends), so under FSDP a zero-bubble schedule runs exactly
//   but W has less to fill the bubbles with.
// - FSDP's actions (UNSHARD, RESHARD, REDUCE_GRAD) are not run yet: FSDP inside a stage acts through its own hooks;
//   such a schedule is refused at construction.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "nn/module.h"
#include "pipeline/schedule.h"

namespace dt::pipeline {

struct StageModule {
  int stage = 0;
  nn::ModulePtr module = nullptr;
};

using LossFn = std::function<nn::Variable(const nn::Variable& output, const DTensor& target)>;

struct RunnerOptions {
  Schedule schedule = {};
  int pp_rank = 0;                       // this rank's index in the schedule (its coordinate on the pp mesh dim)
  CommunicatorPtr pp_comm = nullptr;     // the pp dim's communicator: its rank i holds pp coordinate i
  DeviceMesh stage_mesh = {};            // the mesh this rank's stage modules live on
  std::vector<StageModule> stages = {};  // this rank's stages, those the schedule places on pp_rank
  // The global shape of stage `stage`'s input for microbatch `mb` (stage > 0): the previous stage's output.
  std::function<Shape(int stage, int mb)> boundary_shape = nullptr;
  DType boundary_dtype = DType::f32;
  // The boundary tensors' placements on the stage mesh (empty: Replicate on every dim; {Shard(1)} under sequence
  // parallelism). A stage output in another layout is redistributed to it first, differentiably.
  std::vector<Placement> boundary_placements = {};
  // Called before each backward (B or I) of a stage; `last`: the stage's final backward of the step. FSDP inside a
  // stage reduces its gradients once a step: fsdp_module.set_requires_gradient_sync(last).
  std::function<void(int stage, bool last)> before_backward = nullptr;
};

class PipelineRunner {
 public:
  // Validates the schedule and checks that every pp rank was given the same one (a CRC of its table, all-gathered:
  // collective over the pp communicator), before any step.
  explicit PipelineRunner(RunnerOptions options);
  // One step over the schedule's microbatches: inputs[mb] (the first stage's rank) and targets[mb] (the last
  // stage's rank) on the stage mesh; other ranks may pass empty vectors. Returns the sum of the microbatch losses,
  // on every rank.
  double step(const std::vector<DTensor>& inputs, const std::vector<DTensor>& targets, const LossFn& loss_fn);
  const Schedule& schedule() const { return options_.schedule; }
  // The last step's wall time on this rank and the part of it in the compute actions (F, B, I, W): 1 - compute /
  // step is the rank's bubble (the step ends with the loss all-reduce, so every rank's spans the whole pipeline).
  struct StepTimes {
    double step_s = 0, compute_s = 0;
  };
  const StepTimes& last_step_times() const { return times_; }

 private:
  void check_same_schedule() const;
  RunnerOptions options_;
  std::vector<nn::ModulePtr> by_stage_;  // stage -> module on this rank (null elsewhere)
  // peer rank -> the RECVs of this rank that the messages from that peer answer, in the peer's posting order
  std::vector<std::vector<Action>> incoming_;
  std::vector<size_t> last_backward_;  // stage -> the index of its last backward in this rank's list
  StepTimes times_;
};

// The global gradient norm of parameters spread over pipeline stages (each rank holds its stages'), clipped as
// nn::clip_grad_norm_ clips: the squared norms are summed over `pp_comm` first. Returns the total norm.
double clip_grad_norm_(const std::vector<nn::Variable>& params, double max_norm, const CommunicatorPtr& pp_comm);

}  // namespace dt::pipeline
