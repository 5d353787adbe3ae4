#include "collectives/work.h"

#include <algorithm>
#include <exception>

#include "collectives/communicator.h"
#include "collectives/flight_recorder.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/trace.h"

namespace dt {

Work::Duration default_timeout() {
  return Work::Duration(std::max<int64_t>(1, int64_t(config::get_seconds(config::Var::kTimeoutS) * 1000)));
}

void Work::wait_stream(Stream stream, Device device) {
  (void)stream;
  (void)device;
  wait();
}

void Work::set_record(std::shared_ptr<FlightRecorder> recorder, uint64_t id) {
  recorder_ = std::move(recorder);
  record_id_ = id;
  recorded_.store(true);
  // Finished before the record was attached (a call completed at once): tell it now. Both sides may tell; the state
  // is the same.
  if (const uint8_t f = finished_.load()) recorder_->finish(record_id_, f == 1, algorithm());
}

std::string Work::recent_calls() const {
  return recorded_.load() ? "; " + recorder_->describe_recent() : std::string();
}

Work::WaitSpan::WaitSpan(const Work& work) noexcept : work_(&work), unwinding_(std::uncaught_exceptions()) {
  if (trace::enabled()) begin_ = trace::now_ns();
}

Work::WaitSpan::~WaitSpan() {
  if (std::uncaught_exceptions() > unwinding_) {
    try {
      dump_flight_recorders("a wait on " + work_->describe() + " failed or timed out");
    } catch (...) {  // the wait's own error is what the caller must see
    }
  }
  if (begin_ == 0 || !trace::enabled()) return;
  if (work_->recorded_.load())
    trace::record(trace::Category::kWait, "wait", begin_, trace::now_ns(), trace::thread_track(),
                  work_->recorder_->wait_args(work_->record_id_));
  else
    trace::record(trace::Category::kWait, "wait", begin_, trace::now_ns(), trace::thread_track());
}

void Work::note_finished(bool ok) {
  uint8_t expected = 0;
  if (!finished_.compare_exchange_strong(expected, ok ? 1 : 2)) return;
  if (recorded_.load()) recorder_->finish(record_id_, ok, algorithm());
}

AsyncWork::AsyncWork(std::string description, Duration default_timeout, std::function<bool()> progress)
    : description_(std::move(description)), default_timeout_(default_timeout), progress_(std::move(progress)) {}

void AsyncWork::mark_done(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = error;
  }
  note_finished(error == nullptr);
  cv_.notify_all();
}

void AsyncWork::set_timeout_explainer(std::function<std::string()> explain) { explain_ = std::move(explain); }

bool AsyncWork::is_completed() {
  if (progress_) progress_();
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr AsyncWork::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void AsyncWork::wait(Duration timeout) {
  WaitSpan span(*this);
  if (timeout.count() < 0) timeout = default_timeout_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_) {
    if (std::chrono::steady_clock::now() >= deadline) {
      lock.unlock();
      std::string why = explain_ ? explain_() : std::string();
      DT_THROW(TimeoutError, description_, " did not complete within ", timeout.count() / 1000.0, " s",
               why.empty() ? "" : ": ", why, recent_calls());
    }
    if (progress_) {
      // Drive progress on the caller's thread (UCX): cheaper than waking a progress thread.
      lock.unlock();
      bool moved = progress_();
      lock.lock();
      if (!moved && !done_) cv_.wait_for(lock, std::chrono::microseconds(50));
    } else {
      cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
    }
  }
  if (error_) std::rethrow_exception(error_);
}

namespace {
class CompletedWork : public Work {
 public:
  CompletedWork(std::string d, std::exception_ptr e) : d_(std::move(d)), e_(e) { note_finished(e == nullptr); }
  void wait(Duration) override {
    if (e_) std::rethrow_exception(e_);
  }
  bool is_completed() override { return true; }
  std::exception_ptr error() override { return e_; }
  std::string describe() const override { return d_; }

 private:
  std::string d_;
  std::exception_ptr e_;
};
}  // namespace

WorkPtr completed_work(std::string description, std::exception_ptr error) {
  return std::make_shared<CompletedWork>(std::move(description), error);
}

}  // namespace dt
