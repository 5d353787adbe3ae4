#include "collectives/ucx/op.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "collectives/ucx/tag.h"
#include "collectives/ucx/views.h"
#include "collectives/ucx/worker.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/logging.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"

namespace dt::ucx {

namespace {

void send_cb(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* t = static_cast<Task*>(user_data);
  t->status = status;
  t->op->request_done(t);
}

void recv_cb(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  auto* t = static_cast<Task*>(user_data);
  t->status = status;
  t->length = info != nullptr ? info->length : 0;
  t->op->request_done(t);
}

}  // namespace

CollectiveArgs scalars_of(const CollectiveArgs& a) {
  CollectiveArgs s;
  s.kind = a.kind;
  s.send = a.send;
  s.recv = a.recv;
  s.count = a.count;
  s.dtype = a.dtype;
  s.device = a.device;
  s.op = a.op;
  s.root = a.root;
  s.peer = a.peer;
  s.stream = a.stream;
  // One empty marker each, not the lists (those are the call's, read while building): describe() names views and
  // segments as the call's own description does, also in the errors of a call that fails later.
  if (a.has_views()) s.recv_views.resize(1);
  if (a.has_segments()) s.send_segments.resize(1);
  return s;
}

// ---- UcxWork ----

UcxWork::UcxWork(std::weak_ptr<UcxWorker> worker, const CollectiveArgs& args, std::string comm_name,
                 Duration default_timeout)
    : worker_(std::move(worker)),
      args_(scalars_of(args)),
      comm_name_(std::move(comm_name)),
      default_timeout_(default_timeout) {}

std::string UcxWork::describe() const { return args_.describe() + " on " + comm_name_; }

void UcxWork::mark_done(std::exception_ptr error) {
  if (done_.load(std::memory_order_relaxed)) return;
  const bool ok = error == nullptr;
  error_ = std::move(error);
  done_.store(true, std::memory_order_release);
  note_finished(ok);
}

std::exception_ptr UcxWork::error() { return done() ? error_ : nullptr; }

bool UcxWork::is_completed() {
  if (done()) return true;
  if (auto w = worker_.lock()) w->drive(*this, /*may_block=*/false);
  return done();
}

void UcxWork::wait(Duration timeout) {
  WaitSpan span(*this);
  if (timeout.count() < 0) timeout = default_timeout_;
  // The clock is read every few rounds only: on virtual machines a read costs as much as a round of progress.
  Clock::time_point deadline{};
  std::shared_ptr<UcxWorker> w = worker_.lock();  // held for the whole wait (not re-locked every round)
  for (uint32_t round = 0; !done(); ++round) {
    if ((round & 15) == 1) {
      const auto now = Clock::now();
      if (deadline == Clock::time_point{}) deadline = now + timeout;
      if (now >= deadline) {
        std::string why, what = describe();
        auto op = op_.lock();
        if (w && op) {
          std::lock_guard<std::mutex> lock(w->mutex());
          what = op->description();  // with the call's number
          if (!op->finished()) why = "still waiting for: " + op->pending_summary();
        }
        if (done()) break;
        DT_THROW(TimeoutError, what, " did not complete within ", timeout.count() / 1000.0, " s",
                 why.empty() ? "" : ": ", why, recent_calls());
      }
    }
    if (w) {
      w->drive(*this, /*may_block=*/true);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // the worker is gone: it completed every call
    }
  }
  if (error_) std::rethrow_exception(error_);
}

// ---- UcxOp ----

UcxOp::UcxOp(UcxWorker* worker, std::shared_ptr<CommState> comm, const CollectiveArgs& call, uint32_t seq,
             Work::Duration timeout, Clock::time_point now)
    : worker_(worker),
      comm_(std::move(comm)),
      args_(scalars_of(call)),
      call_(&call),
      seq_(seq),
      sig_(tag_signature(call)),
      lists_(take_lists()),
      timeout_(timeout) {
  deadline_ = now + timeout;
  last_progress_ = now;
}

UcxOp::~UcxOp() {
  for (auto& [p, n] : scratch_) allocator_for(Device::cpu()).deallocate(p, n);
}

// Note [Recycled op lists]
// Every call builds an op, and an op's dozen lists (tasks, edges, views, ...) each took a malloc or more as they
// grew: 6-11 mallocs for a plain collective, about 40 for a strided-views all-to-all. A finished op hands its lists
// back, cleared with their capacity, and the next op takes them: in a steady loop no list allocates. Lists that
// grew beyond kMaxKeptTasks tasks are dropped rather than kept; at most kMaxKeptLists wait.
namespace {
constexpr size_t kMaxKeptLists = 32, kMaxKeptTasks = 4096;
std::mutex g_lists_mu;
}  // namespace

std::vector<UcxOp::Lists*>& UcxOp::spare_lists() {
  static auto* v = new std::vector<Lists*>();  // never destroyed: ops may die during static destruction
  return *v;
}

void UcxOp::Lists::clear() {
  tasks.clear();
  edges.clear();
  succ.clear();
  ready.clear();
  parked.clear();
  completed.clear();
  handling.clear();
  scratch.clear();
  views.clear();
  runs.clear();
}

UcxOp::Lists* UcxOp::take_lists() {
  {
    std::lock_guard<std::mutex> lock(g_lists_mu);
    auto& spare = spare_lists();
    if (!spare.empty()) {
      Lists* l = spare.back();
      spare.pop_back();
      return l;
    }
  }
  auto* l = new Lists();
  l->tasks.reserve(8);
  return l;
}

void UcxOp::Recycle::operator()(Lists* l) const {
  if (l->tasks.capacity() <= kMaxKeptTasks) {
    l->clear();
    std::lock_guard<std::mutex> lock(g_lists_mu);
    auto& spare = spare_lists();
    if (spare.size() < kMaxKeptLists) {
      spare.push_back(l);
      return;
    }
  }
  delete l;
}

std::string UcxOp::description() const {
  const bool p2p = args_.kind == CollectiveKind::kSend || args_.kind == CollectiveKind::kRecv;
  // The group's call number, as the flight recorder numbers it ("#41 all_gather(...)"); a send's counts per peer.
  return p2p ? args_.describe() + " on " + comm_->name : str_cat("#", seq_, " ", args_.describe(), " on ", comm_->name);
}

int UcxOp::rank() const { return comm_->rank; }
int UcxOp::size() const { return comm_->size; }

int UcxOp::add(Task t) {
  DT_ASSERT(!started_, "tasks added to a started op");
  t.op = this;
  tasks_.push_back(t);
  return int(tasks_.size()) - 1;
}

int UcxOp::send(int peer, uint32_t slot, const void* buf, int64_t bytes) {
  Task t;
  t.type = TaskType::kSend;
  t.peer = peer;
  t.slot = slot;
  t.src = buf;
  t.n = bytes;
  return add(t);
}

int UcxOp::recv(int peer, uint32_t slot, void* buf, int64_t bytes) {
  Task t;
  t.type = TaskType::kRecv;
  t.peer = peer;
  t.slot = slot;
  t.dst = buf;
  t.n = bytes;
  return add(t);
}

int UcxOp::reduce(void* out, const void* a, const void* b, int64_t count) {
  Task t;
  t.type = TaskType::kReduce;
  t.dst = out;
  t.src = a;
  t.src2 = b;
  t.n = count;
  return add(t);
}

int UcxOp::copy(void* dst, const void* src, int64_t bytes) {
  Task t;
  t.type = TaskType::kCopy;
  t.dst = dst;
  t.src = src;
  t.n = bytes;
  return add(t);
}

int UcxOp::divide(void* x, int64_t count) {
  Task t;
  t.type = TaskType::kDivide;
  t.dst = x;
  t.n = count;
  return add(t);
}

int UcxOp::add_view(const kernels::StridedView& v) {
  views_.push_back(v);
  return int(views_.size()) - 1;
}

int UcxOp::pack(void* dst, int src_view) {
  Task t;
  t.type = TaskType::kPack;
  t.dst = dst;
  t.view2 = src_view;
  return add(t);
}

int UcxOp::unpack(int dst_view, const void* src) {
  Task t;
  t.type = TaskType::kUnpack;
  t.src = src;
  t.view = dst_view;
  return add(t);
}

void UcxOp::defer(int task) { tasks_[size_t(task)].deferred = true; }

int UcxOp::copy_view(int dst_view, int src_view) {
  Task t;
  t.type = TaskType::kCopyView;
  t.view = dst_view;
  t.view2 = src_view;
  return add(t);
}

int UcxOp::transfer_view(int peer, const void* desc, int mine, bool i_send) {
  Task t;
  t.type = TaskType::kTransferView;
  t.peer = peer;
  t.src = desc;
  t.view = mine;
  t.n = i_send ? 1 : 0;
  return add(t);
}

int UcxOp::run(std::function<void()> fn) {
  runs_.push_back(std::move(fn));
  Task t;
  t.type = TaskType::kRun;
  t.n = int64_t(runs_.size()) - 1;
  return add(t);
}

void UcxOp::after(int before, int then) {
  if (before < 0 || then < 0) return;
  DT_ASSERT(before != then && before < int(tasks_.size()) && then < int(tasks_.size()), "bad dependency ", before,
            " -> ", then);
  edges_.emplace_back(before, then);
}

void* UcxOp::scratch(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  void* p = allocator_for(Device::cpu()).allocate(size_t(bytes));
  scratch_.emplace_back(p, size_t(bytes));
  return p;
}

std::string UcxOp::peer_name(int group_rank) const { return worker_->peer_name(*comm_, group_rank); }

void UcxOp::start() {
  DT_ASSERT(!started_, "op started twice");
  started_ = true;
  // Freeze the graph: successor lists in one array (CSR), dependency counts.
  std::sort(edges_.begin(), edges_.end());
  edges_.erase(std::unique(edges_.begin(), edges_.end()), edges_.end());
  succ_.resize(edges_.size());
  size_t e = 0;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    tasks_[i].succ_begin = int32_t(e);
    while (e < edges_.size() && edges_[e].first == int(i)) {
      succ_[e] = edges_[e].second;
      ++tasks_[size_t(edges_[e].second)].deps;
      ++e;
    }
    tasks_[i].succ_end = int32_t(e);
  }
  edges_.clear();
  if (tasks_.empty()) {
    finish();
    return;
  }
  // Post the ready messages now (receives first: they were added first); arithmetic waits for advance().
  ready_.clear();
  ready_head_ = 0;
  for (size_t i = 0; i < tasks_.size() && !finished_; ++i) {
    if (tasks_[i].deps != 0) continue;
    if (tasks_[i].type == TaskType::kSend || tasks_[i].type == TaskType::kRecv)
      post(tasks_[i]);
    else
      ready_.push_back(int(i));
  }
  if (!completed_.empty() || !ready_.empty()) worker_->mark_dirty(this);
}

