// The collective call contract: CallSignature (what ranks must agree on, its digest in the UCX tag), split
// membership, the bytes a call's buffers span, the debug wrapper communicator, the flight recorder quoted by timeout
// errors, and barrier() on a communicator that refuses host buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "collectives/call_signature.h"
#include "collectives/debug_communicator.h"
#include "collectives/exchange.h"
#include "collectives/flight_recorder.h"
#include "collectives/ucx/tag.h"
#include "thread_test_util.h"

namespace dt::test {
namespace {

using namespace std::chrono_literals;

template <typename E, typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

constexpr CollectiveKind kKinds[] = {
    CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce,
    CollectiveKind::kBroadcast, CollectiveKind::kAllToAll,      CollectiveKind::kAllToAllV,
    CollectiveKind::kSend,      CollectiveKind::kRecv,          CollectiveKind::kBarrier,
};
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                             DType::i32, DType::i64, DType::u8,  DType::b8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};

// The digest the UCX tag carried before CallSignature existed (written out again as the reference).
uint32_t reference_digest(const CollectiveArgs& a) {
  uint32_t h = uint32_t(a.dtype) * 7u;
  if (a.kind == CollectiveKind::kAllReduce || a.kind == CollectiveKind::kReduceScatter) h += uint32_t(a.op) * 3u + 1u;
  if (a.kind == CollectiveKind::kBroadcast) h += uint32_t(a.root) * 5u + 2u;
  return (h ^ (h >> 4) ^ (h >> 8)) & 0xFu;
}

TEST(CallSignature, DigestEqualsTheTagsDigest) {
  int checked = 0;
  for (CollectiveKind kind : kKinds)
    for (DType dt : kDTypes)
      for (ReduceOp op : kOps)
        for (int root : {0, 1, 2, 3, 7, 100, 16383}) {
          CollectiveArgs a;
          a.kind = kind;
          a.dtype = dt;
          a.op = op;
          a.root = root;
          a.count = 12;
          if (kind == CollectiveKind::kBarrier) a.dtype = DType::f32;  // what barrier() marshals
          EXPECT_EQ(CallSignature::of(a).digest(), reference_digest(a)) << a.describe();
          EXPECT_EQ(ucx::tag_signature(a), reference_digest(a)) << a.describe();
          ++checked;
        }
  EXPECT_EQ(checked, 9 * 9 * 5 * 7);
  // Spot values, so that a change of both formulas is seen too.
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllReduce;
  a.dtype = DType::f32;
  a.op = ReduceOp::kSum;
  EXPECT_EQ(CallSignature::of(a).digest(), reference_digest(a));
  a.kind = CollectiveKind::kBroadcast;
  a.root = 5;
  EXPECT_EQ(CallSignature::of(a).digest(), reference_digest(a));
}

TEST(CallSignature, EqualityIsWhatRanksMustAgreeOn) {
  auto args = [](CollectiveKind k, int64_t count, DType dt, ReduceOp op, int root) {
    CollectiveArgs a;
    a.kind = k;
    a.count = count;
    a.dtype = dt;
    a.op = op;
    a.root = root;
    return CallSignature::of(a);
  };
  using K = CollectiveKind;
  const auto f32 = DType::f32, i32 = DType::i32;
  const auto sum = ReduceOp::kSum, mx = ReduceOp::kMax;
  EXPECT_EQ(args(K::kAllReduce, 4, f32, sum, 0), args(K::kAllReduce, 4, f32, sum, 3));  // root: broadcast only
  EXPECT_NE(args(K::kAllReduce, 4, f32, sum, 0), args(K::kAllReduce, 4, f32, mx, 0));
  EXPECT_NE(args(K::kAllReduce, 4, f32, sum, 0), args(K::kAllReduce, 5, f32, sum, 0));
  EXPECT_NE(args(K::kAllReduce, 4, f32, sum, 0), args(K::kAllReduce, 4, i32, sum, 0));
  EXPECT_EQ(args(K::kAllGather, 4, f32, sum, 0), args(K::kAllGather, 4, f32, mx, 0));  // op: reductions only
  EXPECT_NE(args(K::kAllGather, 4, f32, sum, 0), args(K::kAllToAll, 4, f32, sum, 0));
  EXPECT_EQ(args(K::kAllToAllV, 4, f32, sum, 0), args(K::kAllToAllV, 9, f32, sum, 0));  // counts differ by design
  EXPECT_NE(args(K::kAllToAllV, 4, f32, sum, 0), args(K::kAllToAllV, 4, i32, sum, 0));
  EXPECT_NE(args(K::kBroadcast, 4, f32, sum, 0), args(K::kBroadcast, 4, f32, sum, 1));
  EXPECT_EQ(args(K::kBarrier, 0, f32, sum, 0), args(K::kBarrier, 0, i32, mx, 2));
  EXPECT_NE(CallSignature::of_split(), args(K::kBarrier, 0, f32, sum, 0));
  EXPECT_EQ(CallSignature::of_split(), CallSignature::of_split());

  EXPECT_EQ(args(K::kAllReduce, 4, f32, sum, 0).describe(), "all_reduce(count=4, f32, sum)");
  EXPECT_EQ(args(K::kBroadcast, 4, i32, sum, 1).describe(), "broadcast(count=4, i32, root=1)");
  EXPECT_EQ(args(K::kAllGather, 8, f32, mx, 0).describe(), "all_gather(count=8, f32)");
  EXPECT_EQ(args(K::kAllToAllV, 8, f32, sum, 0).describe(), "all_to_allv(f32)");
  EXPECT_EQ(args(K::kBarrier, 0, f32, sum, 0).describe(), "barrier()");
  EXPECT_EQ(CallSignature::of_split().describe(), "split()");

  for (CollectiveKind k : kKinds) {
    const CallSignature s = args(k, 17, DType::bf16, ReduceOp::kMin, 2);
    int64_t ints[CallSignature::kInts];
    s.to_ints(ints);
    EXPECT_EQ(CallSignature::from_ints(ints), s) << s.describe();
  }
}

TEST(CollectiveArgs, SendAndRecvBytes) {
  CollectiveArgs a;
  a.dtype = DType::f64;
  a.count = 3;
  const int n = 4;
  auto both = [&](CollectiveKind k) {
    a.kind = k;
    return std::make_pair(a.send_bytes(n), a.recv_bytes(n));
  };
  EXPECT_EQ(both(CollectiveKind::kAllGather), std::make_pair(int64_t(24), int64_t(96)));
  EXPECT_EQ(both(CollectiveKind::kReduceScatter), std::make_pair(int64_t(96), int64_t(24)));
  EXPECT_EQ(both(CollectiveKind::kAllReduce), std::make_pair(int64_t(24), int64_t(24)));
  EXPECT_EQ(both(CollectiveKind::kBroadcast), std::make_pair(int64_t(24), int64_t(24)));
  EXPECT_EQ(both(CollectiveKind::kAllToAll), std::make_pair(int64_t(96), int64_t(96)));
  EXPECT_EQ(both(CollectiveKind::kSend), std::make_pair(int64_t(24), int64_t(0)));
  EXPECT_EQ(both(CollectiveKind::kRecv), std::make_pair(int64_t(0), int64_t(24)));
  EXPECT_EQ(both(CollectiveKind::kBarrier), std::make_pair(int64_t(0), int64_t(0)));
  // all_to_allv: up to the end of the last non-empty block (an empty block's displacement does not count).
  a.send_counts = {2, 0, 5, 0};
  a.send_displs = {0, 100, 2, 100};
  a.recv_counts = {1, 1, 0, 0};
  a.recv_displs = {4, 0, 50, 60};
  EXPECT_EQ(both(CollectiveKind::kAllToAllV), std::make_pair(int64_t(7 * 8), int64_t(5 * 8)));
}

// The members of every color by an independent rule: rank r's new rank is the number of same-color ranks that
// precede it in (key, rank) order.
TEST(SplitMembers, UnevenColorsAndKeys) {
  for (int n = 1; n <= 9; ++n)
    for (uint64_t seed = 0; seed < 20; ++seed) {
      std::vector<int64_t> ck;
      for (int r = 0; r < n; ++r) {
        ck.push_back(int64_t(mix(seed * 31 + uint64_t(r)) % 4) - 1);  // colors -1..2: some ranks in no group
        ck.push_back(int64_t(mix(seed * 77 + uint64_t(r)) % 3) - 1);  // keys -1..1: ties broken by rank
      }
      std::map<int64_t, std::vector<int>> expected;
      for (int r = 0; r < n; ++r) {
        if (ck[size_t(2 * r)] < 0) continue;
        auto& list = expected[ck[size_t(2 * r)]];
        int pos = 0;
        for (int q = 0; q < n; ++q)
          if (ck[size_t(2 * q)] == ck[size_t(2 * r)] && (ck[size_t(2 * q + 1)] < ck[size_t(2 * r + 1)] ||
                                                         (ck[size_t(2 * q + 1)] == ck[size_t(2 * r + 1)] && q < r)))
            ++pos;
        if (list.size() <= size_t(pos)) list.resize(size_t(pos) + 1, -1);
        list[size_t(pos)] = r;
      }
      for (int64_t color = -1; color <= 3; ++color) {
        const std::vector<int> got = split_members(ck, color);
        if (color < 0 || !expected.count(color)) {
          EXPECT_TRUE(got.empty()) << "n=" << n << " seed=" << seed << " color=" << color;
        } else {
          EXPECT_EQ(got, expected[color]) << "n=" << n << " seed=" << seed << " color=" << color;
        }
      }
    }
}

TEST(FlightRecorder, KeepsTheLastCallsInARing) {
  FlightRecorder rec;
  EXPECT_EQ(rec.describe_recent(), "no calls recorded on this rank");
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllReduce;
  a.count = 4;
  std::vector<uint64_t> ids;
  for (uint64_t s = 1; s <= 70; ++s) ids.push_back(rec.record(s, a));
  for (size_t i = 0; i + 1 < ids.size(); ++i) rec.finish(ids[i], i % 2 == 0);
  const auto all = rec.recent();
  ASSERT_EQ(all.size(), FlightRecorder::kCapacity);
  EXPECT_EQ(all.front().seq, 7u);
  EXPECT_EQ(all.back().seq, 70u);
  EXPECT_EQ(all.back().state, FlightRecorder::State::kIssued);
  EXPECT_EQ(all[all.size() - 2].state, FlightRecorder::State::kCompleted);  // call 69 (ids[68]: even)
  EXPECT_EQ(all[all.size() - 3].state, FlightRecorder::State::kFailed);     // call 68
  rec.finish(ids[0], false);  // call 1 left the ring: call 65, in its slot, stays completed
  EXPECT_EQ(rec.recent()[65 - 7].state, FlightRecorder::State::kCompleted);
  const std::string d = rec.describe_recent(2);
  EXPECT_NE(d.find("#69 all_reduce(count=4, f32, sum) completed"), std::string::npos) << d;
  EXPECT_NE(d.find("#70 all_reduce(count=4, f32, sum) pending"), std::string::npos) << d;
  EXPECT_EQ(d.find("#68"), std::string::npos) << d;
}

// One rank skips a collective: the survivor's timeout error quotes its pending call and the completed one before.
TEST(FlightRecorder, TimeoutErrorQuotesThePendingCall) {
  if (debug_collectives_enabled()) GTEST_SKIP() << "DT_DEBUG_COLLECTIVES is set: the wrapper's exchange times out";
  ThreadCommOptions opts;
  opts.timeout = 300ms;
  std::atomic<bool> rank0_failed{false};
  std::string error;
  run_threads(
      2,
      [&](CommunicatorPtr comm) {
        std::vector<float> x(4, 1.0f);
        comm->all_reduce(x.data(), x.data(), 4, DType::f32, ReduceOp::kSum, Device::cpu())->wait();
        if (comm->rank() == 1) {  // skips the second call, but stays alive (else rank 0 fails at once)
          while (!rank0_failed.load()) std::this_thread::sleep_for(5ms);
          return;
        }
        error = message_of<TimeoutError>(
            [&] { comm->all_reduce(x.data(), x.data(), 4, DType::f32, ReduceOp::kSum, Device::cpu())->wait(); });
        rank0_failed = true;
      },
      opts);
  EXPECT_NE(error.find("last calls on this rank: #1 all_reduce(count=4, f32, sum) completed, "
                       "#2 all_reduce(count=4, f32, sum) pending"),
            std::string::npos)
      << error;
}

// A communicator whose buffers must not be on the host (as NCCL's): it forwards to a thread communicator.
class RefusesHost final : public Communicator {
 public:
  explicit RefusesHost(CommunicatorPtr inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return "refuses-host"; }
  bool supports(const Device& device) const override { return !device.is_cpu(); }
  std::vector<int> global_ranks() const override { return inner_->global_ranks(); }
  std::shared_ptr<Communicator> split(int, int) override { return nullptr; }

