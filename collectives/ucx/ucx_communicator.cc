#include "collectives/ucx/ucx_communicator.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <numeric>
#include <tuple>

#include "collectives/debug_communicator.h"
#include "collectives/exchange.h"
#include "collectives/ucx/algorithms.h"
#include "collectives/ucx/staging.h"
#include "collectives/ucx/tag.h"
#include "collectives/ucx/worker.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"

#ifdef DT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/stream.h"
#endif

namespace dt {

using ucx::CommState;
using ucx::UcxOp;
using ucx::UcxWorker;
using Clock = std::chrono::steady_clock;

namespace {
// A group of one runs its calls of up to this many bytes in the caller at once (Note [UCX progress]).
constexpr int64_t kInlineBytes = int64_t(256) << 10;
}  // namespace

UcxCommunicator::UcxCommunicator(std::shared_ptr<UcxWorker> worker, std::shared_ptr<CommState> state)
    : worker_(std::move(worker)), state_(std::move(state)) {
  std::lock_guard<std::mutex> lock(worker_->mutex());
  state_->recorder = flight_recorder();
}

UcxCommunicator::~UcxCommunicator() = default;

int UcxCommunicator::rank() const { return state_->rank; }
int UcxCommunicator::size() const { return state_->size; }
std::vector<int> UcxCommunicator::global_ranks() const { return state_->members; }
uint32_t UcxCommunicator::id() const { return state_->id; }

bool UcxCommunicator::supports(const Device& device) const {
#ifdef DT_WITH_CUDA
  return device.is_cpu() || device.is_cuda();
#else
  return device.is_cpu();
#endif
}

Work::Duration UcxCommunicator::timeout() const {
  std::lock_guard<std::mutex> lock(worker_->mutex());
  return state_->timeout;
}

std::exception_ptr UcxCommunicator::health() const { return worker_->health(*state_, "ucx " + state_->name); }

void UcxCommunicator::set_timeout(Work::Duration timeout) {
  DT_CHECK_ARG(timeout.count() > 0, "UcxCommunicator::set_timeout: the timeout must be positive, got ", timeout.count(),
               " ms");
  std::lock_guard<std::mutex> lock(worker_->mutex());
  state_->timeout = timeout;
}

ucx::UcxTuning UcxCommunicator::tuning() const {
  std::lock_guard<std::mutex> lock(worker_->mutex());
  return state_->tuning;
}

void UcxCommunicator::set_tuning(const ucx::UcxTuning& tuning) {
  DT_CHECK_ARG(tuning.chunk_bytes > 0 && tuning.reduce_slots > 0,
               "UcxCommunicator::set_tuning: chunk_bytes and reduce_slots must be positive, got ", tuning.chunk_bytes,
               " and ", tuning.reduce_slots);
  std::lock_guard<std::mutex> lock(worker_->mutex());
  state_->tuning = tuning;
}

void UcxCommunicator::set_algorithms(std::string_view spec) {
  ucx::UcxTuning t = tuning();
  t.force_algorithms(spec);
  std::lock_guard<std::mutex> lock(worker_->mutex());
  state_->tuning.forced = t.forced;
}

WorkPtr UcxCommunicator::enqueue(const CollectiveArgs& args) {
  if (args.device.is_cpu()) return enqueue_host(args);
#ifdef DT_WITH_CUDA
  return enqueue_staged(args);
#else
  DT_THROW(Unsupported, args.describe(), " on ucx: device buffers need a CUDA build");
#endif
}

void UcxCommunicator::skip_call(const CollectiveArgs& a) {
  std::unique_lock<std::mutex> lock(worker_->mutex());
  CommState& st = *state_;
  if (a.kind == CollectiveKind::kSend)
    ++st.send_seq[size_t(a.peer)];
  else if (a.kind == CollectiveKind::kRecv)
    ++st.recv_seq[size_t(a.peer)];
  else
    ++st.seq;
}

WorkPtr UcxCommunicator::enqueue_host(const CollectiveArgs& a, std::function<void()> on_success) {
  UcxWorker& w = *worker_;
  std::unique_lock<std::mutex> lock(w.mutex());
  CommState& st = *state_;
  const bool p2p = a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv;
  uint32_t seq;
  if (p2p)
    seq = a.kind == CollectiveKind::kSend ? st.send_seq[size_t(a.peer)]++ : st.recv_seq[size_t(a.peer)]++;
  else
    seq = ++st.seq;
  auto desc = [&] {
    return p2p ? a.describe() + " on " + st.name : str_cat("#", seq, " ", a.describe(), " on ", st.name);
  };
  if (st.failed)
    return completed_work(
        desc(), make_error(st.failed_code, str_cat(desc(), ": the communicator failed earlier: ", st.failed_reason)));
  if (w.has_dead_peer()) {
    if (auto e = w.dead_member_error(st, desc())) return completed_work(desc(), e);
  }

  int64_t bytes = a.count * int64_t(a.elem_size());
  if (a.kind == CollectiveKind::kAllToAllV)
    bytes = std::accumulate(a.send_counts.begin(), a.send_counts.end(), int64_t(0)) * int64_t(a.elem_size());
  // Nothing to move: a group of one with no elements (or a barrier). In a larger group a call with no elements
  // still exchanges its (empty) messages, so that a peer calling with elements is told of the mismatch by the
  // length checks at once instead of waiting out its deadline.
  const bool nothing =
      st.size == 1 && (a.kind == CollectiveKind::kBarrier || (!p2p && a.kind != CollectiveKind::kAllToAllV &&
                                                              !a.has_views() && !a.has_segments() && a.count == 0));
  if (nothing) return completed_work(desc());

  auto op = std::make_shared<UcxOp>(&w, state_, a, seq, st.timeout, Clock::now());
  ucx::AlgorithmChoice choice;
  try {
    choice = ucx::select_algorithm({a.kind, bytes, st.size, st.one_host, a.has_views(), a.has_segments()}, st.tuning);
    choice.algorithm->build(*op, choice.chunk_bytes, st.tuning);
  } catch (const Error& e) {
    // This rank will not take part: the others would wait for it, so fail the group now.
    if (!p2p) w.fail_comm_locked(st, e.code(), e.what(), true);
    throw;
  }
  op->built();
  if (on_success) op->on_success(std::move(on_success));
  auto work = std::make_shared<ucx::UcxWork>(worker_, a, st.name, st.timeout);
  work->set_algorithm(choice.algorithm->name);
  work->set_op(op);
  op->set_work(work);
  if (log_enabled(LogLevel::kDebug))
    DT_LOG_DEBUG(op->description(), ": ", choice.algorithm->name, ", ", op->num_tasks(), " tasks, seq ", seq);
  w.submit_locked(op);
  if (st.size == 1 && bytes <= kInlineBytes && op->started()) op->advance(Clock::now());  // Note [UCX progress]
  const bool done = op->finished();
  lock.unlock();
  if (!done) w.kick();
  return work;
}

std::shared_ptr<Communicator> UcxCommunicator::split(int color, int key) {
  const std::vector<int64_t> all = all_gather_ints(*this, {color, key});
  uint32_t split_no;
  {
    std::lock_guard<std::mutex> lock(worker_->mutex());
    split_no = ++state_->splits;
  }
  if (color < 0) return nullptr;
  const std::vector<int> members = split_members(all, color);
  auto st = std::make_shared<CommState>();
  st->size = int(members.size());
  for (int i = 0; i < st->size; ++i) {
    const int pr = members[size_t(i)];
    if (pr == rank()) st->rank = i;
    st->members.push_back(state_->members[size_t(pr)]);
  }
  // A fresh id from the store: the group's first member draws it and publishes it for the others.
  const std::string id_key = str_cat(worker_->key_prefix(), "/split/", state_->id, "/", split_no, "/", color);
  Store& store = *worker_->store();
  if (st->rank == 0) {
    const int64_t drawn = store.add(worker_->key_prefix() + "/next_comm_id", 1);
    st->id = uint32_t(1 + (drawn - 1) % int64_t(ucx::kCommMask));
    store.set(id_key, std::to_string(st->id));
  } else {
    st->id = uint32_t(std::stoul(store.get(id_key)));
  }
  st->name = str_cat("ucx[comm ", st->id, ", rank ", st->rank, "/", st->size, "]");
  st->send_seq.assign(size_t(st->size), 0);
  st->recv_seq.assign(size_t(st->size), 0);
  {
    std::lock_guard<std::mutex> lock(worker_->mutex());
    st->tuning = state_->tuning;
    st->timeout = state_->timeout;
    worker_->register_comm(st);
  }
  return maybe_wrap_debug(std::make_shared<UcxCommunicator>(worker_, st));
}

#ifdef DT_WITH_CUDA
namespace {
// Pinned host blocks for staging, reused across calls. A block comes back with an event recorded on the stream of
// the call that used it (after its upload was enqueued) and is handed out again only once that event fired, so no
// call waits for the device under the worker lock and no pinned memory is allocated per call once warm.
class PinnedPool {
 public:
  static PinnedPool& instance() {
    static auto* pool = new PinnedPool();  // never destroyed: blocks may come back during static destruction
    return *pool;
  }

