// The intra-op thread pool (kernels/cpu/parallel.h): one loop at a time, workers woken by a condition variable,
// chunks taken from an atomic counter by the workers and the caller alike.
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace dt::kernels {

namespace {

class Pool {
 public:
  void resize(int n) {
    std::lock_guard<std::mutex> job(busy_);
    while (int(workers_.size()) < n - 1) workers_.emplace_back([this] { work(); });
    threads_ = n;
  }
  int threads() const { return threads_.load(); }

  // False when another loop is running (the caller runs its loop inline then).
  bool run(int64_t chunks, const std::function<void(int64_t)>& chunk) {
    std::unique_lock<std::mutex> job(busy_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    const int helpers = std::min<int64_t>(threads_.load() - 1, chunks - 1);
    {
      std::lock_guard<std::mutex> lock(m_);
      chunk_ = &chunk;
      chunks_ = chunks;
      next_.store(0);
      active_ = helpers;
      wanted_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return active_ == 0; });
    chunk_ = nullptr;
    return true;
  }

 private:
  void drain() {
    for (int64_t i; (i = next_.fetch_add(1)) < chunks_;) (*chunk_)(i);
  }
  void work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(m_);
    while (true) {
      cv_.wait(lock, [&] { return generation_ != seen && wanted_ > 0; });
      seen = generation_;
      --wanted_;
      lock.unlock();
      drain();
      lock.lock();
      if (--active_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;  // one loop at a time
  std::mutex m_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> workers_;
  std::atomic<int> threads_{1};
  const std::function<void(int64_t)>* chunk_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int active_ = 0, wanted_ = 0;
  uint64_t generation_ = 0;
};

// Never destroyed: its workers wait until the process exits.
Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

}  // namespace

void set_intra_op_threads(int n) {
  DT_CHECK_ARG(n >= 1 && n <= 1024, "set_intra_op_threads: expected 1 to 1024 threads, got ", n);
  pool().resize(n);
}

int intra_op_threads() { return pool().threads(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int t = pool().threads();
  if (t <= 1 || n < 2 * grain) return fn(0, n);
  const int64_t chunks = std::min<int64_t>(t, n / grain);
  const int64_t size = (n + chunks - 1) / chunks;
  const std::function<void(int64_t)> chunk = [&](int64_t i) {
    const int64_t b = i * size, e = std::min(n, b + size);
    if (b < e) fn(b, e);
  };
  if (!pool().run(chunks, chunk)) fn(0, n);
}

}  // namespace dt::kernels
