// HostWindow (collectives/host_window.h): ranges made of pieces of every rank's window read every rank's bytes in
// place, see later writes at once, and the decision is collective (one rank that cannot, or will not, gives null on
// every rank). On the thread backend (1-4 ranks in this process) and, under dtrun, on real processes over UCX.
#include "collectives/host_window.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "collectives/exchange.h"
#include "collectives/process_group.h"
#include "collectives/thread/thread_comm.h"
#include "core/error.h"

namespace dt {
namespace {

CommunicatorPtr g_world;  // the dtrun world, when launched by dtrun

uint8_t pattern(int rank, int64_t i) { return uint8_t((rank * 131 + i * 7 + (i >> 12) * 13) & 0xff); }

void barrier(Communicator& comm) { all_gather_ints(comm, {0}); }

void check_window(Communicator& comm) {
  const int S = comm.size(), me = comm.rank();
  const int64_t page = HostWindow::page_bytes();
  // Range 0: pages 1-2 of every rank in rank order, the last rank's piece 5 bytes short (a parameter's rows).
  // Range 1: page 0 of every rank in reverse order, then one page no piece covers.
  std::vector<HostWindow::RangeSpec> ranges(2);
  ranges[0].bytes = S * 2 * page - 5;
  ranges[1].bytes = (S + 1) * page;
  for (int r = 0; r < S; ++r) {
    ranges[0].pieces.push_back({r, page, r == S - 1 ? 2 * page - 5 : 2 * page, r * 2 * page});
    ranges[1].pieces.push_back({S - 1 - r, 0, page, r * page});
  }
  auto w = HostWindow::create(comm, 2 * page + 100, ranges, true);
  ASSERT_NE(w, nullptr) << "one host: every rank maps every other's window";
  ASSERT_EQ(w->bytes(), 3 * page);
  for (int64_t i = 0; i < w->bytes(); ++i) w->local()[i] = pattern(me, i);
  barrier(comm);
  for (int r = 0; r < S; ++r) {
    const int64_t n = r == S - 1 ? 2 * page - 5 : 2 * page;
    int64_t bad = 0;
    for (int64_t x = 0; x < n; ++x) bad += w->range(0)[r * 2 * page + x] != pattern(r, page + x);
    EXPECT_EQ(bad, 0) << "range 0, rank " << r << "'s piece";
    bad = 0;
    for (int64_t x = 0; x < page; ++x) bad += w->range(1)[r * page + x] != pattern(S - 1 - r, x);
    EXPECT_EQ(bad, 0) << "range 1, piece " << r;
  }
  barrier(comm);
  // A write to a window is seen through every range that maps it, at once.
  w->local()[page + 1] = uint8_t(200 + me);
  barrier(comm);
  for (int r = 0; r < S; ++r) EXPECT_EQ(w->range(0)[r * 2 * page + 1], uint8_t(200 + r)) << "rank " << r;
  barrier(comm);
  w.reset();

  // One rank that does not take part: null everywhere, and the group still works.
  auto off = HostWindow::create(comm, page, {}, me != S - 1);
  EXPECT_EQ(off, nullptr);
  barrier(comm);

  // A piece off the page grid is refused before any call (every rank gets it).
  std::vector<HostWindow::RangeSpec> bad(1);
  bad[0].bytes = 2 * page;
  bad[0].pieces.push_back({0, 0, page, 100});
  EXPECT_THROW(HostWindow::create(comm, page, bad, true), InvalidArgument);
  bad[0].pieces[0] = {S, 0, page, 0};
  EXPECT_THROW(HostWindow::create(comm, page, bad, true), InvalidArgument);
  barrier(comm);
}

TEST(HostWindow, Threads) {
  for (int n = 1; n <= 4; ++n) run_threads(n, [](CommunicatorPtr world) { check_window(*world); });
}

TEST(HostWindow, Processes) {
  if (!g_world) GTEST_SKIP() << "not launched by dtrun";
  check_window(*g_world);
}

}  // namespace
}  // namespace dt

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (std::getenv("DT_RANK")) dt::g_world = dt::init_process_group();
  const int rc = RUN_ALL_TESTS();
  if (dt::g_world) {
    dt::g_world.reset();
    dt::destroy_process_group();
  }
  return rc;
}
