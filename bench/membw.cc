// The physical limits of host collectives on this machine: memory copy and reduction bandwidth, for the
// single-copy limits that ./dev bench (bench/run.sh) prints beside the large collectives.
//   copy_1t  one thread memcpy of 256 MiB                           GB/s = bytes copied / t
//   copy_2t  two threads, each copying its own 256 MiB              GB/s = bytes copied / t (aggregate Bc)
//   sum_1t   one thread c[i] = a[i] + b[i], float32, 256 MiB arrays  GB/s = 3 streams / t
//   sum_2t   two threads, halves of the same arrays                  GB/s = 3 streams / t (aggregate Bs)
// Median of `reps` repetitions after 2 warm-ups. One JSON line per figure: {"impl":"membw","figure":"copy_2t",
// "gbs":18.0}.
//
//   build/bench/membw [REPS]   (default 9)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "bench/bench_rows.h"
#include "tools/args.h"

namespace {

constexpr size_t kBytes = size_t(256) << 20;

// A page-aligned buffer of `bytes`, every page touched (so that no timed repetition pays the first touch).
struct Buffer {
  explicit Buffer(size_t bytes) {
    if (posix_memalign(&p, 4096, bytes) != 0) std::abort();
    std::memset(p, 1, bytes);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void* p = nullptr;
};

__attribute__((noinline)) void vector_sum(float* __restrict c, const float* __restrict a, const float* __restrict b,
                                          size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

// The median seconds of `reps` repetitions (after 2 untimed ones) of body(t) on threads t = 0 .. threads - 1.
double median_time(int threads, int reps, const std::function<void(int)>& body) {
  std::vector<double> ts;
  for (int r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back(body, t);
    body(0);
    for (auto& th : others) th.join();
    if (r >= 2) ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return dt::bench::median(ts);
}

void emit(const char* figure, double bytes, double seconds) {
  std::printf("{\"impl\":\"membw\",\"figure\":\"%s\",\"gbs\":%.2f}\n", figure, bytes / seconds / 1e9);
  std::fflush(stdout);
}

constexpr const char* kUsage =
    "usage: bench/membw [REPS]\n"
    "  REPS  timed repetitions of each figure, after 2 warm-ups (default 9)\n";

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  dt::tools::read_operands("bench/membw", argc, argv, kUsage, reps);
  {
    Buffer s0(kBytes), d0(kBytes), s1(kBytes), d1(kBytes);
    emit("copy_1t", double(kBytes), median_time(1, reps, [&](int) { std::memcpy(d0.p, s0.p, kBytes); }));
    emit("copy_2t", 2.0 * double(kBytes),
         median_time(2, reps, [&](int t) { t ? std::memcpy(d1.p, s1.p, kBytes) : std::memcpy(d0.p, s0.p, kBytes); }));
  }
  const size_t n = kBytes / sizeof(float), half = n / 2;
  Buffer a(kBytes), b(kBytes), c(kBytes);
  emit("sum_1t", 3.0 * double(kBytes),
       median_time(1, reps, [&](int) { vector_sum(c.as<float>(), a.as<float>(), b.as<float>(), n); }));
  emit("sum_2t", 3.0 * double(kBytes), median_time(2, reps, [&](int t) {
         const size_t off = size_t(t) * half;
         vector_sum(c.as<float>() + off, a.as<float>() + off, b.as<float>() + off, half);
       }));
  return 0;
}
