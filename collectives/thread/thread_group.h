// Internal to the thread backend: the state shared by the ranks (threads) of one in-process group, its collective
// rendezvous and its point-to-point channels. See thread_comm.h for the public API.
//
// Note [Thread rendezvous]
// Every group-wide call of a group gets a sequence number (1, 2, ...), the same on every rank because calls are
// issued in the same order. Each rank's worker thread runs its calls in order; for call s it publishes a pointer to
// its arguments in the slot of call s and waits until all ranks did (phase "arrive"). Then every rank reads its
// peers' buffers directly (copies, kernels::reduce) and waits until all ranks finished (phase "done") before
// returning, so that no buffer is released while a peer still reads or writes it. The last rank to finish removes
// the slot; the ranks still waking up hold it by shared_ptr.
// Once every rank arrived, the remaining phases only wait for peers' memory copies, so they ignore aborts (a rank
// must not return while a peer still writes into its buffers). Before all arrived, an abort, a peer that is gone
// or the deadline ends the wait; the rank that gives up marks the slot abandoned (it stays in the map) so that a late
// peer fails instead of reading buffers that are gone. After a failure ranks may be several calls apart: slots are
// keyed by sequence number, not reused.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/call_signature.h"
#include "collectives/communicator.h"
#include "collectives/flight_recorder.h"
#include "collectives/work.h"

namespace dt::thread_detail {

using Clock = std::chrono::steady_clock;

class ThreadGroup;

// One call of one rank, as its worker runs it.
struct RankOp {
  bool is_split = false;
  CollectiveArgs args;                       // collectives and point-to-point (unused for split)
  int color = -1, key = 0;                   // split
  const FlightRecorder* recorder = nullptr;  // the issuing communicator's (it outlives its queued calls)
  uint64_t seq = 0;                          // group call number (collectives and splits; 0 for send / recv)
  // split results, filled at the rendezvous
  std::shared_ptr<ThreadGroup> new_group;
  int new_rank = -1;

  std::string describe() const;
  CallSignature signature() const;
};

// The world: every group split (transitively) from one make_thread_world() call. An abort fails every pending and
// future operation of every group of the world.
//
// A rank whose thread function returned (run_threads) and whose queued calls all ran is "gone": it will never make
// another call, so a peer waiting for it fails at once (dt::RemoteError) instead of waiting for the deadline. This
// turns a test whose rank returned early (a failed ASSERT) into an error instead of a hang.
class ThreadWorld {
 public:
  explicit ThreadWorld(int size);
  int size() const { return size_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string reason() const;
  // Only the first abort's reason is kept. Wakes every waiter of every group.
  void abort(const std::string& reason);
  void register_group(const std::shared_ptr<ThreadGroup>& group);

  // Calls queued / finished by a rank (global rank), and the end of its thread function.
  void op_queued(int global_rank) { pending_[size_t(global_rank)].fetch_add(1); }
  void op_done(int global_rank);
  void mark_exited(int global_rank);
  bool gone(int global_rank) const {
    return exited_[size_t(global_rank)].load() && pending_[size_t(global_rank)].load() == 0;
  }

 private:
  void wake_all();

  const int size_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<std::atomic<bool>[]> exited_;
  std::unique_ptr<std::atomic<int64_t>[]> pending_;
  mutable std::mutex mu_;
  std::string reason_;
  std::vector<std::weak_ptr<ThreadGroup>> groups_;
};

// A receive posted before the matching send: completed by the sender's worker.
struct PendingRecv {
  void* buf = nullptr;
  int64_t count = 0;
  DType dtype = DType::f32;
  int src = -1, dst = -1;  // group ranks
  std::shared_ptr<AsyncWork> work;
};

class ThreadGroup {
 public:
  ThreadGroup(std::shared_ptr<ThreadWorld> world, std::vector<int> global_ranks, std::string name);

