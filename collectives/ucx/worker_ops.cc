// UcxWorker's op engine: communicators registered with the worker, calls queued per communicator and started in
// order, ops advanced when their requests complete, the failure of a communicator's calls, and the progress step that
// the progress thread and waiting callers run (worker_progress.cc drives it).
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/flight_recorder.h"
#include "collectives/ucx/op.h"
#include "collectives/ucx/views.h"
#include "collectives/ucx/worker.h"
#include "core/error.h"
#include "core/logging.h"

namespace dt::ucx {

void UcxWorker::register_comm(const std::shared_ptr<CommState>& comm) {
  comms_.erase(std::remove_if(comms_.begin(), comms_.end(), [](const auto& w) { return w.expired(); }), comms_.end());
  comms_.push_back(comm);
  comm->one_host = direct_copies_allowed();
  for (int g : comm->members) comm->one_host = comm->one_host && peers_[size_t(g)].same_host;
  auto early = early_aborts_.find(comm->id);
  if (early == early_aborts_.end()) return;
  const auto [from, text] = early->second;
  early_aborts_.erase(early);
  auto it = std::find(comm->members.begin(), comm->members.end(), from);
  if (it != comm->members.end())
    fail_comm_locked(*comm, ErrorCode::kRemoteError,
                     str_cat(peer_name(*comm, int(it - comm->members.begin())), " reported: ", text), false);
}

void UcxWorker::submit_locked(const std::shared_ptr<UcxOp>& op) {
  CommState& c = *op->comm();
  const bool p2p = op->args().kind == CollectiveKind::kSend || op->args().kind == CollectiveKind::kRecv;
  if (p2p) {
    running_.push_back(op);
    op->start();
    return;
  }
  c.queue.push_back(op);
  if (c.queue.size() == 1) {
    running_.push_back(op);
    op->start();
  }
}

void UcxWorker::mark_dirty(UcxOp* op) {
  if (op->dirty) return;
  op->dirty = true;
  dirty_.push_back(op);
}

void UcxWorker::op_done_locked(UcxOp* op) {
  if (op->dirty) {  // it leaves running_ and may be destroyed: no list may point at it (see dirty_ in worker.h)
    op->dirty = false;
    dirty_.erase(std::remove(dirty_.begin(), dirty_.end(), op), dirty_.end());  // erased: no hole left to clear
    for (auto* batch : active_batches_) std::replace(batch->begin(), batch->end(), op, static_cast<UcxOp*>(nullptr));
  }
  auto it = std::find_if(running_.begin(), running_.end(), [op](const auto& p) { return p.get() == op; });
  std::shared_ptr<UcxOp> self;
  if (it != running_.end()) {
    self = *it;
    running_.erase(it);
  } else {
    self = op->shared_from_this();
  }
  if (op->has_outstanding_requests()) zombies_.push_back(self);
  CommState& c = *op->comm();
  if (!c.queue.empty() && c.queue.front().get() == op) {
    c.queue.pop_front();
    // Start the next call of this communicator (one that finishes at once pops itself and starts the next).
    while (!c.queue.empty() && !c.queue.front()->started()) {
      auto next = c.queue.front();
      running_.push_back(next);
      next->start();
    }
  }
}

std::string UcxWorker::peer_name(const CommState& comm, int group_rank) const {
  if (group_rank < 0 || group_rank >= int(comm.members.size())) return "rank " + std::to_string(group_rank);
  const int g = comm.members[size_t(group_rank)];
  const PeerInfo& p = peers_[size_t(g)];
  std::ostringstream os;
  os << "rank " << group_rank;
  if (comm.id != 0)
    os << " (global rank " << g << ", pid " << p.pid << " on " << p.host << ")";
  else
    os << " (pid " << p.pid << " on " << p.host << ")";
  return os.str();
}

std::string UcxWorker::global_peer_name(int g) const {
  const PeerInfo& p = peers_[size_t(g)];
  return str_cat("global rank ", g, " (pid ", p.pid, " on ", p.host, ")");
}

void UcxWorker::fail_comm_locked(CommState& comm, ErrorCode code, const std::string& reason, bool notify,
                                 UcxOp* origin) {
  std::string full_reason = reason;
  if (origin != nullptr) full_reason = origin->description() + ": " + reason;
  if (!comm.failed) {
    comm.failed = true;
    comm.failed_code = code;
    comm.failed_reason = full_reason;
  }
  // Timeout and abort errors quote this rank's last calls (not sent to the peers: they quote their own).
  const std::string recent =
      comm.recorder != nullptr && (code == ErrorCode::kTimeout || code == ErrorCode::kRemoteError)
          ? "; " + comm.recorder->describe_recent()
          : std::string();
  std::vector<std::shared_ptr<UcxOp>> victims;
  for (auto& op : running_)
    if (op->comm().get() == &comm) victims.push_back(op);
  for (auto& op : comm.queue)
    if (std::find(victims.begin(), victims.end(), op) == victims.end()) victims.push_back(op);
  comm.queue.clear();
  for (auto& op : victims) {
    if (op.get() == origin) {
      op->abort(make_error(code, full_reason + recent));
    } else if (op->started()) {
      op->abort(make_error(code, origin != nullptr
                                     ? str_cat(op->description(), ": failed because ", full_reason, recent)
                                     : str_cat(op->description(), ": ", reason, recent)));
    } else {
      op->abort(make_error(code, str_cat(op->description(), ": not run because an earlier call failed: ",
                                         origin != nullptr ? full_reason : reason, recent)));
    }
  }
  if (notify) send_abort_locked(comm, full_reason);
  DT_LOG_DEBUG("UCX ", comm.name, " failed: ", full_reason);
}

void UcxWorker::reap_locked() {
  if (!zombies_.empty())
    zombies_.erase(std::remove_if(zombies_.begin(), zombies_.end(),
                                  [](const auto& op) { return !op->has_outstanding_requests(); }),
                   zombies_.end());
  if (!abort_sends_.empty())
    abort_sends_.erase(std::remove_if(abort_sends_.begin(), abort_sends_.end(),
                                      [](const auto& a) {
                                        if (!a->done) return false;
                                        if (a->request != nullptr) ucp_request_free(a->request);
                                        return true;
                                      }),
                       abort_sends_.end());
}

void UcxWorker::advance_dirty_locked(Clock::time_point now) {
  // The batch vector keeps its capacity from call to call (no allocation per round of progress); a nested call
  // (an op's advance never makes one today) would fall back to a vector of its own.
  std::vector<UcxOp*> nested;
  std::vector<UcxOp*>& batch = active_batches_.empty() ? dirty_batch_ : nested;
  active_batches_.push_back(&batch);
  while (!dirty_.empty()) {
    batch.swap(dirty_);
    for (size_t i = 0; i < batch.size(); ++i) {
      UcxOp* op = batch[i];
      if (op == nullptr) continue;  // finished by an earlier op of the batch (op_done_locked)
      op->dirty = false;
      op->advance(now);  // may finish (and destroy) op: it is not touched again
    }
    batch.clear();
  }
  active_batches_.pop_back();
}

bool UcxWorker::progress_locked(Clock::time_point now) {
  bool moved = false;
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) moved = true;
  if (handle_cma_failures_locked()) moved = true;
  if (abort_recv_->done && poll_abort_locked()) moved = true;
  if (!dirty_.empty()) {
    moved = true;
    advance_dirty_locked(now);
  }
  reap_locked();
  check_health_locked(now);
  return moved;
}

}  // namespace dt::ucx
