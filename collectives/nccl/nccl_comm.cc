#include "collectives/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/debug_communicator.h"
#include "collectives/exchange.h"
#include "collectives/flight_recorder.h"
#include "core/allocator.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/stream.h"
#include "core/trace.h"
#include "kernels/reduce.h"

namespace dt {
namespace nccl_detail {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double seconds(Work::Duration d) { return double(d.count()) / 1000.0; }

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') m += str_cat(" (", last, ")");
  return m;
}

[[noreturn]] void throw_nccl(ncclResult_t r, const std::string& what, ncclComm_t comm) {
  const std::string msg = str_cat(what, ": ", nccl_message(r, comm));
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      throw InvalidArgument(msg);
    case ncclRemoteError:
      throw RemoteError(msg);
    case ncclSystemError:
      throw SystemError(msg);
    case ncclUnhandledCudaError:
      throw CudaError(msg);
    default:
      throw InternalError(msg);
  }
}

// The NCCL type is a column of core/dtype.h's table.
ncclDataType_t nccl_type(DType t) {
  switch (t) {
#define DT_NCCL_(n, type, str, fp, long_name, c_name, c_code, dl_code, st_name, nccl_t) \
  case DType::n:                                                                        \
    return nccl##nccl_t;
    DT_FOR_EACH_DTYPE(DT_NCCL_)
#undef DT_NCCL_
  }
  DT_THROW(Unsupported, "dtype ", dtype_name(t), " has no NCCL equivalent");
}

// Integer avg is a sum followed by divide_by (truncating, as the host backends); see the header for bool.
ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  if (t == DType::b8) return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return is_floating(t) ? ncclAvg : ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

bool needs_divide(ReduceOp op, DType t) { return op == ReduceOp::kAvg && !is_floating(t) && t != DType::b8; }

// Polls a non-blocking communicator until its pending call (init, split, finalize, an enqueue) finished. Returns
// the final state; throws TimeoutError past `deadline` and RemoteError once `aborted` is set.
ncclResult_t poll_ready(ncclComm_t comm, Clock::time_point deadline, const std::atomic<bool>* aborted,
                        const std::string& what, Work::Duration timeout) {
  int spins = 0;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (aborted != nullptr && aborted->load()) DT_THROW(RemoteError, what, ": the communicator was aborted");
    if (Clock::now() >= deadline) DT_THROW(TimeoutError, what, " did not complete within ", seconds(timeout), " s");
    if (++spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(100us);
    }
  }
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // so that ncclCommAbort can interrupt anything (and init/split can have deadlines)
  return cfg;
}

}  // namespace

class NcclWork;

// Everything a communicator, its Works and its watchdog share.
struct NcclState {
  Device device;
  int rank = 0, size = 1;
  std::vector<int> global_ranks;
  Work::Duration timeout{0};
  Work::Duration init_timeout{0};  // deadline of splits (creation has its own, NcclOptions)

  std::mutex mu;              // serializes calls on `comm` (NCCL communicators are not thread-safe)
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  // false for an adopted communicator (Note [Adopted NCCL communicators]): never finalized or destroyed here, and
  // aborted only when `may_abort`.
  bool owned = true;
  bool may_abort = true;
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // device: the barrier word
  size_t scratch_bytes = 0;

  std::shared_ptr<FlightRecorder> recorder;  // the communicator's, quoted by timeout and abort errors

  std::atomic<bool> aborted{false};
  std::mutex reason_mu;
  std::string reason;

  std::mutex events_mu;
  std::vector<cudaEvent_t> free_events;

  // Queued send/recv, issued as one NCCL group by flush_p2p() (Note [NCCL point-to-point groups]). Guarded by mu.
  struct PendingP2p {
    CollectiveArgs args;
    std::shared_ptr<NcclWork> work;
  };
  std::vector<PendingP2p> pending_p2p;

  std::mutex works_mu;
  std::vector<std::shared_ptr<NcclWork>> inflight;

  std::mutex wd_mu;
  std::condition_variable wd_cv;
  bool wd_stop = false;
  std::thread watchdog;

  ~NcclState();
  std::string label() const {
    return str_cat("nccl[rank ", rank, "/", size, " on ", device, owned ? "" : ", adopted", "]");
  }
  std::string abort_reason() {
    std::lock_guard<std::mutex> lock(reason_mu);
    return reason;
  }
  cudaEvent_t acquire_event();
  void release_event(cudaEvent_t e);
  void track(std::shared_ptr<NcclWork> w);
  // Issues the queued send/recv as one group. Called with `mu` held and the device set; throws like an enqueue.
  void flush_p2p_locked();
  // The same from a Work: takes `mu`, sets the device, aborts the communicator when issuing fails.
  void flush_p2p();
  // Fails pending Works (`timed_out` with a TimeoutError, the others with RemoteError) and aborts the NCCL
  // communicator. Must not be called with `mu` held.
  void abort(const std::string& why, const NcclWork* timed_out = nullptr);
  void start_watchdog();
  void stop_watchdog();
  void watchdog_loop();
  void check_once();
};

