// The staging of device buffers (collectives/ucx/staging.h) on host memory: memcpy stands in for the device
// copies, fresh host buffers are filled with garbage (as pinned memory may hold anything), and the host calls run
// on the thread backend. Each case compares the "device" buffers with a reference computed from the inputs.
#include "collectives/ucx/staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "collectives/thread/thread_comm.h"

namespace dt::ucx {
namespace {

constexpr unsigned char kGarbage = 0xAB;

struct FakeDevice {
  int downloads = 0, uploads = 0, waits = 0;
  StagingOps ops() {
    StagingOps o;
    o.download = [this](void* host, const void* dev, size_t n) {
      std::memcpy(host, dev, n);
      ++downloads;
    };
    o.upload = [this](void* dev, const void* host, size_t n) {
      std::memcpy(dev, host, n);
      ++uploads;
    };
    o.wait_downloads = [this] { ++waits; };
    o.host_buffer = [](size_t n) {
      std::shared_ptr<char> p(new char[n], std::default_delete<char[]>());
      std::memset(p.get(), kGarbage, n);
      return p;
    };
    return o;
  }
};

// Runs `a` (buffers in "device" memory) staged on `comm`, as UcxCommunicator::enqueue_staged does.
void run_staged(const CommunicatorPtr& comm, const CollectiveArgs& a, FakeDevice& dev) {
  StagedCall staged(a, comm->size(), dev.ops());
  WorkPtr w = comm->submit(staged.host_args());
  w->wait();
  staged.upload()();
}

// A user's all_to_allv with gaps before, between and after the blocks: the gaps keep their values.
TEST(UcxStaging, AllToAllvKeepsTheGapsOfTheReceiveBuffer) {
  run_threads(3, [](CommunicatorPtr world) {
    const int n = world->size(), r = world->rank();
    // Every rank sends j + 1 elements to rank j (block j at send offset 10 * j), so rank r receives r + 1 elements
    // from every rank q, at offset 2 + 8 * q: gaps in front, between the blocks and after the last.
    const size_t un = size_t(n);
    std::vector<int64_t> sc(un), sd(un), rc(un), rd(un);
    std::vector<int32_t> send(size_t(10 * n));
    for (int j = 0; j < n; ++j) {
      sc[size_t(j)] = j + 1;
      sd[size_t(j)] = 10 * j;
      rc[size_t(j)] = r + 1;
      rd[size_t(j)] = 2 + 8 * j;
      for (int k = 0; k < j + 1; ++k) send[size_t(10 * j + k)] = 1000 * r + 100 * j + k;
    }
    std::vector<int32_t> recv(size_t(8 * n + 3));
    std::iota(recv.begin(), recv.end(), -500);  // the gaps' values
    std::vector<int32_t> want = recv;
    for (int q = 0; q < n; ++q)
      for (int k = 0; k < r + 1; ++k) want[size_t(2 + 8 * q + k)] = 1000 * q + 100 * r + k;

    CollectiveArgs a;
    a.kind = CollectiveKind::kAllToAllV;
    a.send = send.data();
    a.recv = recv.data();
    a.dtype = DType::i32;
    a.send_counts = sc, a.send_displs = sd, a.recv_counts = rc, a.recv_displs = rd;
    FakeDevice dev;
    run_staged(world, a, dev);
    EXPECT_EQ(recv, want) << "rank " << r;
    EXPECT_EQ(dev.downloads, 2);  // the send region and the receive region
    EXPECT_EQ(dev.uploads, 1);
  });
}

// The in-place layouts share one host region; every byte of it round-trips.
TEST(UcxStaging, InPlaceAllGatherAndAllReduce) {
  run_threads(2, [](CommunicatorPtr world) {
    const int n = world->size(), r = world->rank();
    std::vector<float> whole(size_t(4 * n), -1.0f);
    for (int k = 0; k < 4; ++k) whole[size_t(4 * r + k)] = float(10 * r + k);
    CollectiveArgs ag;
    ag.kind = CollectiveKind::kAllGather;
    ag.send = whole.data() + 4 * r;
    ag.recv = whole.data();
    ag.count = 4;
    FakeDevice dev;
    run_staged(world, ag, dev);
    for (int q = 0; q < n; ++q)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(whole[size_t(4 * q + k)], float(10 * q + k));
    EXPECT_EQ(dev.downloads, 1);

    std::vector<float> buf(5, float(r + 1));
    CollectiveArgs ar;
    ar.kind = CollectiveKind::kAllReduce;
    ar.send = ar.recv = buf.data();
    ar.count = 5;
    run_staged(world, ar, dev);
    for (float v : buf) EXPECT_EQ(v, float(n * (n + 1) / 2));
  });
}

// Broadcast reads its one buffer on the root; the others receive into theirs.
TEST(UcxStaging, Broadcast) {
  run_threads(3, [](CommunicatorPtr world) {
    std::vector<int64_t> buf(7, world->rank() == 1 ? 42 : world->rank());
    CollectiveArgs b;
    b.kind = CollectiveKind::kBroadcast;
    b.recv = buf.data();
    b.count = 7;
    b.dtype = DType::i64;
    b.root = 1;
    FakeDevice dev;
    run_staged(world, b, dev);
    for (int64_t v : buf) EXPECT_EQ(v, 42);
  });
}

// Nothing received, nothing uploaded; nothing at all, nothing downloaded either.
TEST(UcxStaging, EmptySides) {
  run_threads(2, [](CommunicatorPtr world) {
    std::vector<int32_t> x(3, 7);
    CollectiveArgs s;
    s.kind = world->rank() == 0 ? CollectiveKind::kSend : CollectiveKind::kRecv;
    s.peer = 1 - world->rank();
    s.dtype = DType::i32;
    s.count = 3;
    if (world->rank() == 0) {
      s.send = x.data();
    } else {
      s.recv = x.data();
      x.assign(3, 0);
    }
    FakeDevice dev;
    run_staged(world, s, dev);
    EXPECT_EQ(x, std::vector<int32_t>(3, 7));
    EXPECT_EQ(dev.uploads, world->rank() == 0 ? 0 : 1);
    EXPECT_EQ(dev.downloads, world->rank() == 0 ? 1 : 0);

    CollectiveArgs none;
    none.kind = CollectiveKind::kAllReduce;
    none.count = 0;
    run_staged(world, none, dev);
    EXPECT_EQ(dev.waits, world->rank() == 0 ? 1 : 0);
  });
}

}  // namespace
}  // namespace dt::ucx
