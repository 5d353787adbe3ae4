// Times a schedule with a cost per action: per-rank busy time, the makespan and the bubble (the idle share), to
// compare schedules and check them against the theory.
//
//   const SimulationResult r = simulate(one_f_one_b(4, 8));  // unit costs: r.bubble_share == 3 / 11
//
// Each rank runs its list in order (Note [Pipeline schedule semantics] in pipeline/validate.h): a compute takes its
// cost; a SEND takes no time on its rank and its message arrives comm later; a RECV ends when the message is there
// (the rank is idle meanwhile); FSDP actions take no time. Costs are per stage: an interleaved schedule's stages
// are the model's layers cut into v p pieces, so its unit forward is 1 / v of a rank's share of the model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace dt::pipeline {

struct Costs {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  std::optional<double> backward = {};  // a whole B; unset: backward_input + backward_weight
  double comm = 0;                      // a message's latency: its RECV ends no sooner than comm after the SEND
  double full_backward() const { return backward.value_or(backward_input + backward_weight); }
};

struct SimulationResult {
  struct Span {
    double start = 0, end = 0;
  };
  double makespan = 0;
  std::vector<double> busy = {};              // per rank: time spent computing
  std::vector<double> bubble = {};            // per rank: (makespan - busy) / makespan
  double bubble_share = 0;                    // all ranks: idle time / (num_ranks * makespan)
  std::vector<std::vector<Span>> spans = {};  // per rank, per action
};

// validate()s the schedule first (its InvalidArgument passes through).
SimulationResult simulate(const Schedule& schedule, const Costs& costs = {});

// The bubble share the literature gives, ignoring comm:
//   gpipe, 1f1b    (p - 1) / (m + p - 1)
//   interleaved    (p - 1) / (v m + p - 1)
//   zb-h1          (p - 1) (F + I - W) / (m (F + I + W) + (p - 1) (F + I - W))
// The built-in schedules reach it exactly at unit costs: gpipe and 1f1b for every m, interleaved and zb-h1 for
// m >= p (below p a microbatch's chain of stages is longer than the formulas assume).
double theory_bubble(const std::string& name, int num_ranks, int num_microbatches, int stages_per_rank = 1,
                     const Costs& costs = {});

}  // namespace dt::pipeline
