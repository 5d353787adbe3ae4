#include "collectives/communicator.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "collectives/flight_recorder.h"
#include "core/error.h"
#include "core/fault_inject.h"
#include "core/logging.h"
#include "core/trace.h"

namespace dt {

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kAllToAllV:
      return "all_to_allv";
    case CollectiveKind::kSend:
      return "send";
    case CollectiveKind::kRecv:
      return "recv";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "?";
}

bool CollectiveArgs::in_place() const { return send != nullptr && recv != nullptr && send == recv; }

namespace {
// The elements of the span [0, max(displ + count)) of an all_to_allv side (empty blocks do not count).
int64_t span_of(const std::vector<int64_t>& counts, const std::vector<int64_t>& displs) {
  int64_t end = 0;
  for (size_t j = 0; j < counts.size() && j < displs.size(); ++j)
    if (counts[j] > 0) end = std::max(end, displs[j] + counts[j]);
  return end;
}
}  // namespace

int64_t CollectiveArgs::send_bytes(int group_size) const {
  const int64_t n = group_size, es = int64_t(elem_size());
  if (has_views() || has_segments()) return 0;
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kSend:
      return count * es;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return n * count * es;
    case CollectiveKind::kAllToAllV:
      return span_of(send_counts, send_displs) * es;
    case CollectiveKind::kRecv:
    case CollectiveKind::kBarrier:
      return 0;
  }
  return 0;
}

int64_t CollectiveArgs::input_bytes(int group_size) const {
  const bool whole = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllToAll;
  return (whole ? int64_t(group_size) : 1) * count * int64_t(elem_size());
}

int64_t CollectiveArgs::recv_bytes(int group_size) const {
  const int64_t n = group_size, es = int64_t(elem_size());
  if (has_views() || (has_segments() && kind == CollectiveKind::kAllGather)) return 0;
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kRecv:
      return count * es;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
      return n * count * es;
    case CollectiveKind::kAllToAllV:
      return span_of(recv_counts, recv_displs) * es;
    case CollectiveKind::kSend:
    case CollectiveKind::kBarrier:
      return 0;
  }
  return 0;
}

std::string CollectiveArgs::describe() const {
  std::ostringstream os;
  if (kind == CollectiveKind::kBarrier) return "barrier()";
  os << collective_kind_name(kind) << "(count=" << count << ", " << dtype_name(dtype);
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce) os << ", " << reduce_op_name(op);
  if (kind == CollectiveKind::kBroadcast) os << ", root=" << root;
  if (kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv) os << ", peer=" << peer;
  if (!device.is_cpu()) os << ", " << device;
  if (has_views()) os << ", strided views";
  if (has_segments()) os << ", segments";
  os << ")";
  return os.str();
}

// ---- observers ----

namespace {
std::mutex g_obs_mu;
std::map<int, CollectiveObserver>& observers() {
  static auto* m = new std::map<int, CollectiveObserver>();
  return *m;
}
std::atomic<int> g_obs_count{0};
int g_next_obs_id = 1;
// Calls made while a wrapper's enqueue() runs on this thread (its exchange, the forwarded call) are not observed.
thread_local int t_forwarding = 0;
struct ForwardingScope {
  ForwardingScope() { ++t_forwarding; }
  ~ForwardingScope() { --t_forwarding; }
  ForwardingScope(const ForwardingScope&) = delete;
  ForwardingScope& operator=(const ForwardingScope&) = delete;
};
}  // namespace

int add_collective_observer(CollectiveObserver observer) {
  std::lock_guard<std::mutex> lock(g_obs_mu);
  int id = g_next_obs_id++;
  observers().emplace(id, std::move(observer));
  g_obs_count.store(int(observers().size()));
  return id;
}

void remove_collective_observer(int id) {
  std::lock_guard<std::mutex> lock(g_obs_mu);
  observers().erase(id);
  g_obs_count.store(int(observers().size()));
}

// ---- default world ----

namespace {
std::mutex g_world_mu;
CommunicatorPtr g_world;
thread_local CommunicatorPtr t_world;
}  // namespace

void set_default_world(CommunicatorPtr world, bool this_thread_only) {
  if (this_thread_only) {
    t_world = std::move(world);
    return;
  }
  std::lock_guard<std::mutex> lock(g_world_mu);
  g_world = std::move(world);
}

CommunicatorPtr default_world() {
  if (t_world) return t_world;
  std::lock_guard<std::mutex> lock(g_world_mu);
  DT_CHECK_ARG(g_world != nullptr,
               "no world communicator: call dt::init_process_group() (or dt::set_default_world) first, or pass a "
               "communicator explicitly");
  return g_world;
}

