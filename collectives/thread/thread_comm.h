// The in-process backend: the ranks of a group are threads of one process sharing memory. It is the fast backend
// for unit tests of every layer above (host buffers only).
//
//   dt::run_threads(4, [](dt::CommunicatorPtr world) {
//     auto row = world->split(world->rank() / 2, world->rank());
//     world->all_reduce(buf, buf, n, dt::DType::f32, dt::ReduceOp::kSum, dt::Device::cpu())->wait();
//   });
//
// Semantics (beyond communicator.h):
// - Each communicator has a worker thread that runs its calls in call order, so calls return at once and progress
//   without the caller. Communicators of one rank (a world and its splits) progress independently.
//   A group of one runs its collectives in the caller instead (Note [A group of one runs in the caller]).
// - Reductions fold the ranks' inputs in rank order (((x0 op x1) op x2) ...), each step rounded to the dtype
//   (f16/bf16 computed in float, as kernels::reduce), then avg divides once by the group size. Results are
//   therefore bit-identical on every rank and from run to run.
// - In place means exactly the layouts of communicator.h; partially overlapping buffers are undefined.
//   all_to_all(v) also works with send == recv.
// - Mismatched calls (different kinds, counts, dtypes, ops or roots at the same call number of a group, or
//   all_to_allv counts that disagree between sender and receiver) fail on every rank with dt::InvalidArgument
//   naming the ranks and what each called. They are always checked: every rank's arguments are visible here.
// - send/recv are matched in call order per (sender, receiver). A send never blocks its worker (the message is
//   copied into the receive when it is posted, else buffered); its Work completes when the receive matched it. A
//   receive does not block its worker either; a later call of the same rank whose buffers overlap a pending
//   receive's buffer waits for it first (stream order), so forwarding a received buffer works.
// - Deadlines: a worker waiting for peers gives up after the communicator's timeout with dt::TimeoutError naming
//   the ranks that never arrived (and their last call), and aborts the world. Work::wait(t) with a shorter t
//   throws TimeoutError naming the missing ranks without aborting anything.
// - abort() (and a rank of run_threads() that throws) fails every pending and future call of every group of the
//   world with dt::RemoteError carrying the reason (naming the failed rank).
// - A rank of run_threads() whose function returned (a failed ASSERT, a forgotten call) makes the peers that wait
//   for it in a call it never made fail at once with dt::RemoteError naming it, rather than at the deadline.
// - Destroying a communicator waits for its queued calls (each bounded by its deadline).
//
// Note [A group of one runs in the caller]
// A group of one (the world of a process started without a launcher) runs a collective in the calling thread when
// nothing is queued or running before it (busy_): nothing waits for a peer, and the hand-over to the worker (two
// thread switches, about 50 us a call on a virtual machine) was most of the call: dtensor.torch's tiny blocks on such
// a world went from 104 to 22 us of overhead a block. Splits still go through the worker (a group of one has no
// point-to-point calls: a rank cannot send to itself).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"

namespace dt {

namespace thread_detail {
class ThreadGroup;
struct PendingRecv;
struct RankOp;
}  // namespace thread_detail

struct ThreadCommOptions {
  // Deadline of every wait for peers (and the default of Work::wait()).
  Work::Duration timeout = default_timeout();
  // Whether the *_views calls are accepted (tests turn it off to exercise the callers' staging paths).
  bool strided_views = true;
  // Whether the *_segments calls are accepted (likewise).
  bool segments = true;
};

class ThreadCommunicator final : public Communicator {
 public:
  // Use make_thread_world() or split().
  ThreadCommunicator(std::shared_ptr<thread_detail::ThreadGroup> group, int rank, ThreadCommOptions options);
  ~ThreadCommunicator() override;
  ThreadCommunicator(const ThreadCommunicator&) = delete;
  ThreadCommunicator& operator=(const ThreadCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override;
  std::string backend_name() const override { return "thread"; }
  bool supports(const Device& device) const override { return device.is_cpu(); }
  bool supports_views(const Device& device) const override { return options_.strided_views && device.is_cpu(); }
  bool supports_segments(const Device& device) const override { return options_.segments && device.is_cpu(); }
  std::vector<int> global_ranks() const override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  Work::Duration timeout() const override { return options_.timeout; }

  // The group's name in messages: "world", "world/1" (color 1 of a split of the world), ...
  const std::string& group_name() const;
  // Fails every pending and future call of every group of this world (all ranks) with dt::RemoteError naming
  // `reason`. Idempotent; the first reason wins.
  void abort(const std::string& reason);
  bool aborted() const;
  // This rank's thread is done with the world (run_threads calls it when the rank's function returned): once its
  // queued calls ran, peers waiting for it in a call it never made fail at once with dt::RemoteError naming it.
  void finished();

 protected:
  WorkPtr enqueue(const CollectiveArgs& args) override;

 private:
  struct Item {
    std::shared_ptr<thread_detail::RankOp> op;
    std::shared_ptr<AsyncWork> work;
  };
  WorkPtr push(std::shared_ptr<thread_detail::RankOp> op, std::string description);
  void worker_loop();
  void run(thread_detail::RankOp& op, const std::shared_ptr<AsyncWork>& work);
  void run_collective(thread_detail::RankOp& op, std::chrono::steady_clock::time_point deadline);
  void wait_pending_recvs(const CollectiveArgs& args, std::chrono::steady_clock::time_point deadline);
  void* scratch(size_t bytes);
  // The strided-views calls (Note [Strided views]): every peer has arrived and its arguments are readable.
  void copy_views(const CollectiveArgs& a, const std::vector<const thread_detail::RankOp*>& peers);
  void copy_segments_of(const CollectiveArgs& a, const std::vector<const thread_detail::RankOp*>& peers);
  std::string label() const;

  std::shared_ptr<thread_detail::ThreadGroup> group_;
  int rank_;
  int global_rank_ = 0;
  ThreadCommOptions options_;
  uint64_t next_seq_ = 0;  // group call numbers handed out by enqueue (caller side)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  bool busy_ = false;  // a call is running (on the worker, or in the caller: Note [A group of one runs in the caller])
  // The group call the worker is running (read by timeout messages, which may outlive this communicator).
  std::shared_ptr<std::atomic<uint64_t>> running_seq_;

  // Worker-only state.
  std::vector<std::shared_ptr<thread_detail::PendingRecv>> pending_recvs_;
  std::unique_ptr<std::byte[]> scratch_;
  size_t scratch_bytes_ = 0;

  std::thread worker_;
};

// Creates the communicators of an in-process world of `size` ranks: element r is rank r's (use it from rank r's
// thread). Each has a worker thread.
std::vector<CommunicatorPtr> make_thread_world(int size, ThreadCommOptions options = {});

// Runs fn(world communicator of rank r) on `world_size` threads (each with dt::set_thread_rank(r) and that
// communicator as its thread's default_world()) and waits for all.
// When a rank throws, the world is aborted so that the others fail fast (dt::RemoteError naming that rank) instead
// of hanging; after every thread ended, the first exception is rethrown (the first that is not a dt::RemoteError
// when there is one: the root cause rather than its echoes on the other ranks).
void run_threads(int world_size, const std::function<void(CommunicatorPtr world)>& fn, ThreadCommOptions options = {});

}  // namespace dt
