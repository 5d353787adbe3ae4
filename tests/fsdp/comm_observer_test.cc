// The FSDP engine's communication observer (fsdp/comm_observer.h) on the thread backend: every collective a group
// issues is reported once as issued and once as completed, every wait once, with the kinds and byte counts that the
// communicators themselves see (CommCounter) or that the shards add up to; nothing is reported when no observer is
// attached.
#include "fsdp/comm_observer.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "collectives/thread/thread_comm.h"
#include "dtensor/comm_counter.h"
#include "fsdp/param_group.h"

namespace dt {
namespace {

using fsdp::CommKind;

class Recorder : public fsdp::CommObserver {
 public:
  void issued(CommKind kind, int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++issued_[kind];
    bytes_[kind] += bytes;
  }
  void completed(CommKind kind, Clock::time_point issued, Clock::time_point seen) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++completed_[kind];
    if (seen < issued) ++out_of_order_;
  }
  void waited(Clock::time_point from, Clock::time_point to) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++waits_;
    if (to < from) ++out_of_order_;
  }
  int64_t issued(CommKind k) const { return at(issued_, k); }
  int64_t bytes(CommKind k) const { return at(bytes_, k); }
  int64_t completed(CommKind k) const { return at(completed_, k); }
  int64_t waits() const { return waits_; }
  int64_t out_of_order() const { return out_of_order_; }

 private:
  static int64_t at(const std::map<CommKind, int64_t>& m, CommKind k) {
    auto it = m.find(k);
    return it == m.end() ? 0 : it->second;
  }
  std::mutex mu_;
  std::map<CommKind, int64_t> issued_, bytes_, completed_;
  int64_t waits_ = 0, out_of_order_ = 0;
};

// Uneven rows over 3 ranks and two reduce dtypes (two reduce-scatters).
const std::vector<std::pair<Shape, DType>> kParams{{{7, 5}, DType::f32}, {{2, 4}, DType::f32}, {{4, 3}, DType::f64}};

// What the communicators saw, summed over the ranks.
struct Seen {
  std::mutex mu;
  int64_t all_gathers = 0, reduce_scatters = 0, all_gather_bytes = 0, reduce_scatter_bytes = 0;
};

// One step of a group on every rank: unshard, a gradient per parameter, reshard, reduce.
void step(const DeviceMesh& mesh, Seen& seen) {
  std::vector<std::string> names;
  std::vector<DTensor> params;
  for (size_t i = 0; i < kParams.size(); ++i) {
    names.push_back("p" + std::to_string(i));
    params.push_back(distribute_tensor(Tensor::randn(kParams[i].first, 10 + i, kParams[i].second), mesh, {Replicate{}},
                                       {}, std::nullopt));
  }
  fsdp::ParamGroup g("group", names, params, mesh, {});
  std::vector<DTensor> grads;  // made first: from_local checks the shapes with a collective of its own
  for (size_t i = 0; i < kParams.size(); ++i) {
    const DTensor& u = g.unsharded_param(i);
    grads.push_back(
        DTensor::from_local(Tensor::randn(kParams[i].first, 20 + i, kParams[i].second), u.mesh(), u.placements()));
  }
  CommCounter counter(mesh);
  g.unshard(false);
  for (size_t i = 0; i < kParams.size(); ++i) g.accumulate_grad(i, grads[i]);
  g.reshard();
  g.reduce_grads();
  g.wait_for_reduce();
  std::lock_guard<std::mutex> lock(seen.mu);
  seen.all_gathers += counter.count(CollectiveKind::kAllGather);
  seen.reduce_scatters += counter.count(CollectiveKind::kReduceScatter);
  seen.all_gather_bytes += counter.bytes(CollectiveKind::kAllGather);
  seen.reduce_scatter_bytes += counter.bytes(CollectiveKind::kReduceScatter);
}

void run_step(bool segments, Seen& seen) {
  run_threads(
      3, [&](CommunicatorPtr world) { step(DeviceMesh::create(world, Device::cpu(), {3}), seen); },
      ThreadCommOptions{.segments = segments});
}

class FsdpCommObserver : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Paths, FsdpCommObserver, testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Segments" : "Flat"; });

TEST_P(FsdpCommObserver, ReportsEveryCollectiveAndWaitOnce) {
  Recorder rec;
  Seen seen;
  {
    const fsdp::ScopedCommObserver attached(rec);
    run_step(GetParam(), seen);
  }
  EXPECT_EQ(fsdp::comm_observer(), nullptr) << "detached with its scope";
  EXPECT_EQ(seen.all_gathers, 3);
  EXPECT_EQ(seen.reduce_scatters, 3 * 2);
  EXPECT_EQ(rec.issued(CommKind::kAllGather), seen.all_gathers);
  EXPECT_EQ(rec.issued(CommKind::kReduceScatter), seen.reduce_scatters);
  EXPECT_EQ(rec.issued(CommKind::kAllReduce), 0);
  for (CommKind k : {CommKind::kAllGather, CommKind::kReduceScatter})
    EXPECT_EQ(rec.completed(k), rec.issued(k)) << "each collective completes once";
  EXPECT_EQ(rec.waits(), seen.all_gathers + seen.reduce_scatters) << "one wait per collective";
  EXPECT_EQ(rec.out_of_order(), 0);
  // The reduce-scatters send every rank's whole padded input; the flat all-gather its padded slot, the segmented one
  // only the shards (each row of every parameter once over the ranks).
  EXPECT_EQ(rec.bytes(CommKind::kReduceScatter), seen.reduce_scatter_bytes);
  int64_t param_bytes = 0;
  for (const auto& [shape, dtype] : kParams) param_bytes += shape_numel(shape) * int64_t(dtype_size(dtype));
  EXPECT_EQ(rec.bytes(CommKind::kAllGather), GetParam() ? param_bytes : seen.all_gather_bytes);
}

TEST(FsdpCommObserverDetached, HearsNothing) {
  Recorder rec;
  { const fsdp::ScopedCommObserver attached(rec); }
  Seen seen;
  run_step(true, seen);
  EXPECT_EQ(seen.all_gathers, 3);
  EXPECT_EQ(rec.issued(CommKind::kAllGather) + rec.issued(CommKind::kReduceScatter) + rec.waits(), 0);
}

TEST(FsdpCommStats, SumTheEvents) {
  fsdp::CommStatsObserver stats;
  using Clock = fsdp::CommObserver::Clock;
  const Clock::time_point t0 = Clock::now();
  stats.issued(CommKind::kAllGather, 100);
  stats.issued(CommKind::kReduceScatter, 30);
  stats.issued(CommKind::kAllReduce, 7);
  stats.completed(CommKind::kAllGather, t0, t0 + std::chrono::milliseconds(250));
  stats.waited(t0, t0 + std::chrono::milliseconds(50));
  fsdp::CommStats s = stats.stats();
  EXPECT_EQ(s.all_gathers, 1);
  EXPECT_EQ(s.reduce_scatters, 1);
  EXPECT_EQ(s.all_reduces, 1);
  EXPECT_EQ(s.bytes, 137);
  EXPECT_DOUBLE_EQ(s.issued_s, 0.25);
  EXPECT_DOUBLE_EQ(s.exposed_s, 0.05);
  stats.reset();
  s = stats.stats();
  EXPECT_EQ(s.all_gathers + s.reduce_scatters + s.all_reduces + s.bytes, 0);
  EXPECT_EQ(s.issued_s + s.exposed_s, 0.0);
}

}  // namespace
}  // namespace dt
