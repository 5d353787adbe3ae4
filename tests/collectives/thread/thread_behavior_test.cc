// Thread backend behaviour beyond the arithmetic: point to point, splits running concurrently, call order,
// mismatched calls, failures and timeouts (never a hang), abort.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <thread>

#include "thread_test_util.h"

namespace dt::test {
namespace {

using namespace std::chrono_literals;

// Runs `fn` and checks that it throws `E` whose message contains every string of `parts`.
template <typename E, typename Fn>
void expect_throw_with(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
  }
}

// DT_DEBUG_COLLECTIVES=1 wraps every communicator in the debug wrapper, which exchanges signatures first (blocking,
// with its own mismatch message): the tests of asynchronous waits and of this backend's own messages do not apply.
class BackendSemantics : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* e = std::getenv("DT_DEBUG_COLLECTIVES");
    if (e != nullptr && *e != '\0' && std::string(e) != "0")
      GTEST_SKIP() << "DT_DEBUG_COLLECTIVES is set: the debug wrapper checks signatures itself and blocks";
  }
};
class ThreadMismatch : public BackendSemantics {};
class ThreadFailure : public BackendSemantics {};
class ThreadInline : public BackendSemantics {};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------------------------
// Point to point

TEST(ThreadP2P, RingWithReceivesPostedFirst) {
  for (int n : {2, 3, 4}) {
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(37), int64_t(100003)}) {
      run_threads(n, [&](CommunicatorPtr comm) {
        const int r = comm->rank();
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        std::vector<double> out(static_cast<size_t>(count)), got(size_t(count), -1);
        for (int64_t i = 0; i < count; ++i) out[size_t(i)] = gen<double>(uint64_t(r), i);
        // Both calls return at once: posting the receive first must not deadlock.
        auto rw = comm->recv(got.data(), count, DType::f64, prev, Device::cpu());
        auto sw = comm->send(out.data(), count, DType::f64, next, Device::cpu());
        rw->wait();
        sw->wait();
        std::vector<double> want(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) want[size_t(i)] = gen<double>(uint64_t(prev), i);
        EXPECT_EQ(compare(got.data(), want.data(), count, "received"), "") << "n=" << n << " count=" << count;
      });
    }
  }
}

TEST(ThreadP2P, MessagesMatchInOrderPerPeer) {
  run_threads(3, [&](CommunicatorPtr comm) {
    const int r = comm->rank();
    if (r == 0) {
      // Several messages to each peer before they post anything.
      std::vector<std::vector<int32_t>> msgs;
      for (int k = 0; k < 6; ++k) msgs.push_back(std::vector<int32_t>(size_t(k * 3 + 1), k));
      std::vector<WorkPtr> works;
      for (int k = 0; k < 6; ++k)
        for (int peer : {1, 2})
          works.push_back(
              comm->send(msgs[size_t(k)].data(), int64_t(msgs[size_t(k)].size()), DType::i32, peer, Device::cpu()));
      comm->barrier()->wait();  // peers receive after the barrier
      for (auto& w : works) w->wait();
    } else {
      comm->barrier()->wait();
      for (int k = 0; k < 6; ++k) {
        std::vector<int32_t> buf(size_t(k * 3 + 1), -1);
        comm->recv(buf.data(), int64_t(buf.size()), DType::i32, 0, Device::cpu())->wait();
        EXPECT_EQ(buf, std::vector<int32_t>(buf.size(), k));
      }
    }
  });
}

