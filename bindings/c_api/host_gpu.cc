// A host framework's GPU resources: its NCCL communicator (Note [Adopted NCCL communicators] in
// collectives/nccl/nccl_comm.cc) and its CUDA streams (Note [Current streams] in core/stream.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "bindings/c_api/funnel.h"
#include "core/error.h"
#include "core/stream.h"

#if defined(DT_WITH_NCCL)
#include "collectives/nccl/nccl_comm.h"
#endif

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {
constexpr uintptr_t kCudaStreamLegacy = 1;  // cudaStreamLegacy's value (cuda_runtime_api.h), DLPack's stream 1
}  // namespace

extern "C" {

void dt_nccl_adopt_params_init(dt_nccl_adopt_params_t* p) {
  if (p == nullptr) return;
  *p = dt_nccl_adopt_params_t{};
  p->struct_size = sizeof(dt_nccl_adopt_params_t);
}

dt_status_t dt_comm_from_nccl(void* nccl_comm, const dt_nccl_adopt_params_t* p, dt_comm_t* out) {
  return call("dt_comm_from_nccl", [&] {
    require(nccl_comm, "nccl_comm");
    require(out, "out");
    const dt_nccl_adopt_params_t q = read_params(p, &dt_nccl_adopt_params_init, "params", "dt_nccl_adopt_params_init");
    DT_CHECK_ARG(q.may_abort == 0 || q.may_abort == 1, "params.may_abort is ", q.may_abort, " (0 or 1)");
    DT_CHECK_ARG(std::isfinite(q.timeout_s) && q.timeout_s < 1e9, "params.timeout_s is ", q.timeout_s,
                 " (seconds: a finite number below 1e9; <= 0 for the default)");
#if defined(DT_WITH_NCCL)
    NcclAdoptOptions options;
    if (q.timeout_s > 0) options.timeout = Work::Duration(std::max<int64_t>(1, int64_t(q.timeout_s * 1000)));
    options.may_abort = q.may_abort != 0;
    auto o = std::make_shared<CommObject>();
    o->owner = std::this_thread::get_id();
    o->comm = NcclCommunicator::adopt(nccl_comm, std::move(options));
    *out = make_handle<dt_comm_t>(std::move(o));
#else
    DT_THROW(Unsupported, "this dtensor was built without NCCL (CUDA off or NCCL not found): it cannot use an "
                          "ncclComm_t");
#endif
  });
}

dt_status_t dt_set_stream(dt_device_t device, void* cuda_stream) {
  return call("dt_set_stream", [&] { set_current_stream(to_device(device), Stream{cuda_stream}); });
}

dt_status_t dt_stream_wait(dt_device_t device, void* cuda_stream) {
  return call("dt_stream_wait", [&] {
    const Device d = to_device(device);
    if (d.is_cpu()) {
      DT_CHECK_ARG(cuda_stream == nullptr, "cpu has no streams, got stream ", cuda_stream);
      return;
    }
    // The null Stream would mean the current stream (Note [Current streams]); the caller's NULL is the legacy one.
    void* const target = cuda_stream != nullptr ? cuda_stream : reinterpret_cast<void*>(kCudaStreamLegacy);
    Event::record(d, Stream{}).block(Stream{target});
  });
}

dt_status_t dt_get_stream(dt_device_t device, void** cuda_stream) {
  return call("dt_get_stream", [&] {
    const Device d = to_device(device);
    require(cuda_stream, "cuda_stream");
    *cuda_stream = current_stream(d).handle;
  });
}

}  // extern "C"
