// UcxWorker's liveness checks (Note [UCX failure detection] in worker.h): stalled calls, peers that died (by /proc
// or under a copy), mismatched calls, and the failure of every call of a group with a dead member.
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/flight_recorder.h"
#include "collectives/ucx/cma_guard.h"
#include "collectives/ucx/process_info.h"
#include "collectives/ucx/tag.h"
#include "collectives/ucx/worker.h"
#include "core/error.h"
#include "core/logging.h"

namespace dt::ucx {

std::exception_ptr UcxWorker::dead_member_error(const CommState& comm, const std::string& what) const {
  for (int r = 0; r < comm.size; ++r) {
    const PeerInfo& p = peers_[size_t(comm.members[size_t(r)])];
    if (!p.dead.empty())
      return make_error(ErrorCode::kRemoteError, str_cat(what, ": ", peer_name(comm, r), " died earlier: ", p.dead));
  }
  for (int g = 0; g < size_; ++g)  // Note [A dead rank fails every group]
    if (!peers_[size_t(g)].dead.empty())
      return make_error(ErrorCode::kRemoteError, str_cat(what, ": ", global_peer_name(g), " died earlier (",
                                                         peers_[size_t(g)].dead, "); the job lost a member"));
  return nullptr;
}

std::exception_ptr UcxWorker::health(const CommState& comm, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  if (now >= next_liveness_) {
    next_liveness_ = now + std::chrono::milliseconds(500);
    check_peers_locked();
  }
  if (comm.failed) return make_error(comm.failed_code, str_cat(what, " failed earlier: ", comm.failed_reason));
  return any_dead_ ? dead_member_error(comm, what) : nullptr;
}

void UcxWorker::check_health_locked(Clock::time_point now) {
  if (running_.empty() || now < next_health_) return;
  next_health_ = now + std::chrono::milliseconds(100);
  bool stalled = false;
  auto running = running_;
  for (auto& op : running) {
    if (op->finished()) continue;
    if (now > op->deadline()) {
      op->fail(ErrorCode::kTimeout, str_cat("did not complete within ", op->timeout().count() / 1000.0,
                                            " s; still waiting for: ", op->pending_summary()));
      continue;
    }
    if (now - op->last_progress() >= stall_threshold_) {
      stalled = true;
      if (find_mismatch_locked(*op)) continue;
    }
  }
  if (stalled && now >= next_liveness_) {
    next_liveness_ = now + std::chrono::milliseconds(500);
    check_peers_locked();
  }
}

bool UcxWorker::find_mismatch_locked(UcxOp& op) {
  if (!op.started() || op.finished()) return false;
  const CommState& c = *op.comm();
  const CollectiveArgs& a = op.args();
  const bool p2p = a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv;
  // A send's number counts this rank's sends to the peer; the peer's messages here count its sends to this rank: a
  // different sequence, so they say nothing about it (a peer may send i64 ids one way while f32 data comes back).
  if (a.kind == CollectiveKind::kSend) return false;
  const uint32_t kind = tag_kind(a.kind), send_kind = uint32_t(CollectiveKind::kSend);
  for (int peer : op.pending_peers()) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h m =
        ucp_tag_probe_nb(worker_, make_tag(0, c.id, op.seq(), 0, uint32_t(peer), 0), kCallMask, 0, &info);
    if (m == nullptr) continue;
    const uint32_t k = tag_kind_of(info.sender_tag);
    // The abort channel, and point-to-point messages against collectives (separate sequence spaces), say nothing.
    if (k == kAbortKind || (k == send_kind) != p2p) continue;
    if (k == kind && tag_sig(info.sender_tag) == op.signature()) continue;  // this very call's, not yet taken
    std::string what;
    if (k != kind)
      what = str_cat(peer_name(c, peer), " called ", collective_kind_name(CollectiveKind(k)),
                     " as the same call of this communicator (mismatched collective calls)");
    else if (p2p)
      what = str_cat(peer_name(c, peer), " sent a message of another dtype (mismatched send and recv)");
    else
      what = str_cat(peer_name(c, peer),
                     " made the same call with another dtype, reduce op or root (mismatched collective calls)");
    op.fail(ErrorCode::kInvalidArgument, what);
    return true;
  }
  return false;
}

void UcxWorker::take_news_locked() {
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  if (abort_recv_->done) poll_abort_locked();
}

void UcxWorker::check_peers_locked() {
  take_news_locked();  // Note [A dead rank fails every group]: a death notice already here names the first death
  std::vector<int> newly_dead;
  for (int g = 0; g < size_; ++g) {
    PeerInfo& p = peers_[size_t(g)];
    if (g == rank_ || !p.same_host || !p.dead.empty()) continue;
    std::string why = process_dead_reason(p.pid, p.start_time);
    if (!why.empty()) {
      p.dead = why;
      any_dead_ = true;
      newly_dead.push_back(g);
      DT_LOG_WARN("UCX: rank ", g, " (pid ", p.pid, ") died: ", why);
    }
  }
  fail_dead_peers_locked(newly_dead);
}