CommunicatorPtr default_world_or_null() {
  if (t_world) return t_world;
  std::lock_guard<std::mutex> lock(g_world_mu);
  return g_world;
}

// ---- validation ----

namespace {

// Note [Segmented blocks]: the lists' shapes, and each list sorted, in range and not overlapping.
template <typename What>
void validate_segments(const Communicator& comm, const CollectiveArgs& a, const What& what) {
  const int n = comm.size();
  DT_CHECK_ARG(comm.supports_segments(a.device), what(), ": segmented blocks on ", a.device,
               " are not supported by the ", comm.backend_name(), " backend (stage into contiguous buffers)");
  const bool gather = a.kind == CollectiveKind::kAllGather;
  DT_CHECK_ARG(gather || a.kind == CollectiveKind::kReduceScatter, what(),
               ": segmented blocks are for all_gather and reduce_scatter only");
  DT_CHECK_ARG(!gather || a.dtype == DType::u8, what(), ": a segmented all_gather counts bytes (u8), got ",
               dtype_name(a.dtype));
  const size_t want_send = gather ? 1 : size_t(n), want_recv = gather ? size_t(n) : 0;
  DT_CHECK_ARG(a.send_segments.size() == want_send && a.recv_segments.size() == want_recv, what(), ": got ",
               a.send_segments.size(), " send and ", a.recv_segments.size(), " recv segment lists, expected ",
               want_send, " and ", want_recv);
  DT_CHECK_ARG(gather || a.count == 0 || a.recv != nullptr, what(), ": recv buffer is null");
  const int64_t es = int64_t(a.elem_size()), block = a.count * es;
  auto check_list = [&](const std::vector<Segment>& list, const char* side, size_t j) {
    int64_t end = 0;
    for (size_t k = 0; k < list.size(); ++k) {
      const Segment& s = list[k];
      DT_CHECK_ARG(s.offset >= 0 && s.bytes >= 0 && s.offset <= block && s.bytes <= block - s.offset, what(), ": ",
                   side, " segment ", k, " of list ", j, " spans [", s.offset, ", ", s.offset + s.bytes,
                   "), outside the block of ", block, " bytes");
      DT_CHECK_ARG(s.offset % es == 0 && s.bytes % es == 0, what(), ": ", side, " segment ", k, " of list ", j,
                   " spans [", s.offset, ", ", s.offset + s.bytes, "), not whole ", dtype_name(a.dtype), " elements");
      DT_CHECK_ARG(s.bytes == 0 || s.data != nullptr, what(), ": ", side, " segment ", k, " of list ", j,
                   " has no address");
      DT_CHECK_ARG(s.offset >= end, what(), ": ", side, " segment ", k, " of list ", j, " starts at ", s.offset,
                   ", before the end of the previous one (", end, "): segments must be sorted and not overlap");
      end = s.offset + s.bytes;
    }
  };
  for (size_t j = 0; j < a.send_segments.size(); ++j) check_list(a.send_segments[j], "send", j);
  for (size_t j = 0; j < a.recv_segments.size(); ++j) check_list(a.recv_segments[j], "recv", j);
}

}  // namespace