void UcxOp::post(Task& t) {
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  p.user_data = &t;
  p.datatype = ucp_dt_make_contig(1);
  const uint32_t kind = tag_kind(args_.kind);
  t.state = Task::State::kPosted;
  ucs_status_ptr_t r;
  if (t.type == TaskType::kSend) {
    p.cb.send = send_cb;
    const uint64_t tag = make_tag(kind, comm_->id, seq_, sig_, uint32_t(comm_->rank), t.slot);
    r = ucp_tag_send_nbx(worker_->ep(comm_->members[size_t(t.peer)]), t.src, size_t(t.n), tag, &p);
  } else {
    // No immediate completion: UCX 1.13 leaves recv_info unfilled on that path, and the received length must be
    // checked. The callback then runs before ucp_tag_recv_nbx returns when the message is already here.
    p.cb.recv = recv_cb;
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    const uint64_t tag = make_tag(kind, comm_->id, seq_, sig_, uint32_t(t.peer), t.slot);
    r = ucp_tag_recv_nbx(worker_->handle(), t.dst, size_t(t.n), tag, kFullMask, &p);
  }
  if (r == nullptr) {  // completed immediately: no callback follows
    t.status = UCS_OK;
    completed_.push_back(&t);
  } else if (UCS_PTR_IS_ERR(r)) {
    t.status = UCS_PTR_STATUS(r);
    completed_.push_back(&t);
  } else if (t.completed_by_ucx) {
    ucp_request_free(r);  // the callback already ran
  } else {
    t.request = r;
    ++outstanding_;
  }
}

