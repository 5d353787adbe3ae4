// UCX communicator on real processes: run under dtrun (`dtrun --nproc-per-node N test_ucx_collectives`). Every rank
// runs the same cases in the same order; each case's inputs come from a per-case seed, so every rank computes the
// reference of the whole collective from all ranks' inputs by itself.
//
// Matrix: every op x dtype (f32, bf16, f16, f64, i32, i64) x reduce op x size (0, 1, odd, large) x in place / out of
// place, every algorithm of the table (forced through the tuning), sub-groups running concurrently, many calls in
// flight, progress without waiting, the Tensor API.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

#include "collectives/process_group.h"
#include "collectives/ucx/op.h"
#include "collectives/ucx/ucx_communicator.h"
#include "collectives/ucx/views.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "tests/collectives/ucx/ucx_test_util.h"
#include "tests/collectives/views_cases.h"

namespace dt {
namespace {

using ucx_test::Expect;
using ucx_test::gen;

std::shared_ptr<UcxCommunicator> g_comm;

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};
// 0, 1, odd, and large enough for several 4 KiB chunks per block and rendezvous (above 8 KiB) messages.
const int64_t kSizes[] = {0, 1, 37, 5003};

uint64_t g_case = 0;  // advances identically on every rank

// Calls fn.template operator()<T>() for the six tested dtypes.
template <typename Fn>
void with_type(DType dt, Fn&& fn) {
  dispatch_dtype(dt, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>)
      fn.template operator()<T>();
    else
      FAIL() << "untested dtype";
  });
}

// Small chunks and few reduce slots, so that "large" exercises the pipelines and the slot reuse.
ucx::UcxTuning test_tuning() {
  ucx::UcxTuning t;
  t.chunk_bytes = 4096;
  t.reduce_slots = 2;
  return t;
}

struct TuningScope {
  explicit TuningScope(const ucx::UcxTuning& t) : saved(g_comm->tuning()) { g_comm->set_tuning(t); }
  ~TuningScope() { g_comm->set_tuning(saved); }
  ucx::UcxTuning saved;
};

std::string label(const std::string& op, DType dt, int64_t count, const std::string& extra = "") {
  return str_cat(op, "(", dtype_name(dt), ", count=", count, extra, ") on ", g_comm->size(), " ranks, rank ",
                 g_comm->rank());
}

template <typename T>
std::vector<T> input(uint64_t seed, int rank, int64_t n, ReduceOp op = ReduceOp::kSum) {
  std::vector<T> v(size_t(std::max<int64_t>(n, 1)));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = gen<T>(seed, rank, i, op);
  return v;
}

template <typename T>
Expect<T> exact(T v) {
  return Expect<T>{to_double(v), 0};
}

template <typename T>
void* ptr(std::vector<T>& v, int64_t count) {
  return count ? v.data() : nullptr;
}

TEST(UcxCollectives, AllGather) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  TuningScope tune(test_tuning());
  for (DType dt : kDTypes)
    for (int64_t count : kSizes)
      for (bool in_place : {false, true})
        with_type(dt, [&]<typename T>() {
          const uint64_t seed = ++g_case;
          std::vector<T> in = input<T>(seed, r, count);
          std::vector<T> out(size_t(std::max<int64_t>(n * count, 1)));
          const void* send = ptr(in, count);
          if (in_place) {
            std::copy(in.begin(), in.begin() + count, out.begin() + r * count);
            send = count ? out.data() + r * count : nullptr;
          }
          c.all_gather(send, ptr(out, count), count, dt, Device::cpu())->wait();
          ucx_test::count_bad<T>(label("all_gather", dt, count, in_place ? ", in place" : ""), out.data(), n * count,
                                 [&](int64_t i) { return exact(gen<T>(seed, int(i / count), i % count)); });
        });
}

TEST(UcxCollectives, ReduceScatter) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  TuningScope tune(test_tuning());
  for (DType dt : kDTypes)
    for (ReduceOp op : kOps)
      for (int64_t count : kSizes)
        for (bool in_place : {false, true})
          with_type(dt, [&]<typename T>() {
            const uint64_t seed = ++g_case;
            std::vector<T> in = input<T>(seed, r, n * count, op);
            std::vector<T> out(size_t(std::max<int64_t>(count, 1)));
            void* recv = in_place ? (count ? in.data() + r * count : nullptr) : ptr(out, count);
            c.reduce_scatter(ptr(in, count), recv, count, dt, op, Device::cpu())->wait();
            const T* got = in_place ? in.data() + r * count : out.data();
            ucx_test::count_bad<T>(
                label("reduce_scatter", dt, count, str_cat(", ", reduce_op_name(op), in_place ? ", in place" : "")),
                got, count, [&](int64_t i) { return ucx_test::reduce_ref<T>(seed, n, r * count + i, op); });
          });
}

