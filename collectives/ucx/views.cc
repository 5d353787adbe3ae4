// all_gather / all_to_all of strided views on UCX (Note [Direct view reads] in views.h). Slots between two ranks:
// 0 the pair's view descriptions, 2 a packed block, 3 "done".
#include "collectives/ucx/views.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "collectives/ucx/algorithms.h"
#include "collectives/ucx/worker.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "kernels/copy.h"

namespace dt::ucx {

namespace {

constexpr uint32_t kDescSlot = 0, kDataSlot = 2, kDoneSlot = 3;

// What a rank tells a peer with which it moves blocks directly: its view of the block it sends to the peer and its
// view of the block it receives from it (each used only when that direction is direct).
struct PairDesc {
  ViewDesc send, recv;
};
constexpr int kMaxIov = 1024;  // IOV_MAX on Linux

// Note [Banded reads]
// The kernel copies into the reader's runs with ordinary stores, and short runs are expensive: the shorter the
// runs, the further a copy falls behind a contiguous one (bench/redistribute's floor column shows by how much). For
// large reads into short runs the reader instead copies the (contiguous or long-run) remote data band by band into
// a cache-sized staging buffer and streams it into its runs with non-temporal stores (Note [Streaming copies] in
// kernels/cpu/stream_copy.h), which pays once the volume is far beyond the cache: S(1)->R of [rows, 1024] f32
// gains most on 4 ranks from 16 MiB and on 2 ranks at 64 MiB, but loses on 2 ranks at 16 MiB (2 KiB runs, 8 MiB
// per peer) and on 4 ranks at 4 MiB (1 MiB per peer), hence the thresholds (bench/redistribute measures them).
constexpr size_t kBandBytes = size_t(256) << 10;
bool banded_read_pays(size_t run_bytes, size_t bytes) {
  return (run_bytes <= 1024 && bytes >= (size_t(4) << 20)) || (run_bytes <= 4096 && bytes >= (size_t(16) << 20));
}

// The contiguous runs of a strided view in row-major order, as (address, bytes). Size-1 dims are dropped and
// adjacent dims that are contiguous with each other are merged, so a block of whole rows is one run per row and a
// contiguous view is a single run.
class Runs {
 public:
  Runs(uintptr_t base, const int64_t* shape, const int64_t* strides, int ndim, size_t es) : base_(base), es_(es) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; ++d) numel *= shape[d];
    if (numel == 0) {
      done_ = true;
      return;
    }
    // Dims of size > 1, innermost first, merged where contiguous.
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] == 1) continue;
      if (nd_ > 0 && strides[d] == size_[nd_ - 1] * stride_[nd_ - 1]) {
        size_[nd_ - 1] *= shape[d];
        continue;
      }
      size_[nd_] = shape[d];
      stride_[nd_] = strides[d];
      ++nd_;
    }
    run_ = es_;
    first_outer_ = 0;
    if (nd_ > 0 && stride_[0] == 1) {
      run_ = size_t(size_[0]) * es_;
      first_outer_ = 1;
    }
    cur_ = base_;
    off_ = 0;
  }

  bool done() const { return done_; }
  // How many runs the view has in all.
  int64_t count() const {
    if (done_) return 0;
    int64_t c = 1;
    for (int d = first_outer_; d < nd_; ++d) c *= size_[d];
    return c;
  }
  // The next whole runs (the view must be at the start of a run), up to `max` of them, as iovecs; adds their bytes to
  // `bytes` and returns how many.
  int take_runs(iovec* iov, int max, size_t& bytes) {
    int k = 0;
    for (; k < max && !done_; ++k) {
      iov[k].iov_base = reinterpret_cast<void*>(cur_);
      iov[k].iov_len = run_;
      next();
    }
    bytes += size_t(k) * run_;
    return k;
  }
  uintptr_t addr() const { return cur_ + off_; }
  size_t run_bytes() const { return run_; }
  size_t left() const { return run_ - off_; }
  void consume(size_t bytes) {
    off_ += bytes;
    if (off_ == run_) next();
  }

 private:
  void next() {
    off_ = 0;
    for (int d = first_outer_; d < nd_; ++d) {
      if (++idx_[d] < size_[d]) {
        cur_ += uintptr_t(stride_[d] * int64_t(es_));
        return;
      }
      cur_ -= uintptr_t((size_[d] - 1) * stride_[d] * int64_t(es_));
      idx_[d] = 0;
    }
    done_ = true;
  }

  uintptr_t base_;
  size_t es_;
  int nd_ = 0, first_outer_ = 0;
  int64_t size_[kernels::kMaxDims] = {}, stride_[kernels::kMaxDims] = {}, idx_[kernels::kMaxDims] = {};
  size_t run_ = 0, off_ = 0;
  uintptr_t cur_ = 0;
  bool done_ = false;
};

}  // namespace