void UcxOp::request_done(Task* t) {
  t->completed_by_ucx = true;
  if (t->request != nullptr) {
    ucp_request_free(t->request);
    t->request = nullptr;
    --outstanding_;
  }
  if (finished_) {
    // A failed op's leftover requests: nothing else to do (the worker reaps the op once none is left).
    t->state = Task::State::kDone;
    return;
  }
  completed_.push_back(t);
  worker_->mark_dirty(this);
}

void UcxOp::poll_network() {
  // Messages first, local arithmetic second: a peer's announcement (rendezvous RTS) answered now lets its data move
  // (and its sender finish) while this rank computes, instead of after.
  if (outstanding_ == 0) return;
  for (int i = 0; i < 16 && ucp_worker_progress(worker_->handle()) != 0; ++i) {
  }
}

void UcxOp::complete(Task& t) {
  t.state = Task::State::kDone;
  ++done_count_;
  for (int32_t e = t.succ_begin; e < t.succ_end; ++e) {
    Task& s = tasks_[size_t(succ_[size_t(e)])];
    if (--s.deps == 0) ready_.push_back(succ_[size_t(e)]);
  }
}

// Note [Deferred tasks]
// A deferred task (defer()) that becomes ready is parked instead of run, and runs only once everything else that is
// ready has run and one more poll of the network has brought no completion. It is local work that needs no peer:
// running it while messages travel, rather than first, lets the peers' work start earlier and hides the last
// message's latency behind it. The views all-to-all defers the copy of this rank's own block: the transfer (which
// waits for the peer's view description, there by the first poll) runs first, its "done" travels while the own
// block is copied, and the peer's "done" is there when that copy ends, as UCX's rendezvous does with a contiguous
// all-to-all (2 ranks, 1 MiB S(1) -> S(0): the 0.6 us after the last copy went to 0.1 us). Parked tasks never wait
// beyond the advance() call that parked them.
bool UcxOp::release_parked() {
  if (parked_.empty()) return false;
  poll_network();
  if (completed_.empty()) {  // nothing new: the parked tasks are next
    ready_.insert(ready_.end(), parked_.begin(), parked_.end());
    parked_.clear();
  }
  return true;
}