void all_reduce_matrix(const ucx::UcxTuning& tuning, const char* algo) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  TuningScope tune(tuning);
  for (DType dt : kDTypes)
    for (ReduceOp op : kOps)
      for (int64_t count : kSizes)
        for (bool in_place : {false, true})
          with_type(dt, [&]<typename T>() {
            const uint64_t seed = ++g_case;
            std::vector<T> in = input<T>(seed, r, count, op);
            std::vector<T> out(size_t(std::max<int64_t>(count, 1)));
            void* recv = in_place ? ptr(in, count) : ptr(out, count);
            WorkPtr work = c.all_reduce(ptr(in, count), recv, count, dt, op, Device::cpu());
            work->wait();
            // The algorithm under test ran (a group of one copies locally, or does nothing without elements).
            if (n > 1) {
              EXPECT_STREQ(work->algorithm(), algo) << label("all_reduce", dt, count);
            }
            const T* got = in_place ? in.data() : out.data();
            ucx_test::count_bad<T>(label(str_cat("all_reduce/", algo), dt, count,
                                         str_cat(", ", reduce_op_name(op), in_place ? ", in place" : "")),
                                   got, count, [&](int64_t i) { return ucx_test::reduce_ref<T>(seed, n, i, op); });
            // Every rank must hold the same bits.
            if (count > 0) {
              const int64_t bytes = count * int64_t(sizeof(T));
              std::vector<char> all(size_t(n * bytes));
              c.all_gather(got, all.data(), bytes, DType::u8, Device::cpu())->wait();
              for (int q = 0; q < n; ++q)
                if (std::memcmp(all.data() + q * bytes, got, size_t(bytes)) != 0) {
                  ADD_FAILURE() << label(str_cat("all_reduce/", algo), dt, count, str_cat(", ", reduce_op_name(op)))
                                << ": rank " << q << " holds different bits";
                  break;
                }
            }
          });
}

TEST(UcxCollectives, AllReduceRing) {
  ucx::UcxTuning t = test_tuning();
  t.allreduce_small_bytes = -1;  // always the ring
  t.direct_allreduce_min_bytes = -1;
  all_reduce_matrix(t, "ring");
}

// Every call of more than one rank's group on this host takes the direct all-reduce (4 KiB chunks: many per block).
TEST(UcxCollectives, AllReduceDirect) {
  if (g_comm->size() > 1 && !ucx::direct_copies_allowed())
    GTEST_SKIP() << "the direct all-reduce needs process_vm_readv/writev between the ranks, which this machine "
                    "forbids (Yama ptrace_scope >= 1 outside the launcher's process tree, or DT_UCX_DIRECT=0)";
  ucx::UcxTuning t = test_tuning();
  t.allreduce_small_bytes = -1;
  t.direct_allreduce_min_bytes = 0;
  all_reduce_matrix(t, "direct");
}

TEST(UcxCollectives, AllReduceRecursiveDoubling) {
  ucx::UcxTuning t = test_tuning();
  t.allreduce_small_bytes = int64_t(1) << 40;  // always recursive doubling
  all_reduce_matrix(t, "recursive_doubling");
}

// Mismatched counts through the direct all-reduce: every rank compares the calls it receives and fails, naming a
// peer, instead of reading past a buffer or timing out. On a split copy of the world (the failure is sticky).
TEST(UcxCollectives, AllReduceDirectMismatchedCounts) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  auto sub = std::static_pointer_cast<UcxCommunicator>(c.split(0, r));
  ucx::UcxTuning t = test_tuning();
  t.allreduce_small_bytes = -1;
  t.direct_allreduce_min_bytes = 0;
  sub->set_tuning(t);
  const int64_t count = r == 0 ? 1001 : 1000;
  std::vector<float> buf(1001, 1.0f);
  try {
    sub->all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::kSum, Device::cpu())
        ->wait(std::chrono::seconds(20));
    ADD_FAILURE() << "expected an error";
  } catch (const TimeoutError& e) {
    ADD_FAILURE() << "timed out instead of failing: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
  c.barrier()->wait();
}

TEST(UcxCollectives, Broadcast) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  for (bool tree : {true, false}) {
    ucx::UcxTuning t = test_tuning();
    t.broadcast_small_bytes = tree ? (int64_t(1) << 40) : -1;
    TuningScope tune(t);
    for (DType dt : kDTypes)
      for (int64_t count : kSizes)
        for (int root = 0; root < n; ++root)
          with_type(dt, [&]<typename T>() {
            const uint64_t seed = ++g_case;
            std::vector<T> buf = r == root ? input<T>(seed, root, count) : std::vector<T>(size_t(count + 1));
            c.broadcast(ptr(buf, count), count, dt, root, Device::cpu())->wait();
            ucx_test::count_bad<T>(
                label(tree ? "broadcast/tree" : "broadcast/chain", dt, count, str_cat(", root ", root)), buf.data(),
                count, [&](int64_t i) { return exact(gen<T>(seed, root, i)); });
          });
  }
}

