#include "collectives/thread/thread_group.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "collectives/exchange.h"
#include "core/error.h"
#include "core/logging.h"

namespace dt::thread_detail {

namespace {

double seconds(Work::Duration d) { return double(d.count()) / 1000.0; }

// Whether two ranks' calls agree (all_to_allv counts are checked separately: they differ per rank by design).
bool same_call(const RankOp& a, const RankOp& b) { return a.signature() == b.signature(); }

}  // namespace

// ---- descriptions ----

CallSignature RankOp::signature() const { return is_split ? CallSignature::of_split() : CallSignature::of(args); }

std::string RankOp::describe() const {
  if (is_split) return str_cat("split(color=", color, ", key=", key, ")");
  if (args.kind == CollectiveKind::kBarrier) return "barrier()";
  return args.describe();
}

// ---- world ----

ThreadWorld::ThreadWorld(int size)
    : size_(size),
      exited_(std::make_unique<std::atomic<bool>[]>(size_t(size))),
      pending_(std::make_unique<std::atomic<int64_t>[]>(size_t(size))) {
  for (int i = 0; i < size; ++i) {
    exited_[size_t(i)].store(false);
    pending_[size_t(i)].store(0);
  }
}

void ThreadWorld::op_done(int global_rank) {
  if (pending_[size_t(global_rank)].fetch_sub(1) == 1 && exited_[size_t(global_rank)].load()) wake_all();
}

void ThreadWorld::mark_exited(int global_rank) {
  exited_[size_t(global_rank)].store(true);
  if (pending_[size_t(global_rank)].load() == 0) wake_all();
}

void ThreadWorld::wake_all() {
  std::vector<std::shared_ptr<ThreadGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : groups_)
      if (auto g = w.lock()) groups.push_back(std::move(g));
  }
  for (auto& g : groups) g->on_rank_gone();
}

std::string ThreadWorld::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void ThreadWorld::abort(const std::string& reason) {
  std::vector<std::shared_ptr<ThreadGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reason_.empty()) reason_ = reason;
    aborted_.store(true, std::memory_order_release);
    for (auto& w : groups_)
      if (auto g = w.lock()) groups.push_back(std::move(g));
  }
  DT_LOG_DEBUG("thread world aborted: ", reason);
  for (auto& g : groups) g->on_abort(reason);
}

void ThreadWorld::register_group(const std::shared_ptr<ThreadGroup>& group) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(groups_, [](const std::weak_ptr<ThreadGroup>& w) { return w.expired(); });
  groups_.push_back(group);
}

// ---- group ----

ThreadGroup::ThreadGroup(std::shared_ptr<ThreadWorld> world, std::vector<int> global_ranks, std::string name)
    : world_(std::move(world)),
      global_ranks_(std::move(global_ranks)),
      name_(std::move(name)),
      last_seq_(global_ranks_.size(), 0),
      last_call_(global_ranks_.size()),
      channels_(global_ranks_.size() * global_ranks_.size()) {}

std::string ThreadGroup::rank_id(int rank) const {
  int g = global_ranks_[size_t(rank)];
  if (g == rank) return std::to_string(rank);
  return str_cat(rank, " (global ", g, ")");
}

std::string ThreadGroup::last_call_of(int r) const {
  if (last_seq_[size_t(r)] == 0) return "no call yet";
  return str_cat("last call #", last_seq_[size_t(r)], ": ", last_call_[size_t(r)].describe());
}

std::string ThreadGroup::remote_error(const std::string& what) const {
  return str_cat(what, " on thread group '", name_, "' failed: the group was aborted: ", world_->reason());
}