void validate_collective(const Communicator& comm, const CollectiveArgs& a) {
  // Hot path: the description is only built when a check fails.
  auto what = [&] {
    return a.describe() + " on " + comm.backend_name() + "[rank " + std::to_string(comm.rank()) + "/" +
           std::to_string(comm.size()) + "]";
  };
  DT_CHECK_ARG(a.count >= 0, what(), ": count must be non-negative, got ", a.count);
  // A barrier moves no user buffer: it runs on the communicator's home device, whatever supports() says.
  DT_CHECK_ARG(a.kind == CollectiveKind::kBarrier || comm.supports(a.device), what(), ": buffers on ", a.device,
               " are not supported by the ", comm.backend_name(), " backend");
  const int n = comm.size();
  const bool reduces = a.kind == CollectiveKind::kAllReduce || a.kind == CollectiveKind::kReduceScatter;
  DT_CHECK_ARG(a.kind == CollectiveKind::kBarrier || is_valid_dtype(a.dtype), what(), ": invalid dtype (value ",
               int(a.dtype), ")");
  DT_CHECK_ARG(!reduces || is_valid_reduce_op(a.op), what(), ": invalid reduce op (value ", int(a.op), ")");
  // The largest element count a call may address (all_gather's output holds n blocks): its bytes must fit an int64.
  const int64_t max_elems =
      std::numeric_limits<int64_t>::max() / int64_t(std::max<size_t>(1, a.elem_size())) / std::max(1, n);
  DT_CHECK_ARG(a.count <= max_elems, what(), ": count ", a.count, " is too large (its bytes overflow)");
  auto need = [&](const void* p, const char* name) {
    DT_CHECK_ARG(a.count == 0 || p != nullptr, what(), ": ", name, " buffer is null");
  };
  if (a.has_segments()) {
    validate_segments(comm, a, what);
    return;
  }
  if (a.has_views()) {
    DT_CHECK_ARG(comm.supports_views(a.device), what(), ": strided views on ", a.device, " are not supported by the ",
                 comm.backend_name(), " backend (stage into contiguous buffers)");
    const size_t want_send = a.kind == CollectiveKind::kAllGather ? 1 : size_t(n);
    DT_CHECK_ARG(a.kind == CollectiveKind::kAllGather || a.kind == CollectiveKind::kAllToAllV, what(),
                 ": strided views are for all_gather and all_to_all only");
    DT_CHECK_ARG(a.send_views.size() == want_send && a.recv_views.size() == size_t(n), what(), ": got ",
                 a.send_views.size(), " send and ", a.recv_views.size(), " recv views, expected ", want_send, " and ",
                 n);
    for (size_t j = 0; j < a.send_views.size(); ++j) {
      kernels::check_view(a.send_views[j], "send view");
      DT_CHECK_ARG(a.send_views[j].dtype == a.dtype, what(), ": send view ", j, " is ",
                   dtype_name(a.send_views[j].dtype), ", expected ", dtype_name(a.dtype));
    }
    for (size_t j = 0; j < a.recv_views.size(); ++j) {
      kernels::check_writable_view(a.recv_views[j], "recv view");
      DT_CHECK_ARG(a.recv_views[j].dtype == a.dtype, what(), ": recv view ", j, " is ",
                   dtype_name(a.recv_views[j].dtype), ", expected ", dtype_name(a.dtype));
    }
    const int r = comm.rank();
    const auto& own = a.send_views[a.kind == CollectiveKind::kAllGather ? 0 : size_t(r)];
    DT_CHECK_ARG(own.numel() == a.recv_views[size_t(r)].numel(), what(), ": this rank sends itself ", own.numel(),
                 " elements but its recv view ", r, " holds ", a.recv_views[size_t(r)].numel());
    return;
  }
  switch (a.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllToAll:
      need(a.send, "send");
      need(a.recv, "recv");
      break;
    case CollectiveKind::kBroadcast:
      need(a.recv, "broadcast");
      DT_CHECK_ARG(a.root >= 0 && a.root < n, what(), ": root ", a.root, " is not a rank of a group of ", n);
      break;
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv:
      need(a.kind == CollectiveKind::kSend ? a.send : a.recv, "message");
      DT_CHECK_ARG(a.peer >= 0 && a.peer < n, what(), ": peer ", a.peer, " is not a rank of a group of ", n);
      DT_CHECK_ARG(a.peer != comm.rank(), what(), ": send/recv to itself (rank ", a.peer, ")");
      break;
    case CollectiveKind::kAllToAllV: {
      auto check_vec = [&](const std::vector<int64_t>& v, const char* name) {
        DT_CHECK_ARG(int(v.size()) == n, what(), ": ", name, " has ", v.size(), " entries, expected one per rank (", n,
                     ")");
        for (int64_t x : v) DT_CHECK_ARG(x >= 0, what(), ": negative entry in ", name, ": ", x);
      };
      check_vec(a.send_counts, "send_counts");
      check_vec(a.send_displs, "send_displs");
      check_vec(a.recv_counts, "recv_counts");
      check_vec(a.recv_displs, "recv_displs");
      // Every block's end must be addressable, each buffer present when it has elements, and the blocks received
      // must not overlap (two peers would write the same elements). The non-empty blocks (displ, count) sit on the
      // stack for groups of up to 16: no allocation per call.
      using Block = std::pair<int64_t, int64_t>;
      Block small[16];
      std::vector<Block> large(n > 16 ? size_t(n) : 0);
      Block* recv_blocks = n > 16 ? large.data() : small;
      size_t nblocks = 0;
      int64_t send_total = 0, recv_total = 0;
      for (int j = 0; j < n; ++j) {
        const int64_t sc = a.send_counts[size_t(j)], sd = a.send_displs[size_t(j)];
        const int64_t rc = a.recv_counts[size_t(j)], rd = a.recv_displs[size_t(j)];
        DT_CHECK_ARG(sc <= max_elems && sd <= max_elems - sc && rc <= max_elems && rd <= max_elems - rc, what(),
                     ": the block for rank ", j, " lies beyond any buffer (count + displacement overflows)");
        send_total += sc;
        recv_total += rc;
        if (rc > 0) recv_blocks[nblocks++] = {rd, rc};
      }
      DT_CHECK_ARG(send_total == 0 || a.send != nullptr, what(), ": send buffer is null");
      DT_CHECK_ARG(recv_total == 0 || a.recv != nullptr, what(), ": recv buffer is null");
      std::sort(recv_blocks, recv_blocks + nblocks);
      for (size_t i = 1; i < nblocks; ++i) {
        const auto [prev, prev_count] = recv_blocks[i - 1];
        const auto [cur, cur_count] = recv_blocks[i];
        DT_CHECK_ARG(prev + prev_count <= cur, what(), ": received blocks overlap (elements ", cur, " to ",
                     std::min(prev + prev_count, cur + cur_count) - 1, " would be written twice)");
      }
      break;
    }
    case CollectiveKind::kBarrier:
      break;
  }
}

