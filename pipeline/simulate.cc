// The unit-cost simulator (pipeline/simulate.h).
#include "pipeline/simulate.h"

#include <algorithm>

#include "core/error.h"
#include "pipeline/schedule_builders.h"
#include "pipeline/validate.h"

namespace dt::pipeline {
namespace {

double cost_of(ActionKind kind, const Costs& c) {
  switch (kind) {
    case ActionKind::kForward:
      return c.forward;
    case ActionKind::kBackward:
      return c.full_backward();
    case ActionKind::kBackwardInput:
      return c.backward_input;
    case ActionKind::kBackwardWeight:
      return c.backward_weight;
    case ActionKind::kSendF:
    case ActionKind::kRecvF:
    case ActionKind::kSendB:
    case ActionKind::kRecvB:
    case ActionKind::kUnshard:
    case ActionKind::kReshard:
    case ActionKind::kReduceGrad:
      return 0;
  }
  return 0;
}

}  // namespace

SimulationResult simulate(const Schedule& s, const Costs& costs) {
  validate(s);
  const int R = s.num_ranks, S = s.num_stages, M = s.num_microbatches;
  // When each SEND was posted, by (direction, stage, microbatch); -1 until then.
  std::vector<double> posted(2 * size_t(S) * M, -1);
  const auto slot = [&](const Action& send) {
    return (size_t(send.kind == ActionKind::kSendB) * S + send.stage) * M + send.microbatch;
  };
  SimulationResult out;
  out.busy.assign(R, 0);
  out.spans.resize(R);
  std::vector<double> clock(R, 0);
  // Every rank runs until it waits for a message not yet posted, round after round (validate() rules out a
  // deadlock, so this ends with every list done).
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      for (size_t i = out.spans[r].size(); i < s.actions[r].size(); ++i) {
        const Action& a = s.actions[r][i];
        double end = clock[r] + cost_of(a.kind, costs);
        if (is_recv(a.kind)) {
          const double sent = posted[slot(peer_transfer(a))];
          if (sent < 0) break;
          end = std::max(clock[r], sent + costs.comm);
        }
        if (is_send(a.kind)) posted[slot(a)] = clock[r];
        if (is_compute(a.kind)) out.busy[r] += end - clock[r];
        out.spans[r].push_back({clock[r], end});
        clock[r] = end;
        progress = true;
      }
    }
  }
  for (int r = 0; r < R; ++r) DT_ASSERT(out.spans[r].size() == s.actions[r].size(), "rank ", r, " stopped");
  out.makespan = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (int r = 0; r < R; ++r) {
    out.bubble.push_back(out.makespan > 0 ? (out.makespan - out.busy[r]) / out.makespan : 0);
    idle += out.makespan - out.busy[r];
  }
  out.bubble_share = out.makespan > 0 ? idle / (R * out.makespan) : 0;
  return out;
}

double theory_bubble(const std::string& name, int p, int m, int v, const Costs& c) {
  by_name(name, p, m, v);  // the same checks of the name and the sizes as the schedule's
  if (name == "zb-h1") {
    const double bubble = (p - 1) * (c.forward + c.backward_input - c.backward_weight);
    return bubble / (m * (c.forward + c.backward_input + c.backward_weight) + bubble);
  }
  return double(p - 1) / (double(v) * m + p - 1);
}

}  // namespace dt::pipeline