// Algorithms forced by name (as DT_UCX_ALGORITHM does) against the size rules: small calls through the ring and the
// chain, each checked against the reference and against the name recorded on its Work.
TEST(UcxCollectives, ForcedByName) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  TuningScope tune(test_tuning());  // restores the forced choices too
  c.set_algorithms("all_reduce:ring, broadcast:chain");
  for (int64_t count : kSizes) {
    const uint64_t seed = ++g_case;
    std::vector<float> in = input<float>(seed, r, count), out(size_t(std::max<int64_t>(count, 1)));
    WorkPtr work = c.all_reduce(ptr(in, count), ptr(out, count), count, DType::f32, ReduceOp::kSum, Device::cpu());
    work->wait();
    if (n > 1) {
      EXPECT_STREQ(work->algorithm(), "ring") << "count " << count;
    }
    ucx_test::count_bad<float>(label("all_reduce/forced ring", DType::f32, count), out.data(), count,
                               [&](int64_t i) { return ucx_test::reduce_ref<float>(seed, n, i, ReduceOp::kSum); });
    std::vector<float> buf = r == 0 ? input<float>(seed, 0, count) : std::vector<float>(size_t(count + 1));
    work = c.broadcast(ptr(buf, count), count, DType::f32, 0, Device::cpu());
    work->wait();
    if (n > 1) {
      EXPECT_STREQ(work->algorithm(), "chain") << "count " << count;
    }
    ucx_test::count_bad<float>(label("broadcast/forced chain", DType::f32, count), buf.data(), count,
                               [&](int64_t i) { return exact(gen<float>(seed, 0, i)); });
  }
  // Not forced: the size rules (recursive doubling for small all-reduces).
  c.set_algorithms("");
  std::vector<float> one(1, 1.0f);
  WorkPtr work = c.all_reduce(one.data(), one.data(), 1, DType::f32, ReduceOp::kSum, Device::cpu());
  work->wait();
  EXPECT_EQ(one[0], float(n));
  EXPECT_STREQ(work->algorithm(), n > 1 ? "recursive_doubling" : "local");
  // A name the kind does not have: a local error listing the valid ones; the communicator stays usable.
  try {
    c.set_algorithms("all_reduce:chain");
    ADD_FAILURE() << "expected dt::InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of local, recursive_doubling, direct, ring"), std::string::npos)
        << e.what();
  }
  c.barrier()->wait();
}

TEST(UcxCollectives, AllToAll) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  for (DType dt : kDTypes)
    for (int64_t count : kSizes)
      with_type(dt, [&]<typename T>() {
        const uint64_t seed = ++g_case;
        std::vector<T> in = input<T>(seed, r, n * count);
        std::vector<T> out(size_t(std::max<int64_t>(n * count, 1)));
        c.all_to_all(ptr(in, count), ptr(out, count), count, dt, Device::cpu())->wait();
        // Block j of the output is block r of rank j's input.
        ucx_test::count_bad<T>(label("all_to_all", dt, count), out.data(), n * count,
                               [&](int64_t i) { return exact(gen<T>(seed, int(i / count), r * count + i % count)); });
      });
}

TEST(UcxCollectives, AllToAllV) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  for (DType dt : kDTypes)
    for (int64_t scale : {0, 1, 29, 1500})
      with_type(dt, [&]<typename T>() {
        const uint64_t seed = ++g_case;
        // counts[i][j]: what rank i sends to rank j (zero for some pairs), known to every rank.
        auto cnt = [&](int i, int j) {
          return int64_t(ucx_test::mix(seed * 131 + uint64_t(i * 17 + j)) % 3) * scale / 2;
        };
        const size_t nn = static_cast<size_t>(n);
        std::vector<int64_t> sc(nn), sd(nn), rc(nn), rd(nn);
        int64_t st = 0, rt = 0;
        for (int j = 0; j < n; ++j) {
          sc[size_t(j)] = cnt(r, j);
          sd[size_t(j)] = st + 1;  // gaps between the blocks
          st += sc[size_t(j)] + 1;
          rc[size_t(j)] = cnt(j, r);
          rd[size_t(j)] = rt;
          rt += rc[size_t(j)];
        }
        std::vector<T> in = input<T>(seed, r, st + 1);
        std::vector<T> out(size_t(rt + 1));
        c.all_to_allv(in.data(), sc, sd, out.data(), rc, rd, dt, Device::cpu())->wait();
        int64_t bad = 0;
        for (int j = 0; j < n; ++j) {
          // Rank j's send displacement for r: 1 + sum over k < r of (cnt(j, k) + 1).
          int64_t jd = 1;
          for (int k = 0; k < r; ++k) jd += cnt(j, k) + 1;
          bad += ucx_test::count_bad<T>(label("all_to_allv", dt, rc[size_t(j)], str_cat(", from rank ", j)),
                                        out.data() + rd[size_t(j)], rc[size_t(j)],
                                        [&](int64_t i) { return exact(gen<T>(seed, j, jd + i)); });
        }
        EXPECT_EQ(bad, 0);
      });
}