class NcclWork final : public Work {
 public:
  // `issued`: whether `ev` was recorded already (false for a queued send/recv, recorded when its group is issued).
  NcclWork(std::shared_ptr<NcclState> st, cudaEvent_t ev, std::string description, cudaStream_t caller, bool issued)
      : st_(std::move(st)),
        ev_(ev),
        desc_(std::move(description)),
        start_(Clock::now()),
        caller_(caller),
        issued_(issued) {}
  ~NcclWork() override { st_->release_event(ev_); }

  // Blocks the host until the operation finished, after making the caller's stream wait for it too (so that work
  // the caller queues on that stream afterwards is ordered after the collective on the device as well, whatever the
  // host does).
  void wait(Duration timeout) override {
    WaitSpan span(*this);
    if (timeout.count() < 0) timeout = st_->timeout;
    const auto deadline = Clock::now() + timeout;
    if (!issued_.load()) st_->flush_p2p();
    if (issued_.load()) {
      DeviceGuard guard(st_->device);
      if (cudaStreamWaitEvent(caller_, ev_, 0) != cudaSuccess) cudaGetLastError();  // the poll below reports errors
    }
    int spins = 0;
    while (!poll()) {
      if (Clock::now() >= deadline)
        DT_THROW(TimeoutError, desc_, " did not complete within ", seconds(timeout), " s",
                 st_->aborted.load() ? ": the communicator was aborted: " + st_->abort_reason() : std::string());
      if (++spins < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(50us);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  // The device-side half of wait(): the stream waits for the completion event; the host goes on. An error known
  // already is thrown now; a later one is the watchdog's and wait()'s to report.
  void wait_stream(Stream stream, Device device) override {
    if (!issued_.load()) st_->flush_p2p();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_) std::rethrow_exception(error_);
    }
    DT_ASSERT(issued_.load(), desc_, ": neither issued nor failed after flushing the queued send/recv");
    DeviceGuard guard(device);
    DT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(resolve_stream(stream, device).handle), ev_, 0), desc_,
                  ": wait_stream on ", device);
  }
  bool is_completed() override {
    if (!issued_.load()) st_->flush_p2p();
    return poll();
  }
  // is_completed() without issuing queued send/recv (the watchdog must not split a group the caller is building).
  bool check() { return poll(); }
  std::exception_ptr error() override {
    if (!issued_.load()) st_->flush_p2p();
    poll();
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  std::string describe() const override { return desc_; }

  void fail(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ || error_) return;
      error_ = std::move(e);
    }
    note_finished(false);
  }
  Clock::time_point start() const { return start_; }
  bool issued() const { return issued_.load(); }
  cudaEvent_t event() const { return ev_; }
  void mark_issued() { issued_.store(true); }

 private:
  // True once finished: the completion event fired, or an error was recorded.
  bool poll() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ || error_) return true;
    }
    if (!issued_.load()) return false;  // an event never recorded reads as complete
    cudaError_t e;
    {
      DeviceGuard guard(st_->device);
      e = cudaEventQuery(ev_);
    }
    if (e == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: clear it so that it does not surface elsewhere
      return false;
    }
    bool ok;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (e == cudaSuccess) {
        if (!error_) done_ = true;
      } else {
        cudaGetLastError();
        if (!error_) error_ = std::make_exception_ptr(CudaError(str_cat(desc_, ": ", cudaGetErrorString(e))));
      }
      ok = error_ == nullptr;
    }
    note_finished(ok);
    return true;
  }

  std::shared_ptr<NcclState> st_;
  cudaEvent_t ev_;
  std::string desc_;
  Clock::time_point start_;
  cudaStream_t caller_;
  std::atomic<bool> issued_;
  std::mutex mu_;
  bool done_ = false;
  std::exception_ptr error_;
};

NcclState::~NcclState() {
  try {
    DeviceGuard guard(device);
    for (cudaEvent_t e : free_events) cudaEventDestroy(e);
    if (stream) {
      allocator_for(device).forget_stream(Stream{stream});  // tensors used on it may outlive it
      cudaStreamDestroy(stream);
    }
    if (scratch) cudaFree(scratch);
    cudaGetLastError();
  } catch (...) {
  }
}

