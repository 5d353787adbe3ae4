// UcxWorker: the process's UCX state, shared by the world communicator and every sub-communicator split from it:
// one UCP context and worker, one endpoint per peer, the peers' identities (for liveness checks), the engine that
// runs UcxOps, and a progress thread.
//
// Note [UCX progress]
// Calls return at once; their messages are posted by the caller and then moved along by whichever thread holds the
// worker's lock (local arithmetic too: reductions run on that thread):
//   - the thread waiting on a Work drives progress itself (UcxWork::wait -> drive): it polls the worker for up to
//     DT_UCX_SPIN_US (default 50 ms) after the last progress, as MPI does (on busy shared cores a process that
//     sleeps loses its turn and small collectives slow down 10-100x), yielding the core between polls when the
//     ranks on this host outnumber its cores, then sleeps on the worker's event descriptor;
//   - a progress thread covers the time nobody waits: it sleeps on the worker's event descriptor (UCP_FEATURE_WAKEUP:
//     ucp_worker_arm + epoll) between events and stands down while a caller drives, so it never spins on a core that
//     compute needs (a spinning progress thread cost ~60 ms per collective on 2 cores). New work kicks it (eventfd)
//     only when it sleeps;
//   - a group of one (a process's own group, a mesh dim of size 1) runs a call of up to 256 KiB in the caller at
//     once (UcxCommunicator::enqueue_host): its only work is a local copy, and the kick, the wake-up and the wait's
//     progress pass cost more than the copy (dtensor.torch's 1-process tiny blocks: about 4 us a block less).
//     Larger calls still go to the progress thread, which copies while the caller computes.
//
// Note [UCX failure detection]
// With UCX 1.13, asking for peer error handling (UCP_ERR_HANDLING_MODE_PEER) drops the shared-memory transports
// (sysv + cma) for tcp over loopback, several times slower, so endpoints use the default mode and failures are
// found another way:
//   - a dead peer: when an operation stalls (no progress for DT_UCX_STALL_MS, default 1 s), the peers on this host
//     are checked through /proc (pid and start time published through the store at startup; zombies count as dead);
//     every operation of a group containing a dead peer fails with an error naming it. A peer that dies while this
//     process copies from its memory is caught at the copy (Note [CMA reads from a dead peer] in cma_guard.h);
//   - a mismatched call: UCX reports truncation, and a received length is checked against the expected one (a call
//     with no elements still sends its empty messages); calls of different kinds, dtypes, reduce ops or roots never
//     match (the tag carries the kind and a digest of the rest), and a stalled call that finds an awaited peer's
//     message of the same number with another kind or digest fails naming that peer (Note [Mismatched calls] in
//     tag.h); otherwise the per-operation deadline fires naming the peers still awaited;
//   - whichever rank sees an error first tells the other members through an abort channel (a reserved tag kind),
//     so they fail promptly with "rank N reported: ..." instead of waiting for their deadlines; a dead rank is
//     news for every group (Note [A dead rank fails every group] in worker_liveness.cc);
//   - every operation has a deadline (the communicator's timeout, DT_TIMEOUT_S): peers on other hosts that die are
//     reported when it passes, naming the peers awaited.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/flight_recorder.h"
#include "collectives/store/store.h"
#include "collectives/ucx/algorithm_table.h"
#include "collectives/ucx/op.h"
#include "core/error.h"

