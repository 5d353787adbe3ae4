// Random valid pipeline schedules for the tests: a random legal sequential order of every rank's actions (any ready
// action of any rank, picked at random, so transfers land anywhere legal), with random stage placement, random
// splits of backwards into I and W, and FSDP's actions in 30 % of them. Header-only: random_schedule_test.cc checks
// the validator against its executor with them, runner_test.cc runs them on PipelineRunner.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/schedule.h"

namespace dt::pipeline {

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return int(next() % uint64_t(n)); }
  bool chance(double p) { return double(next() >> 11) * 0x1.0p-53 < p; }
};

struct ActionLess {
  bool operator()(const Action& a, const Action& b) const {
    return std::tuple(a.kind, a.stage, a.microbatch) < std::tuple(b.kind, b.stage, b.microbatch);
  }
};

inline Schedule random_schedule(Rng& rng) {
  using K = ActionKind;
  const int p = 1 + rng.below(4), S = 1 + rng.below(3 * p), M = 1 + rng.below(5);
  Schedule sch{.name = "random", .num_ranks = p, .num_stages = S, .num_microbatches = M};
  for (int s = 0; s < S; ++s) sch.stage_rank.push_back(rng.below(p));
  sch.actions.resize(p);
  const bool fsdp = rng.chance(0.3);
  std::set<std::pair<int, int>> split;  // (stage, mb) whose backward is I + W
  for (int s = 0; s < S; ++s) {
    for (int mb = 0; mb < M; ++mb) {
      if (rng.chance(0.5)) split.insert({s, mb});
    }
  }
  std::set<Action, ActionLess> done;
  const auto ran = [&](K k, int s, int mb) { return done.count({k, s, mb}) > 0; };
  const auto backward_ran = [&](int s, int mb) { return ran(K::kBackward, s, mb) || ran(K::kBackwardInput, s, mb); };
  std::vector<int> in_flight(p, 0), peak(p, 0), unshards(S, 0), gradients(S, 0), computes_left(S, 0);
  std::vector<char> unsharded(S, 0);
  for (int s = 0; s < S; ++s) computes_left[s] = 2 * M;
  for (const auto& [s, mb] : split) ++computes_left[s];
  for (;;) {
    std::vector<Action> ready;
    for (int s = 0; s < S; ++s) {
      const int r = sch.stage_rank[s];
      const bool can_compute = !fsdp || unsharded[s];
      const bool prev_local = s > 0 && sch.stage_rank[s - 1] == r, next_local = s + 1 < S && sch.stage_rank[s + 1] == r;
      for (int mb = 0; mb < M; ++mb) {
        const bool is_split = split.count({s, mb}) > 0;
        const auto add = [&](bool ok, K k) {
          if (ok && !ran(k, s, mb)) ready.push_back({k, s, mb});
        };
        add(can_compute && (s == 0 || (prev_local ? ran(K::kForward, s - 1, mb) : ran(K::kRecvF, s, mb))), K::kForward);
        add(can_compute && ran(K::kForward, s, mb) && !backward_ran(s, mb) &&
                (s == S - 1 || (next_local ? backward_ran(s + 1, mb) : ran(K::kRecvB, s, mb))),
            is_split ? K::kBackwardInput : K::kBackward);
        add(can_compute && is_split && ran(K::kBackwardInput, s, mb), K::kBackwardWeight);
        add(s + 1 < S && !next_local && ran(K::kForward, s, mb), K::kSendF);
        add(s > 0 && !prev_local && ran(K::kSendF, s - 1, mb), K::kRecvF);
        add(s > 0 && !prev_local && backward_ran(s, mb), K::kSendB);
        add(s + 1 < S && !next_local && ran(K::kSendB, s + 1, mb), K::kRecvB);
      }
      if (!fsdp) continue;
      if (!unsharded[s] && computes_left[s] > 0 && unshards[s] < 3) ready.push_back({K::kUnshard, s, -1});
      if (unsharded[s] && (computes_left[s] == 0 || unshards[s] < 3)) ready.push_back({K::kReshard, s, -1});
      if (gradients[s] == M && !ran(K::kReduceGrad, s, -1)) ready.push_back({K::kReduceGrad, s, -1});
    }
    if (ready.empty()) break;
    const Action a = ready[rng.below(int(ready.size()))];
    const int r = sch.stage_rank[a.stage];
    sch.actions[r].push_back(a);
    if (a.kind != K::kUnshard && a.kind != K::kReshard) done.insert(a);
    if (is_compute(a.kind)) --computes_left[a.stage];
    if (a.kind == K::kForward) peak[r] = std::max(peak[r], ++in_flight[r]);
    if (a.kind == K::kBackward || a.kind == K::kBackwardInput) --in_flight[r];
    if (a.kind == K::kBackward || a.kind == K::kBackwardWeight) ++gradients[a.stage];
    if (a.kind == K::kUnshard) ++unshards[a.stage];
    if (a.kind == K::kUnshard || a.kind == K::kReshard) unsharded[a.stage] = a.kind == K::kUnshard;
  }
  for (int s = 0; s < S; ++s) EXPECT_EQ(computes_left[s], 0) << "the generator got stuck";
  for (int r = 0; r < p; ++r) sch.memory_bound.push_back(peak[r] + (rng.chance(0.3) ? 1 : 0));
  return sch;
}

}  // namespace dt::pipeline