bool direct_copies_allowed() {
  static const bool allowed = [] {
    if (!config::get_bool(config::Var::kUcxDirect)) return false;
    std::FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f == nullptr) return true;  // no Yama: plain ptrace rules (same user) apply
    int scope = 0;
    const bool read = std::fscanf(f, "%d", &scope) == 1;
    std::fclose(f);
    if (read && scope == 0) return true;
    DT_LOG_INFO("kernel.yama.ptrace_scope is ", scope,
                ": strided blocks between processes travel as packed messages, not by direct copies");
    return false;
  }();
  return allowed;
}

namespace {

Runs runs_of(const kernels::StridedView& v) {
  return Runs(reinterpret_cast<uintptr_t>(v.data), v.shape, v.strides, v.ndim, dtype_size(v.dtype));
}

// Appends [addr, addr + bytes) to an iovec list, extending the last entry when contiguous with it. Returns false
// (and appends nothing) when a new entry is needed and the list is full.
bool can_append(const iovec* iov, int n, uintptr_t addr) {
  return n < kMaxIov || reinterpret_cast<uintptr_t>(iov[n - 1].iov_base) + iov[n - 1].iov_len == addr;
}
void append(iovec* iov, int& n, uintptr_t addr, size_t bytes) {
  if (n > 0 && reinterpret_cast<uintptr_t>(iov[n - 1].iov_base) + iov[n - 1].iov_len == addr) {
    iov[n - 1].iov_len += bytes;
    return;
  }
  iov[n].iov_base = reinterpret_cast<void*>(addr);
  iov[n].iov_len = bytes;
  ++n;
}

}  // namespace

ViewDesc describe_view(const kernels::StridedView& v) {
  ViewDesc d;
  d.addr = reinterpret_cast<uintptr_t>(v.data);
  d.ndim = v.ndim;
  d.dtype = int32_t(v.dtype);
  for (int i = 0; i < v.ndim; ++i) {
    d.shape[i] = v.shape[i];
    d.strides[i] = v.strides[i];
  }
  return d;
}

void run_view_copy(const UcxOp& op, const Task& t) {
  const Device cpu = Device::cpu();
  switch (t.type) {
    case TaskType::kPack:
      kernels::pack(op.view(t.view2), t.dst, cpu);
      return;
    case TaskType::kUnpack:
      kernels::unpack(t.src, op.view(t.view), cpu);
      return;
    case TaskType::kCopyView: {
      const kernels::StridedView& dst = op.view(t.view);
      const kernels::StridedView& src = op.view(t.view2);
      if (std::equal(dst.sizes().begin(), dst.sizes().end(), src.sizes().begin(), src.sizes().end())) {
        kernels::copy(dst, src, cpu);
        return;
      }
      // Same count, different shapes: walk both run lists in row-major order.
      Runs d = runs_of(dst), s = runs_of(src);
      while (!d.done() && !s.done()) {
        const size_t m = std::min(d.left(), s.left());
        std::memcpy(reinterpret_cast<void*>(d.addr()), reinterpret_cast<const void*>(s.addr()), m);
        d.consume(m);
        s.consume(m);
      }
      return;
    }
    default:
      DT_ASSERT(false, "run_view_copy: not a view copy task");
  }
}