bool UcxOp::advance(Clock::time_point now) {
  if (finished_ || !started_) return false;
  bool moved = false;
  while (!finished_ && (!completed_.empty() || ready_head_ < ready_.size() || release_parked())) {
    moved = true;
    // A peer that died under a CMA copy left zeros in place of its data: fail before using any completion.
    if (worker_->handle_cma_failures_locked() && finished_) return true;
    if (ready_head_ == ready_.size()) {
      ready_.clear();
      ready_head_ = 0;
    }
    // UCX completions: check them, then release their successors.
    handling_.clear();
    handling_.swap(completed_);
    for (Task* t : handling_) {
      if (t->status != UCS_OK) {
        std::string what = t->type == TaskType::kSend ? "sending to " : "receiving from ";
        ErrorCode code = ErrorCode::kRemoteError;
        std::string hint;
        if (t->status == UCS_ERR_MESSAGE_TRUNCATED) {
          code = ErrorCode::kInvalidArgument;
          hint = str_cat(": the peer sent more than the ", t->n,
                         " bytes expected (mismatched collective calls: different counts or dtypes?)");
        } else if (t->status == UCS_ERR_CANCELED) {
          hint = " (canceled)";
        }
        fail(code, str_cat(what, peer_name(t->peer), " failed: ", ucs_status_string(t->status), hint));
        return true;
      }
      if (t->type == TaskType::kRecv && int64_t(t->length) != t->n) {
        fail(ErrorCode::kInvalidArgument,
             str_cat("received ", t->length, " bytes from ", peer_name(t->peer), " where ", t->n,
                     " were expected (mismatched collective calls: different counts or dtypes?)"));
        return true;
      }
      complete(*t);
    }
    // Ready tasks: post messages, run local arithmetic.
    while (ready_head_ < ready_.size() && !finished_) {
      const int id = ready_[ready_head_++];
      Task& t = tasks_[size_t(id)];
      if (t.deferred) {  // Note [Deferred tasks]
        t.deferred = false;
        parked_.push_back(id);
        continue;
      }
      switch (t.type) {
        case TaskType::kSend:
        case TaskType::kRecv:
          post(t);
          continue;
        case TaskType::kReduce:
          poll_network();
          kernels::reduce(t.dst, t.src, t.src2, t.n, args_.dtype, args_.op, Device::cpu());
          break;
        case TaskType::kCopy:
          poll_network();
          if (t.n > 0 && t.dst != t.src) kernels::copy_bytes(t.dst, t.src, size_t(t.n), Device::cpu());
          break;
        case TaskType::kDivide:
          kernels::divide_by(t.dst, t.n, args_.dtype, comm_->size, Device::cpu());
          break;
        case TaskType::kPack:
        case TaskType::kUnpack:
        case TaskType::kCopyView:
          poll_network();
          run_view_copy(*this, t);
          break;
        case TaskType::kRun:
        case TaskType::kTransferView:  // both may copy from or to a peer's memory
          poll_network();
          try {
            if (t.type == TaskType::kRun)
              runs_[size_t(t.n)]();
            else
              ucx::transfer_view(*worker_, *comm_, t.peer, *static_cast<const ViewDesc*>(t.src), views_[size_t(t.view)],
                                 t.n != 0);
          } catch (const Error& e) {
            // The peer may have left the call for a cause its abort notice names (Note [A peer that left the call]).
            if (e.code() == ErrorCode::kRemoteError && worker_->await_group_failure_locked(*comm_) && finished_)
              return true;
            fail(e.code(), e.what());
            return true;
          }
          // A peer that died under a copy left zeros: fail before anything depends on them.
          if (worker_->handle_cma_failures_locked() && finished_) return true;
          break;
      }
      complete(t);
    }
  }
  if (moved) last_progress_ = now;
  if (!finished_ && done_count_ == int(tasks_.size())) finish();
  return moved;
}

