// Work: the handle of an asynchronous collective. A call returns at once; wait() blocks until the operation
// finished (or its deadline passed) and rethrows the error it failed with.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/device.h"

namespace dt {

class FlightRecorder;

class Work {
 public:
  using Duration = std::chrono::milliseconds;
  // A negative timeout means "the communicator's default" (DT_TIMEOUT_S).
  static constexpr Duration kDefaultTimeout{-1};

  virtual ~Work() = default;

  // Blocks until completion; rethrows the operation's error; throws dt::TimeoutError naming the operation (and,
  // when known, the peers it waited for) when `timeout` passes first. The caller's thread may drive progress.
  virtual void wait(Duration timeout = kDefaultTimeout) = 0;
  // Work queued on `stream` of `device` afterwards runs after the operation. Device backends (NCCL) make the stream
  // wait on the device and do not block the host: a failure is then reported by the watchdog and by a later wait().
  // Host backends, whose operations complete on the host, wait() (the default).
  virtual void wait_stream(Stream stream, Device device);
  // Non-blocking: true once the operation finished (successfully or not).
  virtual bool is_completed() = 0;
  // The error the operation failed with, or nullptr (valid once completed).
  virtual std::exception_ptr error() = 0;
  // What this is, for error messages and logs ("all_reduce(count=1024, f32, sum) on ucx[rank 1/4]").
  virtual std::string describe() const = 0;
  // The name of the algorithm that ran the operation ("ring", "direct", ...: see the backend's algorithm table), for
  // tests and logs; "" for backends that do not say and for calls that moved nothing. Static storage.
  virtual const char* algorithm() const { return ""; }

  // The funnel's flight-recorder entry for this call (collectives/flight_recorder.h), told when the operation
  // finishes, even after the caller released the Work. Set once, by Communicator::submit.
  // Wrappers forward it to the Work they wrap.
  virtual void set_record(std::shared_ptr<FlightRecorder> recorder, uint64_t id);

 protected:
  // Subclasses call it when the operation finished (`ok`: without an error); only the first call counts.
  void note_finished(bool ok);
  // While tracing, the time a caller spends in wait() is a "wait" span on its thread's track, naming the call: the
  // communication it exposed (Note [The trace recorder]). When wait() throws (a failure, a timeout), the rank's flight
  // recorders are dumped (Note [Flight-recorder dumps]). Backends open one at the top of wait().
  class WaitSpan {
   public:
    explicit WaitSpan(const Work& work) noexcept;
    ~WaitSpan();
    WaitSpan(const WaitSpan&) = delete;
    WaitSpan& operator=(const WaitSpan&) = delete;

   private:
    const Work* work_;
    int64_t begin_ = 0;
    int unwinding_;  // exceptions in flight when wait() began
  };
  // "; last calls on this rank: ..." from the flight recorder, for timeout errors ("" before set_record).
  std::string recent_calls() const;

 private:
  std::atomic<uint8_t> finished_{0};  // 0 running, 1 ok, 2 failed
  std::atomic<bool> recorded_{false};
  std::shared_ptr<FlightRecorder> recorder_;
  uint64_t record_id_ = 0;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work completed by someone else calling mark_done(): the building block of the host backends. Optionally the
// waiting thread drives progress itself (`progress` is called repeatedly while waiting; it returns true when it
// made progress) instead of sleeping on the condition variable.
class AsyncWork : public Work {
 public:
  explicit AsyncWork(std::string description, Duration default_timeout, std::function<bool()> progress = nullptr);

  void wait(Duration timeout = kDefaultTimeout) override;
  bool is_completed() override;
  std::exception_ptr error() override;
  std::string describe() const override { return description_; }

  // Completes the work; `error` (may be null) is rethrown by wait(). Only the first call counts.
  void mark_done(std::exception_ptr error = nullptr);
  // Called by wait() when the deadline passes, to produce the timeout message (e.g. naming the missing peers).
  void set_timeout_explainer(std::function<std::string()> explain);

 private:
  std::string description_;
  Duration default_timeout_;
  std::function<bool()> progress_;
  std::function<std::string()> explain_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// A Work that is already complete (local no-ops, size-1 groups, zero-byte calls).
WorkPtr completed_work(std::string description, std::exception_ptr error = nullptr);

// The default deadline for every blocking wait: DT_TIMEOUT_S seconds (default 300).
Work::Duration default_timeout();

}  // namespace dt
