// The schedule validator (pipeline/validate.h, Note [Pipeline schedule semantics]).
#include "pipeline/validate.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace dt::pipeline {
namespace {

constexpr size_t kNumKinds = size_t(ActionKind::kReduceGrad) + 1;

class Validator {
 public:
  explicit Validator(const Schedule& s) : s_(s), S_(s.num_stages), M_(s.num_microbatches) {}

  ValidationReport run() {
    check_shape();
    index_actions();
    check_pairs();
    check_complete();
    execute();
    return std::move(report_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    DT_THROW(InvalidArgument, "pipeline schedule '", s_.name, "': ", std::forward<Args>(args)...);
  }
  // "rank 1 action 4 (1F1)": the rank, the action's index in the rank's list, the action.
  std::string at(int rank, int i) const {
    return str_cat("rank ", rank, " action ", i, " (", to_string(s_.actions[rank][i]), ")");
  }
  std::string at(const Action& a) const { return at(s_.stage_rank[a.stage], index_[key(a)]); }
  size_t key(const Action& a) const { return (size_t(a.kind) * S_ + a.stage) * (M_ + 1) + (a.microbatch + 1); }
  bool has(const Action& a) const { return index_[key(a)] >= 0; }
  bool ran(ActionKind kind, int stage, int mb) const { return done_[key({kind, stage, mb})]; }

  void check_shape() {
    const int R = s_.num_ranks;
    if (R < 1 || S_ < 1 || M_ < 1) {
      fail("num_ranks (", R, "), num_stages (", S_, ") and num_microbatches (", M_, ") must be >= 1");
    }
    if (int(s_.stage_rank.size()) != S_) fail("stage_rank has ", s_.stage_rank.size(), " entries for ", S_, " stages");
    for (int s = 0; s < S_; ++s) {
      if (s_.stage_rank[s] < 0 || s_.stage_rank[s] >= R) fail("stage ", s, " is on rank ", s_.stage_rank[s], " of ", R);
    }
    if (int(s_.actions.size()) != R) fail(s_.actions.size(), " action lists for ", R, " ranks");
    if (int(s_.memory_bound.size()) != R) fail(s_.memory_bound.size(), " memory bounds for ", R, " ranks");
    for (int r = 0; r < R; ++r) {
      if (s_.memory_bound[r] < 0) fail("rank ", r, "'s memory bound is ", s_.memory_bound[r]);
    }
    // Every (stage, microbatch) needs two actions at least; checked first, so the index below stays small.
    size_t count = 0;
    for (const auto& list : s_.actions) count += list.size();
    if (size_t(S_) * size_t(M_) > count / 2) {
      fail(S_, " stages times ", M_, " microbatches need ", 2 * size_t(S_) * size_t(M_), " actions at least, not ",
           count);
    }
  }

  // Checks each action alone (its stage, microbatch, rank and peer) and that it appears once; indexes it.
  void index_actions() {
    index_.assign(kNumKinds * S_ * (M_ + 1), -1);
    for (int r = 0; r < s_.num_ranks; ++r) {
      for (int i = 0; i < int(s_.actions[r].size()); ++i) {
        const Action& a = s_.actions[r][i];
        if (size_t(a.kind) >= kNumKinds) fail(at(r, i), ": no action kind ", int(a.kind));
        if (a.stage < 0 || a.stage >= S_) fail(at(r, i), ": there is no stage ", a.stage, " (", S_, " stages)");
        if (is_fsdp(a.kind)) {
          if (a.microbatch != -1) fail(at(r, i), ": ", kind_name(a.kind), " takes no microbatch");
          report_.fsdp = true;
        } else if (a.microbatch < 0 || a.microbatch >= M_) {
          fail(at(r, i), ": there is no microbatch ", a.microbatch, " (", M_, " microbatches)");
        }
        if (s_.stage_rank[a.stage] != r) fail(at(r, i), ": stage ", a.stage, " runs on rank ", s_.stage_rank[a.stage]);
        if (is_send(a.kind) || is_recv(a.kind)) check_peer(r, i);
        if (a.kind == ActionKind::kUnshard || a.kind == ActionKind::kReshard) continue;
        int& first = index_[key(a)];
        if (first >= 0) fail(at(r, i), ": repeats action ", first, " of rank ", r);
        first = i;
      }
    }
  }

  void check_peer(int r, int i) const {
    const Action& a = s_.actions[r][i];
    const int peer = peer_transfer(a).stage;
    if (peer < 0 || peer >= S_) fail(at(r, i), ": stage ", a.stage, " has no neighbour stage ", peer);
    if (s_.stage_rank[peer] == r) {
      fail(at(r, i), ": stages ", a.stage, " and ", peer, " are both on rank ", r,
           ", which passes the tensor locally, with no transfer");
    }
  }

  void check_pairs() {
    for (int r = 0; r < s_.num_ranks; ++r) {
      for (int i = 0; i < int(s_.actions[r].size()); ++i) {
        const Action& a = s_.actions[r][i];
        if (!is_send(a.kind) && !is_recv(a.kind)) continue;
        const Action peer = peer_transfer(a);
        if (!has(peer)) {
          fail(at(r, i), ": rank ", s_.stage_rank[peer.stage], " never ", is_send(a.kind) ? "receives" : "sends",
               " it: it has no ", to_string(peer));
        }
        report_.num_transfers += is_send(a.kind);
      }
    }
  }

  void check_complete() const {
    for (int s = 0; s < S_; ++s) {
      const int r = s_.stage_rank[s];
      for (int mb = 0; mb < M_; ++mb) {
        const Action f{ActionKind::kForward, s, mb}, b{ActionKind::kBackward, s, mb};
        const Action in{ActionKind::kBackwardInput, s, mb}, w{ActionKind::kBackwardWeight, s, mb};
        if (!has(f)) fail("rank ", r, " never runs ", to_string(f), " (every stage runs every microbatch)");
        if (has(b) && has(in)) fail(at(in), ": ", at(b), " is the backward already (B, or I and W)");
        if (has(in) && !has(w)) fail(at(in), ": its weight gradient ", to_string(w), " never runs");
        if (has(w) && !has(in)) fail(at(w), ": its input gradient ", to_string(in), " never runs");
        if (!has(b) && !has(in)) {
          fail("rank ", r, " never runs the backward of stage ", s, " microbatch ", mb, " (", to_string(b), ", or ",
               to_string(in), " and ", to_string(w), ")");
        }
      }
      const Action reduce{ActionKind::kReduceGrad, s, -1};
      if (report_.fsdp && !has(reduce)) {
        fail("rank ", r, " never runs ", to_string(reduce), " (with FSDP actions, every stage reduces its gradients)");
      }
    }
  }

  // Runs every rank until it waits for a message not yet posted, round after round (Note [Pipeline schedule
  // semantics]), checking each action as it runs.
  void execute() {
    const int R = s_.num_ranks;
    done_.assign(index_.size(), 0);
    pc_.assign(R, 0);
    in_flight_.assign(R, 0);
    deferred_.assign(R, 0);
    unsharded_.assign(S_, 0);
    gradients_.assign(S_, 0);
    report_.peak_activations.assign(R, 0);
    report_.peak_deferred_weights.assign(R, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < R; ++r) {
        for (int& i = pc_[r]; i < int(s_.actions[r].size()); ++i) {
          const Action& a = s_.actions[r][i];
          if (is_recv(a.kind) && !done_[key(peer_transfer(a))]) break;
          step(r, i);
          done_[key(a)] = 1;
          progress = true;
        }
      }
    }
    report_deadlock();
  }

