// UcxOp: one collective call as a small dependency graph of tasks (send, recv, reduce, copy, divide) executed by the
// UCX engine. Algorithms (one file each, see algorithms.h) only add tasks and dependencies; the op posts a
// message as soon as its dependencies are met, runs local arithmetic when its inputs arrived, checks every
// received length (a mismatched call is an error, never garbage) and completes its Work when every task is done.
//
// Note [Op threading]
// Everything here runs with the worker's lock held: building (on the caller's thread), posting, UCX callbacks
// (inside ucp_worker_progress) and advancing (on whichever thread drives progress: the waiting caller or the
// progress thread). Tasks live in one vector that never grows after start(), so UCX callbacks can point at them.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/work.h"
#include "core/error.h"
#include "kernels/strided_view.h"

namespace dt::ucx {

class UcxWorker;
struct CommState;
class UcxOp;

// kPack / kUnpack / kCopyView move strided views (the op's copies of the call's views, add_view) through
// kernels::pack/unpack/copy; kTransferView copies between this rank's view and a peer's in the peer's memory
// (views.h, Note [Direct view reads]).
// kRun runs a function of the algorithm (it may throw dt::Error, which fails the call).
enum class TaskType : uint8_t { kSend, kRecv, kReduce, kCopy, kDivide, kPack, kUnpack, kCopyView, kTransferView, kRun };

struct Task {
  TaskType type = TaskType::kCopy;
  enum class State : uint8_t { kWaiting, kPosted, kDone } state = State::kWaiting;
  bool completed_by_ucx = false;  // the UCX callback ran (status/length valid)
  bool deferred = false;          // runs after what the network has ready (Note [Deferred tasks] in op.cc)
  int peer = -1;                  // group rank (send / recv)
  uint32_t slot = 0;              // tag slot (send / recv)
  void* dst = nullptr;
  const void* src = nullptr;
  const void* src2 = nullptr;
  // bytes for send / recv / copy, elements for reduce / divide, the function's index for run, 1 when this rank sends
  // for transfer_view
  int64_t n = 0;
  int32_t view = -1, view2 = -1;  // view tasks: indices into the op's views (destination, source)
  int32_t deps = 0;
  int32_t succ_begin = 0, succ_end = 0;
  void* request = nullptr;  // UCX request while posted
  ucs_status_t status = UCS_OK;
  size_t length = 0;  // received bytes
  UcxOp* op = nullptr;
};

using Clock = std::chrono::steady_clock;

// The Work of a UCX call. Its description is built only when asked for (an error, a timeout, a log line): building
// it for every call cost more than a whole small collective. wait() drives progress on the caller's thread
// (Note [UCX progress] in worker.h).
class UcxWork final : public Work {
 public:
  UcxWork(std::weak_ptr<UcxWorker> worker, const CollectiveArgs& args, std::string comm_name, Duration default_timeout);

  void wait(Duration timeout = kDefaultTimeout) override;
  bool is_completed() override;
  std::exception_ptr error() override;
  std::string describe() const override;
  const char* algorithm() const override { return algorithm_; }

  // Engine side (worker lock held): completes the work; the first call counts.
  void mark_done(std::exception_ptr error);
  void set_op(std::weak_ptr<UcxOp> op) { op_ = std::move(op); }
  void set_algorithm(const char* name) { algorithm_ = name; }  // a name from the algorithm table (static storage)
  bool done() const { return done_.load(std::memory_order_acquire); }

  // State of the caller's progress loop (see UcxWorker::drive): when the call last moved.
  Clock::time_point last_moved{};

 private:
  std::weak_ptr<UcxWorker> worker_;
  std::weak_ptr<UcxOp> op_;
  CollectiveArgs args_;  // without the all_to_allv vectors: only what describe() prints
  std::string comm_name_;
  Duration default_timeout_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  const char* algorithm_ = "";
};

// The scalar fields of a call (kind, buffers, count, dtype, device, op, root, peer, stream), without its vectors:
// what describe() prints and what an op needs once built.
CollectiveArgs scalars_of(const CollectiveArgs& a);

class UcxOp : public std::enable_shared_from_this<UcxOp> {
 public:
  // `call` must outlive the building (built()); the op keeps a copy of its scalar fields only.
  UcxOp(UcxWorker* worker, std::shared_ptr<CommState> comm, const CollectiveArgs& call, uint32_t seq,
        Work::Duration timeout, Clock::time_point now);
  ~UcxOp();

  // ---- building (before start) ----
  int send(int peer, uint32_t slot, const void* buf, int64_t bytes);
  int recv(int peer, uint32_t slot, void* buf, int64_t bytes);
  int reduce(void* out, const void* a, const void* b, int64_t count);  // out = op(a, b), args().op and dtype
  int copy(void* dst, const void* src, int64_t bytes);
  int divide(void* x, int64_t count);  // x /= group size (ReduceOp::kAvg)
  // Strided views: registered once, referred to by index.
  int add_view(const kernels::StridedView& v);
  const kernels::StridedView& view(int index) const { return views_[size_t(index)]; }
  int pack(void* dst, int src_view);          // dst = the view's elements in row-major order
  int unpack(int dst_view, const void* src);  // the view's elements = src
  int copy_view(int dst_view, int src_view);  // same element count; row-major correspondence
  // The direct move between view `mine` and `peer`'s view described by the ViewDesc at `desc` (received by an earlier
  // task); `i_send`: whether `mine` is the source (views.h).
  int transfer_view(int peer, const void* desc, int mine, bool i_send);
  // Runs `fn` (worker lock held) once the task's dependencies are done.
  int run(std::function<void()> fn);
  // Once ready, `task` waits until nothing that the network has delivered can run (Note [Deferred tasks] in
  // op.cc): local work that fills the time while messages travel.
  void defer(int task);
  // `then` starts only once `before` is done. Task ids are the values returned above; -1 is ignored.
  void after(int before, int then);
  // Scratch memory owned by the op (pooled), released when it finishes.
  void* scratch(int64_t bytes);
  // Runs on success before the Work completes (device staging copies results back).
  void on_success(std::function<void()> fn) { on_success_ = std::move(fn); }

