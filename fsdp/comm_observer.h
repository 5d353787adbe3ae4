// What the FSDP engine tells about its collectives, to whoever attaches an observer: the benchmarks' "share hidden
// behind compute" (CommStatsObserver), and later a trace recorder. With nothing attached, the engine's collective
// path reads one atomic pointer and takes no lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace dt::fsdp {

enum class CommKind { kAllGather, kReduceScatter, kAllReduce };

// The events of every group in this process (all threads), on one clock. Called from the threads that drive the
// groups, concurrently: an observer synchronizes itself.
class CommObserver {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~CommObserver() = default;
  // A collective was issued; `bytes`: this rank's bytes sent into it.
  virtual void issued(CommKind kind, int64_t bytes) = 0;
  // The collective issued at `issued` was first seen complete at `seen` (once per collective).
  virtual void completed(CommKind kind, Clock::time_point issued, Clock::time_point seen) = 0;
  // A caller blocked waiting for a collective (wait_for_unshard, wait_for_reduce) from `from` to `to`.
  virtual void waited(Clock::time_point from, Clock::time_point to) = 0;
};

// Attaches `observer` for every group of the process (null detaches). The caller keeps it alive until it detaches
// it and no group is between two engine calls that report (after wait_for_unshard / wait_for_reduce on every group).
void set_comm_observer(CommObserver* observer);
CommObserver* comm_observer();

// Attaches an observer for its own lifetime (declare it after the observer, before the groups it hears).
class ScopedCommObserver {
 public:
  explicit ScopedCommObserver(CommObserver& observer) { set_comm_observer(&observer); }
  ~ScopedCommObserver() { set_comm_observer(nullptr); }
  ScopedCommObserver(const ScopedCommObserver&) = delete;
  ScopedCommObserver& operator=(const ScopedCommObserver&) = delete;
};

// The figures the benchmarks print: issued_s sums each collective's time from issue to observed completion;
// exposed_s sums the time callers blocked waiting for one. hidden share = 1 - exposed_s / issued_s.
struct CommStats {
  double issued_s = 0;
  double exposed_s = 0;
  int64_t all_gathers = 0, reduce_scatters = 0, all_reduces = 0;
  int64_t bytes = 0;  // this rank's bytes sent into the collectives
};

// Sums the events into CommStats.
class CommStatsObserver : public CommObserver {
 public:
  void issued(CommKind kind, int64_t bytes) override;
  void completed(CommKind kind, Clock::time_point issued, Clock::time_point seen) override;
  void waited(Clock::time_point from, Clock::time_point to) override;
  CommStats stats() const;
  void reset();

 private:
  mutable std::mutex mu_;
  CommStats stats_;
};

}  // namespace dt::fsdp