  std::shared_ptr<char> acquire(size_t bytes, int device, cudaStream_t stream) {
    const size_t size = std::max<size_t>(std::bit_ceil(std::max<size_t>(bytes, 1)), kMinBlock);
    char* p = nullptr;
    cudaEvent_t ev = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        Block& b = free_[i];
        if (b.size != size) continue;
        const cudaError_t q = cudaEventQuery(b.event);
        if (q == cudaErrorNotReady) {
          cudaGetLastError();
          continue;
        }
        cuda_check(q, "UCX staging: cudaEventQuery");
        p = b.data;
        ev = b.event;
        free_[i] = free_.back();
        free_.pop_back();
        break;
      }
    }
    if (p == nullptr) {
      void* q = nullptr;
      DT_CUDA_CHECK(cudaMallocHost(&q, size), "UCX staging");
      p = static_cast<char*>(q);
      DT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "UCX staging");
    }
    return std::shared_ptr<char>(
        p, [this, size, ev, device, stream](char* data) { release(data, size, ev, device, stream); });
  }

 private:
  static constexpr size_t kMinBlock = size_t(64) << 10;
  struct Block {
    char* data;
    size_t size;
    cudaEvent_t event;
  };

  void release(char* data, size_t size, cudaEvent_t ev, int device, cudaStream_t stream) {
    {
      DeviceGuard guard(Device::cuda(device));
      if (cudaEventRecord(ev, stream) != cudaSuccess) {
        // No event marks the block's last use: wait for the stream instead. When that fails too, nothing says the
        // copies reading or writing the block are over, so the block is never reused (kept, not freed: a copy in
        // flight may still touch it; the device is broken by then and its next call reports why).
        cudaGetLastError();
        const cudaError_t synced = cudaStreamSynchronize(stream);
        cudaGetLastError();
        if (synced != cudaSuccess) {
          DT_LOG_WARN("UCX staging: no event or synchronize on the stream of a ", size, "-byte pinned block (",
                      cudaGetErrorString(synced), "); the block is not reused");
          return;
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back({data, size, ev});
  }

  std::mutex mu_;
  std::vector<Block> free_;
};

// A staged call's Work: the result lands on the device when the upload, enqueued on the call's stream once the host
// call succeeded, has run. wait_stream orders the waiting stream after an event recorded behind that upload (as
// NCCL's Work does with its completion event), not only after the host side: a stream other than the call's would
// otherwise read the buffer before the upload landed.
class StagedWork : public Work {
 public:
  StagedWork(WorkPtr host, std::shared_ptr<Event> uploaded) : host_(std::move(host)), uploaded_(std::move(uploaded)) {}
  void wait(Duration timeout) override { host_->wait(timeout); }
  void wait_stream(Stream stream, Device device) override {
    host_->wait();  // the host call finished: the upload is enqueued and the event recorded behind it
    uploaded_->block(resolve_stream(stream, device));
  }
  bool is_completed() override { return host_->is_completed(); }
  std::exception_ptr error() override { return host_->error(); }
  std::string describe() const override { return host_->describe(); }
  const char* algorithm() const override { return host_->algorithm(); }
  void set_record(std::shared_ptr<FlightRecorder> recorder, uint64_t id) override {
    host_->set_record(std::move(recorder), id);  // the host call is what finishes
  }

 private:
  WorkPtr host_;
  std::shared_ptr<Event> uploaded_;  // empty until the upload is enqueued (and for calls that upload nothing)
};
}  // namespace

// Device buffers without NCCL: the call runs on pinned host copies (Note [Staging device buffers] in staging.h).
// Downloads run on the caller's stream and the caller waits for them here, outside the worker lock; the upload is
// enqueued on that stream when the host call succeeded, so the caller's later work on that stream sees the result.
WorkPtr UcxCommunicator::enqueue_staged(const CollectiveArgs& a) {
  static std::once_flag logged;
  std::call_once(logged, [] {
    DT_LOG_INFO("ucx: device buffers are staged through pinned host memory (slow); NCCL is the backend for GPUs");
  });
  DeviceGuard guard(a.device);  // the downloads below; the upload runs later, on the worker's thread
  const auto stream = static_cast<cudaStream_t>(resolve_stream(a.stream, a.device).handle);
  const int device = a.device.index;
  ucx::StagingOps ops;
  ops.download = [stream](void* host, const void* dev, size_t n) {
    DT_CUDA_CHECK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, stream), "UCX staging (download)");
  };
  auto uploaded = std::make_shared<Event>();  // written by the upload, read after the host call finished
  ops.upload = [stream, device, uploaded](void* dev, const void* host, size_t n) {
    DeviceGuard upload_guard(Device::cuda(device));
    DT_CUDA_CHECK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, stream), "UCX staging (upload)");
    *uploaded = Event::record(Device::cuda(device), Stream{stream});
  };
  ops.wait_downloads = [stream] { DT_CUDA_CHECK(cudaStreamSynchronize(stream), "UCX staging"); };
  ops.host_buffer = [stream, device](size_t n) { return PinnedPool::instance().acquire(n, device, stream); };
  ucx::StagedCall staged(a, size(), ops);
  return std::make_shared<StagedWork>(enqueue_host(staged.host_args(), staged.upload()), uploaded);
}
#endif

// ---- factories ----

std::shared_ptr<Communicator> create_ucx_communicator(std::shared_ptr<Store> store, int rank, int world_size) {
  const ucx::UcxTuning tuning = ucx::UcxTuning::from_env();  // a bad DT_UCX_* fails before any peer is involved
  auto worker = UcxWorker::create(std::move(store), rank, world_size);
  auto st = std::make_shared<CommState>();
  st->id = 0;
  st->rank = rank;
  st->size = world_size;
  st->members.resize(size_t(world_size));
  std::iota(st->members.begin(), st->members.end(), 0);
  st->name = str_cat("ucx[rank ", rank, "/", world_size, "]");
  st->send_seq.assign(size_t(world_size), 0);
  st->recv_seq.assign(size_t(world_size), 0);
  st->tuning = tuning;
  st->timeout = default_timeout();
  {
    std::lock_guard<std::mutex> lock(worker->mutex());
    worker->register_comm(st);
  }
  return std::make_shared<UcxCommunicator>(worker, st);
}

}  // namespace dt
