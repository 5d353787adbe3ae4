// The FSDP engine's streams (Note [FSDP streams]) and the allocator declaration that work on them uses a buffer.
#pragma once

#include "core/device.h"
#include "core/stream.h"
#include "core/tensor.h"

namespace dt::fsdp {

// Note [FSDP streams]
// On CUDA the engine queues its copy-ins and collectives on two streams of its own per device (all-gather,
// reduce-scatter), made once and shared by every group, so a group's all-gather and another's reduce-scatter overlap
// each other and the compute on the caller's stream (the legacy default stream, where dtensor's ops run). Ordering
// is by events only: unshard records an event on the caller's stream (the shards are as the optimizer left them)
// that the all-gather stream waits for; wait_for_unshard makes the caller's stream wait for the collective
// (Work::wait_stream) and copies out there; reduce_grads records an event after the gradients' producers that the
// reduce-scatter stream waits for; wait_for_reduce makes the caller's stream wait for the reduction. The host never
// waits for the device. Buffers used on the engine's streams are recorded with the allocator (record_stream), so
// that freeing them on the host never hands them out while that work runs (Note [Stream-safe frees]). On the CPU
// the streams are null, events are no-ops and wait_stream waits: the same code.
struct EngineStreams {
  Stream all_gather, reduce_scatter;
};

// The device's engine streams (null on the CPU).
EngineStreams engine_streams(const Device& device);

// Declares that work on `stream` uses t's memory (no-op on the CPU and for the default stream).
void record_use(const Tensor& t, Stream stream);

}  // namespace dt::fsdp
