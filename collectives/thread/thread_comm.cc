#include "collectives/thread/thread_comm.h"

#include <cstring>
#include <numeric>
#include <utility>

#include "collectives/debug_communicator.h"
#include "collectives/segment_walk.h"
#include "collectives/thread/thread_group.h"
#include "core/error.h"
#include "core/logging.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"

namespace dt {

using thread_detail::ByteRange;
using thread_detail::Clock;
using thread_detail::PendingRecv;
using thread_detail::RankOp;
using thread_detail::ThreadGroup;
using thread_detail::ThreadWorld;

namespace {

std::byte* at(void* p, size_t offset) { return static_cast<std::byte*>(p) + offset; }
const std::byte* at(const void* p, size_t offset) { return static_cast<const std::byte*>(p) + offset; }

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
}

// Whether any rank's send and recv buffers overlap: all_to_all(v) then stages through scratch memory (the decision
// is the same on every rank since it reads every rank's arguments).
bool any_overlap(const std::vector<const RankOp*>& ops, int n) {
  for (const RankOp* op : ops) {
    CollectiveArgs s = op->args, r = op->args;
    s.recv = nullptr;
    r.send = nullptr;
    auto sr = thread_detail::op_ranges(s, n);
    auto rr = thread_detail::op_ranges(r, n);
    for (auto& a : sr)
      for (auto& b : rr)
        if (a.overlaps(b)) return true;
  }
  return false;
}

std::string exception_message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank, ThreadCommOptions options)
    : group_(std::move(group)),
      rank_(rank),
      options_(options),
      running_seq_(std::make_shared<std::atomic<uint64_t>>(0)) {
  DT_CHECK_ARG(group_ != nullptr, "ThreadCommunicator: null group");
  DT_CHECK_ARG(rank_ >= 0 && rank_ < group_->size(), "ThreadCommunicator: rank ", rank_, " is not in a group of ",
               group_->size());
  global_rank_ = group_->global_ranks()[size_t(rank_)];
  DT_CHECK_ARG(options_.timeout.count() > 0, "ThreadCommunicator: timeout must be positive, got ",
               options_.timeout.count(), " ms");
  worker_ = std::thread([this] { worker_loop(); });
}

ThreadCommunicator::~ThreadCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();  // drains the queue: every queued call ends (each bounded by its deadline)
  group_->cancel_recvs(
      rank_, str_cat("the communicator of ", group_->rank_label(rank_), " was destroyed before a matching send"));
  // A receive matched just now may still be written by the sender: let it finish before the buffer can go away.
  for (auto& r : pending_recvs_) {
    try {
      r->work->wait(options_.timeout);
    } catch (...) {
    }
  }
}

int ThreadCommunicator::size() const { return group_->size(); }

std::vector<int> ThreadCommunicator::global_ranks() const { return group_->global_ranks(); }

const std::string& ThreadCommunicator::group_name() const { return group_->name(); }

void ThreadCommunicator::abort(const std::string& reason) { group_->world()->abort(reason); }

bool ThreadCommunicator::aborted() const { return group_->world()->aborted(); }

void ThreadCommunicator::finished() { group_->world()->mark_exited(global_rank_); }

std::string ThreadCommunicator::label() const {
  std::string s = str_cat("thread[rank ", rank_, "/", size(), "]");
  if (group_->name() != "world") s += str_cat(" of group '", group_->name(), "'");
  return s;
}

WorkPtr ThreadCommunicator::enqueue(const CollectiveArgs& args) {
  auto op = std::make_shared<RankOp>();
  op->args = args;
  op->recorder = flight_recorder().get();
  std::string d = str_cat(args.describe(), " on ", label());
  return push(std::move(op), std::move(d));
}

std::shared_ptr<Communicator> ThreadCommunicator::split(int color, int key) {
  auto op = std::make_shared<RankOp>();
  op->is_split = true;
  op->color = color;
  op->key = key;
  op->recorder = flight_recorder().get();
  push(op, str_cat("split(color=", color, ", key=", key, ") on ", label()))->wait();
  if (op->new_group == nullptr) return nullptr;
  return maybe_wrap_debug(std::make_shared<ThreadCommunicator>(op->new_group, op->new_rank, options_));
}