  void need(bool ok, int r, int i, const std::string& what, const std::string& why = "") const {
    if (!ok) fail(at(r, i), ": needs ", what, " before it", why);
  }

  void step(int r, int i) {
    const Action& a = s_.actions[r][i];
    const int s = a.stage, mb = a.microbatch;
    const auto name = [](ActionKind k, int stage, int m) { return to_string({k, stage, m}); };
    if (report_.fsdp && is_compute(a.kind)) {
      need(unsharded_[s], r, i, name(ActionKind::kUnshard, s, -1), str_cat(" (stage ", s, " is sharded here)"));
    }
    switch (a.kind) {
      case ActionKind::kForward:
        if (s > 0 && s_.stage_rank[s - 1] == r) {
          need(ran(ActionKind::kForward, s - 1, mb), r, i, name(ActionKind::kForward, s - 1, mb));
        } else if (s > 0) {
          need(ran(ActionKind::kRecvF, s, mb), r, i, name(ActionKind::kRecvF, s, mb),
               str_cat(" (its input comes from rank ", s_.stage_rank[s - 1], ")"));
        }
        report_.peak_activations[r] = std::max(report_.peak_activations[r], ++in_flight_[r]);
        if (in_flight_[r] > s_.memory_bound[r]) {
          fail(at(r, i), ": ", in_flight_[r], " activations in flight on rank ", r, ", over its memory bound of ",
               s_.memory_bound[r]);
        }
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        need(ran(ActionKind::kForward, s, mb), r, i, name(ActionKind::kForward, s, mb));
        if (s + 1 < S_ && s_.stage_rank[s + 1] == r) {
          need(ran(ActionKind::kBackward, s + 1, mb) || ran(ActionKind::kBackwardInput, s + 1, mb), r, i,
               str_cat(name(ActionKind::kBackward, s + 1, mb), " or ", name(ActionKind::kBackwardInput, s + 1, mb)));
        } else if (s + 1 < S_) {
          need(ran(ActionKind::kRecvB, s, mb), r, i, name(ActionKind::kRecvB, s, mb),
               str_cat(" (its output gradient comes from rank ", s_.stage_rank[s + 1], ")"));
        }
        --in_flight_[r];
        if (a.kind == ActionKind::kBackward) ++gradients_[s];
        if (a.kind == ActionKind::kBackwardInput) {
          report_.peak_deferred_weights[r] = std::max(report_.peak_deferred_weights[r], ++deferred_[r]);
        }
        break;
      case ActionKind::kBackwardWeight:
        need(ran(ActionKind::kBackwardInput, s, mb), r, i, name(ActionKind::kBackwardInput, s, mb));
        --deferred_[r];
        ++gradients_[s];
        break;
      case ActionKind::kSendF:
        need(ran(ActionKind::kForward, s, mb), r, i, name(ActionKind::kForward, s, mb));
        break;
      case ActionKind::kSendB:
        need(ran(ActionKind::kBackward, s, mb) || ran(ActionKind::kBackwardInput, s, mb), r, i,
             str_cat(name(ActionKind::kBackward, s, mb), " or ", name(ActionKind::kBackwardInput, s, mb)));
        break;
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        break;  // execute() runs a RECV once its SEND is posted
      case ActionKind::kUnshard:
        if (unsharded_[s]) fail(at(r, i), ": stage ", s, " is unsharded already");
        unsharded_[s] = 1;
        break;
      case ActionKind::kReshard:
        if (!unsharded_[s]) fail(at(r, i), ": stage ", s, " is sharded already");
        unsharded_[s] = 0;
        break;
      case ActionKind::kReduceGrad:
        if (gradients_[s] < M_) {
          fail(at(r, i), ": needs all of stage ", s, "'s gradients before it (", gradients_[s], " of ", M_,
               " microbatches' B or W have run)");
        }
        break;
    }
  }