void transfer_view(const UcxWorker& worker, const CommState& comm, int peer, const ViewDesc& desc,
                   const kernels::StridedView& mine, bool i_send) {
  auto who = [&] { return worker.peer_name(comm, peer); };
  DT_CHECK_ARG(desc.ndim >= 0 && desc.ndim <= kernels::kMaxDims, "malformed view description from ", who());
  int64_t numel = 1;
  for (int i = 0; i < desc.ndim; ++i) {
    DT_CHECK_ARG(desc.shape[i] >= 0, "malformed view description from ", who());
    numel *= desc.shape[i];
  }
  DT_CHECK_ARG(desc.dtype == int32_t(mine.dtype), who(), i_send ? " expects " : " sends ",
               dtype_name(DType(desc.dtype)), i_send ? " where this rank sends " : " where this rank expects ",
               dtype_name(mine.dtype), " (mismatched collective calls)");
  DT_CHECK_ARG(numel == mine.numel(), who(), i_send ? " expects " : " sends ", numel,
               i_send ? " elements where this rank sends " : " elements where this rank expects ", mine.numel(),
               " (mismatched collective calls: different counts?)");
  Runs local = runs_of(mine);
  Runs remote(uintptr_t(desc.addr), desc.shape, desc.strides, desc.ndim, dtype_size(mine.dtype));
  // The side with more runs copies (Note [Direct view reads]); ties: the receiver.
  const bool sender_copies = i_send ? local.count() > remote.count() : remote.count() > local.count();
  if (sender_copies != i_send) return;
  iovec liov[kMaxIov], riov[kMaxIov];
  if (!i_send && banded_read_pays(local.run_bytes(), mine.nbytes())) {
    // Note [Banded reads]: the remote data in bands through a cache-sized staging buffer, then streamed into the
    // short local runs.
    static thread_local std::vector<char> staging(kBandBytes);
    while (!remote.done()) {
      int rn = 0;
      size_t bytes = 0;
      while (!remote.done() && bytes < staging.size() && can_append(riov, rn, remote.addr())) {
        const size_t m = std::min(remote.left(), staging.size() - bytes);
        append(riov, rn, remote.addr(), m);
        remote.consume(m);
        bytes += m;
      }
      iovec band{staging.data(), bytes};
      move_iovecs(worker, comm, peer, &band, 1, riov, rn, bytes, /*write=*/false);
      for (size_t done = 0; done < bytes;) {
        const size_t m = std::min(local.left(), bytes - done);
        kernels::stream_copy_bytes(reinterpret_cast<void*>(local.addr()), staging.data() + done, m);
        local.consume(m);
        done += m;
      }
    }
    kernels::stream_copy_fence();
    return;
  }
  if (local.count() == 1 || remote.count() == 1) {
    // One side is a single run: the other side's runs as they are, the single run cut to match.
    const bool local_whole = local.count() == 1;
    Runs& many = local_whole ? remote : local;
    Runs& one = local_whole ? local : remote;
    while (!many.done()) {
      iovec single, batch[kMaxIov];
      size_t bytes = 0;
      const int k = many.take_runs(batch, kMaxIov, bytes);
      single.iov_base = reinterpret_cast<void*>(one.addr());
      single.iov_len = bytes;
      one.consume(bytes);
      if (local_whole)
        move_iovecs(worker, comm, peer, &single, 1, batch, k, bytes, i_send);
      else
        move_iovecs(worker, comm, peer, batch, k, &single, 1, bytes, i_send);
    }
    return;
  }
  while (!local.done() && !remote.done()) {
    int ln = 0, rn = 0;
    size_t bytes = 0;
    while (!local.done() && !remote.done() && can_append(liov, ln, local.addr()) &&
           can_append(riov, rn, remote.addr())) {
      const size_t m = std::min(local.left(), remote.left());
      append(liov, ln, local.addr(), m);
      append(riov, rn, remote.addr(), m);
      local.consume(m);
      remote.consume(m);
      bytes += m;
    }
    move_iovecs(worker, comm, peer, liov, ln, riov, rn, bytes, i_send);
  }
}

void move_iovecs(const UcxWorker& worker, const CommState& comm, int peer, const iovec* local, int nlocal,
                 const iovec* remote, int nremote, size_t bytes, bool write) {
  const pid_t pid = pid_t(worker.peer_info(comm.members[size_t(peer)]).pid);
  const ssize_t got = write ? process_vm_writev(pid, local, static_cast<unsigned long>(nlocal), remote,
                                                static_cast<unsigned long>(nremote), 0)
                            : process_vm_readv(pid, local, static_cast<unsigned long>(nlocal), remote,
                                               static_cast<unsigned long>(nremote), 0);
  const char* call = write ? "process_vm_writev" : "process_vm_readv";
  if (got < 0) {
    const int err = errno;
    DT_THROW(RemoteError, write ? "writing " : "reading ", bytes, write ? " bytes to " : " bytes from ",
             worker.peer_name(comm, peer), " with ", call, " failed: ", std::strerror(err),
             err == EPERM ? " (ptrace restrictions: see /proc/sys/kernel/yama/ptrace_scope or the security module's "
                            "ptrace policy, or set DT_UCX_DIRECT=0 to move all data as messages)"
                          : "");
  }
  if (size_t(got) != bytes)
    DT_THROW(RemoteError, call, " with ", worker.peer_name(comm, peer), " moved ", got, " of ", bytes, " bytes");
}