TEST(UcxCollectives, SendRecvRing) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  for (int64_t count : kSizes) {
    const uint64_t seed = ++g_case;
    std::vector<float> a = input<float>(seed, r, count), b(size_t(count + 1));
    // Receive first on even ranks, send first on odd ones: point-to-point calls never wait for each other.
    WorkPtr s, v;
    if (r % 2 == 0) {
      v = c.recv(ptr(b, count), count, DType::f32, (r + n - 1) % n, Device::cpu());
      s = c.send(ptr(a, count), count, DType::f32, (r + 1) % n, Device::cpu());
    } else {
      s = c.send(ptr(a, count), count, DType::f32, (r + 1) % n, Device::cpu());
      v = c.recv(ptr(b, count), count, DType::f32, (r + n - 1) % n, Device::cpu());
    }
    v->wait();
    s->wait();
    ucx_test::count_bad<float>(label("recv", DType::f32, count), b.data(), count,
                               [&](int64_t i) { return exact(gen<float>(seed, (r + n - 1) % n, i)); });
  }
  // Several messages to the same peer match in call order.
  std::vector<std::vector<float>> got(5, std::vector<float>(3));
  std::vector<std::vector<float>> sent(5, std::vector<float>(3));
  std::vector<WorkPtr> works;
  for (int k = 0; k < 5; ++k) {
    for (int e = 0; e < 3; ++e) sent[size_t(k)][size_t(e)] = float(100 * r + 10 * k + e);
    works.push_back(c.send(sent[size_t(k)].data(), 3, DType::f32, (r + 1) % n, Device::cpu()));
  }
  for (int k = 0; k < 5; ++k)
    works.push_back(c.recv(got[size_t(k)].data(), 3, DType::f32, (r + n - 1) % n, Device::cpu()));
  for (auto& w : works) w->wait();
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(got[size_t(k)][1], float(100 * ((r + n - 1) % n) + 10 * k + 1)) << "message " << k;
}

TEST(UcxCollectives, Barrier) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  for (int k = 0; k < 3; ++k) c.barrier()->wait();
  // The last rank arrives 300 ms late: nobody may leave before it arrives.
  auto t0 = std::chrono::steady_clock::now();
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.barrier()->wait();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (n > 1) {
    EXPECT_GE(ms, 250.0) << "left the barrier before the last rank arrived";
  }
}

TEST(UcxCollectives, ManyCallsInFlight) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  constexpr int kCalls = 40;
  const uint64_t seed = ++g_case;
  std::vector<std::vector<float>> bufs;
  std::vector<WorkPtr> works;
  for (int k = 0; k < kCalls; ++k) {
    const int64_t count = 1 + (k * 997) % 3000;
    bufs.push_back(input<float>(seed + uint64_t(k), r, count));
    works.push_back(
        c.all_reduce(bufs.back().data(), bufs.back().data(), count, DType::f32, ReduceOp::kSum, Device::cpu()));
  }
  for (int k = kCalls - 1; k >= 0; --k) works[size_t(k)]->wait();  // waiting out of order is fine
  for (int k = 0; k < kCalls; ++k) {
    const int64_t count = 1 + (k * 997) % 3000;
    ucx_test::count_bad<float>(
        label("all_reduce in flight", DType::f32, count), bufs[size_t(k)].data(), count,
        [&](int64_t i) { return ucx_test::reduce_ref<float>(seed + uint64_t(k), n, i, ReduceOp::kSum); });
  }
}

TEST(UcxCollectives, ProgressWithoutWaiting) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  const uint64_t seed = ++g_case;
  const int64_t count = 300000;  // ring all-reduce: many chunks, reductions on the progress thread
  std::vector<float> in = input<float>(seed, r, count), out(size_t(count), -1.0f);
  WorkPtr w = c.all_reduce(in.data(), out.data(), count, DType::f32, ReduceOp::kSum, Device::cpu());
  // Nobody waits or polls: the progress threads must finish the call. done() only reads the flag (is_completed()
  // would drive progress); the output is read after it, never while the progress thread may write it (a data race).
  auto* uw = dynamic_cast<ucx::UcxWork*>(w.get());
  ASSERT_NE(uw, nullptr);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up && !uw->done())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool finished_alone = uw->done();
  w->wait();
  ucx_test::count_bad<float>(label("all_reduce without waiting", DType::f32, count), out.data(), count,
                             [&](int64_t i) { return ucx_test::reduce_ref<float>(seed, n, i, ReduceOp::kSum); });
  EXPECT_TRUE(finished_alone) << "the call made no progress while nobody waited";
}

TEST(UcxCollectives, TensorApi) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  Tensor t = Tensor::full({3, 5}, double(r + 1), DType::f32);
  c.all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t.data<float>()[14], float(n * (n + 1) / 2));
  Tensor in = Tensor::full({2, 3}, double(r), DType::i64);
  Tensor out = Tensor::empty({2 * n, 3}, DType::i64);
  c.all_gather(in, out)->wait();
  for (int q = 0; q < n; ++q) EXPECT_EQ(out.data<int64_t>()[q * 6 + 5], q);
  Tensor rs_out = Tensor::empty({3}, DType::f64);
  Tensor rs_in = Tensor::full({3 * n}, 2.0, DType::f64);
  c.reduce_scatter(rs_in, rs_out, ReduceOp::kAvg)->wait();
  EXPECT_EQ(rs_out.data<double>()[2], 2.0);
  Tensor b = Tensor::full({4}, r == 0 ? 7.0 : 0.0, DType::bf16);
  c.broadcast(b, 0)->wait();
  EXPECT_EQ(float(b.data<BFloat16>()[3]), 7.0f);
}

