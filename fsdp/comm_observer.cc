// The FSDP engine's communication observer (fsdp/comm_observer.h).
#include "fsdp/comm_observer.h"

#include <atomic>

namespace dt::fsdp {

namespace {

std::atomic<CommObserver*> g_observer{nullptr};

double seconds(CommObserver::Clock::time_point from, CommObserver::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void set_comm_observer(CommObserver* observer) { g_observer.store(observer, std::memory_order_release); }

CommObserver* comm_observer() { return g_observer.load(std::memory_order_acquire); }

void CommStatsObserver::issued(CommKind kind, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (kind) {
    case CommKind::kAllGather:
      ++stats_.all_gathers;
      break;
    case CommKind::kReduceScatter:
      ++stats_.reduce_scatters;
      break;
    case CommKind::kAllReduce:
      ++stats_.all_reduces;
      break;
  }
  stats_.bytes += bytes;
}

void CommStatsObserver::completed(CommKind, Clock::time_point issued, Clock::time_point seen) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.issued_s += seconds(issued, seen);
}

void CommStatsObserver::waited(Clock::time_point from, Clock::time_point to) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.exposed_s += seconds(from, to);
}

CommStats CommStatsObserver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CommStatsObserver::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = CommStats{};
}

}  // namespace dt::fsdp