cudaEvent_t NcclState::acquire_event() {
  {
    std::lock_guard<std::mutex> lock(events_mu);
    if (!free_events.empty()) {
      cudaEvent_t e = free_events.back();
      free_events.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

void NcclState::release_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(events_mu);
  free_events.push_back(e);
}

void NcclState::track(std::shared_ptr<NcclWork> w) {
  std::lock_guard<std::mutex> lock(works_mu);
  inflight.push_back(std::move(w));
}

void NcclState::abort(const std::string& cause, const NcclWork* timed_out) {
  if (aborted.exchange(true)) return;
  const std::string why =
      may_abort ? cause
                : str_cat(cause,
                          "; the communicator is its owner's (adopted): dtensor no longer uses it, and the owner "
                          "must abort it (ncclCommAbort) to stop its work on the GPU");
  {
    std::lock_guard<std::mutex> lock(reason_mu);
    reason = why;
  }
  DT_LOG_WARN("aborting ", label(), ": ", why);
  std::vector<std::shared_ptr<NcclWork>> works;
  {
    std::lock_guard<std::mutex> lock(works_mu);
    works.swap(inflight);
  }
  const std::string recent = recorder != nullptr ? "; " + recorder->describe_recent() : std::string();
  for (auto& w : works) {
    if (w.get() == timed_out) {
      w->fail(std::make_exception_ptr(TimeoutError(str_cat(why, "; ", label(), " was aborted", recent))));
    } else {
      w->fail(std::make_exception_ptr(
          RemoteError(str_cat(w->describe(), " failed: ", label(), " was aborted: ", why, recent))));
    }
  }
  // Enqueues polling a pending NCCL call see `aborted` and release `mu` promptly. The communicator is taken out under
  // `mu` (later calls find none and fail at once) and aborted after it is released: ncclCommAbort may take long, and
  // no other thread's call should wait on the lock for it.
  ncclComm_t doomed = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::swap(doomed, comm);
  }
  if (doomed != nullptr && may_abort) {
    try {
      DeviceGuard guard(device);
      ncclCommAbort(doomed);
    } catch (...) {
    }
  }
}

void NcclState::start_watchdog() {
  watchdog = std::thread([this] { watchdog_loop(); });
}

void NcclState::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(wd_mu);
    wd_stop = true;
  }
  wd_cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
}

void NcclState::watchdog_loop() {
  set_thread_rank(global_ranks[size_t(rank)]);
  if (cudaSetDevice(device.index) != cudaSuccess) cudaGetLastError();
  std::unique_lock<std::mutex> lock(wd_mu);
  while (!wd_stop) {
    wd_cv.wait_for(lock, 20ms, [&] { return wd_stop; });
    if (wd_stop) break;
    lock.unlock();
    try {
      check_once();
    } catch (const std::exception& e) {
      DT_LOG_ERROR("nccl watchdog of ", label(), ": ", e.what());
    }
    lock.lock();
  }
}

void NcclState::check_once() {
  if (aborted.load()) return;
  std::vector<std::shared_ptr<NcclWork>> works;
  {
    std::lock_guard<std::mutex> lock(works_mu);
    works = inflight;
  }
  const auto now = Clock::now();
  const NcclWork* late = nullptr;
  std::vector<const NcclWork*> finished;
  for (auto& w : works) {
    if (w->check()) {
      finished.push_back(w.get());
    } else if (late == nullptr && now - w->start() > timeout) {
      late = w.get();
    }
  }
  if (!finished.empty()) {
    std::lock_guard<std::mutex> lock(works_mu);
    std::erase_if(inflight, [&](const std::shared_ptr<NcclWork>& w) {
      return std::find(finished.begin(), finished.end(), w.get()) != finished.end();
    });
  }
  if (late != nullptr) {
    abort(str_cat(late->describe(), " did not complete within ", seconds(timeout), " s (watchdog)",
                  late->issued() ? ""
                                 : "; it was never issued: queued send/recv are issued by wait() or is_completed() "
                                   "on one of them, or by the next collective"),
          late);
    return;
  }
  // Asynchronous errors (a peer died, a network failure). An enqueue holding `mu` polls the same state itself.
  std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
  if (!lock.owns_lock() || comm == nullptr) return;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress)) return;
  const std::string why = str_cat("asynchronous NCCL error: ", nccl_message(r != ncclSuccess ? r : state, comm));
  lock.unlock();
  abort(why);
}

}  // namespace nccl_detail

using nccl_detail::Clock;
using nccl_detail::NcclState;
using nccl_detail::NcclWork;

