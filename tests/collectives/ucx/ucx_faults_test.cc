// Faults on real processes, one scenario per run (driven by test_ucx_faults.py through dtrun):
//
//   kill V            rank V SIGKILLs itself in the middle of a collective; every other rank must fail with an
//                     error naming rank V (no hang). Survivors ignore dtrun's SIGTERM so that they can report.
//   mismatch_count    rank 0 calls all_reduce with one element more than the others: an error, never garbage.
//   mismatch_kind     rank 0 calls all_gather while the others call reduce_scatter: an error naming the call and a
//                     peer (found when the call stalls, else at the deadline, DT_TIMEOUT_S).
//   mismatch_call K   rank 0's call differs from the others' in K: no elements (zero_all_gather, zero_all_to_all,
//                     zero_all_reduce; the length checks fail at once), the dtype, the reduce op or the kind (the
//                     tag's digest and kind keep the messages apart; the stalled call finds the peer's message of the
//                     same number: Note [Mismatched calls]), or the dtype of a send and its recv (p2p_dtype): an
//                     error on every rank, not a wait for the deadline, and never garbage.
//   debug_mismatch    like mismatch_count under DT_DEBUG_COLLECTIVES=1: the funnel's signature check names the ranks.
//   p2p_busy_peer     not a fault: sends of different dtypes in both directions while one side computes for longer
//                     than the stall threshold; both succeed (no mismatch is read into the other direction).
//   wait_timeout      rank 0 arrives late; the others' wait(short timeout) throws a TimeoutError naming rank 0, and
//                     a later wait() still completes the same call (a caller's timeout does not break the group).
//
// Each rank writes what happened to $DT_TEST_OUT/rank<R>.txt ("error <code>: <message>", "ok", ...) and exits 0 when
// the scenario went as it should from its point of view, 3 otherwise.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/process_group.h"
#include "core/error.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string g_out;
int g_rank = -1;

