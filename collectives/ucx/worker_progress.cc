// UcxWorker's progress: callers driving their own call (drive), and the progress thread that sleeps on the worker's
// event descriptor when nobody drives (Note [UCX progress] in worker.h).
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>

#include "collectives/ucx/worker.h"
#include "core/logging.h"

namespace dt::ucx {

namespace {

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
int64_t now_ns() { return ns_of(Clock::now()); }

}  // namespace

void UcxWorker::drive(UcxWork& work, bool may_block) {
  const auto now = Clock::now();
  drivers_.fetch_add(1);
  last_drive_ns_.store(ns_of(now));
  struct Leave {
    std::atomic<int>& d;
    ~Leave() { d.fetch_sub(1); }
  } leave{drivers_};
  // Another thread progressing holds the lock (the progress thread running a call's local work, a reduction or
  // a copy from a peer, can hold it for milliseconds): a waiter sleeps until it is free rather than spinning on a
  // core that the compute of this or another rank needs; a poll (is_completed) does not wait.
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (may_block) {
    lock.lock();
  } else if (!lock.try_lock()) {
    sched_yield();
    return;
  }
  const bool moved = progress_locked(now);
  if (work.done()) return;
  if (moved) {
    work.last_moved = now;
    return;
  }
  if (work.last_moved == Clock::time_point{}) work.last_moved = now;
  if (!may_block || now - work.last_moved < spin_) {
    lock.unlock();
    if (yield_) sched_yield();
    return;
  }
  // Nothing happened for a while: sleep on the worker's event descriptor (at most 1 ms, to recheck deadlines).
  const ucs_status_t s = ucp_worker_arm(worker_);
  lock.unlock();
  if (s == UCS_OK) {
    pollfd p{efd_, POLLIN, 0};
    poll(&p, 1, 1);
  }
}

void UcxWorker::kick() {
  // Only a progress thread asleep in epoll needs the nudge: one standing down for a driver runs a full progress
  // pass before it sleeps again (thread_sleeping_ is raised before that pass, see thread_main).
  if (kick_fd_ < 0 || !thread_sleeping_.load()) return;
  uint64_t one = 1;
  ssize_t n = write(kick_fd_, &one, sizeof(one));
  (void)n;
}

void UcxWorker::thread_main() {
  epoll_event evs[4];
  while (!stop_.load()) {
    if (drivers_.load() > 0 || now_ns() - last_drive_ns_.load() < 2'000'000) {
      // A caller is driving progress: stay out of its way.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    // Raised before the last progress pass: work submitted after this pass sees it and kicks.
    thread_sleeping_.store(true);
    bool pending = false;
    ucs_status_t s;
    {
      std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
      if (!lock.owns_lock()) {
        thread_sleeping_.store(false);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      progress_locked(Clock::now());
      pending = !running_.empty();
      s = ucp_worker_arm(worker_);
    }
    if (s == UCS_ERR_BUSY || stop_.load()) {
      thread_sleeping_.store(false);
      continue;
    }
    int n = epoll_wait(epfd_, evs, 4, pending ? 100 : 1000);
    thread_sleeping_.store(false);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == kick_fd_) {
        uint64_t v;
        ssize_t r = read(kick_fd_, &v, sizeof(v));
        (void)r;
      }
    }
  }
}

}  // namespace dt::ucx