namespace {

// Initialization and splits wait for every peer to arrive and NCCL to set up its transports, which takes seconds
// on a cold node: a short operation timeout (a watchdog test uses 0.3 s) must not bound them.
constexpr Work::Duration kMinInitTimeout = std::chrono::minutes(2);

std::shared_ptr<NcclState> make_state(ncclComm_t comm, Device device, int rank, int size, std::vector<int> globals,
                                      Work::Duration timeout, Work::Duration init_timeout) {
  auto st = std::make_shared<NcclState>();
  st->device = device;
  st->rank = rank;
  st->size = size;
  st->global_ranks = std::move(globals);
  st->timeout = timeout;
  st->init_timeout = init_timeout;
  st->comm = comm;
  DeviceGuard guard(device);
  cuda_check(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  st->scratch_bytes = 8;  // the barrier word
  cuda_check(cudaMalloc(&st->scratch, st->scratch_bytes), "cudaMalloc (nccl scratch)");
  cuda_check(cudaMemset(st->scratch, 0, st->scratch_bytes), "cudaMemset (nccl scratch)");
  return st;
}

bool nothing_to_do(const CollectiveArgs& a) {
  switch (a.kind) {
    case CollectiveKind::kBarrier:
      return false;
    case CollectiveKind::kAllToAllV:
      return std::all_of(a.send_counts.begin(), a.send_counts.end(), [](int64_t c) { return c == 0; }) &&
             std::all_of(a.recv_counts.begin(), a.recv_counts.end(), [](int64_t c) { return c == 0; });
    default:
      return a.count == 0;
  }
}

const std::byte* bytes_at(const void* p, int64_t elems, size_t es) {
  return static_cast<const std::byte*>(p) + size_t(elems) * es;
}
std::byte* bytes_at(void* p, int64_t elems, size_t es) { return static_cast<std::byte*>(p) + size_t(elems) * es; }

}  // namespace

// ---- creation ----

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(int rank, int size, Device device,
                                                           const NcclExchange& exchange, NcclOptions options) {
  DT_CHECK_ARG(size >= 1, "NcclCommunicator::create: size must be at least 1, got ", size);
  DT_CHECK_ARG(rank >= 0 && rank < size, "NcclCommunicator::create: rank ", rank, " is not in [0, ", size, ")");
  DT_CHECK_ARG(device.is_cuda(), "NcclCommunicator::create: NCCL needs a CUDA device, got ", device);
  DT_CHECK_ARG(bool(exchange), "NcclCommunicator::create: no bootstrap exchange given");
  DT_CHECK_ARG(options.timeout.count() > 0, "NcclCommunicator::create: timeout must be positive");
  DT_CHECK_ARG(options.init_timeout.count() >= 0, "NcclCommunicator::create: init_timeout must not be negative");
  const Work::Duration init_timeout =
      options.init_timeout.count() > 0 ? options.init_timeout : std::max(options.timeout, kMinInitTimeout);
  check_device_usable(device);
  DeviceGuard guard(device);
  const std::string what = str_cat("NCCL init of rank ", rank, "/", size, " on ", device);

  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) nccl_detail::throw_nccl(r, what + ": ncclGetUniqueId", nullptr);
    exchange(options.key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    std::string v = exchange(options.key, std::nullopt);
    DT_CHECK_ARG(v.size() == sizeof(id), what, ": the bootstrap value under '", options.key, "' has ", v.size(),
                 " bytes, expected an ncclUniqueId (", sizeof(id), " bytes)");
    std::memcpy(&id, v.data(), sizeof(id));
  }

  ncclConfig_t cfg = nccl_detail::nonblocking_config();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &cfg);
  try {
    if (r == ncclSuccess || r == ncclInProgress) {
      if (comm == nullptr) nccl_detail::throw_nccl(ncclInternalError, what + ": no communicator returned", nullptr);
      r = nccl_detail::poll_ready(comm, Clock::now() + init_timeout, nullptr, what, init_timeout);
    }
    if (r != ncclSuccess) nccl_detail::throw_nccl(r, what, comm);
  } catch (...) {
    if (comm != nullptr) ncclCommAbort(comm);
    throw;
  }
  std::vector<int> globals(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) globals[size_t(i)] = i;
  std::shared_ptr<NcclState> st;
  try {
    st = make_state(comm, device, rank, size, std::move(globals), options.timeout, init_timeout);
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
  DT_LOG_INFO("created ", st->label(), " (NCCL ", nccl_version(), ")");
  return std::make_shared<NcclCommunicator>(std::move(st));
}

