// The intra-op thread pool (kernels/cpu/parallel.h): one loop at a time, workers woken by a condition variable,
// chunks taken from an atomic counter by the workers and the caller alike.
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "core/config.h"
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
      active_.store(helpers);
      wanted_ = helpers;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    drain();
    // The helpers finish within the loop's own time: spin on the count before sleeping on the condition.
    if (!spin_until([&] { return active_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(m_);
      done_.wait(lock, [&] { return active_.load() == 0; });
    }
    chunk_ = nullptr;
    return true;
  }

 private:
  // Note [Spinning before sleeping]
  // A loop of this pool takes tens to hundreds of microseconds and a training step runs hundreds of them back to
  // back. A worker that sleeps on the condition variable between them is woken through the kernel, and a vCPU that
  // went idle can take longer to wake than the loop takes (steps measured 35 and 69 ms alternately on this
  // machine). So a worker first polls for the next loop for up to kSpin, as OpenMP runtimes do, and only then
  // sleeps; the caller likewise polls for the helpers to finish.
  static constexpr auto kSpin = std::chrono::microseconds(200);
  template <typename Pred>
  static bool spin_until(Pred done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (done()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
  void drain() {
    for (int64_t i; (i = next_.fetch_add(1)) < chunks_;) (*chunk_)(i);
  }
  void work() {
    uint64_t seen = 0;
    while (true) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return generation_.load() != seen && wanted_ > 0; });
      seen = generation_.load();
      --wanted_;
      lock.unlock();
      drain();
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> relock(m_);
        done_.notify_one();
      }
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
  std::atomic<int> active_{0};
  int wanted_ = 0;
  std::atomic<uint64_t> generation_{0};
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

int default_intra_op_threads() {
  int64_t local_ranks = 1;
  for (const char* v : {"DT_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    if (auto s = config::lookup(v)) {
      local_ranks = std::max<int64_t>(1, std::atoll(s->c_str()));
      break;
    }
  const int64_t cores = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  return int(std::max<int64_t>(1, cores / local_ranks));
}

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