TEST(ThreadP2P, ForwardingAReceivedBufferKeepsCallOrder) {
  // Rank 1 relays what it receives to rank 2 without waiting in between: the send must see the received data.
  run_threads(3, [&](CommunicatorPtr comm) {
    const int r = comm->rank();
    std::vector<float> buf(1000, -1.f);
    if (r == 0) {
      std::this_thread::sleep_for(20ms);  // the relay's send is queued before the data arrives
      std::iota(buf.begin(), buf.end(), 0.f);
      comm->send(buf.data(), 1000, DType::f32, 1, Device::cpu())->wait();
    } else if (r == 1) {
      auto w1 = comm->recv(buf.data(), 1000, DType::f32, 0, Device::cpu());
      auto w2 = comm->send(buf.data(), 1000, DType::f32, 2, Device::cpu());
      w1->wait();
      w2->wait();
    } else {
      comm->recv(buf.data(), 1000, DType::f32, 1, Device::cpu())->wait();
      for (int i = 0; i < 1000; ++i) ASSERT_EQ(buf[size_t(i)], float(i));
    }
  });
}

TEST(ThreadP2P, MismatchedSizesFailOnBothSides) {
  run_threads(2, [&](CommunicatorPtr comm) {
    std::vector<float> buf(8);
    if (comm->rank() == 0) {
      expect_throw_with<InvalidArgument>([&] { comm->send(buf.data(), 5, DType::f32, 1, Device::cpu())->wait(); },
                                         {"rank 0 sent 5 x f32", "rank 1", "recv of 4 x f32"});
    } else {
      expect_throw_with<InvalidArgument>([&] { comm->recv(buf.data(), 4, DType::f32, 0, Device::cpu())->wait(); },
                                         {"rank 0 sent 5 x f32", "recv of 4 x f32"});
    }
    comm->barrier()->wait();  // still usable
  });
}

TEST(ThreadP2P, DestroyingTheCommunicatorFailsPendingReceives) {
  auto comms = make_thread_world(2);
  std::vector<float> buf(4);
  WorkPtr w = comms[1]->recv(buf.data(), 4, DType::f32, 0, Device::cpu());
  EXPECT_FALSE(w->is_completed());
  comms[1].reset();
  expect_throw_with<RemoteError>([&] { w->wait(5s); }, {"destroyed"});
}

// ---------------------------------------------------------------------------------------------------------------
// Splits