void ThreadGroup::on_all_arrived(Slot& slot) {
  const int n = size();
  // Mismatch check: group the ranks by what they called.
  bool all_same = true;
  for (int r = 1; r < n; ++r) all_same = all_same && same_call(*slot.ops[0], *slot.ops[size_t(r)]);
  if (!all_same) {
    std::vector<std::pair<std::string, std::vector<int>>> calls;
    for (int r = 0; r < n; ++r) {
      std::string d = slot.ops[size_t(r)]->describe();
      auto it = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == d; });
      if (it == calls.end()) {
        calls.push_back({d, {r}});
      } else {
        it->second.push_back(r);
      }
    }
    std::ostringstream os;
    os << "mismatched collectives on thread group '" << name_ << "' (size " << n << "), call #" << slot.seq << ":";
    for (size_t i = 0; i < calls.size(); ++i) {
      os << (i ? ";" : "") << " ";
      const auto& ranks = calls[i].second;
      os << (ranks.size() > 1 ? "ranks " : "rank ");
      for (size_t k = 0; k < ranks.size(); ++k) os << (k ? ", " : "") << rank_id(ranks[k]);
      os << " called " << calls[i].first;
    }
    slot.mismatch = os.str();
    return;
  }
  const RankOp& first = *slot.ops[0];
  if (!first.is_split && (first.args.kind == CollectiveKind::kAllToAllV || first.args.has_views())) {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        int64_t sent = slot.ops[size_t(i)]->args.send_counts[size_t(j)];
        int64_t expected = slot.ops[size_t(j)]->args.recv_counts[size_t(i)];
        if (sent != expected) {
          slot.mismatch = str_cat("mismatched ", collective_kind_name(first.args.kind), " counts on thread group '",
                                  name_, "', call #", slot.seq, ": ", rank_label(i), " sends ", sent, " elements to ",
                                  rank_label(j), ", which expects ", expected, " from it");
          return;
        }
      }
  }
  if (first.is_split) {
    // Every color forms a group (split_members' order); the last arrival creates them all.
    std::vector<int64_t> color_key;
    std::set<int> colors;
    for (int r = 0; r < n; ++r) {
      const RankOp& op = *slot.ops[size_t(r)];
      color_key.push_back(op.color);
      color_key.push_back(op.key);
      if (op.color >= 0) colors.insert(op.color);
    }
    for (int color : colors) {
      const std::vector<int> members = split_members(color_key, color);
      std::vector<int> globals;
      for (int pr : members) globals.push_back(global_ranks_[size_t(pr)]);
      auto group = std::make_shared<ThreadGroup>(world_, std::move(globals), str_cat(name_, "/", color));
      world_->register_group(group);
      for (size_t i = 0; i < members.size(); ++i) {
        auto* op = const_cast<RankOp*>(slot.ops[size_t(members[i])]);
        op->new_group = group;
        op->new_rank = int(i);
      }
    }
  }
}

