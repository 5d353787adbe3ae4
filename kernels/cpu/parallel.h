// Intra-op parallelism for the CPU loops: parallel_for splits [0, n) into chunks run on a small pool of threads.
// Off by default (one thread: every loop runs inline, as before); a program that owns its cores turns it on with
// set_intra_op_threads (examples/train_gpt does, with its --threads), as PyTorch's torch.set_num_threads. Only loops
// whose chunks write disjoint outputs use it (elementwise ops, softmax and cross-entropy rows, optimizer steps).
#pragma once

#include <cstdint>
#include <functional>

namespace dt::kernels {

void set_intra_op_threads(int n);  // n >= 1
int intra_op_threads();
// The cores of this machine shared among the ranks a launcher started on it (DT_LOCAL_WORLD_SIZE, LOCAL_WORLD_SIZE
// or OMPI_COMM_WORLD_LOCAL_SIZE; 1 without one), at least 1: a rank's fair share, as torchrun's OMP_NUM_THREADS.
int default_intra_op_threads();

// fn(begin, end) for consecutive ranges covering [0, n), each at least `grain` long (but the last). Runs inline when
// one thread is set, n < 2 * grain, or the pool is already running another caller's loop (ranks of the thread
// backend share the process): the result never depends on how the work was split.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace dt::kernels
