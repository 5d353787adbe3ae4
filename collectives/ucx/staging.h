// Device buffers on the UCX communicator: the call runs on host copies of its buffers (Note [Staging device
// buffers]). The bookkeeping is here, free of CUDA: the device copies and the host buffers come in as functions, so
// that tests run it on host memory with memcpy standing in for the device copies.
//
// Note [Staging device buffers]
// A call on device buffers becomes the same call on host buffers:
//   1. download: copy into host buffers what the call reads (the send region) and every receive region that the
//      call does not overwrite whole (all_to_allv leaves the elements between and after its blocks alone, broadcast
//      reads its buffer on the root), then wait for those copies;
//   2. the host call;
//   3. upload: copy the receive region back.
// Step 3 writes the whole receive region, so anything step 1 did not fill would come back as garbage: the gaps of
// a user's all_to_allv were (dtensor's own calls leave none). Buffers that overlap (the in-place layouts) share one
// host region.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "collectives/communicator.h"

namespace dt::ucx {

struct StagingOps {
  // Enqueue a device -> host / host -> device copy on the call's stream.
  std::function<void(void* host, const void* device, size_t bytes)> download;
  std::function<void(void* device, const void* host, size_t bytes)> upload;
  // Blocks until the downloads enqueued so far are done.
  std::function<void()> wait_downloads;
  // A host buffer of at least `bytes` bytes, kept alive by the returned pointer (pinned memory in production).
  std::function<std::shared_ptr<char>(size_t bytes)> host_buffer;
};

// The byte extents of a call's buffers from their base pointers (0 when a side has nothing), as staging needs them:
// for all_to_allv the span up to the end of the last block, whatever lies between.
struct StagingExtents {
  int64_t send_bytes = 0, recv_bytes = 0;
};
StagingExtents staging_extents(const CollectiveArgs& args, int group_size);

// Whether the call leaves parts of its receive region unwritten (so the region must be downloaded first).
bool leaves_receive_gaps(const CollectiveArgs& args);

class StagedCall {
 public:
  // Runs step 1 of the Note (the downloads, then waits for them).
  StagedCall(const CollectiveArgs& device_args, int group_size, const StagingOps& ops);
  // The call on the host buffers (device CPU, no stream).
  const CollectiveArgs& host_args() const { return host_; }
  // Step 3: enqueues the upload of the receive region (nothing when the call receives nothing). Keeps no reference
  // to this object: the returned function owns the host buffers until it is destroyed.
  std::function<void()> upload() const;

 private:
  CollectiveArgs host_;
  std::shared_ptr<char> send_buf_, recv_buf_;  // recv_buf_ also holds the send side when the buffers overlap
  char* device_recv_ = nullptr;
  const char* host_recv_ = nullptr;
  int64_t recv_bytes_ = 0;
  std::function<void(void*, const void*, size_t)> upload_;
};

}  // namespace dt::ucx