// ---- the funnel ----

Communicator::Communicator() : recorder_(std::make_shared<FlightRecorder>()) { register_flight_recorder(recorder_); }

Communicator::~Communicator() = default;

void Communicator::forward_to(const Communicator& inner) {
  forwards_ = true;
  recorder_ = inner.recorder_;
}

WorkPtr Communicator::submit(const CollectiveArgs& args) {
  validate_collective(*this, args);
  const bool p2p = args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv;
  if (!p2p) ++sequence_;  // point-to-point calls involve two ranks only, so they do not advance the group's count
  // Observers see the communicator the caller called: a wrapper's, not the calls it makes on the wrapped one.
  if (g_obs_count.load(std::memory_order_relaxed) > 0 && t_forwarding == 0) {
    std::lock_guard<std::mutex> lock(g_obs_mu);
    CollectiveEvent ev{this, &args};
    for (auto& [id, fn] : observers()) fn(ev);
  }
  if (forwards_) {
    ForwardingScope scope;
    return enqueue(args);
  }
  DT_LOG_DEBUG(args.describe(), " on ", backend_name(), " group of ", size());
  if (!recorder_->named()) name_for_trace();  // once: the group's name in traces and flight-recorder dumps
  const uint64_t record = recorder_->record(p2p ? 0 : sequence_, args, args.input_bytes(size()));
  const fault::Action fault = fault::at(collective_kind_name(args.kind));  // Note [Fault injection]
  WorkPtr work;
  try {
    if (fault == fault::Action::kSkip) {
      skip_call(args);
      work = completed_work(args.describe() + " (skipped by fault injection)");
    } else {
      work = enqueue(args);
    }
  } catch (...) {
    recorder_->finish(record, false);
    throw;
  }
  work->set_record(recorder_, record);
  if (fault == fault::Action::kSkip) recorder_->mark_skipped(record);
  fault::perform(fault);
  return work;
}

// The group's name in traces, the same on every member: its backend and global ranks, and when this member already
// traced a group of the same ranks, the count of those before it ("ucx:0,1,2,3#1"). SPMD programs make their first
// call on such groups in the same order on every member, so the counts agree.
void Communicator::name_for_trace() {
  static std::mutex mu;
  static auto* seen = new std::map<std::string, int>;  // (ranks, this member's global rank) -> groups traced
  const std::vector<int> ranks = global_ranks();
  std::string uid = backend_name() + ":";
  for (size_t i = 0; i < ranks.size(); ++i) uid += (i ? "," : "") + std::to_string(ranks[i]);
  int k = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    k = (*seen)[uid + "@" + std::to_string(ranks.at(size_t(rank())))]++;
  }
  if (k > 0) uid += "#" + std::to_string(k);
  recorder_->set_group(uid, ranks, rank());
}

void Communicator::skip_call(const CollectiveArgs& args) {
  DT_THROW(Unsupported, "fault injection: the ", backend_name(), " backend cannot skip ", args.describe(),
           " (only ucx numbers its calls on the wire)");
}

// ---- marshalling ----

namespace {
CollectiveArgs args_for(CollectiveKind kind, const void* send, void* recv, int64_t count, DType dtype, Device device,
                        Stream stream) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.device = device;
  a.stream = stream;
  return a;
}
}  // namespace