  int size() const { return int(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::string& name() const { return name_; }
  const std::shared_ptr<ThreadWorld>& world() const { return world_; }
  // "rank 1" in the world group, "rank 1 (global 3)" in a sub-group; rank_id() without the word "rank".
  std::string rank_label(int rank) const { return "rank " + rank_id(rank); }
  std::string rank_id(int rank) const;

  // ---- collectives (Note [Thread rendezvous]) ----
  struct Slot {
    explicit Slot(uint64_t s, int n) : seq(s), ops(size_t(n), nullptr) {}
    uint64_t seq;
    int count[3] = {0, 0, 0};  // ranks that reached phase 0 (arrived), 1, 2 (done)
    bool abandoned = false;
    bool abandoned_on_timeout = false;  // else a peer was gone
    std::string abandon_reason;
    std::string mismatch;            // set by the last arrival when the ranks called different things
    std::vector<const RankOp*> ops;  // every rank's call, indexed by group rank
  };
  // Publishes `op` (which must stay valid until phase 2) and waits for every rank. Returns the call's slot (every
  // rank's op in slot->ops). Throws TimeoutError (after aborting the world) when `deadline` passes, RemoteError when
  // the world is aborted or a peer is gone, InvalidArgument (after phase 2) when the ranks called different things.
  std::shared_ptr<Slot> arrive(int rank, const RankOp* op, Clock::time_point deadline, Work::Duration timeout);
  // Waits until every rank reached `phase` (1: an intermediate step, 2: done) of the slot's call.
  void sync(int rank, Slot& slot, int phase, Clock::time_point deadline, Work::Duration timeout);
  // The ranks that have not arrived at call `seq` yet, for timeout messages ("rank 1 (last call #3: barrier())").
  std::string describe_missing(uint64_t seq);

  // ---- point to point (matched in order per (src, dst)) ----
  // Runs on the sender's worker: copies into a posted receive, or buffers the message. `work` completes when the
  // message is matched (with an error when the receive disagrees on count or dtype).
  void post_send(int src, int dst, const void* buf, int64_t count, DType dtype, std::shared_ptr<AsyncWork> work);
  // Runs on the receiver's worker: completes at once from a buffered message, or stays pending until the send.
  void post_recv(const std::shared_ptr<PendingRecv>& recv);
  // Fails the receives `dst` posted that are still unmatched (its communicator goes away).
  void cancel_recvs(int dst, const std::string& why);
  std::string describe_p2p_wait(int src, int dst, bool is_send);

  // Called by ThreadWorld::abort: fails pending point-to-point work and wakes every waiter.
  void on_abort(const std::string& reason);
  // Called when a rank is gone: wakes the waiters and fails the point-to-point work that waits for a gone peer.
  void on_rank_gone();

 private:
  struct Message {
    std::unique_ptr<std::byte[]> data;
    int64_t count = 0;
    DType dtype = DType::f32;
    std::shared_ptr<AsyncWork> work;
  };
  struct Channel {
    std::deque<Message> sends;                       // sent, not yet received
    std::deque<std::shared_ptr<PendingRecv>> recvs;  // posted, not yet matched
  };
  void on_all_arrived(Slot& slot);  // with mu_ held, by the last arrival
  Channel& channel(int src, int dst) { return channels_[size_t(src) * global_ranks_.size() + size_t(dst)]; }
  std::string remote_error(const std::string& what) const;
  std::string last_call_of(int rank) const;  // with mu_ held

  std::shared_ptr<ThreadWorld> world_;
  std::vector<int> global_ranks_;
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::shared_ptr<Slot>> slots_;  // calls in progress (and abandoned ones)
  std::vector<uint64_t> last_seq_;                   // per rank: the last call it arrived at (0: none yet)
  std::vector<CallSignature> last_call_;             // per rank: what that call was
  std::vector<Channel> channels_;
};

// The byte ranges [lo, hi) an operation reads or writes on its own rank (for ordering against pending receives).
struct ByteRange {
  const std::byte* lo;
  const std::byte* hi;
  bool overlaps(const ByteRange& o) const { return lo < o.hi && o.lo < hi; }
};
std::vector<ByteRange> op_ranges(const CollectiveArgs& args, int group_size);

}  // namespace dt::thread_detail
