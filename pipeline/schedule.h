// A pipeline schedule as data: per rank, the actions it runs in order. The same value is built by the generators
// (pipeline/schedule_builders.h), read from and printed as a table, checked by validate() (pipeline/validate.h)
// before anything runs, and timed by simulate() (pipeline/simulate.h).
//
// The table, one line per field and then one per rank (format_schedule prints it, parse_schedule reads it back
// exactly):
//
//   # 1f1b
//   stages: 2
//   microbatches: 2
//   stage_ranks: 0 1
//   memory_bound: 2 1
//   rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
//   rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
//
// The first '#' line is the name (later ones are comments); blank lines are skipped; the header lines may come in
// any order, each once; rank lines are numbered 0, 1, ... in order, and their count is num_ranks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipeline/action.h"

namespace dt::pipeline {

struct Schedule {
  std::string name = {};
  int num_ranks = 0;
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<int> stage_rank = {};               // stage -> the rank that runs it
  std::vector<std::vector<Action>> actions = {};  // per rank, in order
  std::vector<int> memory_bound = {};             // per rank: the most activations in flight the schedule promises
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

std::string format_schedule(const Schedule& schedule);
// InvalidArgument naming the line (number and text) that is not part of the format. Checks the syntax and the
// sizes (stage_ranks has `stages` entries, memory_bound one per rank); what the actions mean is validate()'s.
Schedule parse_schedule(std::string_view text);

}  // namespace dt::pipeline