std::shared_ptr<ThreadGroup::Slot> ThreadGroup::arrive(int rank, const RankOp* op, Clock::time_point deadline,
                                                       Work::Duration timeout) {
  const int n = size();
  // Timeout and abort errors quote this rank's last calls (its flight recorder).
  auto recent = [&] { return op->recorder != nullptr ? "; " + op->recorder->describe_recent() : std::string(); };
  std::unique_lock<std::mutex> lock(mu_);
  if (world_->aborted()) DT_THROW(RemoteError, remote_error(op->describe()), recent());
  auto it = slots_.find(op->seq);
  if (it == slots_.end()) it = slots_.emplace(op->seq, std::make_shared<Slot>(op->seq, n)).first;
  std::shared_ptr<Slot> slot = it->second;
  Slot& s = *slot;
  if (s.abandoned) {
    std::string msg = str_cat(op->describe(), " on thread group '", name_, "' (", rank_label(rank), "), call #",
                              op->seq, ": ", s.abandon_reason);
    if (s.abandoned_on_timeout) DT_THROW(TimeoutError, msg, recent());
    DT_THROW(RemoteError, msg, recent());
  }
  s.ops[size_t(rank)] = op;
  last_seq_[size_t(rank)] = op->seq;
  last_call_[size_t(rank)] = op->signature();
  if (++s.count[0] == n) {
    on_all_arrived(s);
    cv_.notify_all();
  } else {
    while (s.count[0] < n) {
      // A peer gave up on this very call (it timed out waiting for the same ranks, or saw one of them gone).
      if (s.abandoned) {
        std::string msg = str_cat(op->describe(), " on thread group '", name_, "' (", rank_label(rank), "), call #",
                                  op->seq, ": ", s.abandon_reason);
        if (s.abandoned_on_timeout) DT_THROW(TimeoutError, msg, recent());
        DT_THROW(RemoteError, msg, recent());
      }
      if (world_->aborted()) DT_THROW(RemoteError, remote_error(op->describe()), recent());
      for (int r = 0; r < n; ++r) {
        if (s.ops[size_t(r)] != nullptr || !world_->gone(global_ranks_[size_t(r)])) continue;
        std::string msg = str_cat(
            op->describe(), " on thread group '", name_, "' (", rank_label(rank), " of ", n, "), call #", op->seq, ": ",
            rank_label(r), " finished (its thread function returned) without making this call (", last_call_of(r), ")");
        s.abandoned = true;
        s.abandon_reason = str_cat(rank_label(r), " finished without making this call (", last_call_of(r), ")");
        cv_.notify_all();
        DT_THROW(RemoteError, msg, recent());
      }
      if (Clock::now() >= deadline) {
        std::string missing;
        for (int r = 0; r < n; ++r)
          if (s.ops[size_t(r)] == nullptr)
            missing += str_cat(missing.empty() ? "" : ", ", rank_label(r), " (", last_call_of(r), ")");
        std::string msg =
            str_cat(op->describe(), " on thread group '", name_, "' (", rank_label(rank), " of ", n, "), call #",
                    op->seq, ": timed out after ", seconds(timeout), " s waiting for ", missing, " to arrive");
        s.abandoned = true;
        s.abandoned_on_timeout = true;
        s.abandon_reason = str_cat(rank_label(rank), " gave up waiting for this call: ", msg);
        lock.unlock();
        world_->abort(msg);
        DT_THROW(TimeoutError, msg, recent());
      }
      cv_.wait_until(lock, deadline);
    }
  }
  if (!s.mismatch.empty()) {
    std::string msg = s.mismatch;
    lock.unlock();
    sync(rank, s, 2, deadline, timeout);
    DT_THROW(InvalidArgument, msg);
  }
  return slot;
}

void ThreadGroup::sync(int rank, Slot& s, int phase, Clock::time_point deadline, Work::Duration timeout) {
  const int n = size();
  const uint64_t seq = s.seq;
  std::unique_lock<std::mutex> lock(mu_);
  if (++s.count[phase] == n) {
    if (phase == 2) slots_.erase(seq);  // the others still waking up hold the slot by shared_ptr
    cv_.notify_all();
    return;
  }
  // Every rank arrived, so every rank gets here without waiting on anything but memory copies: aborts are ignored
  // (Note [Thread rendezvous]); the deadline only guards against bugs.
  while (s.count[phase] < n) {
    if (Clock::now() >= deadline) {
      std::string msg = str_cat("call #", seq, " on thread group '", name_, "' (", rank_label(rank),
                                "): peers did not finish their copies within ", seconds(timeout), " s");
      lock.unlock();
      world_->abort(msg);
      DT_THROW(TimeoutError, msg);
    }
    cv_.wait_until(lock, deadline);
  }
}

std::string ThreadGroup::describe_missing(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (int r = 0; r < size(); ++r) {
    if (last_seq_[size_t(r)] >= seq) continue;
    out += str_cat(out.empty() ? "" : ", ", rank_label(r), " (", last_call_of(r), ")");
  }
  if (out.empty()) return str_cat("every rank of group '", name_, "' arrived at call #", seq);
  return str_cat("waiting for ", out, " to arrive at call #", seq, " of group '", name_, "'");
}

