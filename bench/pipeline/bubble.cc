// bench/pipeline's program: a pipeline schedule run by PipelineRunner on stages that sleep instead of computing
// (forward F ms, backward 2F ms, of which F is the weights' under a zero-bubble schedule's W: the unit costs of the
// schedules' theory), so that 4 ranks on 2 cores measure the
// schedule, not the cores' contention. Run under dtrun with DT_TRACE set: each rank's timeline has a step span per
// step and a span per action; bench/pipeline/run.py reads the bubble off them. Prints the schedule and, as one JSON
// line, the simulator's bubble for it (pipeline::simulate at the same costs) and the theory's
// (pipeline::theory_bubble).
//
//   DT_TRACE=/tmp/t dtrun --nproc-per-node 4 bench/pipeline_bubble --schedule 1f1b --microbatches 8 --steps 4
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "core/trace.h"
#include "examples/program_world.h"
#include "nn/autograd.h"
#include "nn/ops.h"
#include "pipeline/runner.h"
#include "pipeline/schedule_builders.h"
#include "pipeline/simulate.h"
#include "tools/args.h"

namespace {

struct Args {
  std::string schedule = "1f1b";
  int64_t microbatches = 8, stages_per_rank = 1, steps = 4;
  double forward_ms = 20;
  bool print = false;
};

constexpr const char* kUsage =
    "usage: pipeline_bubble [--schedule gpipe|1f1b|interleaved|zb-h1] [--microbatches 8] [--stages-per-rank 1]\n"
    "                       [--steps 4] [--forward-ms 20] [--print]\n"
    "Run under dtrun with one process per pipeline rank, DT_TRACE set to record the timelines.\n";

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--schedule", a.schedule) || args.take("--microbatches", a.microbatches) ||
        args.take("--stages-per-rank", a.stages_per_rank) || args.take("--steps", a.steps) ||
        args.take("--forward-ms", a.forward_ms) || args.take("--print", a.print))
      continue;
    throw args.unexpected();
  }
  if (a.microbatches < 1 || a.stages_per_rank < 1 || a.steps < 1 || a.forward_ms <= 0)
    throw dt::tools::UsageError{"--microbatches, --stages-per-rank, --steps and --forward-ms must be positive"};
  return a;
}

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(int64_t(ms * 1000))); }

// A stage that scales its input by a parameter (so that every stage has a gradient to compute), sleeping `forward_ms`
// in forward and twice that in backward.
class SleepStage : public dt::nn::Module {
 public:
  SleepStage(double forward_ms, int64_t width) : Module("SleepStage"), ms_(forward_ms) {
    register_parameter("w", {width}, dt::nn::Init::ones());
  }
  std::vector<dt::nn::Variable> forward(const std::vector<dt::nn::Variable>& in) override {
    sleep_ms(ms_);
    const double backward_ms = 2 * ms_;
    const dt::nn::Variable y = dt::nn::mul(in[0], get_parameter("w"));
    return {dt::nn::record_one("sleep", {y}, y.data(),
                               [backward_ms](const std::vector<dt::DTensor>& g) -> std::vector<dt::DTensor> {
                                 // A zero-bubble schedule's I: half now, the weights' half when W runs.
                                 if (dt::nn::WeightGradQueue* w = dt::nn::deferred_weight_grads()) {
                                   sleep_ms(backward_ms / 2);
                                   w->push([backward_ms] { sleep_ms(backward_ms / 2); });
                                 } else {
                                   sleep_ms(backward_ms);
                                 }
                                 return {g[0]};
                               })};
  }

 private:
  double ms_;
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = dt::tools::parse_or_exit("pipeline_bubble", [&] { return parse(argc, argv); });
  try {
    const dt::examples::ProgramWorld program = dt::examples::join_world(1);
    const dt::CommunicatorPtr& world = program.world;
    const int p = world->size(), me = world->rank();
    dt::DeviceMesh mesh = dt::DeviceMesh::create(dt::DeviceType::kCPU, {p, 1}, {"pp", "stage"});
    const dt::pipeline::Schedule schedule =
        dt::pipeline::by_name(a.schedule, p, int(a.microbatches), int(a.stages_per_rank));
    // Each of the v stages of a rank holds 1/v of its layers: F / v a stage, so every schedule does the same work.
    const double stage_ms = a.forward_ms / double(a.stages_per_rank);
    const dt::Shape boundary{1, 16};
    std::vector<dt::pipeline::StageModule> mine;
    for (int s = 0; s < schedule.num_stages; ++s)
      if (schedule.stage_rank[size_t(s)] == me) {
        auto stage = std::make_shared<SleepStage>(stage_ms, boundary[1]);
        stage->materialize(mesh["stage"], 0);
        mine.push_back({s, stage});
      }
    dt::pipeline::PipelineRunner runner({.schedule = schedule,
                                         .pp_rank = me,
                                         .pp_comm = mesh.comm("pp"),
                                         .stage_mesh = mesh["stage"],
                                         .stages = mine,
                                         .boundary_shape = [&](int, int) { return boundary; }});
    std::vector<dt::DTensor> inputs, targets;
    for (int mb = 0; mb < schedule.num_microbatches; ++mb) {
      inputs.push_back(dt::DTensor::from_local(dt::Tensor::zeros(boundary), mesh["stage"], {dt::Replicate{}}));
      targets.push_back(inputs.back());
    }
    const auto loss = [](const dt::nn::Variable& out, const dt::DTensor&) { return dt::nn::sum(out); };
    if (me == 0 && a.print) std::printf("%s", dt::pipeline::format_schedule(schedule).c_str());
    for (int64_t step = 0; step < a.steps; ++step) {
      dt::trace::StepSpan span(step);
      runner.step(inputs, targets, loss);
    }
    if (me == 0) {
      dt::pipeline::Costs costs;
      costs.forward = stage_ms;
      costs.backward_input = stage_ms;
      costs.backward_weight = stage_ms;
      const dt::pipeline::SimulationResult sim = dt::pipeline::simulate(schedule, costs);
      const double theory =
          dt::pipeline::theory_bubble(a.schedule, p, schedule.num_microbatches, int(a.stages_per_rank), costs);
      std::printf(
          "{\"schedule\": \"%s\", \"ranks\": %d, \"microbatches\": %d, \"stages_per_rank\": %lld, "
          "\"forward_ms\": %g, \"simulated_bubble\": %.6f, \"theory_bubble\": %.6f}\n",
          a.schedule.c_str(), p, schedule.num_microbatches, (long long)a.stages_per_rank, a.forward_ms,
          sim.bubble_share, theory);
    }
    if (program.launched) dt::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "pipeline_bubble: " << e.what() << "\n";
    return 1;
  }
}