namespace dt::ucx {

// A communicator's engine-side state (UcxCommunicator is the user-facing half).
struct CommState {
  uint32_t id = 0;
  int rank = 0;
  int size = 1;
  std::vector<int> members;                  // global ranks in group-rank order
  std::string name;                          // "ucx[rank 1/4]" or "ucx[comm 3, rank 1/2]"
  std::deque<std::shared_ptr<UcxOp>> queue;  // collectives in call order; the head runs
  uint32_t seq = 0;                          // collective calls issued
  std::vector<uint32_t> send_seq, recv_seq;  // point-to-point calls per peer
  uint32_t splits = 0;                       // split() calls (names the store keys of the new group)
  bool failed = false;                       // set once a call failed: later calls fail at once
  ErrorCode failed_code = ErrorCode::kInternal;
  std::string failed_reason;
  UcxTuning tuning;
  Work::Duration timeout{0};
  bool one_host = false;  // every member lives on this host and may be copied directly (set by register_comm)
  std::shared_ptr<FlightRecorder> recorder;  // the communicator's, quoted by timeout and abort errors
};

// What the other processes published about themselves.
struct PeerInfo {
  int64_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
  std::string host;
  bool same_host = false;  // same boot, host name and pid namespace: its pid can be checked here
  std::string dead;        // why it is known dead ("" while alive)
};

class UcxWorker : public std::enable_shared_from_this<UcxWorker> {
 public:
  // Collective over the `size` processes: creates the UCP context and worker, publishes this process's worker
  // address and identity under the store, reads everyone else's and creates the endpoints.
  static std::shared_ptr<UcxWorker> create(std::shared_ptr<Store> store, int rank, int size);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  const std::string& key_prefix() const { return prefix_; }  // store keys of this worker: "dt_ucx/<generation>"
  std::mutex& mutex() { return mu_; }
  ucp_worker_h handle() const { return worker_; }
  ucp_ep_h ep(int global_rank) const { return eps_[size_t(global_rank)]; }
  const PeerInfo& peer_info(int global_rank) const { return peers_[size_t(global_rank)]; }

  // ---- engine: worker lock held ----
  // Queues a collective (starts it when it is the head of its communicator's queue) or starts a point-to-point op.
  void submit_locked(const std::shared_ptr<UcxOp>& op);
  void mark_dirty(UcxOp* op);
  // An op finished or failed: drop it from the running set, start the next call of its communicator.
  void op_done_locked(UcxOp* op);
  // Fails every pending call of `comm` with `code`: started calls with "<call>: <reason>", queued ones with
  // "<call>: an earlier call ... failed: <reason>"; later calls fail at once. `origin` is the call that failed (if
  // any). When `notify`, the other members hear of it through the abort channel.
  void fail_comm_locked(CommState& comm, ErrorCode code, const std::string& reason, bool notify,
                        UcxOp* origin = nullptr);
  // "rank 2 (global rank 5, pid 1234 on host h)"
  std::string peer_name(const CommState& comm, int group_rank) const;
  // The error for a call on `comm` when one of its members is known dead, else nullptr.
  std::exception_ptr dead_member_error(const CommState& comm, const std::string& what) const;
  // Communicator::health(): the group's failure, else a dead member's error (the peers on this host are checked
  // first, at most every 500 ms).
  std::exception_ptr health(const CommState& comm, const std::string& what);
  bool has_dead_peer() const { return any_dead_; }
  void register_comm(const std::shared_ptr<CommState>& comm);
  // Peers whose memory vanished under a CMA copy (Note [CMA reads from a dead peer]): marks them dead and fails the
  // calls of their groups, before any completion of those calls is looked at. Returns whether any call failed.
  bool handle_cma_failures_locked();
  // A copy with a live peer of `comm` failed: waits (at most the stall threshold) for the group to fail with the
  // cause, a peer's abort notice or a death (Note [A peer that left the call]). Returns whether it failed.
  bool await_group_failure_locked(const CommState& comm);

  // ---- any thread ----
  // One step of a caller waiting on `work` (Note [UCX progress]): progress if the lock is free; with nothing to do,
  // keep polling for a while after the last progress, then (when `may_block`) sleep on the event descriptor for
  // at most a millisecond.
  void drive(UcxWork& work, bool may_block);
  // Wakes the progress thread so that it looks at newly started work.
  void kick();