WorkPtr ThreadCommunicator::push(std::shared_ptr<RankOp> op, std::string description) {
  // The caller's deadline is a little later than the worker's, so that a timeout is normally reported by the worker
  // (which names the missing ranks and aborts the world).
  const Work::Duration caller_timeout = options_.timeout + options_.timeout / 10 + Work::Duration(200);
  auto work = std::make_shared<AsyncWork>(std::move(description), caller_timeout);
  const bool p2p = !op->is_split && (op->args.kind == CollectiveKind::kSend || op->args.kind == CollectiveKind::kRecv);
  bool here;  // Note [A group of one runs in the caller]
  {
    std::lock_guard<std::mutex> lock(mu_);
    DT_CHECK_ARG(!stop_, work->describe(), ": the communicator is being destroyed");
    if (!p2p) op->seq = ++next_seq_;
    here = !p2p && !op->is_split && size() == 1 && queue_.empty() && !busy_ && pending_recvs_.empty();
    if (here)
      busy_ = true;
    else
      queue_.push_back(Item{op, work});
    group_->world()->op_queued(global_rank_);
  }
  if (!here) cv_.notify_one();
  std::weak_ptr<ThreadGroup> weak_group = group_;
  work->set_timeout_explainer([weak_group, running = running_seq_, seq = op->seq, p2p, rank = rank_,
                               peer = op->args.peer, is_send = op->args.kind == CollectiveKind::kSend,
                               recorder = flight_recorder()]() {
    auto g = weak_group.lock();
    if (!g) return std::string();
    const std::string recent = "; " + recorder->describe_recent();
    if (g->world()->aborted()) return "the group was aborted: " + g->world()->reason() + recent;
    if (p2p) return g->describe_p2p_wait(is_send ? rank : peer, is_send ? peer : rank, is_send) + recent;
    uint64_t cur = running->load();
    if (cur != 0 && cur < seq)
      return str_cat("queued behind call #", cur, " of this rank, ", g->describe_missing(cur), recent);
    return g->describe_missing(seq) + recent;
  });
  if (here) {
    run(*op, work);
    op.reset();
    group_->world()->op_done(global_rank_);
    bool queued;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      queued = !queue_.empty();
    }
    if (queued) cv_.notify_one();  // calls queued meanwhile (from other threads of this rank)
  }
  return work;
}

void ThreadCommunicator::worker_loop() {
  set_thread_rank(global_rank_);
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ || !queue_.empty()) && !busy_; });
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    run(*item.op, item.work);
    item = Item{};  // release the call's buffers before reporting the rank idle
    group_->world()->op_done(global_rank_);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
}

void ThreadCommunicator::run(RankOp& op, const std::shared_ptr<AsyncWork>& work) {
  const auto deadline = Clock::now() + options_.timeout;
  try {
    if (op.seq != 0) running_seq_->store(op.seq);
    if (!op.is_split && !pending_recvs_.empty()) wait_pending_recvs(op.args, deadline);
    if (op.is_split || op.seq != 0) {
      run_collective(op, deadline);
    } else if (op.args.kind == CollectiveKind::kSend) {
      // Completed by the receiver's match (or at once when the receive was already posted).
      group_->post_send(rank_, op.args.peer, op.args.send, op.args.count, op.args.dtype, work);
      return;
    } else {
      auto r = std::make_shared<PendingRecv>();
      r->buf = op.args.recv;
      r->count = op.args.count;
      r->dtype = op.args.dtype;
      r->src = op.args.peer;
      r->dst = rank_;
      r->work = work;
      pending_recvs_.push_back(r);
      group_->post_recv(r);
      return;
    }
    work->mark_done();
  } catch (...) {
    work->mark_done(std::current_exception());
  }
}