void copy_with_peer(const UcxWorker& worker, const CommState& comm, int peer, void* local, uint64_t remote,
                    size_t bytes, bool write) {
  if (bytes == 0) return;
  iovec l{local, bytes}, r{reinterpret_cast<void*>(uintptr_t(remote)), bytes};
  move_iovecs(worker, comm, peer, &l, 1, &r, 1, bytes, write);
}

void build_views(UcxOp& op, int64_t direct_min_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const bool gather = a.kind == CollectiveKind::kAllGather;
  const UcxWorker& w = op.worker();
  auto direct = [&](int peer, int64_t bytes) {
    return direct_min_bytes >= 0 && bytes >= direct_min_bytes &&
           w.peer_info(op.comm()->members[size_t(peer)]).same_host && direct_copies_allowed();
  };
  // The op's views: the send views, then the recv views (add_view numbers them in order).
  auto add_all = [&](const std::vector<kernels::StridedView>& views) {
    int first = -1;
    for (const auto& v : views) {
      const int id = op.add_view(v);
      if (first < 0) first = id;
    }
    return first;
  };
  const int send0 = add_all(a.send_views), recv0 = add_all(a.recv_views);
  auto sview = [&](int j) { return send0 + (gather ? 0 : j); };
  auto rview = [&](int j) { return recv0 + j; };

  PairDesc* descs = nullptr;    // per peer j: this rank's descriptions (2j) and the peer's (2j + 1), one scratch
  void* packed_once = nullptr;  // all_gather packs its one block once for every packed peer
  int packed_once_task = -1;
  for (int s = 1; s < n; ++s) {
    const int j = (r - s + n) % n;
    const kernels::StridedView& in = op.view(rview(j));
    const kernels::StridedView& out = op.view(sview(j));
    const int64_t in_bytes = int64_t(in.nbytes()), out_bytes = int64_t(out.nbytes());
    const bool in_direct = direct(j, in_bytes), out_direct = direct(j, out_bytes);
    // Packed directions: one message each way (receives first: they are posted first).
    if (!in_direct) {
      if (in.is_contiguous()) {
        op.recv(j, kDataSlot, in_bytes ? in.data : nullptr, in_bytes);
      } else {
        void* buf = op.scratch(in_bytes);
        op.after(op.recv(j, kDataSlot, buf, in_bytes), op.unpack(rview(j), buf));
      }
    }
    if (!out_direct) {
      if (out.is_contiguous()) {
        op.send(j, kDataSlot, out_bytes ? out.data : nullptr, out_bytes);
      } else if (gather) {
        if (packed_once == nullptr) {
          packed_once = op.scratch(std::max<int64_t>(out_bytes, 1));
          packed_once_task = op.pack(packed_once, sview(j));
        }
        op.after(packed_once_task, op.send(j, kDataSlot, packed_once, out_bytes));
      } else {
        void* buf = op.scratch(std::max<int64_t>(out_bytes, 1));
        op.after(op.pack(buf, sview(j)), op.send(j, kDataSlot, buf, out_bytes));
      }
    }
    if (!in_direct && !out_direct) continue;
    // Direct directions: one description each way for both, the copies, one "done" each way after them.
    if (descs == nullptr) descs = static_cast<PairDesc*>(op.scratch(int64_t(sizeof(PairDesc)) * 2 * n));
    PairDesc* mine = &descs[2 * j];
    PairDesc* theirs = &descs[2 * j + 1];
    mine->send = describe_view(out);
    mine->recv = describe_view(in);
    const int got = op.recv(j, kDescSlot, theirs, sizeof(PairDesc));
    op.recv(j, kDoneSlot, nullptr, 0);
    op.send(j, kDescSlot, mine, sizeof(PairDesc));
    const int done = op.send(j, kDoneSlot, nullptr, 0);
    if (in_direct) {
      const int move = op.transfer_view(j, &theirs->send, rview(j), /*i_send=*/false);
      op.after(got, move);
      op.after(move, done);
    }
    if (out_direct) {
      const int move = op.transfer_view(j, &theirs->recv, sview(j), /*i_send=*/true);
      op.after(got, move);
      op.after(move, done);
    }
  }
  // This rank's own block, while the messages move.
  if (op.view(rview(r)).numel() > 0) op.defer(op.copy_view(rview(r), sview(r)));
}

}  // namespace dt::ucx