 private:
  UcxWorker(std::shared_ptr<Store> store, int rank, int size);
  void init(int64_t generation);
  // ucp_worker_progress until idle, then advance dirty ops and run the periodic checks. Returns whether anything
  // moved.
  bool progress_locked(Clock::time_point now);
  void advance_dirty_locked(Clock::time_point now);
  void check_health_locked(Clock::time_point now);
  void check_peers_locked();
  // Progresses UCX and handles the abort messages that arrived, before a death of this rank's own finding is named.
  void take_news_locked();
  // A stalled op whose awaited peer sent a message of the same call number with another kind or digest (Note
  // [Mismatched calls] in tag.h): fails it naming that peer. Whether it did.
  bool find_mismatch_locked(UcxOp& op);
  // Note [A dead rank fails every group]: fails every communicator of this process naming the first of
  // `newly_dead`, and (announce) tells every live peer in one death notice each.
  void fail_dead_peers_locked(const std::vector<int>& newly_dead, bool announce = true);
  std::string global_peer_name(int g) const;  // "global rank 2 (pid 123 on host)"
  bool poll_abort_locked();                   // handles a received abort message (and reposts); true when one came
  void handle_abort_locked(const std::string& message, int from);
  void reap_locked();
  void thread_main();
  void stop_thread();
  friend void stop_all_progress_threads();

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::string prefix_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<PeerInfo> peers_;
  bool any_dead_ = false;  // some peer is known dead (under mu_)
  int efd_ = -1;           // the UCP worker's event descriptor
  int epfd_ = -1;          // epoll over efd_ and kick_fd_ (progress thread)
  int kick_fd_ = -1;       // eventfd
  std::chrono::microseconds spin_{0};
  bool yield_ = false;

  std::mutex mu_;
  std::vector<std::shared_ptr<UcxOp>> running_;  // started, not finished
  std::vector<std::shared_ptr<UcxOp>> zombies_;  // finished (failed) with UCX requests still outstanding
  // Ops with completions or ready tasks. Not owners (no reference count traffic per completion: a 1-rank call went
  // from 0.53 to 0.50 us): running_ owns every op that can be dirty, and op_done_locked, the only way out of
  // running_, removes a finishing op from these lists before anything can destroy it.
  std::vector<UcxOp*> dirty_;
  std::vector<UcxOp*> dirty_batch_;                   // advance_dirty_locked's batch (capacity reused)
  std::vector<std::vector<UcxOp*>*> active_batches_;  // batches being advanced (a nested call has its own)
  std::vector<std::weak_ptr<CommState>> comms_;
  std::map<uint32_t, std::pair<int, std::string>> early_aborts_;  // comm id -> (global rank, text): see handle_abort
  Clock::time_point next_health_{};
  Clock::time_point next_liveness_{};
  std::chrono::milliseconds stall_threshold_{1000};

  // abort channel
  struct AbortRecv {
    static constexpr size_t kMax = 4096;
    char buf[kMax];
    void* request = nullptr;
    bool posted = false;
    bool done = false;
    ucs_status_t status = UCS_OK;
    ucp_tag_recv_info_t info{};
  };
  struct AbortSend {
    std::string payload;
    void* request = nullptr;
    bool done = false;
  };
  static void abort_recv_cb(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
  static void abort_send_cb(void* request, ucs_status_t status, void* user_data);
  void send_abort_locked(const CommState& comm, const std::string& text);
  // One abort-channel message to global rank g.
  void post_abort_locked(int g, const std::string& payload);
  // The abort-channel message "dead G1 G2\nwhy1\nwhy2": the deaths the sender saw at once.
  static const char* const kDeathNotice;
  std::unique_ptr<AbortRecv> abort_recv_;
  std::vector<std::unique_ptr<AbortSend>> abort_sends_;

  // progress thread
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> drivers_{0};
  std::atomic<int64_t> last_drive_ns_{0};
  std::atomic<bool> thread_sleeping_{false};
};

// what() of an exception_ptr.
std::string error_message(const std::exception_ptr& e);

}  // namespace dt::ucx
