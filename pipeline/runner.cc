// Runs a schedule on this rank's stages (Note [Pipeline runner] in pipeline/runner.h).
#include "pipeline/runner.h"

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "collectives/exchange.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/trace.h"
#include "nn/autograd.h"
#include "nn/ops.h"
#include "nn/optim.h"
#include "pipeline/validate.h"
#include "placement/layout.h"

namespace dt::pipeline {
namespace {

using Key = std::pair<int, int>;  // (stage, microbatch)

// What one step keeps per (stage, microbatch) between its actions.
struct Flight {
  nn::Variable input;   // the stage's input leaf (stage > 0)
  nn::Variable output;  // the stage's output, or the loss on the last stage
  DTensor output_grad;  // the gradient of the output, received or handed over by the next stage on this rank
};

// Rethrows the current dt::Error naming where the schedule was.
[[noreturn]] void rethrow_at(int rank, size_t index, const Action& a, const Error& e) {
  std::rethrow_exception(
      make_error(e.code(), str_cat("pipeline: rank ", rank, " at action #", index, " ", to_string(a), ": ", e.what())));
}

}  // namespace

PipelineRunner::PipelineRunner(RunnerOptions options) : options_(std::move(options)) {
  const Schedule& s = options_.schedule;
  validate(s);
  DT_CHECK_ARG(options_.pp_comm != nullptr, "PipelineRunner: the pp communicator is null");
  DT_CHECK_ARG(options_.pp_comm->size() == s.num_ranks, "PipelineRunner: the schedule '", s.name, "' has ", s.num_ranks,
               " ranks but the pp communicator has ", options_.pp_comm->size());
  DT_CHECK_ARG(options_.pp_rank == options_.pp_comm->rank(), "PipelineRunner: pp_rank ", options_.pp_rank,
               " is not the pp communicator's rank ", options_.pp_comm->rank());
  DT_CHECK_ARG(options_.stage_mesh.defined(), "PipelineRunner: the stage mesh is undefined");
  DT_CHECK_ARG(s.num_stages == 1 || options_.boundary_shape != nullptr,
               "PipelineRunner: boundary_shape is needed to receive stage inputs");
  for (const auto& list : s.actions)
    for (const Action& a : list)
      DT_CHECK_ARG(!is_fsdp(a.kind), "PipelineRunner: the schedule '", s.name, "' has ", to_string(a),
                   ": FSDP's actions are not run by the runner yet (FSDP inside a stage unshards and reduces through "
                   "its own hooks: see before_backward)");
  by_stage_.assign(size_t(s.num_stages), nullptr);
  for (const StageModule& m : options_.stages) {
    DT_CHECK_ARG(m.stage >= 0 && m.stage < s.num_stages && m.module != nullptr, "PipelineRunner: stage ", m.stage,
                 " is not a stage of '", s.name, "' (", s.num_stages, " stages) or has no module");
    DT_CHECK_ARG(s.stage_rank[size_t(m.stage)] == options_.pp_rank, "PipelineRunner: stage ", m.stage, " runs on rank ",
                 s.stage_rank[size_t(m.stage)], " in '", s.name, "', not on this rank ", options_.pp_rank);
    DT_CHECK_ARG(by_stage_[size_t(m.stage)] == nullptr, "PipelineRunner: stage ", m.stage, " given twice");
    by_stage_[size_t(m.stage)] = m.module;
  }
  for (int st = 0; st < s.num_stages; ++st)
    DT_CHECK_ARG(s.stage_rank[size_t(st)] != options_.pp_rank || by_stage_[size_t(st)] != nullptr,
                 "PipelineRunner: the schedule places stage ", st, " on rank ", options_.pp_rank,
                 " but no module was given for it");
  last_backward_.assign(size_t(s.num_stages), 0);
  const std::vector<Action>& mine = s.actions[size_t(options_.pp_rank)];
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].kind == ActionKind::kBackward || mine[i].kind == ActionKind::kBackwardInput)
      last_backward_[size_t(mine[i].stage)] = i;
  check_same_schedule();
  incoming_.assign(size_t(s.num_ranks), {});
  for (int r = 0; r < s.num_ranks; ++r)
    for (const Action& a : s.actions[size_t(r)])
      if (is_send(a.kind)) {
        const Action recv = peer_transfer(a);
        if (s.stage_rank[size_t(recv.stage)] == options_.pp_rank) incoming_[size_t(r)].push_back(recv);
      }
}