TEST(ThreadSplit, GridRowsAndColumnsRunConcurrently) {
  run_threads(4, [&](CommunicatorPtr world) {
    const int r = world->rank();
    auto row = world->split(r / 2, r);  // {0,1}, {2,3}
    auto col = world->split(r % 2, r);  // {0,2}, {1,3}
    ASSERT_TRUE(row && col);
    EXPECT_EQ(row->size(), 2);
    EXPECT_EQ(col->size(), 2);
    EXPECT_EQ(row->rank(), r % 2);
    EXPECT_EQ(col->rank(), r / 2);
    EXPECT_EQ(row->global_ranks(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(col->global_ranks(), (std::vector<int>{r % 2, r % 2 + 2}));
    for (int it = 0; it < 200; ++it) {
      const int64_t count = 1 + (it * 7) % 50;
      std::vector<int64_t> a(size_t(count), r + 1 + it), b(size_t(count), 10 * (r + 1) + it);
      // Half of the ranks issue the column call first: each group must progress on its own.
      WorkPtr wa, wb;
      if ((r + it) % 2 == 0) {
        wa = row->all_reduce(a.data(), a.data(), count, DType::i64, ReduceOp::kSum, Device::cpu());
        wb = col->all_reduce(b.data(), b.data(), count, DType::i64, ReduceOp::kSum, Device::cpu());
      } else {
        wb = col->all_reduce(b.data(), b.data(), count, DType::i64, ReduceOp::kSum, Device::cpu());
        wa = row->all_reduce(a.data(), a.data(), count, DType::i64, ReduceOp::kSum, Device::cpu());
      }
      wb->wait();
      wa->wait();
      const int r0 = r / 2 * 2, c0 = r % 2;
      const int64_t row_sum = (r0 + 1 + it) + (r0 + 2 + it);
      const int64_t col_sum = 10 * (c0 + 1) + it + 10 * (c0 + 3) + it;
      ASSERT_EQ(a, std::vector<int64_t>(size_t(count), row_sum)) << "iteration " << it;
      ASSERT_EQ(b, std::vector<int64_t>(size_t(count), col_sum)) << "iteration " << it;
    }
    // The world still works after its splits ran.
    int64_t x = r;
    world->all_reduce(&x, &x, 1, DType::i64, ReduceOp::kMax, Device::cpu())->wait();
    EXPECT_EQ(x, 3);
  });
}

TEST(ThreadSplit, KeysOrderRanksAndNegativeColorsOptOut) {
  run_threads(5, [&](CommunicatorPtr world) {
    const int r = world->rank();
    auto sub = world->split(r == 4 ? -1 : r % 2, -r);  // keys reverse the order
    if (r == 4) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    const std::vector<int> want = r % 2 ? std::vector<int>{3, 1} : std::vector<int>{2, 0};
    EXPECT_EQ(sub->global_ranks(), want);
    EXPECT_EQ(sub->global_ranks()[size_t(sub->rank())], r);
    // A sub-group's all_gather orders blocks by sub-group rank.
    int32_t mine = r;
    std::vector<int32_t> all(2, -1);
    sub->all_gather(&mine, all.data(), 1, DType::i32, Device::cpu())->wait();
    EXPECT_EQ(all, std::vector<int32_t>(want.begin(), want.end()));
    // Nested split.
    auto solo = sub->split(sub->rank(), 0);
    ASSERT_NE(solo, nullptr);
    EXPECT_EQ(solo->size(), 1);
    EXPECT_EQ(solo->global_ranks(), std::vector<int>{r});
    solo->barrier()->wait();
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Call order and asynchrony

TEST(ThreadOrder, CallsRunInCallOrderWithoutWaiting) {
  run_threads(3, [&](CommunicatorPtr comm) {
    std::vector<int32_t> buf(100, comm->rank() + 1);
    std::vector<WorkPtr> works;
    // Each all_reduce reads the previous one's result: 6 -> 18 -> 54.
    for (int k = 0; k < 3; ++k)
      works.push_back(comm->all_reduce(buf.data(), buf.data(), 100, DType::i32, ReduceOp::kSum, Device::cpu()));
    for (auto& w : works) w->wait();
    EXPECT_EQ(buf, std::vector<int32_t>(100, 6 * 3 * 3));
  });
}

TEST(ThreadOrder, ManySmallCollectivesStayCorrect) {
  // The DTensor tests run thousands of small redistributions on this backend.
  run_threads(4, [&](CommunicatorPtr comm) {
    const int r = comm->rank();
    for (int it = 0; it < 1000; ++it) {
      float v[2] = {float(r), float(it)};
      float g[8];
      comm->all_gather(v, g, 2, DType::f32, Device::cpu())->wait();
      for (int j = 0; j < 4; ++j) {
        ASSERT_EQ(g[2 * j], float(j));
        ASSERT_EQ(g[2 * j + 1], float(it));
      }
    }
  });
}

// Note [A group of one runs in the caller]: the call is done when it returns (this backend's is_completed() never
// runs anything), in call order with the calls the worker runs (a split).
TEST_F(ThreadInline, AGroupOfOneRunsInTheCaller) {
  CommunicatorPtr comm = make_thread_world(1)[0];
  std::vector<float> in(64), out(64, -1.0f), sum(64, 0.0f);
  std::iota(in.begin(), in.end(), 1.0f);
  WorkPtr w = comm->all_gather(in.data(), out.data(), 64, DType::f32, Device::cpu());
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(out, in);
  for (int it = 0; it < 100; ++it) {  // each call reads the previous one's result
    EXPECT_TRUE(
        comm->all_reduce(out.data(), out.data(), 64, DType::f32, ReduceOp::kSum, Device::cpu())->is_completed());
  }
  EXPECT_EQ(out, in);
  auto solo = comm->split(0, 0);  // through the worker; its group of one then runs in the caller too
  ASSERT_NE(solo, nullptr);
  EXPECT_TRUE(solo->all_reduce(in.data(), sum.data(), 64, DType::f32, ReduceOp::kAvg, Device::cpu())->is_completed());
  EXPECT_EQ(sum, in);
}

TEST(ThreadOrder, UnsupportedDeviceIsRejectedAtTheEntry) {
  run_threads(2, [&](CommunicatorPtr comm) {
    EXPECT_EQ(comm->backend_name(), "thread");
    EXPECT_TRUE(comm->supports(Device::cpu()));
    EXPECT_FALSE(comm->supports(Device::cuda(0)));
    float x = 1;
    expect_throw_with<InvalidArgument>(
        [&] { comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cuda(0)); }, {"not supported"});
    comm->barrier()->wait();
  });
}

TEST(ThreadOrder, BadArgumentsAreRejectedAtTheEntry) {
  // validate_collective (shared by every backend): each call fails on the calling rank before anything is sent, so
  // the group stays usable.
  run_threads(2, [&](CommunicatorPtr comm) {
    float buf[8] = {};
    const auto cpu = Device::cpu();
    expect_throw_with<InvalidArgument>(
        [&] {
          comm->all_to_allv(nullptr, {2, 2}, {0, 2}, buf, {2, 2}, {0, 2}, DType::f32, cpu);
        },
        {"send buffer is null"});
    expect_throw_with<InvalidArgument>(
        [&] {
          comm->all_to_allv(buf, {2, 2}, {0, 2}, nullptr, {2, 2}, {0, 2}, DType::f32, cpu);
        },
        {"recv buffer is null"});
    expect_throw_with<InvalidArgument>(
        [&] {
          comm->all_to_allv(buf, {2, 2}, {0, 2}, buf + 4, {3, 2}, {0, 2}, DType::f32, cpu);
        },
        {"received blocks overlap"});
    const int64_t huge = std::numeric_limits<int64_t>::max() - 1;
    expect_throw_with<InvalidArgument>(
        [&] {
          comm->all_to_allv(buf, {2, 2}, {0, huge}, buf + 4, {2, 2}, {0, 2}, DType::f32, cpu);
        },
        {"overflows"});
    expect_throw_with<InvalidArgument>(
        [&] { comm->all_gather(buf, buf, std::numeric_limits<int64_t>::max() / 3, DType::f32, cpu); }, {"too large"});
    expect_throw_with<InvalidArgument>(
        [&] { comm->all_reduce(buf, buf, 4, DType::f32, static_cast<ReduceOp>(17), cpu); }, {"invalid reduce op"});
    expect_throw_with<InvalidArgument>([&] { comm->all_gather(buf, buf, 1, static_cast<DType>(77), cpu); },
                                       {"invalid dtype"});
    // Empty all_to_allv blocks may share a displacement and need no buffer.
    comm->all_to_allv(nullptr, {0, 0}, {0, 0}, nullptr, {0, 0}, {0, 0}, DType::f32, cpu)->wait();
    comm->barrier()->wait();
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Mismatched calls: an error on every rank naming the ranks, never a hang or garbage.

TEST_F(ThreadMismatch, DifferentKindsCountsDtypesOpsRoots) {
  struct Variant {
    std::string name;
    std::function<WorkPtr(Communicator&, std::vector<float>&)> call;  // per rank
    std::vector<std::string> expect;                                  // in every rank's message
  };
  auto ar = [](Communicator& c, std::vector<float>& b, int64_t count, DType dt, ReduceOp op) {
    return c.all_reduce(b.data(), b.data(), count, dt, op, Device::cpu());
  };
  std::vector<Variant> variants = {
      {"kinds",
       [&](Communicator& c, std::vector<float>& b) {
         if (c.rank() == 1) return c.all_gather(b.data(), b.data() + 8, 4, DType::f32, Device::cpu());
         return ar(c, b, 4, DType::f32, ReduceOp::kSum);
       },
       {"mismatched collectives", "ranks 0, 2 called all_reduce(count=4, f32, sum)",
        "rank 1 called all_gather(count=4, f32)"}},
      {"counts",
       [&](Communicator& c, std::vector<float>& b) {
         return ar(c, b, c.rank() == 2 ? 3 : 4, DType::f32, ReduceOp::kSum);
       },
       {"rank 2 called all_reduce(count=3, f32, sum)", "ranks 0, 1 called all_reduce(count=4"}},
      {"dtypes",
       [&](Communicator& c, std::vector<float>& b) {
         return ar(c, b, 4, c.rank() == 0 ? DType::i32 : DType::f32, ReduceOp::kSum);
       },
       {"rank 0 called all_reduce(count=4, i32, sum)", "ranks 1, 2 called all_reduce(count=4, f32, sum)"}},
      {"ops",
       [&](Communicator& c, std::vector<float>& b) {
         return ar(c, b, 4, DType::f32, c.rank() == 1 ? ReduceOp::kMax : ReduceOp::kSum);
       },
       {"rank 1 called all_reduce(count=4, f32, max)"}},
      {"roots",
       [&](Communicator& c, std::vector<float>& b) {
         return c.broadcast(b.data(), 4, DType::f32, c.rank() == 0 ? 0 : 1, Device::cpu());
       },
       {"rank 0 called broadcast(count=4, f32, root=0)", "ranks 1, 2 called broadcast(count=4, f32, root=1)"}},
  };
  for (const auto& v : variants) {
    run_threads(3, [&](CommunicatorPtr comm) {
      std::vector<float> buf(32, 1.f);
      std::vector<float> before = buf;
      expect_throw_with<InvalidArgument>([&] { v.call(*comm, buf)->wait(); }, v.expect);
      EXPECT_EQ(buf, before) << v.name << ": a mismatched call must not touch the buffers";
      // The group stays usable: the next call matches again.
      float x = 1;
      comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait();
      EXPECT_EQ(x, 3.f) << v.name;
    });
  }
}

TEST_F(ThreadMismatch, AllToAllVCountsThatDisagree) {
  run_threads(2, [&](CommunicatorPtr comm) {
    std::vector<float> s(8, 1.f), d(8, 0.f);
    // Rank 0 sends 2 elements to rank 1, which expects 3.
    std::vector<int64_t> sc = {1, 2}, sd = {0, 4}, rd = {0, 4};
    std::vector<int64_t> rc = comm->rank() == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{3, 2};
    expect_throw_with<InvalidArgument>(
        [&] { comm->all_to_allv(s.data(), sc, sd, d.data(), rc, rd, DType::f32, Device::cpu())->wait(); },
        {"all_to_allv", "rank 0 sends 2 elements to rank 1, which expects 3"});
  });
}

TEST_F(ThreadMismatch, SplitAgainstACollective) {
  run_threads(2, [&](CommunicatorPtr comm) {
    if (comm->rank() == 0) {
      expect_throw_with<InvalidArgument>([&] { comm->split(0, 0); },
                                         {"rank 0 called split(color=0, key=0)", "rank 1 called barrier()"});
    } else {
      expect_throw_with<InvalidArgument>([&] { comm->barrier()->wait(); }, {"rank 0 called split(color=0, key=0)"});
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Failures and timeouts: the survivors fail fast with an error naming the peer.

TEST_F(ThreadFailure, ARankThatThrowsMakesTheOthersFail) {
  std::atomic<int> remote_errors{0};
  auto t0 = std::chrono::steady_clock::now();
  try {
    run_threads(4, [&](CommunicatorPtr comm) {
      if (comm->rank() == 2) {
        std::this_thread::sleep_for(20ms);  // the others are already waiting in the all_reduce
        throw std::runtime_error("boom on rank 2");
      }
      float x = 1;
      try {
        comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait();
        ADD_FAILURE() << "the all_reduce should have failed";
      } catch (const RemoteError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 2 failed: boom on rank 2"), std::string::npos) << e.what();
        ++remote_errors;
        throw;
      }
    });
    ADD_FAILURE() << "run_threads should rethrow rank 2's exception";
  } catch (const dt::Error& e) {
    ADD_FAILURE() << "run_threads rethrew an echo instead of the root cause: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom on rank 2");
  }
  EXPECT_EQ(remote_errors.load(), 3);
  EXPECT_LT(seconds_since(t0), 20.0) << "the other ranks must fail fast, not wait for a timeout";
}

TEST_F(ThreadFailure, AbortWakesSubGroupsAndFailsLaterCalls) {
  auto t0 = std::chrono::steady_clock::now();
  run_threads(4, [&](CommunicatorPtr world) {
    const int r = world->rank();
    auto row = world->split(r / 2, r);
    auto* tc = dynamic_cast<ThreadCommunicator*>(world.get());
    ASSERT_NE(tc, nullptr);
    if (r == 3) {
      std::this_thread::sleep_for(20ms);
      tc->abort("test abort by rank 3");
    } else {
      float x = 1;
      // Rank 2's row partner (3) never calls: the abort must wake it. Ranks 0 and 1 are also woken in the world.
      WorkPtr w = r == 2 ? row->barrier() : world->barrier();
      expect_throw_with<RemoteError>([&] { w->wait(); }, {"test abort by rank 3"});
      expect_throw_with<RemoteError>(
          [&] { row->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait(); },
          {"test abort by rank 3"});
    }
    EXPECT_TRUE(tc->aborted());
  });
  EXPECT_LT(seconds_since(t0), 20.0);
}

TEST_F(ThreadFailure, AbortWithAPendingReceiveFailsItAndLaterCalls) {
  // The abort used to take the Work out of the pending receive that the communicator still held: its later calls
  // and its destructor then dereferenced null (a crash, about one run in six for a peer that throws).
  for (int round = 0; round < 20; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      run_threads(2, [&](CommunicatorPtr comm) {
        if (comm->rank() == 1) throw std::runtime_error("rank 1 bails out");
        std::vector<float> buf(5);
        WorkPtr w = comm->recv(buf.data(), 5, DType::f32, 1, Device::cpu());
        expect_throw_with<RemoteError>([&] { w->wait(); }, {"rank 1"});
        float x = 1;
        expect_throw_with<RemoteError>(
            [&] { comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait(); }, {"rank 1"});
      });
      ADD_FAILURE() << "run_threads should rethrow rank 1's exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "rank 1 bails out");
    }
    EXPECT_LT(seconds_since(t0), 20.0);
  }
}

// Keeps a rank alive (without calls) until the others are done, so that they time out instead of seeing it gone.
struct Idle {
  std::atomic<int> done{0};
  void wait_for(int n) {
    for (int i = 0; i < 1000 && done.load() < n; ++i) std::this_thread::sleep_for(10ms);
  }
};

TEST_F(ThreadFailure, WaitTimeoutNamesThePeerThatNeverArrives) {
  ThreadCommOptions opts;
  opts.timeout = 400ms;
  Idle idle;
  auto t0 = std::chrono::steady_clock::now();
  run_threads(
      3,
      [&](CommunicatorPtr comm) {
        if (comm->rank() == 1) return idle.wait_for(2);  // alive, but never calls
        struct Done {
          Idle& i;
          ~Done() { ++i.done; }
        } done{idle};
        float x = 1;
        WorkPtr w = comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu());
        // A short caller-side timeout reports who is missing and leaves the call pending.
        expect_throw_with<TimeoutError>([&] { w->wait(30ms); }, {"all_reduce", "rank 1 (no call yet)"});
        EXPECT_FALSE(w->is_completed());
        // The communicator's deadline fails the call itself, naming the peer, and aborts the world.
        expect_throw_with<TimeoutError>([&] { w->wait(); }, {"timed out", "waiting for rank 1 (no call yet)"});
      },
      opts);
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST_F(ThreadFailure, ShortWaitTimeoutThenLateArrivalSucceeds) {
  run_threads(2, [&](CommunicatorPtr comm) {
    int64_t x = comm->rank() + 1;
    if (comm->rank() == 1) std::this_thread::sleep_for(150ms);
    WorkPtr w = comm->all_reduce(&x, &x, 1, DType::i64, ReduceOp::kSum, Device::cpu());
    if (comm->rank() == 0) expect_throw_with<TimeoutError>([&] { w->wait(10ms); }, {"rank 1"});
    w->wait();
    EXPECT_EQ(x, 3);
  });
}

TEST_F(ThreadFailure, TimeoutNamesTheLastCallOfTheLaggingRank) {
  ThreadCommOptions opts;
  opts.timeout = 300ms;
  Idle idle;
  run_threads(
      2,
      [&](CommunicatorPtr comm) {
        comm->barrier()->wait();
        if (comm->rank() == 1) return idle.wait_for(1);
        expect_throw_with<TimeoutError>([&] { comm->barrier()->wait(); },
                                        {"call #2", "rank 1 (last call #1: barrier())"});
        ++idle.done;
      },
      opts);
}

TEST_F(ThreadFailure, ARankThatReturnsEarlyMakesItsPeersFailFast) {
  // As when a rank's ASSERT fails: the others must not wait for the (default, long) deadline.
  auto t0 = std::chrono::steady_clock::now();
  run_threads(3, [&](CommunicatorPtr comm) {
    const int r = comm->rank();
    auto pair = comm->split(r == 2 ? -1 : 0, r);  // ranks 0 and 1
    auto even = comm->split(r == 1 ? -1 : 0, r);  // ranks 0 and 2
    comm->barrier()->wait();
    if (r == 1) return;  // leaves without the calls below
    float x = 1;
    if (r == 0) {
      expect_throw_with<RemoteError>(
          [&] { comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait(); },
          {"rank 1 finished", "without making this call", "last call #3: barrier()"});
      expect_throw_with<RemoteError>([&] { pair->barrier()->wait(); }, {"rank 1 finished"});
      expect_throw_with<RemoteError>([&] { comm->recv(&x, 1, DType::f32, 1, Device::cpu())->wait(); },
                                     {"rank 1 finished", "without sending"});
    } else {
      // Rank 2 joins the same all_reduce: rank 0 gave up on it because of rank 1.
      expect_throw_with<RemoteError>(
          [&] { comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu())->wait(); }, {"rank 1 finished"});
      std::this_thread::sleep_for(20ms);  // late for the calls below, which rank 0 already gave up on
    }
    for (int k = 0; k < 3; ++k) expect_throw_with<RemoteError>([&] { comm->barrier()->wait(); }, {"rank 1 finished"});
    // Groups without the gone rank keep working.
    int64_t v = r;
    even->all_reduce(&v, &v, 1, DType::i64, ReduceOp::kSum, Device::cpu())->wait();
    EXPECT_EQ(v, 2);
  });
  EXPECT_LT(seconds_since(t0), 20.0);
}

TEST_F(ThreadFailure, RunThreadsPrefersTheRootCause) {
  // Rank 0 fails first with its own error; the others see RemoteErrors; the launcher rethrows rank 0's error.
  expect_throw_with<InvalidArgument>(
      [&] {
        run_threads(3, [&](CommunicatorPtr comm) {
          if (comm->rank() == 0) DT_THROW(InvalidArgument, "root cause");
          comm->barrier()->wait();
        });
      },
      {"root cause"});
}

}  // namespace
}  // namespace dt::test