// Note [Adopted NCCL communicators]
// A host framework that already runs NCCL (PyTorch's ProcessGroupNCCL, a custom trainer) hands its ncclComm_t in, so
// that dtensor's collectives and the host's share one communicator and the GPU work interleaves on the streams the
// host chooses (the caller's stream: Note [Current streams] in core/stream.h). The communicator stays the host's:
// - dtensor reads rank, size and device from it, issues its calls under its own lock (the host must not issue on
//   the same communicator from another thread at the same time: NCCL communicators are not thread-safe), and never
//   finalizes or destroys it;
// - on a timeout or an asynchronous error dtensor fails its pending and later calls with an error that says the
//   owner must abort the communicator; it calls ncclCommAbort itself only when allowed (may_abort), because an
//   abort frees the handle the host still holds;
// - blocking and non-blocking communicators both work: a non-blocking one's ncclInProgress is polled as for
//   dtensor's own (a blocking one returns ncclSuccess once the call is enqueued);
// - splits (a mesh's per-dim communicators) are new non-blocking communicators that dtensor owns.
std::shared_ptr<NcclCommunicator> NcclCommunicator::adopt(void* nccl_comm, NcclAdoptOptions options) {
  DT_CHECK_ARG(nccl_comm != nullptr, "NcclCommunicator::adopt: the ncclComm_t is null");
  DT_CHECK_ARG(options.timeout.count() > 0, "NcclCommunicator::adopt: timeout must be positive");
  DT_CHECK_ARG(options.init_timeout.count() >= 0, "NcclCommunicator::adopt: init_timeout must not be negative");
  const Work::Duration init_timeout =
      options.init_timeout.count() > 0 ? options.init_timeout : std::max(options.timeout, kMinInitTimeout);
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  const std::string what = "NcclCommunicator::adopt";
  // A non-blocking communicator may still be initializing: wait for it (bounded) before asking it anything.
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r == ncclSuccess && state == ncclInProgress)
    state = nccl_detail::poll_ready(comm, Clock::now() + init_timeout, nullptr, what, init_timeout);
  if (r != ncclSuccess || state != ncclSuccess)
    nccl_detail::throw_nccl(r != ncclSuccess ? r : state, what + ": the communicator is not usable", comm);
  int size = 0, rank = -1, cuda = -1;
  r = ncclCommCount(comm, &size);
  if (r == ncclSuccess) r = ncclCommUserRank(comm, &rank);
  if (r == ncclSuccess) r = ncclCommCuDevice(comm, &cuda);
  if (r != ncclSuccess) nccl_detail::throw_nccl(r, what + ": querying rank, size and device", comm);
  std::vector<int> globals = std::move(options.global_ranks);
  if (globals.empty()) {
    for (int i = 0; i < size; ++i) globals.push_back(i);
  } else {
    DT_CHECK_ARG(int(globals.size()) == size, what, ": ", globals.size(), " global ranks given for a communicator of ",
                 size, " ranks");
    std::vector<int> sorted = globals;
    std::sort(sorted.begin(), sorted.end());
    DT_CHECK_ARG(sorted.front() >= 0 && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), what,
                 ": the global ranks must be distinct and non-negative");
  }
  const Device device = Device::cuda(cuda);
  check_device_usable(device);
  std::shared_ptr<NcclState> st =
      make_state(comm, device, rank, size, std::move(globals), options.timeout, init_timeout);
  st->owned = false;
  st->may_abort = options.may_abort;
  DT_LOG_INFO("adopted ", st->label(), " (NCCL ", nccl_version(), ")");
  return std::make_shared<NcclCommunicator>(std::move(st));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclState> state) : state_(std::move(state)) {
  DT_CHECK_ARG(state_ != nullptr, "NcclCommunicator: null state");
  state_->recorder = flight_recorder();
  state_->start_watchdog();
}