// Strided views: random cases with the default direct-read threshold, always direct reads (every block, even
// tiny ones, read with process_vm_readv) and never (packed messages).
TEST(UcxCollectives, StridedViews) {
  auto& c = *g_comm;
  EXPECT_TRUE(c.supports_views(Device::cpu()));
  for (int64_t threshold : {int64_t(32) << 10, int64_t(0), int64_t(-1)}) {
    ucx::UcxTuning t = g_comm->tuning();
    t.direct_min_bytes = threshold;
    TuningScope scope(t);
    EXPECT_EQ(test::run_view_cases(c, 77 + uint64_t(threshold + 1), 40), 41) << "threshold " << threshold;
  }
}

// Large blocks landing in short runs take the banded reads (Note [Banded reads] in collectives/ucx/views.cc):
// an S(1) -> R gather with 1 KiB runs of 8 MiB per peer, and an S(1) -> S(0) exchange with 1 KiB runs.
TEST(UcxCollectives, StridedViewsBandedReads) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  const int64_t rows = 8192, cols = 256;
  const Tensor g = Tensor::rand({rows, cols * n}, 4242, DType::f32, -1, 1);  // the same on every rank
  Tensor mine = g.narrow(1, r * cols, cols).contiguous();
  Tensor out = Tensor::zeros({rows, cols * n});
  std::vector<kernels::StridedView> recv;
  for (int j = 0; j < n; ++j) recv.push_back(kernels::view_of(out.narrow(1, j * cols, cols)));
  c.all_gather_views(kernels::view_of(mine), recv, Device::cpu())->wait();
  EXPECT_TRUE(equal(out, g)) << "all_gather_views into 1 KiB runs";
  // S(1) -> S(0): rank p holds columns block p of all rows; rank q receives rows block q of all columns.
  const int64_t band = rows / n;
  Tensor got = Tensor::zeros({band, cols * n});
  std::vector<kernels::StridedView> sv, rv;
  for (int q = 0; q < n; ++q) {
    sv.push_back(kernels::view_of(mine.narrow(0, q * band, band)));
    rv.push_back(kernels::view_of(got.narrow(1, q * cols, cols)));
  }
  c.all_to_all_views(sv, rv, Device::cpu())->wait();
  EXPECT_TRUE(equal(got, g.narrow(0, r * band, band).contiguous())) << "all_to_all_views into 1 KiB runs";
}

// A reader that expects more than the owner's view holds fails naming the peer; with direct reads every rank hears
// of it (they wait for acknowledgements); never a hang.
// On a split copy of the world, so that the failed communicator does not affect the other tests.
TEST(UcxCollectives, StridedViewsMismatchedCounts) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  for (int64_t threshold : {int64_t(0), int64_t(-1)}) {
    auto sub = std::static_pointer_cast<UcxCommunicator>(c.split(0, r));
    ucx::UcxTuning t = sub->tuning();
    t.direct_min_bytes = threshold;
    sub->set_tuning(t);
    Tensor in = Tensor::ones({2, 3}), out = Tensor::zeros({int64_t(2 * n + 1), 3});
    std::vector<kernels::StridedView> recv;
    int64_t off = 0;
    for (int j = 0; j < n; ++j) {
      const int64_t rows = (r == 1 && j == 0) ? 3 : 2;  // rank 1 expects 3 rows from rank 0, which sends 2
      recv.push_back(kernels::view_of(out.narrow(0, off, rows)));
      off += rows;
    }
    try {
      sub->all_gather_views(kernels::view_of(in), recv, Device::cpu())->wait(std::chrono::seconds(20));
      // The other ranks received what they expected: with packed messages they may finish before the abort.
      if (r == 1 || (threshold == 0 && ucx::direct_copies_allowed()))
        ADD_FAILURE() << "expected an error (threshold " << threshold << ")";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "timed out instead of failing: " << e.what();
    } catch (const Error& e) {
      if (r == 1) {
        EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      }
    }
  }
  c.barrier()->wait();
}

// Segmented blocks (Note [Segmented blocks]): random cases, each rank's block made of random send segments (gaps read
// as zeros) in buffers of their own, and random recv segments per sender into an output buffer at the block's
// offsets, so that the bytes no recv segment names must keep their sentinel. Every rank draws every rank's segments
// from the same seeds, so each checks its own result against the blocks it rebuilds. Thresholds: the default, always
// direct reads, never (packed messages).
namespace seg {

// Sorted, non-overlapping random segments in [0, block): `count` of them (some empty), with gaps.
std::vector<std::pair<int64_t, int64_t>> draw(std::mt19937_64& rng, int64_t block, int count) {
  std::vector<int64_t> cuts;
  for (int i = 0; i < 2 * count; ++i) cuts.push_back(block ? int64_t(rng() % uint64_t(block + 1)) : 0);
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int i = 0; i < count; ++i) out.emplace_back(cuts[size_t(2 * i)], cuts[size_t(2 * i + 1)] - cuts[size_t(2 * i)]);
  return out;
}

struct Sender {
  std::vector<std::pair<int64_t, int64_t>> segs;
  std::vector<std::vector<uint8_t>> data;  // one buffer per segment
  std::vector<uint8_t> block;              // the block they make (gaps zero)
};

