// Note [CMA reads from a dead peer]
// Large messages between processes of one host travel by CMA: the receiver copies straight out of the sender's
// memory with process_vm_readv. When the sender dies between announcing a message and the copy, the call fails with
// ESRCH, and UCX 1.13 without peer error handling (which we cannot ask for: it drops shared memory, see
// Note [UCX failure detection] in worker.h) treats that as fatal and aborts the surviving process.
//
// So this file defines process_vm_readv / process_vm_writev, which take precedence over glibc's for UCX's CMA
// transport (the executable exports them: see collectives/meson.build). They are the plain system calls, except that
// ESRCH from a registered peer reports the copy as done (the local side zero-filled) and flags the peer: the worker
// then checks its peers at once and fails every call of a group containing the dead one, so the zeros are never
// delivered as a result (UcxWorker::handle_cma_failures_locked runs before any completion is processed). Other pids,
// and other errors, behave exactly like glibc. The definitions must be in the process's global symbol scope: an
// executable linked against dt_collectives exports them (collectives/meson.build), libdtensor.so exports them, but a
// libdtensor.so opened with dlopen(RTLD_LOCAL) (Python ctypes' default) does not: open it with RTLD_GLOBAL, or a
// peer dying mid-copy aborts this process (UCX's own behaviour) instead of failing the call.
#pragma once

#include <sys/types.h>

#include <vector>

namespace dt::ucx {

// Peers whose CMA failures are absorbed (every worker registers the pids of its peers on this host).
void register_cma_peer(pid_t pid);
// Whether a registered peer's copy failed since the last take (cheap: one atomic load).
bool cma_peer_failure_pending();
// The pids whose copies failed since the last call (each reported once).
std::vector<pid_t> take_cma_peer_failures();

}  // namespace dt::ucx