NcclCommunicator::~NcclCommunicator() {
  NcclState& st = *state_;
  st.stop_watchdog();
  try {
    if (!st.aborted.load()) {
      // Let queued operations finish (bounded), then finalize; abort when that does not complete in time.
      const auto deadline = Clock::now() + st.timeout;
      std::vector<std::shared_ptr<NcclWork>> works;
      {
        std::lock_guard<std::mutex> lock(st.works_mu);
        works = st.inflight;
      }
      for (auto& w : works)
        while (!w->is_completed() && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::unique_lock<std::mutex> lock(st.mu);
      if (!st.owned) st.comm = nullptr;  // the owner's to destroy
      if (st.comm != nullptr) {
        DeviceGuard guard(st.device);
        ncclResult_t r = ncclCommFinalize(st.comm);
        if (r == ncclSuccess || r == ncclInProgress) {
          try {
            r = nccl_detail::poll_ready(st.comm, deadline, nullptr, "ncclCommFinalize", st.timeout);
          } catch (const std::exception& e) {
            DT_LOG_WARN(st.label(), ": ", e.what(), "; aborting");
            r = ncclInternalError;
          }
        }
        if (r == ncclSuccess) {
          ncclCommDestroy(st.comm);
        } else {
          ncclCommAbort(st.comm);
        }
        st.comm = nullptr;
      }
    }
  } catch (const std::exception& e) {
    DT_LOG_WARN("destroying ", st.label(), ": ", e.what());
  }
  // Works keep the state alive; the state must not keep them (no cycle).
  std::lock_guard<std::mutex> lock(st.works_mu);
  st.inflight.clear();
}

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
std::vector<int> NcclCommunicator::global_ranks() const { return state_->global_ranks; }
Work::Duration NcclCommunicator::timeout() const { return state_->timeout; }
Device NcclCommunicator::device() const { return state_->device; }
bool NcclCommunicator::supports(const Device& d) const { return d.is_cuda() && d.index == state_->device.index; }
void NcclCommunicator::abort(const std::string& reason) { state_->abort(reason); }
bool NcclCommunicator::aborted() const { return state_->aborted.load(); }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return str_cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

// ---- operations ----

namespace {

// Issues `a` on the internal stream. Called with st.mu held and the device set.
void issue(NcclState& st, const CollectiveArgs& a, const std::string& what) {
  ncclComm_t c = st.comm;
  cudaStream_t s = st.stream;
  const ncclDataType_t t = nccl_detail::nccl_type(a.dtype);
  const size_t es = a.elem_size();
  const auto deadline = Clock::now() + st.timeout;
  auto check = [&](ncclResult_t r, const char* call) {
    if (r == ncclInProgress) r = nccl_detail::poll_ready(c, deadline, &st.aborted, what, st.timeout);
    if (r != ncclSuccess) nccl_detail::throw_nccl(r, str_cat(what, ": ", call), c);
  };
  auto cuda = [&](cudaError_t e, const char* call) { cuda_check(e, str_cat(what, ": ", call)); };
  auto post_divide = [&](void* buf, int64_t count) {
    if (nccl_detail::needs_divide(a.op, a.dtype))
      kernels::divide_by(buf, count, a.dtype, st.size, st.device, Stream{s});
  };

  // all_to_all(v) as grouped point-to-point; the own block is a device copy.
  auto exchange = [&](const std::vector<int64_t>& sc, const std::vector<int64_t>& sd, const std::vector<int64_t>& rc,
                      const std::vector<int64_t>& rd) {
    const void* src = a.send;
    void* staged = nullptr;
    int64_t send_span = 0, recv_span = 0;
    for (int j = 0; j < st.size; ++j) {
      if (sc[size_t(j)]) send_span = std::max(send_span, sd[size_t(j)] + sc[size_t(j)]);
      if (rc[size_t(j)]) recv_span = std::max(recv_span, rd[size_t(j)] + rc[size_t(j)]);
    }
    const auto* s_lo = static_cast<const std::byte*>(a.send);
    const auto* r_lo = static_cast<const std::byte*>(a.recv);
    const bool overlap =
        send_span > 0 && recv_span > 0 && s_lo < r_lo + size_t(recv_span) * es && r_lo < s_lo + size_t(send_span) * es;
    if (overlap) {
      cuda(cudaMallocAsync(&staged, size_t(send_span) * es, s), "cudaMallocAsync (staging)");
      cuda(cudaMemcpyAsync(staged, a.send, size_t(send_span) * es, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      src = staged;
    }
    const int me = st.rank;
    DT_ASSERT(sc[size_t(me)] == rc[size_t(me)], "own block: sends ", sc[size_t(me)], ", receives ", rc[size_t(me)]);
    if (sc[size_t(me)])
      cuda(cudaMemcpyAsync(bytes_at(a.recv, rd[size_t(me)], es), bytes_at(src, sd[size_t(me)], es),
                           size_t(sc[size_t(me)]) * es, cudaMemcpyDeviceToDevice, s),
           "cudaMemcpyAsync (own block)");
    if (st.size > 1) {
      ncclResult_t first = ncclGroupStart();
      if (first == ncclSuccess) {
        for (int j = 0; j < st.size && first == ncclSuccess; ++j) {
          if (j == me) continue;
          if (sc[size_t(j)]) first = ncclSend(bytes_at(src, sd[size_t(j)], es), size_t(sc[size_t(j)]), t, j, c, s);
          if (first == ncclSuccess && rc[size_t(j)])
            first = ncclRecv(bytes_at(a.recv, rd[size_t(j)], es), size_t(rc[size_t(j)]), t, j, c, s);
        }
        ncclResult_t end = ncclGroupEnd();  // always close the group
        if (first == ncclSuccess) first = end;
      }
      check(first, "grouped ncclSend/ncclRecv");
    }
    if (staged) cuda(cudaFreeAsync(staged, s), "cudaFreeAsync (staging)");
  };

  switch (a.kind) {
    case CollectiveKind::kAllGather:
      check(ncclAllGather(a.send, a.recv, size_t(a.count), t, c, s), "ncclAllGather");
      break;
    case CollectiveKind::kReduceScatter:
      check(ncclReduceScatter(a.send, a.recv, size_t(a.count), t, nccl_detail::nccl_op(a.op, a.dtype), c, s),
            "ncclReduceScatter");
      post_divide(a.recv, a.count);
      break;
    case CollectiveKind::kAllReduce:
      check(ncclAllReduce(a.send, a.recv, size_t(a.count), t, nccl_detail::nccl_op(a.op, a.dtype), c, s),
            "ncclAllReduce");
      post_divide(a.recv, a.count);
      break;
    case CollectiveKind::kBroadcast:
      check(ncclBroadcast(a.recv, a.recv, size_t(a.count), t, a.root, c, s), "ncclBroadcast");
      break;
    case CollectiveKind::kAllToAll: {
      std::vector<int64_t> counts(size_t(st.size), a.count), displs(size_t(st.size));
      for (int j = 0; j < st.size; ++j) displs[size_t(j)] = a.count * j;
      exchange(counts, displs, counts, displs);
      break;
    }
    case CollectiveKind::kAllToAllV:
      exchange(a.send_counts, a.send_displs, a.recv_counts, a.recv_displs);
      break;
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv:
      DT_ASSERT(false, what, ": send/recv are issued in groups (flush_p2p_locked)");
      break;
    case CollectiveKind::kBarrier:
      check(ncclAllReduce(st.scratch, st.scratch, 1, ncclInt32, ncclSum, c, s), "ncclAllReduce (barrier)");
      break;
  }
}

}  // namespace

// Note [NCCL point-to-point groups]
// NCCL runs each ungrouped ncclSend/ncclRecv to completion in stream order on the communicator's one stream, so
// "recv from the left, then send to the right" on every rank deadlocks: every recv waits for a send queued behind
// another recv. Like the other backends, a send and a recv must be able to be posted in any order. So send/recv are
// queued here (the internal stream already ordered after the caller's) and issued together in one
// ncclGroupStart/End when a Work of one of them is waited on or tested, or before the next collective. The rule for
// callers (communicator.h): post every send and recv of an exchange before waiting on any of them.

void NcclState::flush_p2p_locked() {
  if (pending_p2p.empty()) return;
  std::vector<PendingP2p> batch;
  batch.swap(pending_p2p);
  const std::string what = str_cat("send/recv group of ", batch.size(), " on ", label());
  if (comm == nullptr) {
    for (auto& p : batch)
      p.work->fail(std::make_exception_ptr(
          RemoteError(str_cat(p.work->describe(), " failed: ", label(), " was aborted: ", abort_reason()))));
    return;
  }
  const auto deadline = Clock::now() + timeout;
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) {
    for (auto& p : batch) {
      const CollectiveArgs& a = p.args;
      const ncclDataType_t t = nccl_detail::nccl_type(a.dtype);
      r = a.kind == CollectiveKind::kSend ? ncclSend(a.send, size_t(a.count), t, a.peer, comm, stream)
                                          : ncclRecv(a.recv, size_t(a.count), t, a.peer, comm, stream);
      if (r != ncclSuccess && r != ncclInProgress) break;
    }
    const ncclResult_t end = ncclGroupEnd();  // always close the group
    if (r == ncclSuccess || r == ncclInProgress) r = end;
  }
  if (r == ncclInProgress) r = nccl_detail::poll_ready(comm, deadline, &aborted, what, timeout);
  if (r != ncclSuccess) nccl_detail::throw_nccl(r, what, comm);
  for (auto& p : batch) {
    cuda_check(cudaEventRecord(p.work->event(), stream), what + ": cudaEventRecord");
    p.work->mark_issued();
  }
}

void NcclState::flush_p2p() {
  try {
    DeviceGuard guard(device);
    std::lock_guard<std::mutex> lock(mu);
    flush_p2p_locked();
  } catch (const std::exception& e) {
    abort(str_cat("issuing queued send/recv failed: ", e.what()));
  }
}

WorkPtr NcclCommunicator::enqueue(const CollectiveArgs& a) {
  NcclState& st = *state_;
  std::string desc = str_cat(a.describe(), " on ", st.label());
  auto aborted_error = [&] {
    return std::make_exception_ptr(
        RemoteError(str_cat(desc, " failed: ", st.label(), " was aborted: ", st.abort_reason())));
  };
  if (st.aborted.load()) return completed_work(desc, aborted_error());
  if (nothing_to_do(a)) return completed_work(desc);
  const bool p2p = a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv;
  const auto caller = static_cast<cudaStream_t>(resolve_stream(a.stream, st.device).handle);
  DeviceGuard guard(st.device);
  std::shared_ptr<NcclWork> work;
  try {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.comm == nullptr) return completed_work(desc, aborted_error());
    // Stream order: the internal stream waits for what the caller queued on its stream so far.
    cudaEvent_t ready = st.acquire_event();
    cudaError_t e = cudaEventRecord(ready, caller);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(st.stream, ready, 0);
    st.release_event(ready);
    cuda_check(e, desc + ": ordering after the caller's stream");
    // The internal stream uses the buffers: freed early, they must not be reused before it is done with them.
    Allocator& pool = allocator_for(st.device);
    pool.record_stream(a.send, Stream{st.stream});
    pool.record_stream(a.recv, Stream{st.stream});
    if (p2p) {
      work = std::make_shared<NcclWork>(state_, st.acquire_event(), desc, caller, false);
      st.pending_p2p.push_back({a, work});
    } else {
      st.flush_p2p_locked();
      {
        trace::GpuSpan gpu(collective_kind_name(a.kind), st.device.index, st.stream);  // Note [GPU spans]
        if (gpu.active()) {
          trace::Deferred args;
          args.format = [](const int64_t* v, std::string& out) { out += "\"bytes\": " + std::to_string(v[0]); };
          args.push(a.input_bytes(st.size));
          gpu.set_args(args);
        }
        issue(st, a, desc);
      }
      cudaEvent_t done = st.acquire_event();
      e = cudaEventRecord(done, st.stream);
      if (e != cudaSuccess) {
        st.release_event(done);
        cuda_check(e, desc + ": cudaEventRecord");
      }
      work = std::make_shared<NcclWork>(state_, done, desc, caller, true);
    }
  } catch (const InvalidArgument&) {
    throw;  // a bad call, the communicator is fine
  } catch (const std::exception& e) {
    st.abort(str_cat("enqueue failed: ", e.what()));
    throw;
  }
  st.track(work);
  return work;
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  NcclState& st = *state_;
  const std::string what = str_cat("split(color=", color, ", key=", key, ") on ", st.label());
  DT_CHECK_ARG(!st.aborted.load(), what, ": the communicator was aborted: ", st.abort_reason());
  DeviceGuard guard(st.device);

  // Every rank's (color, key), to know the new group's members: NCCL does not tell.
  const std::vector<int> members = split_members(all_gather_ints(*this, {color, key}), color);
  std::vector<int> globals;
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    globals.push_back(st.global_ranks[size_t(members[i])]);
    if (members[i] == st.rank) new_rank = int(i);
  }

  ncclComm_t nc = nullptr;
  try {
    std::lock_guard<std::mutex> lock(st.mu);
    DT_CHECK_ARG(st.comm != nullptr, what, ": the communicator was aborted: ", st.abort_reason());
    ncclConfig_t cfg = nccl_detail::nonblocking_config();
    ncclResult_t r = ncclCommSplit(st.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &cfg);
    if (r == ncclSuccess || r == ncclInProgress)
      r = nccl_detail::poll_ready(nc != nullptr ? nc : st.comm, Clock::now() + st.init_timeout, &st.aborted, what,
                                  st.init_timeout);
    if (r != ncclSuccess) nccl_detail::throw_nccl(r, what, st.comm);
  } catch (const InvalidArgument&) {
    if (nc != nullptr) ncclCommAbort(nc);
    throw;
  } catch (const std::exception& e) {
    if (nc != nullptr) ncclCommAbort(nc);
    st.abort(str_cat("split failed: ", e.what()));
    throw;
  }
  if (color < 0) {
    if (nc != nullptr) ncclCommDestroy(nc);
    return nullptr;
  }
  DT_ASSERT(nc != nullptr && new_rank >= 0, what, ": no communicator for a non-negative color");
  std::shared_ptr<NcclState> ns;
  try {
    ns = make_state(nc, st.device, new_rank, int(globals.size()), std::move(globals), st.timeout, st.init_timeout);
  } catch (...) {
    ncclCommAbort(nc);
    throw;
  }
  return maybe_wrap_debug(std::make_shared<NcclCommunicator>(std::move(ns)));
}

}  // namespace dt