void report(const std::string& line) {
  std::ofstream f(g_out + "/rank" + std::to_string(g_rank) + ".txt", std::ios::app);
  f << line << "\n";
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The lines the test driver checks: the error (code and text) and how long after t0 it came.
void report_error(const dt::Error& e, Clock::time_point t0) {
  report(std::string("error ") + dt::error_code_name(e.code()) + ": " + e.what());
  report("after " + std::to_string(since(t0)) + " s");
}

// Runs `calls`, which must fail: reports the error (then runs `after`) and returns 0, or reports "no error" and
// returns 3.
int expect_error(const std::function<void()>& calls, const std::function<void()>& after = {}) {
  const auto t0 = Clock::now();
  try {
    calls();
  } catch (const dt::Error& e) {
    report_error(e, t0);
    if (after) after();
    return 0;
  }
  report("no error");
  return 3;
}

int scenario_kill(dt::Communicator& c, int victim) {
  const int r = c.rank();
  const int64_t count = 1 << 20;
  std::vector<float> buf(size_t(count), 1.0f);
  if (r != victim) signal(SIGTERM, SIG_IGN);  // dtrun stops the others once the victim dies: report first
  return expect_error([&] {
    for (int k = 0; k < 50; ++k) {
      auto w = c.all_reduce(buf.data(), buf.data(), count, dt::DType::f32, dt::ReduceOp::kSum, dt::Device::cpu());
      if (r == victim && k == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the call start on every rank
        raise(SIGKILL);
      }
      w->wait();
    }
  });
}

int scenario_mismatch(dt::Communicator& c) {
  const int r = c.rank();
  const int64_t count = r == 0 ? 1001 : 1000;
  std::vector<float> buf(1001, 1.0f);
  return expect_error(
      [&] {
        // A few matching calls first: the mismatch must not disturb what came before.
        for (int k = 0; k < 3; ++k)
          c.all_reduce(buf.data(), buf.data(), 10, dt::DType::f32, dt::ReduceOp::kSum, dt::Device::cpu())->wait();
        c.all_reduce(buf.data(), buf.data(), count, dt::DType::f32, dt::ReduceOp::kSum, dt::Device::cpu())->wait();
      },
      [&] {
        // The group is unusable now: later calls fail at once instead of hanging.
        try {
          c.barrier()->wait(std::chrono::seconds(5));
          report("barrier after the failure succeeded");
        } catch (const dt::Error& e2) {
          report(std::string("later call: ") + e2.what());
        }
      });
}

// Rank 0's call differs from the others' in one way (`what`); every rank must get an error, not wait out its deadline.
int scenario_mismatch_call(dt::Communicator& c, const std::string& what) {
  const int r = c.rank(), n = c.size();
  const bool odd = r == 0;
  std::vector<float> in(size_t(1000 * n), 1.0f), out(size_t(1000 * n), 0.0f);
  const auto cpu = dt::Device::cpu();
  const auto f32 = dt::DType::f32;
  const char* variants[] = {"zero_all_gather", "zero_all_to_all", "zero_all_reduce", "dtype", "op", "kind",
                            "p2p_dtype"};
  if (std::find(std::begin(variants), std::end(variants), what) == std::end(variants)) {
    report("unknown variant " + what);
    return 3;
  }
  return expect_error([&] {
    c.all_reduce(in.data(), out.data(), 10, f32, dt::ReduceOp::kSum, cpu)->wait();
    if (what == "zero_all_gather") {
      c.all_gather(in.data(), out.data(), odd ? 0 : 1000, f32, cpu)->wait();
    } else if (what == "zero_all_to_all") {
      c.all_to_all(in.data(), out.data(), odd ? 0 : 1000, f32, cpu)->wait();
    } else if (what == "zero_all_reduce") {
      c.all_reduce(in.data(), out.data(), odd ? 0 : 1000, f32, dt::ReduceOp::kSum, cpu)->wait();
    } else if (what == "dtype") {  // same element size: only the tag's digest tells them apart
      c.all_reduce(in.data(), out.data(), 100, odd ? dt::DType::i32 : f32, dt::ReduceOp::kSum, cpu)->wait();
    } else if (what == "op") {
      c.all_reduce(in.data(), out.data(), 100, f32, odd ? dt::ReduceOp::kMax : dt::ReduceOp::kSum, cpu)->wait();
    } else if (what == "kind") {
      if (odd)
        c.all_reduce(in.data(), out.data(), 100, f32, dt::ReduceOp::kSum, cpu)->wait();
      else
        c.broadcast(out.data(), 100, f32, 0, cpu)->wait();
    } else {  // p2p_dtype: ranks 0 and 1 only; the others wait in the barrier below
      if (r == 0) c.send(in.data(), 100, f32, 1, cpu)->wait();
      if (r == 1) c.recv(out.data(), 100, dt::DType::i32, 0, cpu)->wait();
      c.barrier()->wait();
    }
  });
}

// Not a fault: rank 1 sends i64 ids to rank 0 and computes for longer than the stall threshold before receiving rank
// 0's f32 data, so rank 0's rendezvous send stalls while rank 1's message (another dtype, the other direction) waits
// in its queue. Both must succeed: the mismatch check must not read the other direction's message as a mismatch.
int scenario_p2p_busy_peer(dt::Communicator& c) {
  const int r = c.rank();
  const int64_t n = 1 << 18;  // 1 MiB of f32: rendezvous
  std::vector<float> data(size_t(n), float(r + 1));
  std::vector<int64_t> ids(1000, int64_t(r + 7));
  try {
    if (r == 0) {
      c.send(data.data(), n, dt::DType::f32, 1, dt::Device::cpu())->wait();
      c.recv(ids.data(), 1000, dt::DType::i64, 1, dt::Device::cpu())->wait();
      if (ids[999] != 8) {
        report("wrong ids " + std::to_string(ids[999]));
        return 3;
      }
    } else if (r == 1) {
      auto s = c.send(ids.data(), 1000, dt::DType::i64, 0, dt::Device::cpu());
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      c.recv(data.data(), n, dt::DType::f32, 0, dt::Device::cpu())->wait();
      s->wait();
      if (data[size_t(n - 1)] != 1.0f) {
        report("wrong data " + std::to_string(data[size_t(n - 1)]));
        return 3;
      }
    }
    c.barrier()->wait();
  } catch (const dt::Error& e) {
    report_error(e, Clock::now());
    return 3;
  }
  report("ok");
  return 0;
}

int scenario_mismatch_kind(dt::Communicator& c) {
  const int r = c.rank(), n = c.size();
  std::vector<float> a(size_t(4 * n), 1.0f), b(size_t(4 * n), 0.0f);
  return expect_error([&] {
    if (r == 0)
      c.all_gather(a.data(), b.data(), 4, dt::DType::f32, dt::Device::cpu())->wait();
    else
      c.reduce_scatter(a.data(), b.data(), 4, dt::DType::f32, dt::ReduceOp::kSum, dt::Device::cpu())->wait();
  });
}

int scenario_wait_timeout(dt::Communicator& c) {
  const int r = c.rank(), n = c.size();
  std::vector<float> buf(100, float(r + 1));
  if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto w = c.all_reduce(buf.data(), buf.data(), 100, dt::DType::f32, dt::ReduceOp::kSum, dt::Device::cpu());
  int rc = 0;
  if (r != 0) {
    try {
      w->wait(std::chrono::milliseconds(300));
      report("short wait did not time out");
      rc = 3;
    } catch (const dt::TimeoutError& e) {
      report(std::string("timeout: ") + e.what());
    }
  }
  w->wait();
  if (buf[99] != float(n * (n + 1) / 2)) {
    report("wrong result " + std::to_string(buf[99]));
    rc = 3;
  }
  c.barrier()->wait();
  report(rc == 0 ? "ok" : "failed");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s kill V | mismatch_count | mismatch_call K | mismatch_kind | p2p_busy_peer | debug_mismatch "
                 "| wait_timeout\n",
                 argv[0]);
    return 2;
  }
  const char* out = std::getenv("DT_TEST_OUT");
  g_out = out ? out : ".";
  const std::string mode = argv[1];
  std::shared_ptr<dt::Communicator> comm;
  try {
    comm = dt::init_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_process_group failed: %s\n", e.what());
    return 1;
  }
  g_rank = comm->rank();
  int rc = 3;
  if (mode == "kill" && argc > 2)
    rc = scenario_kill(*comm, std::atoi(argv[2]));
  else if (mode == "mismatch_count")
    rc = scenario_mismatch(*comm);
  else if (mode == "debug_mismatch")
    rc = scenario_mismatch(*comm);
  else if (mode == "mismatch_call" && argc > 2)
    rc = scenario_mismatch_call(*comm, argv[2]);
  else if (mode == "mismatch_kind")
    rc = scenario_mismatch_kind(*comm);
  else if (mode == "p2p_busy_peer")
    rc = scenario_p2p_busy_peer(*comm);
  else if (mode == "wait_timeout")
    rc = scenario_wait_timeout(*comm);
  else
    std::fprintf(stderr, "unknown scenario '%s'\n", mode.c_str());
  report("exit " + std::to_string(rc));
  comm.reset();
  dt::destroy_process_group();
  return rc;
}