void ThreadCommunicator::wait_pending_recvs(const CollectiveArgs& args, Clock::time_point deadline) {
  std::erase_if(pending_recvs_, [](const std::shared_ptr<PendingRecv>& r) { return r->work->is_completed(); });
  if (pending_recvs_.empty()) return;
  const auto ranges = thread_detail::op_ranges(args, size());
  for (auto& r : pending_recvs_) {
    ByteRange rr{static_cast<const std::byte*>(r->buf),
                 static_cast<const std::byte*>(r->buf) + size_t(r->count) * dtype_size(r->dtype)};
    bool overlaps = false;
    for (auto& x : ranges) overlaps = overlaps || x.overlaps(rr);
    if (!overlaps) continue;
    // Stream order: this call uses memory an earlier receive of this rank still has to fill.
    auto left = std::chrono::duration_cast<Work::Duration>(deadline - Clock::now());
    try {
      r->work->wait(std::max(left, Work::Duration(0)));
    } catch (const TimeoutError& e) {
      std::string msg = str_cat(args.describe(), " on ", label(), " waited for an earlier ", e.what());
      group_->world()->abort(msg);
      DT_THROW(TimeoutError, msg);
    } catch (...) {
      // The receive's own Work reports its failure.
    }
  }
}

void* ThreadCommunicator::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    size_t n = std::max(bytes, scratch_bytes_ * 2);
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(n);
    scratch_bytes_ = n;
  }
  return scratch_.get();
}

void ThreadCommunicator::copy_views(const CollectiveArgs& a, const std::vector<const RankOp*>& peers) {
  // Each peer's view for this rank into its recv view (outputs overlap no input: checked above the backend, and
  // every rank only writes its own outputs).
  const Device cpu = Device::cpu();
  for (int j = 0; j < size(); ++j) {
    const CollectiveArgs& pj = peers[size_t(j)]->args;
    const kernels::StridedView& from = pj.send_views[a.kind == CollectiveKind::kAllGather ? 0 : size_t(rank_)];
    const kernels::StridedView& to = a.recv_views[size_t(j)];
    if (to.numel() == 0) continue;
    if (std::equal(from.sizes().begin(), from.sizes().end(), to.sizes().begin(), to.sizes().end())) {
      kernels::copy(to, from, cpu);
    } else {  // same count, different shapes: through row-major order
      void* tmp = scratch(to.nbytes());
      kernels::pack(from, tmp, cpu);
      kernels::unpack(tmp, to, cpu);
    }
  }
}

void ThreadCommunicator::copy_segments_of(const CollectiveArgs& a, const std::vector<const RankOp*>& peers) {
  // Only this rank's outputs are written: its recv segments (all_gather), its recv buffer (reduce_scatter).
  const int n = size();
  if (a.kind == CollectiveKind::kAllGather) {
    for (int j = 0; j < n; ++j) {
      const std::vector<Segment>& from = peers[size_t(j)]->args.send_segments[0];
      const std::vector<Segment>& to = a.recv_segments[size_t(j)];
      copy_segments(from.data(), int64_t(from.size()), to.data(), int64_t(to.size()));
    }
    return;
  }
  // reduce_scatter: every rank's block of this rank, packed, combined in rank order.
  const int64_t es = int64_t(a.elem_size()), block = a.count * es;
  if (block == 0) return;
  void* tmp = scratch(size_t(block));
  for (int j = 0; j < n; ++j) {
    const std::vector<Segment>& from = peers[size_t(j)]->args.send_segments[size_t(rank_)];
    const Segment whole{0, block, j == 0 ? a.recv : tmp};
    copy_segments(from.data(), int64_t(from.size()), &whole, 1);
    if (j > 0) kernels::reduce(a.recv, a.recv, tmp, a.count, a.dtype, a.op, Device::cpu());
  }
  if (a.op == ReduceOp::kAvg) kernels::divide_by(a.recv, a.count, a.dtype, n, Device::cpu());
}