WorkPtr Communicator::all_gather(const void* send, void* recv, int64_t count, DType dtype, Device device,
                                 Stream stream) {
  return submit(args_for(CollectiveKind::kAllGather, send, recv, count, dtype, device, stream));
}

WorkPtr Communicator::reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                     Device device, Stream stream) {
  CollectiveArgs a = args_for(CollectiveKind::kReduceScatter, send, recv, count, dtype, device, stream);
  a.op = op;
  return submit(a);
}

WorkPtr Communicator::all_reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, Device device,
                                 Stream stream) {
  CollectiveArgs a = args_for(CollectiveKind::kAllReduce, send, recv, count, dtype, device, stream);
  a.op = op;
  return submit(a);
}

WorkPtr Communicator::broadcast(void* buf, int64_t count, DType dtype, int root, Device device, Stream stream) {
  CollectiveArgs a = args_for(CollectiveKind::kBroadcast, buf, buf, count, dtype, device, stream);
  a.root = root;
  return submit(a);
}

WorkPtr Communicator::all_to_all(const void* send, void* recv, int64_t count, DType dtype, Device device,
                                 Stream stream) {
  return submit(args_for(CollectiveKind::kAllToAll, send, recv, count, dtype, device, stream));
}

WorkPtr Communicator::all_to_allv(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                  void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                  DType dtype, Device device, Stream stream) {
  int64_t total = 0;  // saturates: validate_collective reports the entries that are negative or too large
  for (int64_t c : send_counts)
    if (c > 0 && __builtin_add_overflow(total, c, &total)) total = std::numeric_limits<int64_t>::max();
  CollectiveArgs a = args_for(CollectiveKind::kAllToAllV, send, recv, total, dtype, device, stream);
  a.send_counts = std::move(send_counts);
  a.send_displs = std::move(send_displs);
  a.recv_counts = std::move(recv_counts);
  a.recv_displs = std::move(recv_displs);
  return submit(a);
}

WorkPtr Communicator::all_gather_views(const kernels::StridedView& send, std::vector<kernels::StridedView> recv,
                                       Device device) {
  CollectiveArgs a = args_for(CollectiveKind::kAllGather, nullptr, nullptr, send.numel(), send.dtype, device, {});
  a.send_views = {send};
  a.recv_views = std::move(recv);
  for (const auto& v : a.recv_views) {
    a.send_counts.push_back(send.numel());
    a.recv_counts.push_back(v.numel());
  }
  return submit(a);
}

WorkPtr Communicator::all_gather_segments(std::vector<Segment> send, int64_t block_bytes,
                                          std::vector<std::vector<Segment>> recv, Device device) {
  CollectiveArgs a = args_for(CollectiveKind::kAllGather, nullptr, nullptr, block_bytes, DType::u8, device, {});
  a.send_segments.push_back(std::move(send));
  a.recv_segments = std::move(recv);
  return submit(a);
}

WorkPtr Communicator::reduce_scatter_segments(std::vector<std::vector<Segment>> send, void* recv, int64_t count,
                                              DType dtype, ReduceOp op, Device device) {
  CollectiveArgs a = args_for(CollectiveKind::kReduceScatter, nullptr, recv, count, dtype, device, {});
  a.op = op;
  a.send_segments = std::move(send);
  return submit(a);
}

WorkPtr Communicator::all_to_all_views(std::vector<kernels::StridedView> send, std::vector<kernels::StridedView> recv,
                                       Device device) {
  int64_t total = 0;
  for (const auto& v : send) total += v.numel();
  CollectiveArgs a = args_for(CollectiveKind::kAllToAllV, nullptr, nullptr, total,
                              send.empty() ? DType::f32 : send[0].dtype, device, {});
  a.send_counts.reserve(send.size());
  a.recv_counts.reserve(recv.size());
  for (const auto& v : send) a.send_counts.push_back(v.numel());
  for (const auto& v : recv) a.recv_counts.push_back(v.numel());
  a.send_views = std::move(send);
  a.recv_views = std::move(recv);
  return submit(a);
}

WorkPtr Communicator::send(const void* buf, int64_t count, DType dtype, int peer, Device device, Stream stream) {
  CollectiveArgs a = args_for(CollectiveKind::kSend, buf, nullptr, count, dtype, device, stream);
  a.peer = peer;
  return submit(a);
}

