// What the training programs (examples/, bench/) share at start-up: joining the job, and checking that it has the
// ranks their --dp and --tp ask for. Header-only, so any program can use it without another library. (Their
// command lines go through tools/args.h.)
//
//   dt::examples::ProgramWorld w = dt::examples::join_world(args.threads);   // first thing in main
//   ... DeviceMesh::create(...) uses w.world as the default world ...
//   if (w.launched) dt::destroy_process_group();                              // before main returns
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "collectives/bootstrap.h"
#include "collectives/process_group.h"
#include "collectives/thread/thread_comm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/matmul.h"

namespace dt::examples {

struct ProgramWorld {
  CommunicatorPtr world;
  bool launched = false;  // under a launcher (dtrun, torchrun, mpirun, srun): destroy_process_group at the end
  int threads = 1;        // this rank's intra-op threads
  // An elastic launcher's generation (Note [Generations]): -1 when not launched by one; max_restarts > 0 when the
  // job may be restarted on another number of ranks (Note [Resize policy]).
  int restart_count = -1, max_restarts = 0;
};

// Under a launcher: its processes (init_process_group); started directly: a world of this one process. Then this
// rank's threads, like torch.set_num_threads: `threads` when > 0, else the cores shared among the node's ranks; the
// CPU loops and GEMMs split over them (kernels/cpu/parallel.h) and BLAS's own pool stays at 1 thread, so that no
// thread of it spins beside ours.
inline ProgramWorld join_world(int64_t threads = 0) {
  ProgramWorld w;
  w.launched = under_launcher();
  if (w.launched) {
    const BootstrapEnv env = init_from_env();
    w.restart_count = env.restart_count;
    w.max_restarts = env.max_restarts;
    w.world = init_process_group();
  } else {
    w.world = make_thread_world(1)[0];
    set_default_world(w.world);
  }
  w.threads = threads > 0 ? int(threads) : kernels::default_intra_op_threads();
  kernels::set_blas_threads(1);
  kernels::set_intra_op_threads(w.threads);
  return w;
}

// Whether the world has the pp x dp x tp ranks the flags ask for; rank 0 says what to run otherwise.
inline bool check_ranks(const Communicator& world, int64_t dp, int64_t tp, const char* program, int64_t pp = 1) {
  const int64_t n = pp * dp * tp;
  if (world.size() == n) return true;
  if (world.rank() == 0)
    std::fprintf(stderr,
                 "%s: %s--dp %lld x --tp %lld = %lld ranks, but %d processes run (dtrun --nproc-per-node %lld)\n",
                 program, pp > 1 ? ("--pp " + std::to_string(pp) + " x ").c_str() : "", (long long)dp, (long long)tp,
                 (long long)n, world.size(), (long long)n);
  return false;
}

}  // namespace dt::examples