  // The call: whole while the op is built, its scalar fields (scalars_of) after built().
  const CollectiveArgs& args() const { return call_ != nullptr ? *call_ : args_; }
  // Building is over: the caller's arguments may go (the vectors of an all_to_allv or a views call are not copied).
  void built() { call_ = nullptr; }
  int rank() const;
  int size() const;
  size_t elem_size() const { return args_.elem_size(); }
  // "all_reduce(count=1024, f32, sum) on ucx[rank 1/4]" (built on demand).
  std::string description() const;
  const std::shared_ptr<UcxWork>& work() const { return work_; }
  void set_work(std::shared_ptr<UcxWork> work) { work_ = std::move(work); }
  const std::shared_ptr<CommState>& comm() const { return comm_; }
  const UcxWorker& worker() const { return *worker_; }
  size_t num_tasks() const { return tasks_.size(); }

  // ---- engine (worker lock held) ----
  // Freezes the graph and posts the messages that are ready. Local arithmetic waits for advance() so that the
  // caller returns at once.
  void start();
  bool started() const { return started_; }
  // Handles UCX completions and runs ready tasks. Returns true when anything moved.
  bool advance(Clock::time_point now);
  bool finished() const { return finished_; }
  bool has_outstanding_requests() const { return outstanding_ > 0; }
  // Fails the op and every pending call of its communicator with `code` and `reason` (the description is
  // prepended); the other members hear of it through the abort channel. Idempotent.
  void fail(ErrorCode code, const std::string& reason);
  // Fails this op only: cancels its receives and completes its Work with `error`. Idempotent.
  void abort(std::exception_ptr error);
  // Called from UCX callbacks.
  void request_done(Task* t);

  // The call's sequence number and digest in its messages' tags (tag.h).
  uint32_t seq() const { return seq_; }
  uint32_t signature() const { return sig_; }
  Clock::time_point deadline() const { return deadline_; }
  Work::Duration timeout() const { return timeout_; }
  Clock::time_point last_progress() const { return last_progress_; }
  // What the op still waits for ("recv from rank 1 (global 1), 2 sends to rank 3 unfinished"), for timeouts.
  std::string pending_summary() const;
  // Group ranks this op still waits on.
  std::vector<int> pending_peers() const;
  bool dirty = false;  // queued in the worker's dirty list

 private:
  int add(Task t);
  void post(Task& t);
  void complete(Task& t);
  void poll_network();
  // Polls the network once when tasks are parked; makes them ready when nothing new came. Whether any were parked.
  bool release_parked();
  void finish();
  std::string peer_name(int group_rank) const;

  // The op's lists, reused by later ops with their capacity (Note [Recycled op lists] in op.cc).
  struct Lists {
    std::vector<Task> tasks;
    std::vector<std::pair<int, int>> edges;
    std::vector<int32_t> succ;
    std::vector<int> ready, parked;
    std::vector<Task*> completed, handling;
    std::vector<std::pair<void*, size_t>> scratch;
    std::vector<kernels::StridedView> views;
    std::vector<std::function<void()>> runs;
    void clear();
  };
  struct Recycle {
    void operator()(Lists* l) const;
  };
  static Lists* take_lists();
  static std::vector<Lists*>& spare_lists();  // g_lists_mu (op.cc) held

  UcxWorker* worker_;  // outlives its ops (its destructor aborts them)
  std::shared_ptr<CommState> comm_;
  CollectiveArgs args_;                   // scalars_of(the call)
  const CollectiveArgs* call_ = nullptr;  // the whole call, while building
  uint32_t seq_;
  uint32_t sig_;  // tag_signature(the call): Note [Mismatched calls] in tag.h
  std::shared_ptr<UcxWork> work_;
  std::unique_ptr<Lists, Recycle> lists_;
  std::vector<Task>& tasks_ = lists_->tasks;
  std::vector<std::pair<int, int>>& edges_ = lists_->edges;
  std::vector<int32_t>& succ_ = lists_->succ;
  std::vector<int>& ready_ = lists_->ready;  // FIFO from ready_head_
  size_t ready_head_ = 0;
  std::vector<int>& parked_ = lists_->parked;          // deferred tasks that became ready (Note [Deferred tasks])
  std::vector<Task*>& completed_ = lists_->completed;  // UCX completions not yet handled
  std::vector<Task*>& handling_ = lists_->handling;    // the batch being handled (kept to reuse its capacity)
  std::vector<std::pair<void*, size_t>>& scratch_ = lists_->scratch;
  std::vector<kernels::StridedView>& views_ = lists_->views;
  std::vector<std::function<void()>>& runs_ = lists_->runs;
  std::function<void()> on_success_;
  int done_count_ = 0;
  int outstanding_ = 0;  // UCX requests posted and not yet completed
  bool started_ = false;
  bool finished_ = false;
  Work::Duration timeout_;
  Clock::time_point deadline_;
  Clock::time_point last_progress_;
};

}  // namespace dt::ucx
