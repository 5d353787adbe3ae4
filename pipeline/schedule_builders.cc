// The built-in schedules (pipeline/schedule_builders.h).
#include "pipeline/schedule_builders.h"

#include <algorithm>
#include <deque>

#include "core/error.h"
#include "pipeline/lower.h"

namespace dt::pipeline {
namespace {

Action compute(ActionKind kind, int stage, int mb) { return {.kind = kind, .stage = stage, .microbatch = mb}; }

// A schedule of p ranks with v stages each, stage s on rank s % p, and no actions yet.
Schedule start(const char* name, int p, int m, int v) {
  DT_CHECK_ARG(p >= 1 && m >= 1 && v >= 1, name, ": num_ranks (", p, "), num_microbatches (", m,
               ") and stages_per_rank (", v, ") must be >= 1");
  Schedule s{.name = name, .num_ranks = p, .num_stages = p * v, .num_microbatches = m};
  for (int stage = 0; stage < p * v; ++stage) s.stage_rank.push_back(stage % p);
  s.actions.resize(p);
  s.memory_bound.resize(p);
  return s;
}

Schedule lower(Schedule s, const BuildOptions& options) {
  add_send_recv(s);
  if (options.fsdp) add_fsdp_actions(s);
  return s;
}

}  // namespace

Schedule gpipe(int p, int m, const BuildOptions& options) {
  Schedule s = start("gpipe", p, m, 1);
  for (int r = 0; r < p; ++r) {
    for (int mb = 0; mb < m; ++mb) s.actions[r].push_back(compute(ActionKind::kForward, r, mb));
    for (int mb = 0; mb < m; ++mb) s.actions[r].push_back(compute(ActionKind::kBackward, r, mb));
    s.memory_bound[r] = m;
  }
  return lower(std::move(s), options);
}

Schedule one_f_one_b(int p, int m, const BuildOptions& options) {
  Schedule s = start("1f1b", p, m, 1);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - 1 - r, m);
    for (int mb = 0; mb < warmup; ++mb) s.actions[r].push_back(compute(ActionKind::kForward, r, mb));
    for (int mb = 0; mb < m; ++mb) {
      if (warmup + mb < m) s.actions[r].push_back(compute(ActionKind::kForward, r, warmup + mb));
      s.actions[r].push_back(compute(ActionKind::kBackward, r, mb));
    }
    s.memory_bound[r] = std::min(p - r, m);
  }
  return lower(std::move(s), options);
}

Schedule zero_bubble_h1(int p, int m, const BuildOptions& options) {
  Schedule s = start("zb-h1", p, m, 1);
  for (int r = 0; r < p; ++r) {
    auto& list = s.actions[r];
    const int warmup = std::min(p - 1 - r, m);
    for (int mb = 0; mb < warmup; ++mb) list.push_back(compute(ActionKind::kForward, r, mb));
    std::deque<int> weights;  // microbatches whose I is done and W is not, oldest first
    for (int mb = 0; mb < m; ++mb) {
      if (warmup + mb < m) list.push_back(compute(ActionKind::kForward, r, warmup + mb));
      list.push_back(compute(ActionKind::kBackwardInput, r, mb));
      weights.push_back(mb);
      // Rank r holds back r weight gradients: the ranks nearer the start idle longest in the drain.
      if (mb >= r) {
        list.push_back(compute(ActionKind::kBackwardWeight, r, weights.front()));
        weights.pop_front();
      }
    }
    for (int mb : weights) list.push_back(compute(ActionKind::kBackwardWeight, r, mb));
    s.memory_bound[r] = std::min(p - r, m);
  }
  return lower(std::move(s), options);
}

// Note [Interleaved microbatch groups]
// Megatron's interleaved 1F1B takes the microbatches in groups: every rank runs a group's forwards through its
// first stage (chunk 0), then the same group through chunk 1, and so on, and its backwards in the same order with
// the chunks reversed. Rank r warms up with (v - 1) g + 2 (p - 1 - r) forwards: the group's earlier chunks, plus
// the trip of the first microbatch to the last rank and back; then one forward, one backward; then the drain.
// Megatron uses groups of g = p and needs m % p == 0: with a short last group the warmup, sized for the first
// group, no longer matches the later ones, and the order can deadlock (p = 4, v = 3, m = 5 does). Equal groups of
// any size g >= p work: here g is the smallest divisor of m that is at least p (PyTorch takes m / (m / p) when it
// divides m, and refuses otherwise), and one group of m when m < p. At unit costs the simulator gives the theory's
// bubble (p - 1) / (v m + p - 1) exactly for every m >= p (checked for p <= 8, m <= 20, v <= 4); below p no order
// can, a microbatch's v p forwards and backwards being one chain. A group larger than p costs memory: the bound is
// min((v - 1) g + 2 (p - 1 - r) + 1, v m) activations on rank r.
Schedule interleaved_one_f_one_b(int p, int m, int v, const BuildOptions& options) {
  DT_CHECK_ARG(v >= 2, "interleaved: stages_per_rank is ", v, "; it needs at least 2 (with one stage per rank, use ",
               "1f1b)");
  Schedule s = start("interleaved", p, m, v);
  int g = m;
  if (m >= p) {
    g = p;
    while (m % g != 0) ++g;
  }
  struct Slot {
    int mb, chunk;
  };
  std::vector<Slot> order;  // the forward order of every rank (Note [Interleaved microbatch groups])
  for (int first = 0; first < m; first += g) {
    for (int chunk = 0; chunk < v; ++chunk) {
      for (int mb = first; mb < first + g; ++mb) order.push_back({mb, chunk});
    }
  }
  const int total = v * m;
  for (int r = 0; r < p; ++r) {
    auto& list = s.actions[r];
    const auto forward = [&](int k) {
      list.push_back(compute(ActionKind::kForward, order[k].chunk * p + r, order[k].mb));
    };
    const auto backward = [&](int k) {
      list.push_back(compute(ActionKind::kBackward, (v - 1 - order[k].chunk) * p + r, order[k].mb));
    };
    const int warmup = std::min((v - 1) * g + 2 * (p - 1 - r), total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total; ++k) {
      if (warmup + k < total) forward(warmup + k);
      backward(k);
    }
    s.memory_bound[r] = std::min(warmup + 1, total);
  }
  return lower(std::move(s), options);
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zb-h1"};
  return names;
}

Schedule by_name(const std::string& name, int p, int m, int v, const BuildOptions& options) {
  if (name == "interleaved") return interleaved_one_f_one_b(p, m, v, options);
  if (name == "gpipe" || name == "1f1b" || name == "zb-h1") {
    DT_CHECK_ARG(v == 1, name, " runs one stage per rank; stages_per_rank ", v, " is for interleaved");
  }
  if (name == "gpipe") return gpipe(p, m, options);
  if (name == "1f1b") return one_f_one_b(p, m, options);
  if (name == "zb-h1") return zero_bubble_h1(p, m, options);
  std::string known;
  for (const std::string& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
  DT_THROW(InvalidArgument, "pipeline schedule '", name, "' is not one of ", known);
}

}  // namespace dt::pipeline