void PipelineRunner::check_same_schedule() const {
  const Schedule& s = options_.schedule;
  const std::string text = format_schedule(s);
  const std::vector<int64_t> crc = all_gather_ints(*options_.pp_comm, {int64_t(crc32c(text.data(), text.size()))});
  for (int r = 0; r < s.num_ranks; ++r)
    DT_CHECK_ARG(crc[size_t(r)] == crc[size_t(options_.pp_rank)], "PipelineRunner: rank ", r,
                 "'s schedule differs from rank ", options_.pp_rank, "'s '", s.name, "' (CRC32C of the table ",
                 crc[size_t(r)], " vs ", crc[size_t(options_.pp_rank)],
                 "): every pipeline rank must run the same schedule");
}

double PipelineRunner::step(const std::vector<DTensor>& inputs, const std::vector<DTensor>& targets,
                            const LossFn& loss_fn) {
  const Schedule& s = options_.schedule;
  const int me = options_.pp_rank, last = s.num_stages - 1;
  const DeviceMesh& mesh = options_.stage_mesh;
  const std::vector<Placement> boundary = options_.boundary_placements.empty()
                                              ? std::vector<Placement>(size_t(mesh.ndim()), Replicate{})
                                              : options_.boundary_placements;
  Communicator& comm = *options_.pp_comm;
  const auto on_me = [&](int stage) { return s.stage_rank[size_t(stage)] == me; };
  if (on_me(0))
    DT_CHECK_ARG(int(inputs.size()) == s.num_microbatches, "PipelineRunner::step: ", inputs.size(), " inputs for ",
                 s.num_microbatches, " microbatches");
  if (on_me(last)) {
    DT_CHECK_ARG(int(targets.size()) == s.num_microbatches, "PipelineRunner::step: ", targets.size(), " targets for ",
                 s.num_microbatches, " microbatches");
    DT_CHECK_ARG(loss_fn != nullptr, "PipelineRunner::step: the loss function is null");
  }
  std::map<Key, Flight> flights;
  std::map<Key, DTensor> arrived;                  // stage inputs received, or handed over by the previous stage here
  std::map<Key, DTensor> input_grads;              // stage inputs' gradients waiting for their SEND_B
  std::map<Key, nn::WeightGradQueue> weight_work;  // I ran, W not yet
  std::vector<std::pair<WorkPtr, Tensor>> sends;   // waited for at the end; the tensor lives until then
  double loss_sum = 0;
  // Messages taken off a channel ahead of their RECV, and how many each channel has delivered.
  std::map<std::pair<ActionKind, Key>, std::pair<Tensor, Shape>> early;  // the local block, the global shape
  std::vector<size_t> delivered(size_t(s.num_ranks), 0);
  const auto receive = [&](const Action& a) {
    const int peer = s.stage_rank[size_t(peer_transfer(a).stage)];
    const std::vector<Action>& order = incoming_[size_t(peer)];
    for (;;) {
      auto it = early.find({a.kind, {a.stage, a.microbatch}});
      if (it != early.end()) {
        Tensor t = std::move(it->second.first);
        const Shape global = it->second.second;
        early.erase(it);
        return DTensor::from_local(t, mesh, boundary, global);
      }
      const Action& next = order.at(delivered[size_t(peer)]++);
      // A forward's input has its stage's input shape; a gradient, the shape of its stage's output (the next
      // stage's input).
      const int shaped = next.kind == ActionKind::kRecvF ? next.stage : next.stage + 1;
      const Shape global = options_.boundary_shape(shaped, next.microbatch);
      Tensor t = Tensor::empty(local_shape(global, mesh.shape(), ShardingSpec(boundary), mesh.coordinate()),
                               options_.boundary_dtype, mesh.device());
      comm.recv(t, peer)->wait();
      early[{next.kind, {next.stage, next.microbatch}}] = {t, global};
    }
  };
  const auto send = [&](const DTensor& d, int peer) {
    Tensor t = d.to_local().contiguous();
    sends.emplace_back(comm.send(t, peer), t);
  };

  const std::vector<Action>& list = s.actions[size_t(me)];
  using Clock = std::chrono::steady_clock;
  const Clock::time_point step_start = Clock::now();
  double compute_s = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const Key key{a.stage, a.microbatch};
    const Clock::time_point action_start = Clock::now();
    try {
      trace::Span span(trace::Category::kUser, trace::enabled() ? trace::intern(to_string(a)) : "");
      switch (a.kind) {
        case ActionKind::kForward: {
          Flight& f = flights[key];
          nn::Variable x;
          if (a.stage == 0) {
            x = nn::Variable(inputs[size_t(a.microbatch)]);
          } else {
            auto it = arrived.find(key);
            DT_ASSERT(it != arrived.end(), "no input for ", to_string(a));
            f.input = nn::Variable(it->second, /*requires_grad=*/true);
            arrived.erase(it);
            x = f.input;
          }
          nn::Variable y = (*by_stage_[size_t(a.stage)])(x);
          if (a.stage == last) {
            f.output = loss_fn(y, targets[size_t(a.microbatch)]);
            loss_sum += f.output.data().full_tensor().to(DType::f64).data<double>()[0];
          } else {
            if (y.data().placements() != boundary) y = nn::redistribute(y, boundary);
            f.output = y;
            if (on_me(a.stage + 1)) arrived[{a.stage + 1, a.microbatch}] = y.data();
          }
          break;
        }
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput: {
          auto it = flights.find(key);
          DT_ASSERT(it != flights.end(), "no forward for ", to_string(a));
          Flight& f = it->second;
          if (options_.before_backward) options_.before_backward(a.stage, i == last_backward_[size_t(a.stage)]);
          std::optional<nn::DeferWeightGrads> defer;  // I: the weights' gradients wait for W
          if (a.kind == ActionKind::kBackwardInput) defer.emplace(weight_work[key]);
          if (a.stage == last) {
            nn::backward({f.output});
          } else {
            DT_ASSERT(f.output_grad.defined(), "no output gradient for ", to_string(a));
            nn::backward({f.output}, {f.output_grad});
          }
          defer.reset();
          if (a.stage > 0) {
            DT_ASSERT(f.input.grad().defined(), "no input gradient after ", to_string(a));
            const DTensor g = f.input.grad();
            if (on_me(a.stage - 1))
              flights[{a.stage - 1, a.microbatch}].output_grad = g;
            else
              input_grads[key] = g;
          }
          flights.erase(key);
          break;
        }
        case ActionKind::kSendF:
          send(flights.at(key).output.data(), s.stage_rank[size_t(a.stage + 1)]);
          break;
        case ActionKind::kRecvF:
          arrived[key] = receive(a);
          break;
        case ActionKind::kSendB: {
          auto it = input_grads.find(key);
          DT_ASSERT(it != input_grads.end(), "no input gradient for ", to_string(a));
          send(it->second, s.stage_rank[size_t(a.stage - 1)]);
          input_grads.erase(it);
          break;
        }
        case ActionKind::kRecvB:
          flights[key].output_grad = receive(a);
          break;
        case ActionKind::kBackwardWeight: {
          auto it = weight_work.find(key);
          DT_ASSERT(it != weight_work.end(), "no input backward before ", to_string(a));
          it->second.run();
          weight_work.erase(it);
          break;
        }
        case ActionKind::kUnshard:
        case ActionKind::kReshard:
        case ActionKind::kReduceGrad:
          DT_THROW(InternalError, "refused at construction");
      }
    } catch (const Error& e) {
      rethrow_at(me, i, a, e);
    }
    if (is_compute(a.kind)) compute_s += std::chrono::duration<double>(Clock::now() - action_start).count();
  }
  for (auto& [work, tensor] : sends) work->wait();
  // The loss lives on the last stage's rank: every rank returns it.
  Tensor l = Tensor::from_vector({on_me(last) ? loss_sum : 0.0}, {1}, DType::f64);
  comm.all_reduce(l, ReduceOp::kSum)->wait();
  times_ = {std::chrono::duration<double>(Clock::now() - step_start).count(), compute_s};
  return l.data<double>()[0];
}

double clip_grad_norm_(const std::vector<nn::Variable>& params, double max_norm, const CommunicatorPtr& pp_comm) {
  DT_CHECK_ARG(pp_comm != nullptr, "pipeline::clip_grad_norm_: the pp communicator is null");
  const double local = nn::grad_norm(params);
  Tensor sq = Tensor::from_vector({local * local}, {1}, DType::f64);
  pp_comm->all_reduce(sq, ReduceOp::kSum)->wait();
  const double norm = std::sqrt(sq.data<double>()[0]);
  nn::clip_grads_to_norm_(params, max_norm, norm);
  return norm;
}

}  // namespace dt::pipeline