  // Ranks left waiting: each waits at a RECV whose SEND its peer has not reached, so the waits form a cycle.
  void report_deadlock() const {
    std::vector<int> waits_on(s_.num_ranks, -1);
    std::string waits;
    int first = -1;
    for (int r = 0; r < s_.num_ranks; ++r) {
      if (pc_[r] == int(s_.actions[r].size())) continue;
      const Action send = peer_transfer(s_.actions[r][pc_[r]]);
      waits_on[r] = s_.stage_rank[send.stage];
      waits += str_cat(waits.empty() ? "" : "; ", at(r, pc_[r]), " waits for ", to_string(send), ", which rank ",
                       waits_on[r], " posts at its action ", index_[key(send)]);
      if (first < 0) first = r;
    }
    if (first < 0) return;
    std::vector<char> seen(s_.num_ranks, 0);
    int r = first;
    while (!seen[r]) {
      seen[r] = 1;
      r = waits_on[r];
    }
    std::string cycle = str_cat("rank ", r);
    for (int q = waits_on[r];; q = waits_on[q]) {
      cycle += str_cat(" -> rank ", q);
      if (q == r) break;
    }
    fail("deadlock: ", waits, "; cycle of waits: ", cycle);
  }

  const Schedule& s_;
  const int S_, M_;
  std::vector<int> index_;                      // per action key: its index in its rank's list, -1 when absent
  std::vector<char> done_;                      // per action key
  std::vector<int> pc_, in_flight_, deferred_;  // per rank
  std::vector<int> unsharded_, gradients_;      // per stage: FSDP state, B and W run so far
  ValidationReport report_;
};

}  // namespace

ValidationReport validate(const Schedule& schedule) { return Validator(schedule).run(); }

}  // namespace dt::pipeline