void ThreadCommunicator::run_collective(RankOp& op, Clock::time_point deadline) {
  const auto slot = group_->arrive(rank_, &op, deadline, options_.timeout);
  const auto& peers = slot->ops;
  // From here on every rank reaches the final sync without blocking (Note [Thread rendezvous]).
  std::exception_ptr error;
  try {
    if (!op.is_split && op.args.has_views()) {
      copy_views(op.args, peers);
    } else if (!op.is_split && op.args.has_segments()) {
      copy_segments_of(op.args, peers);
    } else if (!op.is_split) {
      const CollectiveArgs& a = op.args;
      const int n = size();
      const int r = rank_;
      const size_t es = a.elem_size();
      const Device cpu = Device::cpu();
      auto src = [&](int j) { return peers[size_t(j)]->args.send; };
      auto dst = [&](int j) { return peers[size_t(j)]->args.recv; };
      switch (a.kind) {
        case CollectiveKind::kBarrier:
        case CollectiveKind::kSend:
        case CollectiveKind::kRecv:
          break;
        case CollectiveKind::kBroadcast: {
          if (r != a.root) copy_bytes(a.recv, dst(a.root), size_t(a.count) * es);
          break;
        }
        case CollectiveKind::kAllGather: {
          const size_t bytes = size_t(a.count) * es;
          for (int j = 0; j < n; ++j) copy_bytes(at(a.recv, size_t(j) * bytes), src(j), bytes);
          break;
        }
        case CollectiveKind::kAllReduce: {
          if (n == 1) {
            copy_bytes(a.recv, a.send, size_t(a.count) * es);
            break;
          }
          // Rank r reduces chunk r of every input and writes it into every output: the work is spread over the
          // ranks and no two ranks touch the same bytes.
          const int64_t begin = a.count * r / n, end = a.count * (r + 1) / n, len = end - begin;
          if (len == 0) break;
          const size_t off = size_t(begin) * es, bytes = size_t(len) * es;
          void* acc = a.in_place() ? scratch(bytes) : at(a.recv, off);
          kernels::reduce(acc, at(src(0), off), at(src(1), off), len, a.dtype, a.op, cpu);
          for (int j = 2; j < n; ++j) kernels::reduce(acc, acc, at(src(j), off), len, a.dtype, a.op, cpu);
          if (a.op == ReduceOp::kAvg) kernels::divide_by(acc, len, a.dtype, n, cpu);
          for (int j = 0; j < n; ++j) copy_bytes(at(dst(j), off), acc, bytes);
          break;
        }
        case CollectiveKind::kReduceScatter: {
          const size_t bytes = size_t(a.count) * es, off = size_t(r) * bytes;
          if (n == 1) {
            copy_bytes(a.recv, a.send, bytes);
            break;
          }
          if (bytes == 0) break;
          void* acc = a.recv == at(a.send, off) ? scratch(bytes) : a.recv;
          kernels::reduce(acc, at(src(0), off), at(src(1), off), a.count, a.dtype, a.op, cpu);
          for (int j = 2; j < n; ++j) kernels::reduce(acc, acc, at(src(j), off), a.count, a.dtype, a.op, cpu);
          if (a.op == ReduceOp::kAvg) kernels::divide_by(acc, a.count, a.dtype, n, cpu);
          copy_bytes(a.recv, acc, bytes);
          break;
        }
        case CollectiveKind::kAllToAll: {
          const size_t bytes = size_t(a.count) * es;
          if (!any_overlap(peers, n)) {
            for (int j = 0; j < n; ++j) copy_bytes(at(a.recv, size_t(j) * bytes), at(src(j), size_t(r) * bytes), bytes);
            break;
          }
          void* tmp = scratch(std::max<size_t>(bytes * size_t(n), 1));
          for (int j = 0; j < n; ++j) copy_bytes(at(tmp, size_t(j) * bytes), at(src(j), size_t(r) * bytes), bytes);
          group_->sync(rank_, *slot, 1, deadline, options_.timeout);  // every rank read its inputs
          copy_bytes(a.recv, tmp, bytes * size_t(n));
          break;
        }
        case CollectiveKind::kAllToAllV: {
          // Block j of my output comes from rank j's block r (counts were checked to agree at the rendezvous).
          auto from = [&](int j) { return at(src(j), size_t(peers[size_t(j)]->args.send_displs[size_t(r)]) * es); };
          if (!any_overlap(peers, n)) {
            for (int j = 0; j < n; ++j)
              copy_bytes(at(a.recv, size_t(a.recv_displs[size_t(j)]) * es), from(j),
                         size_t(a.recv_counts[size_t(j)]) * es);
            break;
          }
          const int64_t total = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), int64_t(0));
          void* tmp = scratch(std::max<size_t>(size_t(total) * es, 1));
          size_t packed = 0;
          for (int j = 0; j < n; ++j) {
            copy_bytes(at(tmp, packed), from(j), size_t(a.recv_counts[size_t(j)]) * es);
            packed += size_t(a.recv_counts[size_t(j)]) * es;
          }
          group_->sync(rank_, *slot, 1, deadline, options_.timeout);
          packed = 0;
          for (int j = 0; j < n; ++j) {
            copy_bytes(at(a.recv, size_t(a.recv_displs[size_t(j)]) * es), at(tmp, packed),
                       size_t(a.recv_counts[size_t(j)]) * es);
            packed += size_t(a.recv_counts[size_t(j)]) * es;
          }
          break;
        }
      }
    }
  } catch (...) {
    error = std::current_exception();
  }
  group_->sync(rank_, *slot, 2, deadline, options_.timeout);
  if (error) std::rethrow_exception(error);
}