bool UcxWorker::handle_cma_failures_locked() {
  if (!cma_peer_failure_pending()) return false;
  take_news_locked();  // the peer may have exited on a death it was told of: that death is the news
  std::vector<int> newly_dead;
  for (pid_t pid : take_cma_peer_failures())
    for (int g = 0; g < size_; ++g) {
      PeerInfo& p = peers_[size_t(g)];
      if (g == rank_ || !p.same_host || p.pid != int64_t(pid) || !p.dead.empty()) continue;
      p.dead = "its process " + std::to_string(pid) + " is gone (a copy from its memory failed)";
      any_dead_ = true;
      newly_dead.push_back(g);
      DT_LOG_WARN("UCX: rank ", g, " (pid ", pid, ") died: ", p.dead);
    }
  if (newly_dead.empty()) return false;
  fail_dead_peers_locked(newly_dead);
  return true;
}

// Note [A peer that left the call]
// A direct copy into or out of a live peer's memory fails (EFAULT) when that peer has already given up on the call
// (a third rank died under it, or it timed out) and its buffers are gone. The failure is a symptom: the peer's
// abort notice names the cause and is on its way, or the dead rank is about to be seen by this rank's own checks.
// The failing rank waits for either, bounded by the stall threshold, so that every survivor reports the cause (the
// dead rank) rather than "Bad address"; without one, the copy's own error stands.
bool UcxWorker::await_group_failure_locked(const CommState& comm) {
  const auto deadline = Clock::now() + stall_threshold_;
  while (!comm.failed && !stop_.load()) {
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
    }
    handle_cma_failures_locked();
    if (abort_recv_->done) poll_abort_locked();
    check_peers_locked();
    if (comm.failed || Clock::now() >= deadline) break;
    ::usleep(200);
  }
  return comm.failed;
}

// Note [A dead rank fails every group]
// A rank that died leaves the job broken (there is no elastic recovery), so its death fails every communicator of
// every survivor, not only the groups it belonged to: otherwise a survivor waiting in a group without the dead rank
// would see only the next survivor exit on its error, and name that one. The first rank to see a death (by /proc, a
// failed copy or a lost connection) fails its own communicators and sends one death notice to every live peer; a
// peer that receives it fails all of its communicators the same way, naming the dead rank and who saw it, and does
// not forward it. Ranks found dead at once are all named, in the errors and in one notice: which of them died first
// (and made the others exit on their errors) cannot be told from /proc. Calls on a communicator made later (a split
// included) fail at once, naming it. As with NCCL's abort, this is per process: the survivors are expected to exit.
void UcxWorker::fail_dead_peers_locked(const std::vector<int>& newly_dead, bool announce) {
  if (newly_dead.empty()) return;
  const int dead = newly_dead.front();
  const std::string why = peers_[size_t(dead)].dead;
  auto comms = comms_;
  for (auto& w : comms) {
    auto c = w.lock();
    if (!c || c->failed) continue;
    std::string reason;
    int named = dead;
    for (int g : newly_dead) {
      auto it = std::find(c->members.begin(), c->members.end(), g);
      if (it == c->members.end()) continue;
      reason = str_cat(peer_name(*c, int(it - c->members.begin())), " died (", peers_[size_t(g)].dead, ")");
      named = g;
      break;
    }
    if (reason.empty()) reason = str_cat(global_peer_name(dead), " died (", why, "); the job lost a member");
    // Several found dead at once: which died first (and made the others exit) cannot be told, so all are named.
    for (int g : newly_dead)
      if (g != named) reason += str_cat("; ", global_peer_name(g), " died too (", peers_[size_t(g)].dead, ")");
    fail_comm_locked(*c, ErrorCode::kRemoteError, reason, false);
  }
  if (!announce) return;
  // One notice names every death seen at once (up to 16: the abort channel's messages are small), so that a peer
  // names them all, as this rank does.
  for (size_t first = 0; first < newly_dead.size(); first += 16) {
    std::string ranks, whys;
    for (size_t k = first; k < std::min(newly_dead.size(), first + 16); ++k) {
      ranks += str_cat(k == first ? "" : " ", newly_dead[k]);
      whys += str_cat("\n", peers_[size_t(newly_dead[k])].dead);
    }
    const std::string payload = str_cat(kDeathNotice, ranks, whys);
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && peers_[size_t(p)].dead.empty()) post_abort_locked(p, payload);
  }
}

}  // namespace dt::ucx
