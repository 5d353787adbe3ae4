#include "core/device.h"

#include <mutex>

#include "core/error.h"
#include "core/stream.h"

#if defined(DT_WITH_CUDA)
#include "core/cuda_check.h"
#endif

namespace dt {

std::string Device::to_string() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.to_string(); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int idx = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && idx >= 0) return cuda(idx);
    } catch (const std::exception&) {
    }
  }
  DT_THROW(InvalidArgument, "unknown device '", s, "': expected cpu, cuda or cuda:N");
}

int cuda_device_count() {
#if defined(DT_WITH_CUDA)
  static int count = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // without a driver this is error 35; clear it and carry on without CUDA
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

void check_device_usable(const Device& device) {
  if (device.is_cpu()) return;
#if defined(DT_WITH_CUDA)
  int n = cuda_device_count();
  if (n == 0) DT_THROW(Unsupported, "device ", device, " requested but no CUDA device is usable in this process");
  DT_CHECK_ARG(device.index >= 0 && device.index < n, "device ", device, " does not exist: this process sees ", n,
               " CUDA device(s)");
#else
  DT_THROW(Unsupported, "device ", device, " requested but dtensor was built without CUDA (-Dcuda=disabled)");
#endif
}

void synchronize(const Device& device, Stream stream) {
  if (device.is_cpu()) return;
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);
  DT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(resolve_stream(stream, device).handle)),
                "synchronize on ", device);
#else
  (void)stream;
  check_device_usable(device);
#endif
}

void set_current_device(const Device& device) {
  if (device.is_cpu()) return;
  check_device_usable(device);
#if defined(DT_WITH_CUDA)
  DT_CUDA_CHECK(cudaSetDevice(device.index), "set_current_device(", device, ")");
#endif
}

DeviceGuard::DeviceGuard(const Device& device) {
  if (device.is_cpu()) return;
  check_device_usable(device);
#if defined(DT_WITH_CUDA)
  int current = -1;
  DT_CUDA_CHECK(cudaGetDevice(&current), "DeviceGuard(", device, ")");
  if (current == device.index) return;
  DT_CUDA_CHECK(cudaSetDevice(device.index), "DeviceGuard(", device, ")");
  previous_ = current;
#endif
}

DeviceGuard::~DeviceGuard() {
#if defined(DT_WITH_CUDA)
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();  // a destructor must not throw
#endif
}

#if defined(DT_WITH_CUDA)
void throw_cuda_error(cudaError_t error, const std::string& what) {
  cudaGetLastError();
  DT_THROW(CudaError, what, ": ", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}
#endif

}  // namespace dt
