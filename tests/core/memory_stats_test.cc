// Memory accounting by kind (core/memory_stats.h): scopes, what a Storage charges over its life, moves between
// kinds, peaks and their reset, and threads. The counters are process-wide, so every check compares differences
// against a reading taken before, with sizes chosen per test (odd sizes: the figures are the bytes asked for, not
// the pool's rounded blocks).
#include "core/memory_stats.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/storage.h"

namespace dt {
namespace {

const Device kCpu = Device::cpu();

// current and peak, per kind and total, minus a reading taken before.
struct Delta {
  MemoryUsage before = memory_usage(kCpu);
  int64_t current(MemoryKind k) const { return memory_usage(kCpu).current_of(k) - before.current_of(k); }
  int64_t peak(MemoryKind k) const { return memory_usage(kCpu).peak_of(k) - before.current_of(k); }
  int64_t total() const { return memory_usage(kCpu).total_current - before.total_current; }
  int64_t total_peak() const { return memory_usage(kCpu).total_peak - before.total_current; }
};

TEST(MemoryStats, KindNames) {
  const std::vector<std::string> want = {"activations", "parameters",      "unsharded parameters",
                                         "gradients",   "optimizer state", "communication buffers"};
  ASSERT_EQ(want.size(), kMemoryKinds);
  for (size_t k = 0; k < kMemoryKinds; ++k) EXPECT_EQ(memory_kind_name(MemoryKind(k)), want[k]);
  EXPECT_THROW(memory_kind_name(MemoryKind::kCount), InvalidArgument);
  EXPECT_THROW(MemoryKindScope{MemoryKind(17)}, InvalidArgument);
  EXPECT_EQ(current_memory_kind(), MemoryKind::kActivations);  // a failed scope changes nothing
  EXPECT_THROW(memory_usage(Device::cuda(1000)), InvalidArgument);
}

TEST(MemoryStats, ScopesNestAndTheInnermostWins) {
  EXPECT_EQ(current_memory_kind(), MemoryKind::kActivations);
  Delta d;
  std::shared_ptr<Storage> a, b, c, e;
  {
    MemoryKindScope outer(MemoryKind::kParameters);
    a = Storage::create(1000, kCpu);
    {
      MemoryKindScope inner(MemoryKind::kOptimizerState);
      EXPECT_EQ(current_memory_kind(), MemoryKind::kOptimizerState);
      b = Storage::create(3000, kCpu);
    }
    EXPECT_EQ(current_memory_kind(), MemoryKind::kParameters);
    c = Storage::create(5, kCpu);
  }
  EXPECT_EQ(current_memory_kind(), MemoryKind::kActivations);
  e = Storage::create(77, kCpu);
  EXPECT_EQ(a->memory_kind(), MemoryKind::kParameters);
  EXPECT_EQ(b->memory_kind(), MemoryKind::kOptimizerState);
  EXPECT_EQ(c->memory_kind(), MemoryKind::kParameters);
  EXPECT_EQ(e->memory_kind(), MemoryKind::kActivations);
  EXPECT_EQ(d.current(MemoryKind::kParameters), 1000 + 5);
  EXPECT_EQ(d.current(MemoryKind::kOptimizerState), 3000);
  EXPECT_EQ(d.current(MemoryKind::kActivations), 77);
  EXPECT_EQ(d.current(MemoryKind::kGradients), 0);
  EXPECT_EQ(d.total(), 1000 + 3000 + 5 + 77);
}

TEST(MemoryStats, StorageLifeCycle) {
  Delta d;
  const auto g = MemoryKind::kGradients;
  std::shared_ptr<Storage> s;
  {
    MemoryKindScope scope(g);
    s = Storage::create(1000, kCpu);
  }
  EXPECT_EQ(d.current(g), 1000);
  s->resize(2999);  // a size change
  EXPECT_EQ(d.current(g), 2999);
  EXPECT_EQ(d.total(), 2999);
  s->release();
  s->release();  // twice: still counted out once
  EXPECT_EQ(d.current(g), 0);
  EXPECT_EQ(d.total(), 0);
  {
    // A re-fill is charged to the storage's kind, not to the scope open at the time.
    MemoryKindScope scope(MemoryKind::kCommBuffers);
    s->resize(640);
  }
  EXPECT_EQ(d.current(g), 640);
  EXPECT_EQ(d.current(MemoryKind::kCommBuffers), 0);
  s->resize(640);  // no change
  EXPECT_EQ(d.current(g), 640);
  s.reset();  // destruction
  EXPECT_EQ(d.current(g), 0);
  EXPECT_EQ(d.total(), 0);

  // Destroying a released storage counts nothing twice; an empty storage counts nothing.
  auto r = Storage::create(123, kCpu);
  r->release();
  r.reset();
  auto z = Storage::create(0, kCpu);
  EXPECT_EQ(d.total(), 0);
}

TEST(MemoryStats, WrappedMemoryIsNotCounted) {
  Delta d;
  std::vector<char> buf(4096);
  {
    MemoryKindScope scope(MemoryKind::kParameters);
    auto w = Storage::wrap(buf.data(), buf.size(), kCpu, {});
    EXPECT_EQ(d.total(), 0);
    w->set_memory_kind(MemoryKind::kGradients);
    EXPECT_EQ(w->memory_kind(), MemoryKind::kGradients);
    EXPECT_EQ(d.current(MemoryKind::kGradients), 0);
    EXPECT_EQ(d.current(MemoryKind::kParameters), 0);
  }
  EXPECT_EQ(d.total(), 0);
}

TEST(MemoryStats, SetMemoryKindMovesTheBytes) {
  reset_peak_memory(kCpu);
  Delta d;
  auto s = Storage::create(2048, kCpu);  // a computed tensor...
  EXPECT_EQ(d.current(MemoryKind::kActivations), 2048);
  s->set_memory_kind(MemoryKind::kGradients);  // ...that becomes a gradient
  EXPECT_EQ(s->memory_kind(), MemoryKind::kGradients);
  EXPECT_EQ(d.current(MemoryKind::kActivations), 0);
  EXPECT_EQ(d.current(MemoryKind::kGradients), 2048);
  EXPECT_EQ(d.peak(MemoryKind::kGradients), 2048);
  EXPECT_EQ(d.total(), 2048);
  EXPECT_EQ(d.total_peak(), 2048);  // a move is not an allocation
  EXPECT_THROW(s->set_memory_kind(MemoryKind::kCount), InvalidArgument);

  // Released, it moves nothing; its next fill is charged to the new kind.
  s->release();
  s->set_memory_kind(MemoryKind::kOptimizerState);
  EXPECT_EQ(d.current(MemoryKind::kGradients), 0);
  EXPECT_EQ(d.current(MemoryKind::kOptimizerState), 0);
  s->resize(100);
  EXPECT_EQ(d.current(MemoryKind::kOptimizerState), 100);
  s.reset();
  EXPECT_EQ(d.total(), 0);
}

TEST(MemoryStats, PeaksFollowEveryChangeAndReset) {
  const auto p = MemoryKind::kParameters, o = MemoryKind::kOptimizerState;
  reset_peak_memory(kCpu);
  Delta d;
  {
    MemoryKindScope scope(p);
    auto a = Storage::create(4096, kCpu);
    auto b = Storage::create(8191, kCpu);
    a.reset();
    auto c = Storage::create(1024, kCpu);
    EXPECT_EQ(d.current(p), 8191 + 1024);
    EXPECT_EQ(d.peak(p), 4096 + 8191);
  }
  EXPECT_EQ(d.current(p), 0);
  EXPECT_EQ(d.peak(p), 4096 + 8191);
  // The total's peak is the largest sum held at once, not the sum of the kinds' peaks.
  {
    MemoryKindScope scope(o);
    auto e = Storage::create(4096 + 8191, kCpu);
  }
  EXPECT_EQ(d.peak(o), 4096 + 8191);
  EXPECT_EQ(d.total_peak(), 4096 + 8191);

  reset_peak_memory(kCpu);
  const MemoryUsage u = memory_usage(kCpu);
  for (size_t k = 0; k < kMemoryKinds; ++k) EXPECT_EQ(u.peak[k], u.current[k]) << memory_kind_name(MemoryKind(k));
  EXPECT_EQ(u.total_peak, u.total_current);
  // After a reset the peak follows new allocations from the current value.
  {
    MemoryKindScope scope(p);
    auto f = Storage::create(300, kCpu);
  }
  EXPECT_EQ(d.peak(p), 300);
  EXPECT_EQ(d.total_peak(), 300);
}

TEST(MemoryStats, ScopesArePerThreadAndCountersAreShared) {
  constexpr int kThreads = 4, kPerThread = 200;
  const MemoryKind kinds[kThreads] = {MemoryKind::kParameters, MemoryKind::kGradients, MemoryKind::kOptimizerState,
                                      MemoryKind::kCommBuffers};
  Delta d;
  std::barrier sync(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      MemoryKindScope scope(kinds[t]);
      std::vector<std::shared_ptr<Storage>> held;
      for (int i = 0; i < kPerThread; ++i) {
        held.push_back(Storage::create(size_t(10 + t), kCpu));
        Storage::create(size_t(1000 + i), kCpu);  // made and freed at once, racing with the other threads
      }
      sync.arrive_and_wait();  // everything held: the main thread reads
      sync.arrive_and_wait();
    });
  sync.arrive_and_wait();
  // The threads' scopes did not leak into this one.
  EXPECT_EQ(current_memory_kind(), MemoryKind::kActivations);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(d.current(kinds[t]), int64_t(kPerThread) * (10 + t));
  EXPECT_EQ(d.total(), int64_t(kPerThread) * (10 + 11 + 12 + 13));
  EXPECT_EQ(d.current(MemoryKind::kActivations), 0);
  sync.arrive_and_wait();
  for (auto& th : threads) th.join();
  EXPECT_EQ(d.total(), 0);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(d.current(kinds[t]), 0);
}

TEST(MemoryStats, FormatOneLine) {
  MemoryUsage u;
  u.current[size_t(MemoryKind::kActivations)] = 512;
  u.peak[size_t(MemoryKind::kActivations)] = 1536;
  u.current[size_t(MemoryKind::kParameters)] = int64_t(12) << 20;
  u.peak[size_t(MemoryKind::kParameters)] = int64_t(12) << 20;
  u.current[size_t(MemoryKind::kOptimizerState)] = 0;  // held once: its peak is shown
  u.peak[size_t(MemoryKind::kOptimizerState)] = int64_t(3) << 30;
  u.total_current = 512 + (int64_t(12) << 20);
  u.total_peak = (int64_t(3) << 30) + (int64_t(12) << 20);
  EXPECT_EQ(format_memory_usage(u),
            "activations 512 B (peak 1.5 KiB) · parameters 12.0 MiB (peak 12.0) · optimizer state 0 B (peak 3.0 GiB) · "
            "total 12.0 MiB (peak 3.0 GiB)");
  EXPECT_EQ(format_memory_usage(MemoryUsage{}), "total 0 B (peak 0)");
  // One unit whatever the size, for reports that line figures up.
  EXPECT_EQ(format_mib(0), "0.0 MiB");
  EXPECT_EQ(format_mib(1536.0 * 1024), "1.5 MiB");
  EXPECT_EQ(format_mib(3.0 * 1024 * 1024 * 1024), "3072.0 MiB");
  u = MemoryUsage{};
  u.current[size_t(MemoryKind::kGradients)] = u.total_current = 1536;
  u.peak[size_t(MemoryKind::kGradients)] = u.total_peak = 2048;
  EXPECT_EQ(format_memory_usage(u), "gradients 1.5 KiB (peak 2.0) · total 1.5 KiB (peak 2.0)");
}

}  // namespace
}  // namespace dt