// ---- world creation and the thread launcher ----

std::vector<CommunicatorPtr> make_thread_world(int size, ThreadCommOptions options) {
  DT_CHECK_ARG(size >= 1, "make_thread_world: the world size must be at least 1, got ", size);
  auto world = std::make_shared<ThreadWorld>(size);
  std::vector<int> ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = std::make_shared<ThreadGroup>(world, std::move(ranks), "world");
  world->register_group(group);
  std::vector<CommunicatorPtr> comms;
  comms.reserve(size_t(size));
  for (int r = 0; r < size; ++r)
    comms.push_back(maybe_wrap_debug(std::make_shared<ThreadCommunicator>(group, r, options)));
  return comms;
}

void run_threads(int world_size, const std::function<void(CommunicatorPtr world)>& fn, ThreadCommOptions options) {
  DT_CHECK_ARG(bool(fn), "run_threads: no function given");
  auto comms = make_thread_world(world_size, options);
  std::mutex mu;
  std::exception_ptr first, first_root_cause;
  std::vector<std::thread> threads;
  threads.reserve(size_t(world_size));
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      set_thread_rank(r);
      set_default_world(comms[size_t(r)], /*this_thread_only=*/true);
      Communicator* c = comms[size_t(r)].get();
      if (auto* d = dynamic_cast<DebugCommunicator*>(c)) c = d->inner().get();
      auto& mine = static_cast<ThreadCommunicator&>(*c);
      try {
        fn(comms[size_t(r)]);
        mine.finished();
      } catch (...) {
        auto e = std::current_exception();
        bool remote = false;
        try {
          std::rethrow_exception(e);
        } catch (const RemoteError&) {
          remote = true;
        } catch (...) {
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = e;
          if (!remote && !first_root_cause) first_root_cause = e;
        }
        mine.abort(str_cat("rank ", r, " failed: ", exception_message(e)));
        mine.finished();
      }
      set_default_world(nullptr, /*this_thread_only=*/true);
      set_thread_rank(-1);
    });
  }
  for (auto& t : threads) t.join();
  comms.clear();
  // A rank's own failure explains the RemoteErrors it caused on the others: prefer it.
  if (first_root_cause) std::rethrow_exception(first_root_cause);
  if (first) std::rethrow_exception(first);
}

}  // namespace dt