WorkPtr Communicator::recv(void* buf, int64_t count, DType dtype, int peer, Device device, Stream stream) {
  CollectiveArgs a = args_for(CollectiveKind::kRecv, nullptr, buf, count, dtype, device, stream);
  a.peer = peer;
  return submit(a);
}

WorkPtr Communicator::barrier() {
  return submit(args_for(CollectiveKind::kBarrier, nullptr, nullptr, 0, DType::f32, home_device(), {}));
}

// ---- Tensor API ----

namespace {
void check_tensor(const Tensor& t, const char* op, const char* name) {
  DT_CHECK_ARG(t.defined(), op, ": ", name, " tensor is undefined");
  DT_CHECK_ARG(t.is_contiguous(), op, ": ", name, " tensor must be contiguous (shape ", shape_str(t.shape()),
               ", strides ", shape_str(t.strides()), ")");
}
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  DT_CHECK_ARG(a.dtype() == b.dtype(), op, ": input dtype ", dtype_name(a.dtype()), " differs from output dtype ",
               dtype_name(b.dtype()));
  DT_CHECK_ARG(a.device() == b.device(), op, ": input on ", a.device(), " but output on ", b.device());
}
}  // namespace

// Note [Argument order]
// Input and output are both Tensors, so all_gather(output, input) compiles whenever the caller's input is not
// const. We keep plain Tensors rather than typed In/Out wrappers: the size checks below reject a swapped
// all_gather / reduce_scatter on every group of two or more ranks (the output is `size` times the input), the
// swaps they cannot see (all_to_all, whose buffers have equal sizes; any call on a group of one) only arise in code
// calling collectives directly, which inside dtensor is one transition per collective, each tested against a
// one-process reference that a swap fails; and wrappers would change every call site of every layer and binding
// for no other gain. Users of the DTensor API never pass these buffers.
WorkPtr Communicator::all_gather(const Tensor& input, Tensor& output) {
  check_tensor(input, "all_gather", "input");
  check_tensor(output, "all_gather", "output");
  check_same(input, output, "all_gather");
  DT_CHECK_ARG(output.numel() == int64_t(size()) * input.numel(), "all_gather: output has ", output.numel(),
               " elements, expected ", size(), " x ", input.numel());
  return all_gather(input.numel() ? input.data_ptr() : nullptr, output.numel() ? output.data_ptr() : nullptr,
                    input.numel(), input.dtype(), input.device());
}

WorkPtr Communicator::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  check_tensor(input, "reduce_scatter", "input");
  check_tensor(output, "reduce_scatter", "output");
  check_same(input, output, "reduce_scatter");
  DT_CHECK_ARG(input.numel() == int64_t(size()) * output.numel(), "reduce_scatter: input has ", input.numel(),
               " elements, expected ", size(), " x ", output.numel());
  return reduce_scatter(input.numel() ? input.data_ptr() : nullptr, output.numel() ? output.data_ptr() : nullptr,
                        output.numel(), input.dtype(), op, input.device());
}

WorkPtr Communicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce", "");
  void* p = tensor.numel() ? tensor.data_ptr() : nullptr;
  return all_reduce(p, p, tensor.numel(), tensor.dtype(), op, tensor.device());
}

WorkPtr Communicator::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast", "");
  return broadcast(tensor.numel() ? tensor.data_ptr() : nullptr, tensor.numel(), tensor.dtype(), root, tensor.device());
}

WorkPtr Communicator::all_to_all(const Tensor& input, Tensor& output) {
  check_tensor(input, "all_to_all", "input");
  check_tensor(output, "all_to_all", "output");
  check_same(input, output, "all_to_all");
  DT_CHECK_ARG(input.numel() == output.numel() && input.numel() % size() == 0, "all_to_all: input (", input.numel(),
               " elements) and output (", output.numel(),
               " elements) must have the same size, divisible by the group size ", size());
  return all_to_all(input.numel() ? input.data_ptr() : nullptr, output.numel() ? output.data_ptr() : nullptr,
                    input.numel() / size(), input.dtype(), input.device());
}

WorkPtr Communicator::send(const Tensor& tensor, int peer) {
  check_tensor(tensor, "send", "");
  return send(tensor.numel() ? tensor.data_ptr() : nullptr, tensor.numel(), tensor.dtype(), peer, tensor.device());
}

WorkPtr Communicator::recv(Tensor& tensor, int peer) {
  check_tensor(tensor, "recv", "");
  return recv(tensor.numel() ? tensor.data_ptr() : nullptr, tensor.numel(), tensor.dtype(), peer, tensor.device());
}

}  // namespace dt