// ---- point to point ----

namespace {
std::exception_ptr p2p_mismatch(const ThreadGroup& g, int src, int dst, int64_t sent, DType sent_t, int64_t posted,
                                DType posted_t) {
  return std::make_exception_ptr(
      InvalidArgument(str_cat("mismatched send/recv on thread group '", g.name(), "': ", g.rank_label(src), " sent ",
                              sent, " x ", dtype_name(sent_t), " to ", g.rank_label(dst), ", which posted a recv of ",
                              posted, " x ", dtype_name(posted_t))));
}
}  // namespace

void ThreadGroup::post_send(int src, int dst, const void* buf, int64_t count, DType dtype,
                            std::shared_ptr<AsyncWork> work) {
  const size_t bytes = size_t(count) * dtype_size(dtype);
  std::unique_lock<std::mutex> lock(mu_);
  if (world_->aborted()) DT_THROW(RemoteError, remote_error("send"));
  Channel& c = channel(src, dst);
  std::shared_ptr<PendingRecv> r;
  if (!c.recvs.empty()) {
    r = std::move(c.recvs.front());
    c.recvs.pop_front();
  } else {
    // Buffer the message (outside the lock); only this worker adds to this channel's sends, so the order holds.
    lock.unlock();
    Message m;
    m.count = count;
    m.dtype = dtype;
    m.work = work;
    if (bytes) {
      m.data = std::make_unique_for_overwrite<std::byte[]>(bytes);
      std::memcpy(m.data.get(), buf, bytes);
    }
    lock.lock();
    if (world_->aborted()) DT_THROW(RemoteError, remote_error("send"));
    if (c.recvs.empty()) {
      if (world_->gone(global_ranks_[size_t(dst)]))
        DT_THROW(RemoteError, work->describe(), " failed: ", rank_label(dst),
                 " finished (its thread function returned) without posting the matching recv");
      c.sends.push_back(std::move(m));
      return;
    }
    r = std::move(c.recvs.front());
    c.recvs.pop_front();
  }
  lock.unlock();
  if (r->count != count || r->dtype != dtype) {
    // One exception object per Work: they are rethrown on different threads.
    r->work->mark_done(p2p_mismatch(*this, src, dst, count, dtype, r->count, r->dtype));
    work->mark_done(p2p_mismatch(*this, src, dst, count, dtype, r->count, r->dtype));
    return;
  }
  if (bytes) std::memcpy(r->buf, buf, bytes);
  r->work->mark_done();
  work->mark_done();
}

void ThreadGroup::post_recv(const std::shared_ptr<PendingRecv>& r) {
  std::unique_lock<std::mutex> lock(mu_);
  if (world_->aborted()) DT_THROW(RemoteError, remote_error("recv"));
  Channel& c = channel(r->src, r->dst);
  if (c.sends.empty()) {
    if (world_->gone(global_ranks_[size_t(r->src)]))
      DT_THROW(RemoteError, r->work->describe(), " failed: ", rank_label(r->src),
               " finished (its thread function returned) without sending the matching message");
    c.recvs.push_back(r);
    return;
  }
  Message m = std::move(c.sends.front());
  c.sends.pop_front();
  lock.unlock();
  if (r->count != m.count || r->dtype != m.dtype) {
    r->work->mark_done(p2p_mismatch(*this, r->src, r->dst, m.count, m.dtype, r->count, r->dtype));
    m.work->mark_done(p2p_mismatch(*this, r->src, r->dst, m.count, m.dtype, r->count, r->dtype));
    return;
  }
  if (m.count) std::memcpy(r->buf, m.data.get(), size_t(m.count) * dtype_size(m.dtype));
  r->work->mark_done();
  m.work->mark_done();
}

