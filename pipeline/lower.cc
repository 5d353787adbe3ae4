// Lowering passes (pipeline/lower.h).
#include "pipeline/lower.h"

#include "core/error.h"

namespace dt::pipeline {
namespace {

bool is_backward(ActionKind k) { return k == ActionKind::kBackward || k == ActionKind::kBackwardInput; }

}  // namespace

void add_send_recv(Schedule& schedule) {
  const auto& rank_of = schedule.stage_rank;
  const int last = schedule.num_stages - 1;
  DT_CHECK_ARG(int(rank_of.size()) == schedule.num_stages, "add_send_recv: stage_ranks has ", rank_of.size(),
               " entries for ", schedule.num_stages, " stages");
  for (auto& list : schedule.actions) {
    std::vector<Action> lowered;
    for (const Action& a : list) {
      DT_CHECK_ARG(is_compute(a.kind), "add_send_recv: schedule '", schedule.name, "' has ", to_string(a),
                   " already; it takes compute actions only");
      DT_CHECK_ARG(a.stage >= 0 && a.stage <= last, "add_send_recv: ", to_string(a), " names no stage of ",
                   schedule.num_stages);
      const int s = a.stage, mb = a.microbatch;
      const bool from_prev = s > 0 && rank_of[s - 1] != rank_of[s];
      const bool from_next = s < last && rank_of[s + 1] != rank_of[s];
      if (a.kind == ActionKind::kForward && from_prev) lowered.push_back({ActionKind::kRecvF, s, mb});
      if (is_backward(a.kind) && from_next) lowered.push_back({ActionKind::kRecvB, s, mb});
      lowered.push_back(a);
      if (a.kind == ActionKind::kForward && from_next) lowered.push_back({ActionKind::kSendF, s, mb});
      if (is_backward(a.kind) && from_prev) lowered.push_back({ActionKind::kSendB, s, mb});
    }
    list = std::move(lowered);
  }
}

void add_fsdp_actions(Schedule& schedule) {
  for (auto& list : schedule.actions) {
    // Per stage on this rank: the index of its first compute and of its last gradient-producing one (B or W).
    std::vector<int> first(schedule.num_stages, -1), last(schedule.num_stages, -1);
    for (int i = 0; i < int(list.size()); ++i) {
      const Action& a = list[i];
      DT_CHECK_ARG(!is_fsdp(a.kind), "add_fsdp_actions: schedule '", schedule.name, "' has ", to_string(a), " already");
      DT_CHECK_ARG(a.stage >= 0 && a.stage < schedule.num_stages, "add_fsdp_actions: ", to_string(a),
                   " names no stage of ", schedule.num_stages);
      if (!is_compute(a.kind)) continue;
      // Before the receive of the first compute's input, if any: the gather overlaps the wait.
      const bool after_recv =
          i > 0 && is_recv(list[i - 1].kind) && list[i - 1].stage == a.stage && list[i - 1].microbatch == a.microbatch;
      if (first[a.stage] < 0) first[a.stage] = after_recv ? i - 1 : i;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) last[a.stage] = i;
    }
    // The gradient's SEND_B goes out before the reduction, so the rank before does not wait for it.
    for (int& i : last) {
      if (i >= 0 && i + 1 < int(list.size()) && list[i + 1].kind == ActionKind::kSendB &&
          list[i + 1].stage == list[i].stage) {
        ++i;
      }
    }
    std::vector<Action> lowered;
    for (int i = 0; i < int(list.size()); ++i) {
      const int s = list[i].stage;
      if (first[s] == i) lowered.push_back({ActionKind::kUnshard, s, -1});
      lowered.push_back(list[i]);
      if (last[s] == i) {
        lowered.push_back({ActionKind::kReduceGrad, s, -1});
        lowered.push_back({ActionKind::kReshard, s, -1});
      }
    }
    list = std::move(lowered);
  }
}

}  // namespace dt::pipeline