Sender sender(uint64_t seed, int rank, int64_t block, int count) {
  std::mt19937_64 rng(seed * 1000003u + uint64_t(rank));
  Sender s;
  s.segs = draw(rng, block, count);
  s.block.assign(size_t(block), 0);
  for (const auto& [off, bytes] : s.segs) {
    std::vector<uint8_t> d(static_cast<size_t>(bytes));
    for (auto& b : d) b = uint8_t(rng());
    std::copy(d.begin(), d.end(), s.block.begin() + off);
    s.data.push_back(std::move(d));
  }
  return s;
}

std::vector<Segment> send_list(Sender& s) {
  std::vector<Segment> out;
  for (size_t k = 0; k < s.segs.size(); ++k)
    out.push_back(Segment{s.segs[k].first, s.segs[k].second, s.data[k].empty() ? nullptr : s.data[k].data()});
  return out;
}

}  // namespace seg

TEST(UcxCollectives, SegmentedBlocks) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  EXPECT_TRUE(c.supports_segments(Device::cpu()));
  constexpr uint8_t kSentinel = 0xAB;
  for (int64_t threshold : {int64_t(32) << 10, int64_t(0), int64_t(-1)}) {
    ucx::UcxTuning t = g_comm->tuning();
    t.direct_min_bytes = threshold;
    TuningScope scope(t);
    std::mt19937_64 cases(9000 + uint64_t(threshold + 1));
    for (int trial = 0; trial < 24; ++trial) {
      const int64_t block = trial == 0 ? 0 : int64_t(cases() % (trial % 3 == 0 ? 300000 : 4000));
      const int count = int(cases() % 7);  // the same number of send segments on every rank
      const uint64_t seed = cases();
      std::vector<seg::Sender> senders;
      for (int j = 0; j < n; ++j) senders.push_back(seg::sender(seed, j, block, count));
      std::vector<std::vector<uint8_t>> out(size_t(n), std::vector<uint8_t>(size_t(block) + 1, kSentinel));
      std::vector<std::vector<Segment>> recv(static_cast<size_t>(n));
      std::mt19937_64 rng(seed ^ (uint64_t(r + 1) << 40));
      for (int j = 0; j < n; ++j)
        for (const auto& [off, bytes] : seg::draw(rng, block, int(rng() % 6)))
          recv[size_t(j)].push_back(Segment{off, bytes, out[size_t(j)].data() + off});
      auto want = out;  // the sentinel where no recv segment writes
      for (int j = 0; j < n; ++j)
        for (const Segment& sg : recv[size_t(j)])
          std::copy_n(senders[size_t(j)].block.begin() + sg.offset, sg.bytes, want[size_t(j)].begin() + sg.offset);
      c.all_gather_segments(seg::send_list(senders[size_t(r)]), block, recv, Device::cpu())->wait();
      for (int j = 0; j < n; ++j)
        EXPECT_TRUE(out[size_t(j)] == want[size_t(j)])
            << "block of rank " << j << " (" << block << " bytes, " << count << " send segments, threshold "
            << threshold << ", trial " << trial << ") on rank " << r;
    }
  }
}

// reduce_scatter_segments: rank p's block j is made of random segments of f32 holding small integers (sums are
// exact in any order) or i64, gaps zero; rank r checks the reduction of every rank's block r against the blocks it
// rebuilds. Sum, average (i64: truncating) and max; the default threshold, always direct, never.
TEST(UcxCollectives, SegmentedReduceScatter) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  for (int64_t threshold : {int64_t(32) << 10, int64_t(0), int64_t(-1)}) {
    ucx::UcxTuning t = g_comm->tuning();
    t.direct_min_bytes = threshold;
    TuningScope scope(t);
    std::mt19937_64 cases(7100 + uint64_t(threshold + 1));
    for (int trial = 0; trial < 18; ++trial) {
      const DType dtype = trial % 2 ? DType::i64 : DType::f32;
      const ReduceOp op = (ReduceOp[]){ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}[trial % 3];
      const int64_t es = int64_t(dtype_size(dtype));
      const int64_t count = trial == 0 ? 0 : int64_t(cases() % (trial % 4 == 1 ? 200000 : 1500));
      const int segs = int(cases() % 6);
      const uint64_t seed = cases();
      // blocks[p][j]: rank p's block j as values; data[p][j][k]: its segment k's values.
      std::vector<std::vector<std::vector<double>>> blocks(static_cast<size_t>(n),
                                                           std::vector<std::vector<double>>(static_cast<size_t>(n)));
      std::vector<std::vector<Segment>> send(static_cast<size_t>(n));
      std::vector<std::vector<std::vector<char>>> keep(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) {
        std::mt19937_64 rng(seed + uint64_t(p) * 7919u);
        for (int j = 0; j < n; ++j) {
          std::vector<double>& blk = blocks[size_t(p)][size_t(j)];
          blk.assign(size_t(count), 0.0);
          for (const auto& [off, len] : seg::draw(rng, count, segs)) {
            std::vector<char> bytes(static_cast<size_t>(len * es));
            for (int64_t e = 0; e < len; ++e) {
              const int64_t v = int64_t(rng() % 2001) - 1000;
              blk[size_t(off + e)] = double(v);
              if (dtype == DType::f32) {
                const float f = float(v);
                std::memcpy(bytes.data() + e * es, &f, 4);
              } else {
                std::memcpy(bytes.data() + e * es, &v, 8);
              }
            }
            if (p == r) {
              keep[size_t(j)].push_back(std::move(bytes));
              std::vector<char>& b = keep[size_t(j)].back();
              send[size_t(j)].push_back(Segment{off * es, len * es, b.empty() ? nullptr : b.data()});
            }
          }
        }
      }
      std::vector<char> out(static_cast<size_t>(std::max<int64_t>(count, 1) * es), 0x5A);
      c.reduce_scatter_segments(send, out.data(), count, dtype, op, Device::cpu())->wait();
      int bad = 0;
      for (int64_t e = 0; e < count && bad < 3; ++e) {
        double want = blocks[0][size_t(r)][size_t(e)];
        for (int p = 1; p < n; ++p) {
          const double v = blocks[size_t(p)][size_t(r)][size_t(e)];
          want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
        }
        double got;
        if (dtype == DType::f32) {
          float f;
          std::memcpy(&f, out.data() + e * es, 4);
          got = f;
          if (op == ReduceOp::kAvg) want /= n;
        } else {
          int64_t v;
          std::memcpy(&v, out.data() + e * es, 8);
          got = double(v);
          if (op == ReduceOp::kAvg) want = double(int64_t(want) / n);
        }
        if (dtype == DType::f32 && op == ReduceOp::kAvg ? std::abs(got - want) > 1e-4 : got != want) {
          ++bad;
          ADD_FAILURE() << "element " << e << ": " << got << ", expected " << want << " (" << dtype_name(dtype) << ", "
                        << reduce_op_name(op) << ", count " << count << ", " << segs << " segments, threshold "
                        << threshold << ", trial " << trial << ") on rank " << r;
        }
      }
    }
  }
}