void UcxOp::finish() {
  finished_ = true;
  std::exception_ptr err;
  if (on_success_) {
    try {
      on_success_();
    } catch (...) {
      err = std::current_exception();
    }
  }
  for (auto& [p, n] : scratch_) allocator_for(Device::cpu()).deallocate(p, n);
  scratch_.clear();
  auto self = shared_from_this();  // op_done_locked may drop the last other reference
  worker_->op_done_locked(this);
  work_->mark_done(err);
  if (err) worker_->fail_comm_locked(*comm_, ErrorCode::kInternal, error_message(err), true, this);
}

void UcxOp::fail(ErrorCode code, const std::string& reason) {
  if (finished_) return;
  auto self = shared_from_this();
  worker_->fail_comm_locked(*comm_, code, reason, true, this);
}

void UcxOp::abort(std::exception_ptr error) {
  if (finished_) return;
  finished_ = true;
  auto self = shared_from_this();
  for (Task& t : tasks_)
    if (t.state == Task::State::kPosted && t.request != nullptr && t.type == TaskType::kRecv)
      ucp_request_cancel(worker_->handle(), t.request);
  completed_.clear();
  ready_.clear();
  ready_head_ = 0;
  // Scratch stays allocated while UCX may still write into it (the op is kept as a zombie until then).
  worker_->op_done_locked(this);
  if (work_) work_->mark_done(error);
}

std::vector<int> UcxOp::pending_peers() const {
  std::set<int> peers;
  for (const Task& t : tasks_)
    if ((t.type == TaskType::kSend || t.type == TaskType::kRecv) && t.state != Task::State::kDone) peers.insert(t.peer);
  return {peers.begin(), peers.end()};
}

std::string UcxOp::pending_summary() const {
  if (!started_) return "nothing yet: queued behind an earlier call of this communicator";
  // Aggregated per (direction, peer): "2 receives from rank 3 (...) (32 bytes), 1 not yet posted".
  struct Agg {
    int posted = 0, waiting = 0;
    int64_t bytes = 0;
  };
  std::map<std::pair<int, int>, Agg> agg;  // (0 recv / 1 send, peer)
  for (const Task& t : tasks_) {
    if (t.state == Task::State::kDone) continue;
    if (t.type != TaskType::kSend && t.type != TaskType::kRecv) continue;
    Agg& a = agg[{t.type == TaskType::kSend ? 1 : 0, t.peer}];
    (t.state == Task::State::kPosted ? a.posted : a.waiting)++;
    a.bytes += t.n;
  }
  if (agg.empty()) return "no message outstanding";
  std::ostringstream os;
  bool first = true;
  for (const auto& [key, a] : agg) {
    const int total = a.posted + a.waiting;
    os << (first ? "" : "; ") << total << (key.first ? " send" : " receive") << (total > 1 ? "s" : "")
       << (key.first ? " to " : " from ") << peer_name(key.second) << " (" << a.bytes << " bytes";
    if (a.waiting) os << ", " << a.waiting << " not yet posted";
    os << ")";
    first = false;
  }
  return os.str();
}

}  // namespace dt::ucx
