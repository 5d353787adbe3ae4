#include "collectives/ucx/staging.h"

#include <algorithm>

#include "core/error.h"

namespace dt::ucx {

StagingExtents staging_extents(const CollectiveArgs& a, int group_size) {
  // A broadcast has one buffer (send == recv): it is staged as the receive side only.
  return {a.kind == CollectiveKind::kBroadcast ? 0 : a.send_bytes(group_size), a.recv_bytes(group_size)};
}

bool leaves_receive_gaps(const CollectiveArgs& a) {
  return a.kind == CollectiveKind::kAllToAllV || a.kind == CollectiveKind::kBroadcast;
}

StagedCall::StagedCall(const CollectiveArgs& a, int group_size, const StagingOps& ops) : host_(a), upload_(ops.upload) {
  DT_ASSERT(!a.has_views(), "staging: strided views on a device are not supported");
  const StagingExtents x = staging_extents(a, group_size);
  const char* dsend = static_cast<const char*>(a.send);
  char* drecv = static_cast<char*>(a.recv);
  host_.device = Device::cpu();
  host_.stream = Stream{};
  // Nothing to stage on a side: no device address reaches the host call (a call with no elements still sends empty
  // messages).
  host_.send = nullptr;
  host_.recv = nullptr;
  bool downloaded = false;
  auto download = [&](void* host, const void* device, int64_t bytes) {
    ops.download(host, device, size_t(bytes));
    downloaded = true;
  };
  if (x.send_bytes > 0 && x.recv_bytes > 0 && dsend < drecv + x.recv_bytes && drecv < dsend + x.send_bytes) {
    // One host region covers both buffers (the in-place layouts); downloading all of it keeps any gap too.
    const char* lo = std::min<const char*>(dsend, drecv);
    const int64_t region = std::max<const char*>(dsend + x.send_bytes, drecv + x.recv_bytes) - lo;
    recv_buf_ = ops.host_buffer(size_t(region));
    download(recv_buf_.get(), lo, region);
    host_.send = recv_buf_.get() + (dsend - lo);
    host_.recv = recv_buf_.get() + (drecv - lo);
  } else {
    if (x.send_bytes > 0) {
      send_buf_ = ops.host_buffer(size_t(x.send_bytes));
      download(send_buf_.get(), dsend, x.send_bytes);
      host_.send = send_buf_.get();
    }
    if (x.recv_bytes > 0) {
      recv_buf_ = ops.host_buffer(size_t(x.recv_bytes));
      if (leaves_receive_gaps(a)) download(recv_buf_.get(), drecv, x.recv_bytes);
      host_.recv = recv_buf_.get();
    }
    if (a.kind == CollectiveKind::kBroadcast) host_.send = host_.recv;
  }
  if (downloaded) ops.wait_downloads();
  if (x.recv_bytes > 0) {
    device_recv_ = drecv;
    host_recv_ = static_cast<const char*>(host_.recv);
    recv_bytes_ = x.recv_bytes;
  }
}

std::function<void()> StagedCall::upload() const {
  if (recv_bytes_ == 0) return [send = send_buf_] {};
  return [send = send_buf_, recv = recv_buf_, dst = device_recv_, src = host_recv_, n = size_t(recv_bytes_),
          up = upload_] { up(dst, src, n); };
}

}  // namespace dt::ucx