// Bad lists are refused before anything moves; a block size or segment count that differs between ranks fails as
// mismatched calls, never a hang. On split copies of the world.
TEST(UcxCollectives, SegmentedBlocksBadInput) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  std::vector<uint8_t> a(64, 1), b(64, 0);
  auto lists = [&](std::vector<Segment> one) { return std::vector<std::vector<Segment>>(size_t(n), one); };
  auto refused = [&](std::vector<Segment> send, std::vector<std::vector<Segment>> recv, const char* needle) {
    try {
      c.all_gather_segments(std::move(send), 64, std::move(recv), Device::cpu())->wait();
      ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({{0, 65, a.data()}}, lists({}), "outside the block");
  refused({{8, 8, a.data()}, {0, 8, a.data() + 8}}, lists({}), "sorted");
  refused({{0, 8, nullptr}}, lists({}), "no address");
  refused({}, lists({{-1, 4, b.data()}}), "outside the block");
  refused({}, std::vector<std::vector<Segment>>(size_t(n) + 1), "recv segment lists");
  auto refused_rs = [&](std::vector<std::vector<Segment>> send, int64_t count, const char* needle) {
    try {
      c.reduce_scatter_segments(std::move(send), b.data(), count, DType::f32, ReduceOp::kSum, Device::cpu())->wait();
      ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused_rs(lists({{2, 4, a.data()}}), 4, "not whole f32 elements");
  refused_rs(lists({{0, 20, a.data()}}), 4, "outside the block");
  refused_rs(std::vector<std::vector<Segment>>(size_t(n) + 1), 4, "segment lists");
  if (n == 1) return;
  for (int64_t threshold : {int64_t(0), int64_t(-1)}) {
    for (bool by_count : {false, true}) {
      if (by_count && threshold < 0) continue;  // packed blocks do not carry the segment count
      auto sub = std::static_pointer_cast<UcxCommunicator>(c.split(0, r));
      ucx::UcxTuning t = sub->tuning();
      t.direct_min_bytes = threshold;
      sub->set_tuning(t);
      std::vector<Segment> send{{0, 32, a.data()}};
      if (by_count && r == 1) send.push_back(Segment{32, 32, a.data() + 32});
      const int64_t block = (!by_count && r == 1) ? 48 : 64;
      try {
        sub->all_gather_segments(send, block, lists({{0, 16, b.data()}}), Device::cpu())
            ->wait(std::chrono::seconds(20));
        if (r == 1) ADD_FAILURE() << "expected an error (threshold " << threshold << ", by count " << by_count << ")";
      } catch (const TimeoutError& e) {
        ADD_FAILURE() << "timed out instead of failing: " << e.what();
      } catch (const Error& e) {
        if (r == 1) {
          EXPECT_NE(std::string(e.what()).find("mismatched collective calls"), std::string::npos) << e.what();
        }
      }
    }
  }
  c.barrier()->wait();
}

// Note [UCX progress]: a group of one runs a small call in the caller and hands a large one to the progress thread;
// both give the input back, in call order (a call that reads the previous one's output sees it).
TEST(UcxCollectives, AGroupOfOneRunsSmallCallsInTheCaller) {
  auto& c = *g_comm;
  auto solo = c.split(c.rank(), 0);
  ASSERT_TRUE(solo);
  ASSERT_EQ(solo->size(), 1);
  for (const int64_t count : {int64_t(1000), int64_t(1) << 20}) {  // 4 KB and 4 MiB
    const uint64_t seed = ++g_case;
    std::vector<float> in = input<float>(seed, c.rank(), count), out(size_t(count), -1.0f);
    WorkPtr gather = solo->all_gather(in.data(), out.data(), count, DType::f32, Device::cpu());
    // In call order after the gather: the sum (of one) of what it wrote.
    std::vector<float> sum(size_t(count), -1.0f);
    WorkPtr reduce = solo->all_reduce(out.data(), sum.data(), count, DType::f32, ReduceOp::kSum, Device::cpu());
    reduce->wait();
    EXPECT_TRUE(gather->is_completed());
    EXPECT_EQ(out, in);
    EXPECT_EQ(sum, in);
  }
  c.barrier()->wait();
}

TEST(UcxCollectives, SplitRowsAndColumnsConcurrently) {
  auto& c = *g_comm;
  const int n = c.size(), r = c.rank();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  // A (n/2) x 2 grid: rows {0,1}, {2,3}, ...; columns {0,2,..}, {1,3,..}.
  auto row = c.split(r / 2, r);
  auto col = c.split(r % 2, r);
  auto none = c.split(r == 0 ? 0 : -1, 0);
  ASSERT_TRUE(row && col);
  EXPECT_EQ(row->size(), 2);
  EXPECT_EQ(col->size(), n / 2);
  EXPECT_EQ(row->rank(), r % 2);
  EXPECT_EQ(col->rank(), r / 2);
  EXPECT_EQ(none != nullptr, r == 0);
  EXPECT_EQ(row->global_ranks(), (std::vector<int>{r - r % 2, r - r % 2 + 1}));
  for (int iter = 0; iter < 5; ++iter) {
    const uint64_t seed = ++g_case;
    const int64_t count = 4000 + iter;
    std::vector<float> a = input<float>(seed, r, count), b = input<float>(seed + 1000, r, count);
    std::vector<float> w = input<float>(seed + 2000, r, count);
    // Same kind, same sequence numbers, same sizes on three groups at once: only the communicator id in the tag
    // keeps them apart.
    WorkPtr wa = row->all_reduce(a.data(), a.data(), count, DType::f32, ReduceOp::kSum, Device::cpu());
    WorkPtr wb = col->all_reduce(b.data(), b.data(), count, DType::f32, ReduceOp::kSum, Device::cpu());
    WorkPtr ww = c.all_reduce(w.data(), w.data(), count, DType::f32, ReduceOp::kSum, Device::cpu());
    wb->wait();
    ww->wait();
    wa->wait();
    auto group_ref = [&](uint64_t s, const std::vector<int>& members, int64_t i) {
      double acc = 0, mag = 0;
      for (int m : members) {
        acc += double(gen<float>(s, m, i));
        mag += std::fabs(double(gen<float>(s, m, i)));
      }
      return Expect<float>{acc, double(members.size() + 1) * 0x1.0p-23 * mag};
    };
    ucx_test::count_bad<float>("row all_reduce", a.data(), count,
                               [&](int64_t i) { return group_ref(seed, row->global_ranks(), i); });
    ucx_test::count_bad<float>("column all_reduce", b.data(), count,
                               [&](int64_t i) { return group_ref(seed + 1000, col->global_ranks(), i); });
    ucx_test::count_bad<float>("world all_reduce", w.data(), count, [&](int64_t i) {
      return ucx_test::reduce_ref<float>(seed + 2000, n, i, ReduceOp::kSum);
    });
  }
  // A split of a split.
  auto sub = col->split(0, -col->rank());  // reversed order
  EXPECT_EQ(sub->rank(), col->size() - 1 - col->rank());
  std::vector<int> id(1, r), ids(size_t(sub->size()));
  sub->all_gather(id.data(), ids.data(), 1, DType::i32, Device::cpu())->wait();
  auto expect = col->global_ranks();
  std::reverse(expect.begin(), expect.end());
  EXPECT_EQ(ids, expect);
}

}  // namespace
}  // namespace dt

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  try {
    auto comm = dt::init_process_group();
    dt::g_comm = std::dynamic_pointer_cast<dt::UcxCommunicator>(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_process_group failed: %s\n", e.what());
    return 1;
  }
  if (dt::g_comm == nullptr) {  // DT_DEBUG_COLLECTIVES wraps it: these tests tune the UCX communicator itself
    std::fprintf(stderr, "skipped: the world is not a UcxCommunicator (DT_DEBUG_COLLECTIVES is set)\n");
    return 77;
  }
  if (dt::g_comm->rank() != 0) testing::GTEST_FLAG(brief) = true;
  int rc = RUN_ALL_TESTS();
  // Leave together (rank 0 may host the store), then report whether any rank failed.
  int mine = rc, worst = 0;
  try {
    dt::g_comm->all_reduce(&mine, &worst, 1, dt::DType::i32, dt::ReduceOp::kMax, dt::Device::cpu())->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "final all_reduce failed: %s\n", e.what());
    worst = 1;
  }
  dt::g_comm.reset();
  dt::destroy_process_group();
  return rc != 0 ? rc : (worst != 0 ? 3 : 0);
}