void ThreadGroup::cancel_recvs(int dst, const std::string& why) {
  std::vector<std::shared_ptr<PendingRecv>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int src = 0; src < size(); ++src) {
      Channel& c = channel(src, dst);
      for (auto& r : c.recvs) cancelled.push_back(std::move(r));
      c.recvs.clear();
    }
  }
  for (auto& r : cancelled)
    r->work->mark_done(std::make_exception_ptr(RemoteError(str_cat(r->work->describe(), ": ", why))));
}

std::string ThreadGroup::describe_p2p_wait(int src, int dst, bool is_send) {
  if (world_->aborted()) return "the group was aborted: " + world_->reason();
  if (is_send) return str_cat("waiting for ", rank_label(dst), " to post the matching recv");
  return str_cat("waiting for a matching send from ", rank_label(src));
}

void ThreadGroup::on_abort(const std::string& reason) {
  std::vector<std::shared_ptr<AsyncWork>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Channel& c : channels_) {
      for (auto& m : c.sends) works.push_back(std::move(m.work));
      // Copied, not moved: the receiving communicator still holds the PendingRecv and waits on its Work.
      for (auto& r : c.recvs) works.push_back(r->work);
      c.sends.clear();
      c.recvs.clear();
    }
  }
  cv_.notify_all();
  for (auto& w : works)
    w->mark_done(std::make_exception_ptr(
        RemoteError(str_cat(w->describe(), " failed: thread group '", name_, "' was aborted: ", reason))));
}

void ThreadGroup::on_rank_gone() {
  std::vector<std::pair<std::shared_ptr<AsyncWork>, std::string>> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = size();
    for (int src = 0; src < n; ++src)
      for (int dst = 0; dst < n; ++dst) {
        Channel& c = channel(src, dst);
        if (!c.recvs.empty() && world_->gone(global_ranks_[size_t(src)])) {
          for (auto& r : c.recvs)
            doomed.push_back({r->work, str_cat(rank_label(src),
                                               " finished (its thread function returned) "
                                               "without sending the matching message")});
          c.recvs.clear();
        }
        if (!c.sends.empty() && world_->gone(global_ranks_[size_t(dst)])) {
          for (auto& m : c.sends)
            doomed.push_back({m.work, str_cat(rank_label(dst),
                                              " finished (its thread function returned) "
                                              "without posting the matching recv")});
          c.sends.clear();
        }
      }
  }
  cv_.notify_all();
  for (auto& [w, why] : doomed)
    w->mark_done(std::make_exception_ptr(RemoteError(str_cat(w->describe(), " failed: ", why))));
}

// ---- byte ranges ----

std::vector<ByteRange> op_ranges(const CollectiveArgs& a, int n) {
  const size_t es = a.elem_size();
  std::vector<ByteRange> out;
  auto add = [&](const void* p, int64_t bytes) {
    const auto* b = static_cast<const std::byte*>(p);
    if (p != nullptr && bytes > 0) out.push_back(ByteRange{b, b + bytes});
  };
  if (a.has_views()) {  // each view's span, first to last byte
    auto add_view = [&](const kernels::StridedView& v) {
      if (v.numel() == 0) return;
      int64_t lo = 0, hi = 0;
      for (int d = 0; d < v.ndim; ++d) (v.strides[d] < 0 ? lo : hi) += (v.shape[d] - 1) * v.strides[d];
      out.push_back(ByteRange{static_cast<const std::byte*>(v.data) + lo * int64_t(es),
                              static_cast<const std::byte*>(v.data) + (hi + 1) * int64_t(es)});
    };
    for (const auto& v : a.send_views) add_view(v);
    for (const auto& v : a.recv_views) add_view(v);
    return out;
  }
  for (const auto& list : a.send_segments)
    for (const Segment& s : list) add(s.data, s.bytes);
  for (const auto& list : a.recv_segments)
    for (const Segment& s : list) add(s.data, s.bytes);
  add(a.send, a.send_bytes(n));
  add(a.recv, a.recv_bytes(n));
  return out;
}

}  // namespace dt::thread_detail
