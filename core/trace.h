// The span recorder: what every rank did, when, as a timeline (the profiler's trace for distributed runs).
//
//   DT_TRACE=/tmp/trace dtrun --nproc-per-node 4 dttrain cfg.toml   # every rank writes
//   /tmp/trace/rank-NNNNN.trace.json dttrace summary /tmp/trace                                      # compute, exposed
//   communication, idle, stragglers
//
// or from code (dtensor/dt.h):
//
//   dt::trace::start({.dir = "trace", .rank = r, .world_size = w});
//   for (step...) { dt::trace::StepSpan s(step); ... }
//   { dt::trace::Span s(dt::trace::Category::kUser, "data loading"); ... }
//   dt::trace::stop();   // writes the file
//
// Note [The trace recorder]
// - One clock: steady_clock in nanoseconds (trace::ns / now_ns). The flight recorder, FSDP's communication observer
//   and the benchmarks' timers read the same clock, so a collective's span is the flight recorder's own entry, from
//   issue to completion, not a second timer.
// - Off, a span costs one relaxed atomic load and a predictable branch (enabled()); nothing else is built, no thread
//   runs and no file is written. On, a span is one clock read at each end and one short locked copy into a ring of
//   DT_TRACE_EVENTS events allocated at start: the memory is bounded whatever the length of the run, and the ring
//   keeps the last events (the file says how many were dropped).
// - Events are Chrome trace "complete" events (ph X) on tracks: a track per thread that records (the thread that
//   started the trace is "main") and one per communicator for its collectives (issue to completion overlap the
//   compute, so they cannot nest in the thread's spans). Spans on one thread nest, being scopes.
// - Timestamps are written on rank 0's clock: the process group estimates this rank's offset by ping-pong with rank 0
//   (the exchange with the least round trip wins; half of it is the uncertainty) and stop() adds it, writing both in
//   the file's "dtensor" block. Processes on one host share the clock, so there the offset is about 0.
// - stop() (called by destroy_process_group, or at exit) is the only I/O: it writes DIR/rank-NNNNN.trace.json, which
//   Perfetto and chrome://tracing open as it is; `dttrace merge` joins the ranks.
// - CUDA: an op on a CUDA device has its host span (the launch) and a GPU span (Note [GPU spans] in trace_gpu.cc):
//   the kernels' execution, timed by two CUDA events on the stream, on a track per stream ("cuda:0 stream ...").
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dt::trace {

using Clock = std::chrono::steady_clock;

enum class Category : uint8_t {
  kStep,
  kOp,
  kCollective,
  kWait,
  kFsdp,
  kRedistribute,
  kCheckpoint,
  kOptimizer,
  kUser,
  kGpu,  // work on a CUDA stream, timed by events (GpuSpan)
};
const char* category_name(Category c);  // "step", "op", "collective", "wait", "fsdp", ..., "gpu"

namespace detail {
extern std::atomic<bool> g_on;
}
// Whether spans are recorded now: the one branch every instrumented site takes.
inline bool enabled() noexcept { return detail::g_on.load(std::memory_order_relaxed); }

// The trace clock: steady_clock in nanoseconds (plus DT_TRACE_CLOCK_SKEW_NS, which tests set to check the alignment).
int64_t ns(Clock::time_point t);
int64_t now_ns();

// The body of a JSON object for an event's args, built cheaply: Args().num("step", 3).str("group", "layers.0").
class Args {
 public:
  Args& num(const char* key, int64_t value);
  Args& real(const char* key, double value);
  Args& str(const char* key, std::string_view value);
  Args& boolean(const char* key, bool value);
  Args& ints(const char* key, const std::vector<int>& values);
  Args& raw(const char* key, std::string_view json);  // a value already in JSON (an array made once)
  std::string take() { return std::move(body_); }
  const std::string& body() const { return body_; }

 private:
  void key(const char* k);
  std::string body_;
};

// Tracks. A thread gets one the first time it records (ids 1, 2, ...); set_thread_name names the calling thread's.
// new_track makes a timeline that is not a thread (a communicator's calls): ids from 1000.
int32_t thread_track();
void set_thread_name(const std::string& name);
int32_t new_track(const std::string& name);

// A name that lives as long as the process (events keep the pointer): for names made at run time (an FSDP group's
// module name), interned once per object, not per event.
const char* intern(std::string_view s);

// One complete event, on any track. No-op unless enabled(). `args`: an Args body, or empty.
void record(Category category, const char* name, int64_t begin_ns, int64_t end_ns, int32_t track,
            std::string_view args = {});

// Args made when the file is written, not when the span ends (Note [The trace recorder]: formatting shapes and
// signatures costs more than the span): up to kDeferred integers (ints, interned names as pointers) and the function
// that appends the args body for them.
constexpr size_t kDeferred = 14;
struct Deferred {
  void (*format)(const int64_t* values, std::string& out) = nullptr;
  int64_t values[kDeferred] = {};
  size_t size = 0;
  bool push(int64_t v) {
    if (size == kDeferred) return false;
    values[size++] = v;
    return true;
  }
  void push_name(const char* interned) { push(int64_t(reinterpret_cast<intptr_t>(interned))); }
  static const char* name_at(const int64_t* values, size_t i) {
    return reinterpret_cast<const char*>(intptr_t(values[i]));
  }
};
void record(Category category, const char* name, int64_t begin_ns, int64_t end_ns, int32_t track, const Deferred& args);
// Appends `[4, 8]` for n dims, and a name as a JSON string, for Deferred formatters.
void append_dims(std::string& out, const int64_t* dims, size_t n);
void append_string(std::string& out, std::string_view s);

// A scope recorded on the calling thread's track (when tracing was on at its start). `name`: static storage or
// intern()ed.
class Span {
 public:
  Span(Category category, const char* name) noexcept : on_(enabled()), category_(category), name_(name) {
    if (on_) begin_ = now_ns();
  }
  ~Span() {
    if (on_) finish();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  bool active() const { return on_; }
  void set_args(std::string args) {
    if (on_) args_ = std::move(args);
  }
  void set_args(const Deferred& args) {
    if (on_) deferred_ = args;
  }

 private:
  void finish();
  bool on_;
  Category category_;
  const char* name_;
  int64_t begin_ = 0;
  std::string args_;
  Deferred deferred_;
};

// The work a scope queues on a CUDA stream, timed on the device (Note [GPU spans] in core/trace_gpu.cc): an event
// recorded on the stream at the start and one at the end; the span (category gpu, on the stream's track) is made
// once the work finished. `cuda_device`: the CUDA device's index, or -1 (the CPU: nothing); `stream`: a
// cudaStream_t, or null for the thread's current stream of that device. Nothing in a build without CUDA or while
// tracing is off. `name`: static storage or intern()ed. Never throws: a CUDA error drops the span.
class GpuSpan {
 public:
  GpuSpan(const char* name, int cuda_device, void* stream) noexcept;
  ~GpuSpan();
  GpuSpan(const GpuSpan&) = delete;
  GpuSpan& operator=(const GpuSpan&) = delete;
  bool active() const { return begin_ != nullptr; }
  void set_args(const Deferred& args) {
    if (active()) args_ = args;
  }

 private:
  const char* name_;
  int device_ = 0;
  void* stream_ = nullptr;        // the resolved cudaStream_t
  void* begin_ = nullptr;         // the start event (cudaEvent_t); null: inactive
  std::shared_ptr<void> anchor_;  // the device's anchor when the span started
  Deferred args_;
};
// Turns the GPU spans whose work finished into events (block: waits for all of them first). StepSpan's end, stop()
// and a full queue call it; a program that traces CUDA work without steps may call it.
void drain_gpu_spans(bool block);

// A training step's span (category step, args {"step": step}): what dttrace's per-step summary divides time by.
class StepSpan {
 public:
  explicit StepSpan(int64_t step) : span_(Category::kStep, "step") {
    if (span_.active()) span_.set_args(Args().num("step", step).take());
  }
  ~StepSpan() {
    if (span_.active()) drain_gpu_spans(false);
  }

 private:
  Span span_;
};

// ---- control ----
struct Options {
  std::string dir;  // the folder of the rank files (made when missing)
  int rank = 0;     // of the job (the file's name and its pid in the timeline)
  int world_size = 1;
  size_t capacity = 0;  // events kept (a ring); 0: DT_TRACE_EVENTS
};
// Starts recording (InvalidArgument when already started or the folder cannot be made). The calling thread's track
// is "main".
void start(const Options& options);
// Stops and writes DIR/rank-NNNNN.trace.json; returns its path ("" when not started). Errors writing are reported
// as IoError naming the file.
std::string stop();
bool started();
// This rank's clock against the reference rank's: written timestamps are local + offset_ns.
void set_clock_offset(int64_t offset_ns, int64_t uncertainty_ns);
// "rank-00003.trace.json" in dir.
std::string rank_file(const std::string& dir, int rank);

struct Stats {
  int64_t recorded = 0;  // since start
  int64_t dropped = 0;   // overwritten in the ring
  size_t capacity = 0;
};
Stats stats();

// A copy of the events kept so far (for tests and in-process tools), oldest first, timestamps local.
struct Event {
  int64_t begin_ns = 0, end_ns = 0;
  const char* name = "";
  Category category = Category::kUser;
  int32_t track = 0;
  std::string args;   // formatted (snapshot() formats the deferred ones)
  Deferred deferred;  // in the ring: args still to format
};
std::vector<Event> snapshot();

}  // namespace dt::trace