 protected:
  WorkPtr enqueue(const CollectiveArgs& args) override {
    seen_device = args.device;
    return inner_->submit(args);
  }

 public:
  Device seen_device = Device::cuda(0);

 private:
  CommunicatorPtr inner_;
};

TEST(Barrier, PassesTheFunnelOfACommunicatorThatRefusesHostBuffers) {
  run_threads(3, [&](CommunicatorPtr comm) {
    RefusesHost c(comm);
    c.barrier()->wait();
    EXPECT_EQ(c.seen_device, c.home_device());
    float x = 1;
    const std::string e =
        message_of<InvalidArgument>([&] { c.all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu()); });
    EXPECT_NE(e.find("are not supported by the refuses-host backend"), std::string::npos) << e;
  });
}

TEST(DebugCommunicator, MatchingCallsRunAndMismatchesNameTheRanks) {
  run_threads(3, [&](CommunicatorPtr world) {
    auto comm = std::make_shared<DebugCommunicator>(world);
    const int r = comm->rank();
    std::vector<float> x(4, float(r + 1));
    comm->all_reduce(x.data(), x.data(), 4, DType::f32, ReduceOp::kSum, Device::cpu())->wait();
    EXPECT_EQ(x, std::vector<float>(4, 6.0f));
    comm->barrier()->wait();
    // all_to_allv counts differ per rank by design: not a mismatch.
    std::vector<float> in(size_t(3 * (r + 1)), float(r)), out(6, -1.0f);
    std::vector<int64_t> sc(3, r + 1), sd = {0, r + 1, 2 * (r + 1)}, rc = {1, 2, 3}, rd = {0, 1, 3};
    comm->all_to_allv(in.data(), sc, sd, out.data(), rc, rd, DType::f32, Device::cpu())->wait();
    EXPECT_EQ(out, std::vector<float>({0, 1, 1, 2, 2, 2}));

    auto sub = comm->split(r == 2 ? 1 : 0, -r);
    EXPECT_NE(dynamic_cast<DebugCommunicator*>(sub.get()), nullptr) << "a wrapper's splits are wrapped";
    EXPECT_EQ(sub->rank(), r == 2 ? 0 : 1 - r);

    // Rank 1 calls something else as the 4th group call.
    const std::string e = message_of<InvalidArgument>([&] {
      if (r == 1) return comm->all_gather(x.data(), x.data(), 1, DType::f32, Device::cpu())->wait();
      comm->all_reduce(x.data(), x.data(), 4, DType::f32, ReduceOp::kMax, Device::cpu())->wait();
    });
    EXPECT_NE(e.find("mismatched collectives on thread group of 3: rank 0 called all_reduce(count=4, f32, max) as "
                     "call #4; rank 1 (global 1) called all_gather(count=1, f32) as call #4"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find("rank 2 (global 2) called"), std::string::npos) << e;
  });
}

// Communication counters see the call once, on the communicator the caller called, and not the exchange.
TEST(DebugCommunicator, ObserversSeeEachCallOnceOnTheWrapper) {
  run_threads(2, [&](CommunicatorPtr world) {
    auto comm = std::make_shared<DebugCommunicator>(world);
    const auto me = std::this_thread::get_id();
    std::vector<std::pair<const Communicator*, CollectiveKind>> seen;  // this rank's thread only
    const int id = add_collective_observer([&](const CollectiveEvent& ev) {
      if (std::this_thread::get_id() == me) seen.push_back({ev.comm, ev.args->kind});
    });
    float x = 1;
    comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait();
    remove_collective_observer(id);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].first, comm.get());
    EXPECT_EQ(seen[0].second, CollectiveKind::kAllReduce);
    EXPECT_EQ(x, 2.0f);
  });
}

TEST(DebugCommunicator, MaybeWrapFollowsTheVariable) {
  auto comms = make_thread_world(1);
  CommunicatorPtr w = maybe_wrap_debug(comms[0]);
  EXPECT_EQ(dynamic_cast<DebugCommunicator*>(w.get()) != nullptr, debug_collectives_enabled());
  EXPECT_EQ(maybe_wrap_debug(w), w) << "a wrapper is not wrapped again";
  EXPECT_EQ(maybe_wrap_debug(nullptr), nullptr);
}

}  // namespace
}  // namespace dt::test
